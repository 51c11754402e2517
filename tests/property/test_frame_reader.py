"""Decoding any bytes either succeeds or raises a `ProtocolError`, never anything else, and never
hangs (BatonMQ architecture, tests 2); partial input is never an error, however the stream is cut
(BatonMQ style §3); and the connection state machine turns every error in its input into a
connection.close (rule 7 of `batonmq/amqp/connection.py`)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame
from pamqp.body import ContentBody

from batonmq.amqp.connection import (
    ChannelFailed,
    ConnectionSettings,
    ContentReceived,
    Event,
    MethodReceived,
    ServerConnection,
    State,
)
from batonmq.amqp.constants import (
    BASIC_CLASS_ID,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    ReplyCode,
)
from batonmq.amqp.errors import ChannelError, HardError, ProtocolError
from batonmq.amqp.frames import (
    HEARTBEAT_BYTES,
    BodyFrame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    _fast_publish,
    decode_properties,
    encode_frame,
    encode_header_payload,
)
from tests.memclient import ConnectionEnd, MemClient, default_answer

FRAME_MAX = 131072

# Valid frames ------------------------------------------------------------------------------------

SAMPLE_METHODS = [
    commands.Channel.Open(),
    commands.Channel.Close(reply_code=200, reply_text="ok", class_id=0, method_id=0),
    commands.Channel.CloseOk(),
    commands.Channel.Flow(active=False),
    commands.Queue.Declare(queue="q", durable=True, arguments={"x-max-length": 10}),
    commands.Queue.Bind(queue="q", exchange="amq.topic", routing_key="a.#"),
    commands.Queue.Delete(queue="q", if_unused=True),
    commands.Exchange.Declare(exchange="x", exchange_type="fanout", arguments={"a": [1, "b"]}),
    commands.Basic.Qos(prefetch_count=10, global_=True),
    commands.Basic.Consume(queue="q", consumer_tag="c", arguments={"x-priority": 5}),
    commands.Basic.Cancel(consumer_tag="c"),
    commands.Basic.Publish(exchange="", routing_key="q", mandatory=True),
    commands.Basic.Get(queue="q", no_ack=True),
    commands.Basic.Ack(delivery_tag=3, multiple=True),
    commands.Basic.Nack(delivery_tag=4, multiple=False, requeue=True),
    commands.Basic.Reject(delivery_tag=5, requeue=False),
    commands.Tx.Select(),
    commands.Tx.Commit(),
    commands.Confirm.Select(nowait=False),
    commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
    commands.Connection.CloseOk(),
]

channels = st.integers(0, 3)
header_payloads = st.builds(
    lambda body_size, headers, delivery_mode: encode_header_payload(
        commands.Basic.Properties(headers=headers, delivery_mode=delivery_mode, app_id="t"),
        body_size,
    ),
    st.integers(0, 10),
    st.dictionaries(st.text(max_size=5), st.integers(-5, 5) | st.text(max_size=5), max_size=3),
    st.sampled_from([None, 1, 2]),
)

valid_frames = st.one_of(
    st.builds(
        frame.marshal,
        st.sampled_from(SAMPLE_METHODS),
        channels,
    ),
    st.builds(encode_frame, st.just(FRAME_HEADER), channels, header_payloads),
    st.builds(
        lambda body, channel: frame.marshal(ContentBody(body), channel),
        st.binary(max_size=20),
        channels,
    ),
    st.just(HEARTBEAT_BYTES),
)


streams = st.lists(valid_frames, max_size=12)


def shape(decoded: object) -> tuple[object, ...]:
    """A comparable summary of a decoded frame (pamqp methods have no equality)."""
    if isinstance(decoded, MethodFrame):
        return ("method", decoded.channel, decoded.method.name, repr(dict(decoded.method)))
    if isinstance(decoded, HeaderFrame | BodyFrame | HeartbeatFrame):
        return ("frame", decoded)
    raise AssertionError(f"not a frame: {decoded!r}")


def read_until_partial(reader: FrameReader, fed: int) -> list[tuple[object, ...]]:
    """Every whole frame buffered; fails if the reader yields more frames than the bytes fed
    could hold (each frame is at least 8 octets), which is how a hang would show."""
    frames = []
    while (decoded := reader.next_frame()) is not None:
        frames.append(shape(decoded))
        assert len(frames) <= fed // FRAME_OVERHEAD, "reader yields frames from nothing"
    return frames


def decode_or_protocol_error(chunks: list[bytes], frame_max: int = FRAME_MAX) -> list[object]:
    """Feed `chunks` one by one; the frames, ending with the ProtocolError if one is raised.
    Any other exception propagates and fails the test."""
    reader = FrameReader(frame_max)
    results: list[object] = []
    fed = 0
    for chunk in chunks:
        reader.feed(chunk)
        fed += len(chunk)
        try:
            results.extend(read_until_partial(reader, fed))
        except ProtocolError as error:
            results.append(error)
            return results
    return results


# FrameReader -------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(frames=streams, data=st.data())
def test_any_split_of_a_valid_stream_gives_the_same_frames(frames, data):
    """BatonMQ style §3: partial input is not an error. However the stream is cut into reads, the
    reader yields the same frames, and None at every cut that falls inside a frame."""
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=10)))
    chunks = [
        stream[start:end] for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True)
    ]
    whole = decode_or_protocol_error([stream])
    assert len(whole) == len(frames)
    assert decode_or_protocol_error(chunks) == whole


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=300), frame_max=st.sampled_from([4096, 131072]))
def test_any_bytes_decode_to_frames_or_a_protocol_error(data, frame_max):
    """Decoding any bytes either succeeds or raises a protocol error, never anything else."""
    decode_or_protocol_error([data], frame_max)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(min_size=1, max_size=200), size=st.integers(1, 7))
def test_any_bytes_in_small_reads_decode_to_frames_or_a_protocol_error(data, size):
    """The same for any bytes arriving a few octets at a time: partial input is never an error
    (BatonMQ style §3), and nothing but a ProtocolError is raised."""
    decode_or_protocol_error([data[i : i + size] for i in range(0, len(data), size)])


@st.composite
def mutated_streams(draw: st.DrawFn) -> bytes:
    """A valid stream with some octets replaced, inserted or removed, or cut short."""
    stream = bytearray(b"".join(draw(streams.filter(bool))))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(stream) - 1))
        kind = draw(st.sampled_from(["replace", "insert", "delete"]))
        octet = draw(st.integers(0, 255))
        if kind == "replace":
            stream[position] = octet
        elif kind == "insert":
            stream.insert(position, octet)
        elif len(stream) > 1:
            del stream[position]
    return bytes(stream[: draw(st.integers(0, len(stream)))])


@settings(max_examples=500, deadline=None)
@given(stream=mutated_streams())
def test_mutated_valid_streams_decode_to_frames_or_a_protocol_error(stream):
    """Valid frames with octets replaced, inserted or removed: frames or a ProtocolError (spec
    4.2.3: a bad frame is "a fatal protocol error", never a crash)."""
    decode_or_protocol_error([stream])


# decode_properties -------------------------------------------------------------------------------


def properties_or_protocol_error(payload: bytes) -> None:
    """Properties, or 502 SYNTAX_ERROR (a value no client decodes) or 505 UNEXPECTED_FRAME (a
    badly-formatted header); any other exception propagates and fails the test."""
    outcome: commands.Basic.Properties | ProtocolError
    try:
        outcome = decode_properties(payload)
    except ProtocolError as error:
        outcome = error
    if isinstance(outcome, ProtocolError):
        assert outcome.reply_code in (ReplyCode.SYNTAX_ERROR, ReplyCode.UNEXPECTED_FRAME)
    else:
        assert isinstance(outcome, commands.Basic.Properties)


@settings(max_examples=500, deadline=None)
@given(payload=st.binary(max_size=200))
def test_decode_properties_of_any_bytes_gives_properties_or_a_protocol_error(payload):
    """Any content header payload: basic properties, or 502 syntax-error ("The sender sent a
    frame that contained illegal values for one or more fields"), or 505 (spec 4.2.6: "A peer
    that receives an incomplete or badly-formatted content MUST raise a connection exception
    with reply code 505 (unexpected frame)")."""
    properties_or_protocol_error(payload)


@settings(max_examples=500, deadline=None)
@given(payload=header_payloads, data=st.data())
def test_decode_properties_of_mutated_headers_gives_properties_or_a_protocol_error(payload, data):
    """Valid content header payloads with octets changed or cut: properties, 502 or 505, nothing
    else."""
    mutated = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 3))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    properties_or_protocol_error(bytes(mutated[: data.draw(st.integers(0, len(mutated)))]))


