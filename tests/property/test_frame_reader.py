"""Decoding any bytes either succeeds or raises a `ProtocolError`, never anything else, and never
hangs (ARCHITECTURE.md, tests 2); partial input is never an error, however the stream is cut
(STYLE.md 3); and the connection state machine turns every error in its input into a
connection.close (rule 7 of `batonmq/amqp/connection.py`)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame
from pamqp.body import ContentBody

from batonmq.amqp.connection import ConnectionSettings, ServerConnection, State
from batonmq.amqp.constants import FRAME_HEADER, FRAME_OVERHEAD, ReplyCode
from batonmq.amqp.errors import ProtocolError
from batonmq.amqp.frames import (
    HEARTBEAT_BYTES,
    BodyFrame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    decode_properties,
    encode_frame,
    encode_header_payload,
)
from tests.memclient import ConnectionEnd, MemClient

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
    """STYLE.md 3: partial input is not an error. However the stream is cut into reads, the
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
    (STYLE.md 3), and nothing but a ProtocolError is raised."""
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
    """Properties, or a 502 syntax error; any other exception propagates and fails the test."""
    outcome: commands.Basic.Properties | ProtocolError
    try:
        outcome = decode_properties(payload)
    except ProtocolError as error:
        outcome = error
    if isinstance(outcome, ProtocolError):
        assert outcome.reply_code is ReplyCode.SYNTAX_ERROR
    else:
        assert isinstance(outcome, commands.Basic.Properties)


@settings(max_examples=500, deadline=None)
@given(payload=st.binary(max_size=200))
def test_decode_properties_of_any_bytes_gives_properties_or_a_protocol_error(payload):
    """Any content header payload: basic properties or 502 syntax-error ("The sender sent a frame
    that contained illegal values for one or more fields")."""
    properties_or_protocol_error(payload)


@settings(max_examples=500, deadline=None)
@given(payload=header_payloads, data=st.data())
def test_decode_properties_of_mutated_headers_gives_properties_or_a_protocol_error(payload, data):
    """Valid content header payloads with octets changed or cut: properties or 502, nothing else."""
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