# ServerConnection --------------------------------------------------------------------------------

SETTINGS = ConnectionSettings(server_properties={}, frame_max=FRAME_MAX, channel_max=8)


def open_connection() -> ConnectionEnd:
    end = ConnectionEnd(ServerConnection(SETTINGS))
    client = MemClient(end)
    client.handshake()
    client.open_channel(1)
    return end


def check_never_raises(end: ConnectionEnd, chunks: list[bytes]) -> None:
    """Rule 7: whatever arrives, receive_data does not raise; the server has sent at most one
    connection.close, with a hard-error code, and only if it is no longer open."""
    for chunk in chunks:
        end.send(chunk)
    connection = end.connection
    output = b"".join(connection.data_to_send())
    reader = FrameReader(1 << 32)
    reader.feed(output)
    sent = []
    while (decoded := reader.next_frame()) is not None:
        sent.append(decoded)
    closes = [
        f.method
        for f in sent
        if isinstance(f, MethodFrame) and isinstance(f.method, commands.Connection.Close)
    ]
    assert all(not ReplyCode(close.reply_code).is_soft for close in closes)
    if connection.state is State.OPEN:
        assert closes == []
    elif connection.state is State.CLOSING:
        assert len(closes) == 1
    else:
        # Ended: by the client's close (after the server's own close, or not).
        assert connection.state is State.CLOSED
        assert len(closes) <= 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_connection_after_handshake_never_raises_on_any_bytes(data):
    """Rule 7: "Any ProtocolError found in the input closes the connection with that error's code
    and text; the error never escapes receive_data"."""
    check_never_raises(open_connection(), [data])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=streams)
def test_connection_after_handshake_never_raises_on_any_valid_frames(frames):
    """Valid frames in any order and on any channel: methods out of place, content without its
    method, connection methods on channels, channels not open."""
    check_never_raises(open_connection(), frames)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=mutated_streams(), size=st.integers(1, 64))
def test_connection_after_handshake_never_raises_on_mutated_streams(stream, size):
    """Rule 7 for valid streams with octets changed, in reads of any size."""
    check_never_raises(
        open_connection(), [stream[i : i + size] for i in range(0, len(stream), size)]
    )


# The publish fast path ---------------------------------------------------------------------------
#
# `FrameReader.peek_content` and the connection's use of it take a whole basic.publish, content
# header and body at once. They must agree with the frame-by-frame path on any input: same
# events, same output, same errors, same state.


def publish_frame(channel: int, exchange: bytes, routing_key: bytes, bits: int) -> bytes:
    """basic.publish written by hand, so that names may be any octets (not UTF-8, too long for
    the frame, ...) and the bits any value."""
    payload = (
        struct.pack(">HHH", 60, 40, 0)
        + bytes((len(exchange) & 0xFF,))
        + exchange
        + bytes((len(routing_key) & 0xFF,))
        + routing_key
        + bytes((bits,))
    )
    return encode_frame(FRAME_METHOD, channel, payload)


names_octets = st.one_of(
    st.sampled_from([b"", b"q", b"amq.direct", b"\xc3\xa9t\xc3\xa9", b"\xff\xfe"]),
    st.binary(max_size=8),
)
content_channels = st.sampled_from([1, 1, 1, 2, 3, 0])
publish_frames = st.builds(
    publish_frame, content_channels, names_octets, names_octets, st.sampled_from([0, 0, 1, 2, 3])
)


#: How a publish may differ from the plain one: each is something the fast path must leave to
#: the frame-by-frame path (or, for the last ones, take just as it would).
DEFECTS = [
    "header channel",
    "body channel",
    "header class",
    "body size",
    "split body",
    "no body frame",
    "method frame end",
    "header frame end",
    "body frame end",
    "short header",
    "oversized body frame",
    "names",
    "after a bare method",
    "oversized header frame",
    "not a method frame",
]


def with_frame_end(frame_bytes: bytes, octet: int) -> bytes:
    return frame_bytes[:-1] + bytes((octet,))


@st.composite
def publishes(draw: st.DrawFn, plain: bool = False) -> bytes:
    """A publish, its header and its body, plain or with one defect (always plain, on the open
    channels 1 and 2, if `plain`)."""
    defect = None if plain else draw(st.sampled_from([None, *DEFECTS]))
    channel = draw(st.sampled_from([1, 2]) if plain else content_channels)
    # Bodies about max_message_size (30 in `run_connection`), too.
    sizes_about_the_limit = st.integers(28, 33).map(bytes)
    body = draw(st.sampled_from([b"", b"!", b"#"])) + draw(
        st.binary(max_size=20) | sizes_about_the_limit
    )
    if defect == "oversized body frame":
        body = bytes(4090)  # a frame of 4098 octets: over the frame_max of 4096 used below
    body_size = len(body)
    if defect == "body size":
        body_size = draw(st.sampled_from([body_size + 1, max(body_size - 1, 0)]))
    properties = draw(
        st.sampled_from(
            [
                commands.Basic.Properties(),
                commands.Basic.Properties(delivery_mode=2, headers={"a": 1}),
            ]
        )
    )
    if defect == "oversized header frame":
        properties = commands.Basic.Properties(headers={"big": "x" * 4090})
    header_payload = encode_header_payload(properties, body_size)
    if defect == "header class":
        header_payload = struct.pack(">H", draw(st.sampled_from([50, 61]))) + header_payload[2:]
    if defect == "short header":
        header_payload = header_payload[: draw(st.integers(0, 13))]
    plain_method = publish_frame(channel, b"", b"q", 0)
    method = draw(publish_frames) if defect == "names" else plain_method
    header_channel = channel + 1 if defect == "header channel" else channel
    header = encode_frame(FRAME_HEADER, header_channel, header_payload)
    body_channel = draw(st.sampled_from([0, 1, 2, 3]).filter(lambda other: other != channel))
    bodies = [encode_frame(FRAME_BODY, body_channel if defect == "body channel" else channel, body)]
    if defect == "split body" and len(body) > 1:
        split = draw(st.integers(1, len(body) - 1))
        bodies = [encode_frame(FRAME_BODY, channel, part) for part in (body[:split], body[split:])]
    if defect == "no body frame":
        bodies = []
    end_octet = draw(st.sampled_from([0x00, 0xCD, 0xCF]))
    if defect == "method frame end":
        method = with_frame_end(method, end_octet)
    if defect == "header frame end":
        header = with_frame_end(header, end_octet)
    if defect == "body frame end" and bodies:
        bodies[-1] = with_frame_end(bodies[-1], end_octet)
    if defect == "not a method frame":
        # The payload of a publish, in a frame of another type.
        method = bytes((draw(st.sampled_from([FRAME_HEADER, FRAME_BODY, 4])),)) + method[1:]
    if defect == "after a bare method":
        # Content was expected on this channel: the publish is an unexpected frame (rule 5).
        method = plain_method + method
    return b"".join([method, header, *bodies])


#: Publishes among other frames (bare publish methods too, which leave content pending);
#: mostly plain ones, so that a stream goes on for a while before an error ends it.
publish_streams = st.lists(
    st.one_of(*[publishes(plain=True)] * 3, *[publishes()] * 3, publish_frames, valid_frames),
    max_size=12,
)


@st.composite
def mutated_publish_streams(draw: st.DrawFn) -> bytes:
    """Such streams, sometimes with a few octets replaced."""
    stream = bytearray(b"".join(draw(publish_streams.filter(bool))))
    for _ in range(draw(st.sampled_from([0, 0, 1, 3]))):
        position = draw(st.integers(0, len(stream) - 1))
        stream[position] = draw(st.integers(0, 255))
    return bytes(stream)


def frame_by_frame(stream: bytes) -> tuple[int, object] | None:
    """What `peek_content` should give for `stream`, read by `next_frame`: the three frames and
    the octets they take, or None if they are not a plain publish on one channel."""
    reader = FrameReader(4096)
    reader.feed(stream)
    frames = []
    try:
        for _ in range(3):
            decoded = reader.next_frame()
            if decoded is None:
                return None
            frames.append(decoded)
    except ProtocolError:
        return None
    method, header, body = frames
    if not (
        isinstance(method, MethodFrame)
        and isinstance(method.method, commands.Basic.Publish)
        and isinstance(header, HeaderFrame)
        and isinstance(body, BodyFrame)
        and method.channel == header.channel == body.channel
        and header.class_id == BASIC_CLASS_ID
        and header.body_size == len(body.payload) > 0
    ):
        return None
    consumed = len(stream) - sum(len(chunk) for chunk in iter(lambda: reader.take(1), None))
    return consumed, (shape(method), header, body.payload)


@settings(max_examples=1000, deadline=None)
@given(first=publishes() | publishes(plain=True), rest=mutated_publish_streams())
def test_peek_content_agrees_with_reading_frame_by_frame(first, rest):
    """The fast path takes exactly the publishes the frame-by-frame path reads as method, header
    and one body frame on one channel, and gives the same method, header and body."""
    stream = first + rest
    reader = FrameReader(4096)
    reader.feed(stream)
    peeked = reader.peek_content()
    expected = frame_by_frame(stream)
    if peeked is None:
        if expected is not None:
            # Declining is always safe; it happens only for publish arguments that the fast
            # decoder leaves to pamqp (trailing octets).
            (size,) = struct.unpack_from(">I", stream, 3)
            assert _fast_publish(stream[7 : 7 + size]) is None
        return
    channel, method, header, body, end = peeked
    assert expected == (end, (shape(MethodFrame(channel, method)), header, body))
    # Nothing was consumed: the frame-by-frame path reads the same stream from its start.
    first = FrameReader(4096)
    first.feed(stream)
    assert shape(reader.next_frame()) == shape(first.next_frame())


def content_answer(connection: ServerConnection, event: Event) -> None:
    """As an engine would: accept the handshake, and close a channel (a soft error) or the
    connection (a hard error) for some publishes, after which their frames are discarded."""
    default_answer(connection, event)
    if isinstance(event, ContentReceived):
        if event.body.startswith(b"!"):
            connection.close_channel(
                event.channel, ChannelError(ReplyCode.PRECONDITION_FAILED, "soft")
            )
        elif event.body.startswith(b"#"):
            connection.close(HardError(ReplyCode.INTERNAL_ERROR, "hard"))


def describe(event: Event) -> object:
    if isinstance(event, ContentReceived | MethodReceived):
        content = (event.header, event.body) if isinstance(event, ContentReceived) else None
        return (type(event), event.channel, event.method.name, repr(dict(event.method)), content)
    if isinstance(event, ChannelFailed):
        return (type(event), event.channel, event.error.reply_code, event.error.reply_text)
    return event


def run_connection(chunks: list[bytes], fast: bool) -> tuple[object, ...]:
    settings_ = ConnectionSettings(
        server_properties={}, frame_max=4096, channel_max=8, max_message_size=30
    )
    end = ConnectionEnd(ServerConnection(settings_), content_answer)
    client = MemClient(end)
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    end.take_events()
    if not fast:
        end.connection._reader.peek_content = lambda: None  # type: ignore[method-assign]
    for chunk in chunks:
        end.send(chunk)
    connection = end.connection
    return (
        [describe(event) for event in end.take_events()],
        end.output(),
        connection.state,
        connection.open_channels(),
    )


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=mutated_publish_streams(), size=st.sampled_from([1, 7, 50, 100000]))
def test_connection_fast_path_agrees_with_the_frame_by_frame_path(stream, size):
    """Rule 5 and the order of events hold on the fast path: for any stream of publishes and
    other frames, mutated, in reads of any size, the connection yields the same events, sends
    the same bytes and ends in the same state with the fast path as without it."""
    chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
    assert run_connection(chunks, fast=True) == run_connection(chunks, fast=False)
