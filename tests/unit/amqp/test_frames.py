"""Frames on the wire: `FrameReader`, `decode_frame`, `decode_method`, `decode_properties` and
the encoders (AMQP 0-9-1 section 4.2.3, "General Frame Format")."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from pamqp import base, commands, frame, header
from pamqp.body import ContentBody

from batonmq.amqp.constants import (
    BASIC_CLASS_ID,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    ReplyCode,
)
from batonmq.amqp.errors import HardError
from batonmq.amqp.frames import (
    HEARTBEAT_BYTES,
    BodyFrame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    decode_frame,
    decode_method,
    decode_properties,
    encode_content,
    encode_frame,
    encode_header_payload,
    encode_method,
)
from batonmq.amqp.properties import MAX_NESTING
from tests.wire import method_payload, raw_frame

FRAME_MAX = 4096


def valid_stream() -> tuple[bytes, list[tuple[object, ...]]]:
    """A stream of every frame type, and what each frame should decode to (see `shape`)."""
    body = b"x" * 5000
    content_header = header.ContentHeader(0, len(body), commands.Basic.Properties())
    parts = [
        (
            frame.marshal(commands.Queue.Declare(queue="q", durable=True), 1),
            ("method", 1, "Queue.Declare", {"queue": "q", "durable": True}),
        ),
        (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1),
            ("method", 1, "Basic.Publish", {"routing_key": "q"}),
        ),
        (frame.marshal(content_header, 1), ("header", 1, BASIC_CLASS_ID, len(body))),
        (frame.marshal(ContentBody(body[:4000]), 1), ("body", 1, body[:4000])),
        (frame.marshal(ContentBody(body[4000:]), 1), ("body", 1, body[4000:])),
        (HEARTBEAT_BYTES, ("heartbeat", 0)),
        (
            frame.marshal(commands.Channel.Close(200, "bye", 0, 0), 2),
            ("method", 2, "Channel.Close", {}),
        ),
    ]
    return b"".join(data for data, _ in parts), [expected for _, expected in parts]


def shape(decoded: object) -> tuple[object, ...]:
    """A comparable summary of a decoded frame (pamqp methods have no equality)."""
    if isinstance(decoded, MethodFrame):
        return ("method", decoded.channel, decoded.method.name, dict(decoded.method))
    if isinstance(decoded, HeaderFrame):
        return ("header", decoded.channel, decoded.class_id, decoded.body_size)
    if isinstance(decoded, BodyFrame):
        return ("body", decoded.channel, decoded.payload)
    assert isinstance(decoded, HeartbeatFrame)
    return ("heartbeat", decoded.channel)


def matches(actual: tuple[object, ...], expected: tuple[object, ...]) -> bool:
    """`expected` with a dict of method arguments matches when those arguments agree."""
    if expected[0] != "method":
        return actual == expected
    arguments = actual[3]
    assert isinstance(arguments, dict)
    wanted = expected[3]
    assert isinstance(wanted, dict)
    return actual[:3] == expected[:3] and all(arguments[k] == v for k, v in wanted.items())


def read_all(reader: FrameReader) -> list[tuple[object, ...]]:
    frames = []
    while (decoded := reader.next_frame()) is not None:
        frames.append(shape(decoded))
    return frames


# Partial input ------------------------------------------------------------------------------------


def test_a_valid_stream_decodes_frame_by_frame():
    """Spec 4.2.3: a stream is a sequence of frames - type, channel, size, payload, frame-end - of
    every type."""
    stream, expected = valid_stream()
    reader = FrameReader(FRAME_MAX)
    reader.feed(stream)
    frames = read_all(reader)
    assert len(frames) == len(expected)
    assert all(matches(a, e) for a, e in zip(frames, expected, strict=True))


def test_every_proper_prefix_of_a_frame_is_partial_input():
    """BatonMQ style §3: partial input is not an error. A reader fed any proper prefix of a frame
    returns None, and the frame once the rest arrives."""
    data = frame.marshal(commands.Basic.Qos(prefetch_count=7), 3)
    for cut in range(len(data)):
        reader = FrameReader(FRAME_MAX)
        reader.feed(data[:cut])
        assert reader.next_frame() is None, cut
        reader.feed(data[cut:])
        decoded = reader.next_frame()
        assert isinstance(decoded, MethodFrame)
        assert isinstance(decoded.method, commands.Basic.Qos)
        assert decoded.method.prefetch_count == 7
        assert reader.next_frame() is None


def test_every_prefix_of_a_stream_yields_exactly_the_whole_frames_in_it():
    """BatonMQ style §3: a read that ends inside a frame yields the whole frames before it, then
    None."""
    stream, expected = valid_stream()
    ends = []
    reader = FrameReader(FRAME_MAX)
    for position in range(len(stream)):
        reader.feed(stream[position : position + 1])
        if reader.next_frame() is not None:
            ends.append(position + 1)
    assert len(ends) == len(expected)
    for cut in range(0, len(stream), 97):
        reader = FrameReader(FRAME_MAX)
        reader.feed(stream[:cut])
        whole = sum(1 for end in ends if end <= cut)
        assert len(read_all(reader)) == whole, cut


def test_take_waits_for_the_whole_protocol_header():
    """Spec 4.2.2: the protocol header is 8 octets, not a frame; partial input waits."""
    reader = FrameReader(FRAME_MAX)
    reader.feed(b"AMQP\x00")
    assert reader.take(8) is None
    reader.feed(b"\x00\x09\x01" + HEARTBEAT_BYTES)
    assert reader.take(8) == b"AMQP\x00\x00\x09\x01"
    assert reader.next_frame() == HeartbeatFrame(0)


# Malformed frames ---------------------------------------------------------------------------------


def error_of(data: bytes, frame_max: int = FRAME_MAX) -> HardError:
    reader = FrameReader(frame_max)
    reader.feed(data)
    with pytest.raises(HardError) as caught:
        reader.next_frame()
    return caught.value


def test_wrong_frame_end_is_frame_error():
    """Spec 4.2.3: "When a peer reads a frame it MUST check that the frame-end is valid before
    attempting to decode the frame. If the frame-end is not valid it MUST treat this as a fatal
    protocol error" (501 frame-error)."""
    payload = method_payload(commands.Basic.Qos())
    error = error_of(raw_frame(FRAME_METHOD, 1, payload, frame_end=0xCD))
    assert error.reply_code is ReplyCode.FRAME_ERROR
    assert error.closes_connection


def test_wrong_frame_end_is_found_before_the_payload_is_decoded():
    """A garbage payload with a bad frame-end is a frame error, not a syntax error: the end is
    checked first (spec 4.2.3)."""
    error = error_of(raw_frame(FRAME_METHOD, 1, b"\xff\xff\xff\xff", frame_end=0))
    assert error.reply_code is ReplyCode.FRAME_ERROR


def test_frame_over_frame_max_is_frame_error_as_soon_as_its_size_is_read():
    """Spec 4.2.3: "A peer that receives an oversized frame MUST signal a connection exception
    with reply code 501 (frame error)." The size is in the first 7 octets: the reader refuses
    there, without buffering the oversized payload."""
    size = FRAME_MAX - FRAME_OVERHEAD + 1
    error = error_of(struct.pack(">BHI", FRAME_BODY, 1, size))
    assert error.reply_code is ReplyCode.FRAME_ERROR


def test_frame_of_exactly_frame_max_is_accepted():
    """Spec 4.2.3: frame-max is the largest frame, header and frame-end included; a frame of that
    size is legal."""
    payload = b"b" * (FRAME_MAX - FRAME_OVERHEAD)
    reader = FrameReader(FRAME_MAX)
    reader.feed(raw_frame(FRAME_BODY, 1, payload))
    assert reader.next_frame() == BodyFrame(1, payload)


def test_unknown_frame_type_is_frame_error():
    """Spec 4.2.3: "If a peer receives a frame with a type that is not one of these defined
    types, it MUST treat this as a fatal protocol error"."""
    for frame_type in (0, 4, 7, 9, 0x41, 255):
        error = error_of(raw_frame(frame_type, 0, b""))
        assert error.reply_code is ReplyCode.FRAME_ERROR, frame_type


def test_heartbeat_on_a_channel_other_than_0_is_frame_error():
    """Spec 4.2.6.2: "Heartbeat frames MUST have a channel number of zero." BatonMQ refuses
    others as a malformed frame, 501 frame-error (spec 4.2.3 itself names 503 for a non-zero
    channel on a heartbeat frame)."""
    error = error_of(raw_frame(FRAME_HEARTBEAT, 1, b""))
    assert error.reply_code is ReplyCode.FRAME_ERROR


def test_heartbeat_on_channel_0_decodes():
    """Spec 4.2.7: heartbeat frames are type 8 on channel 0 with an empty payload."""
    assert decode_frame(FRAME_HEARTBEAT, 0, b"") == HeartbeatFrame(0)


def test_unknown_method_is_not_implemented():
    """amqp0-9-1.xml, not-implemented (540): "The client tried to use functionality that is not
    implemented in the server"; an unknown class/method id is such functionality."""
    for index in (0x000A0001, 0x00FF000A, 0xFFFFFFFF, 0x003C00C8):
        error = error_of(raw_frame(FRAME_METHOD, 1, struct.pack(">I", index)))
        assert error.reply_code is ReplyCode.NOT_IMPLEMENTED, hex(index)
        assert error.closes_connection


def test_truncated_method_arguments_are_frame_error():
    """amqp0-9-1.xml, frame-error (501): "The sender sent a malformed frame that the recipient
    could not decode"; an argument list cut short is one (RabbitMQ answers 501 too). The error
    names the method."""
    payload = method_payload(commands.Queue.Declare(queue="orders", arguments={"x": 1}))
    for cut in (5, 7, 12, len(payload) - 3):
        with pytest.raises(HardError) as caught:
            decode_method(payload[:cut])
        assert caught.value.reply_code is ReplyCode.FRAME_ERROR, cut
        assert (caught.value.class_id, caught.value.method_id) == (50, 10)


def test_undecodable_method_arguments_are_frame_error():
    """Invalid UTF-8 in a short string and an unknown field-table type tag cannot be decoded
    either (501 frame-error)."""
    bad_utf8 = struct.pack(">IH", commands.Basic.Get.index, 0) + b"\x02\xff\xfe" + b"\x00"
    bad_table = (
        struct.pack(">IH", commands.Queue.Declare.index, 0)
        + b"\x01q\x00"
        + struct.pack(">I", 3)
        + b"\x01kZ"
    )
    for payload in (bad_utf8, bad_table):
        with pytest.raises(HardError) as caught:
            decode_method(payload)
        assert caught.value.reply_code is ReplyCode.FRAME_ERROR


def nested(depth: int) -> dict[str, object]:
    """A table whose tables nest `depth` deep, the outermost counted (an array at the bottom)."""
    table: dict[str, object] = {"leaf": [1]}
    for _ in range(depth - 2):
        table = {"n": table}
    return table


@pytest.mark.parametrize(
    "method",
    [
        lambda table: commands.Queue.Declare(queue="q", durable=True, arguments=table),
        lambda table: commands.Queue.Bind(queue="q", exchange="x", arguments=table),
        lambda table: commands.Exchange.Declare(exchange="x", arguments=table),
        lambda table: commands.Basic.Consume(queue="q", arguments=table),
        lambda table: commands.Connection.StartOk(client_properties=table, response="\0a\0b"),
    ],
    ids=["queue.declare", "queue.bind", "exchange.declare", "basic.consume", "start-ok"],
)
def test_method_tables_nested_past_the_limit_are_a_syntax_error(
    method: Callable[[dict[str, object]], base.Frame],
) -> None:
    """A method's field tables may nest `MAX_NESTING` deep, as a content header's: one more is
    502 syntax-error ("The sender sent a frame that contained illegal values for one or more
    fields"), at the edge, rather than a table the broker cannot write back: a durable queue
    declared with a table nested 400 deep failed its store write with a RecursionError."""
    table = nested(MAX_NESTING)
    decoded = decode_method(method_payload(method(table)))
    tables = [getattr(decoded, name, None) for name in ("arguments", "client_properties")]
    assert table in tables  # 100 deep: decoded whole
    for depth in (MAX_NESTING + 1, 400):
        with pytest.raises(HardError) as caught:
            decode_method(method_payload(method(nested(depth))))
        assert caught.value.reply_code is ReplyCode.SYNTAX_ERROR
        assert f"nested more than {MAX_NESTING} deep" in caught.value.reply_text


def test_method_frame_shorter_than_its_ids_is_frame_error():
    """Spec 4.2.4: a method payload starts with class-id and method-id (4 octets); fewer cannot be
    decoded (501 frame-error)."""
    for payload in (b"", b"\x00", b"\x00\x3c\x00"):
        with pytest.raises(HardError) as caught:
            decode_frame(FRAME_METHOD, 1, payload)
        assert caught.value.reply_code is ReplyCode.FRAME_ERROR


def test_content_header_shorter_than_14_octets_is_frame_error():
    """Spec 4.2.6.1: a content header is class-id, weight, body-size (12 octets) and at least
    one 16-bit property-flags word; fewer than 14 octets cannot be a content header (501)."""
    payload = encode_header_payload(commands.Basic.Properties(), 0)
    assert len(payload) == 14
    for cut in range(14):
        with pytest.raises(HardError) as caught:
            decode_frame(FRAME_HEADER, 1, payload[:cut])
        assert caught.value.reply_code is ReplyCode.FRAME_ERROR
    assert decode_frame(FRAME_HEADER, 1, payload) == HeaderFrame(1, BASIC_CLASS_ID, 0, payload)


def test_decode_method_of_basic_recover_async_does_not_warn():
    """basic.recover-async (class 60, method 100) is deprecated but still a valid 0-9-1 method
    a client may send; decoding it must return the method, not raise pamqp's
    DeprecationWarning (which this test suite, like any `-W error` deployment, turns into an
    exception escaping the decoder)."""
    payload = struct.pack(">I", commands.Basic.RecoverAsync.index) + b"\x01"
    method = decode_method(payload)
    assert method.name == "Basic.RecoverAsync"
    assert method.requeue is True


# Properties ---------------------------------------------------------------------------------------


def test_decode_properties_reads_what_encode_header_payload_wrote():
    """Spec 4.2.6.1: property flags then the present properties; absent ones decode as None."""
    properties = commands.Basic.Properties(
        content_type="text/plain", delivery_mode=2, headers={"a": 1}, user_id="guest"
    )
    payload = encode_header_payload(properties, 42)
    decoded = decode_properties(payload)
    assert decoded.content_type == "text/plain"
    assert decoded.delivery_mode == 2
    assert decoded.headers == {"a": 1}
    assert decoded.user_id == "guest"
    assert decoded.message_id is None
    assert decode_frame(FRAME_HEADER, 1, payload).body_size == 42


def test_a_property_list_shorter_than_its_flags_is_badly_formatted_content():
    """The flags say a content-type of 5 octets follows, and 2 do. Spec 4.2.6: "A peer that
    receives an incomplete or badly-formatted content MUST raise a connection exception with
    reply code 505 (unexpected frame)"."""
    malformed = struct.pack(">HHQH", BASIC_CLASS_ID, 0, 0, 0x8000) + b"\x05ab"
    with pytest.raises(HardError) as caught:
        decode_properties(malformed)
    assert caught.value.reply_code is ReplyCode.UNEXPECTED_FRAME


# Encoders -----------------------------------------------------------------------------------------


def test_encode_frame_is_type_channel_size_payload_frame_end():
    """Spec 4.2.3: frame = type (octet), channel (short), size (long), payload, frame-end
    (%xCE)."""
    assert encode_frame(FRAME_BODY, 5, b"abc") == b"\x03\x00\x05\x00\x00\x00\x03abc\xce"
    assert HEARTBEAT_BYTES == b"\x08\x00\x00\x00\x00\x00\x00\xce"  # spec 4.2.3: type 8, channel 0


def test_encode_method_matches_pamqp():
    """Spec 4.2.4: a method frame is class-id, method-id and the arguments, as every pamqp client
    writes it."""
    method = commands.Basic.Deliver("ctag", 9, True, "ex", "rk")
    assert encode_method(4, method) == frame.marshal(method, 4)


def test_encode_content_splits_the_body_to_fit_frame_max():
    """Spec 4.2.6.2: a body "MAY be broken into several (or many) chunks, each forming a content
    body frame"; none may exceed frame-max (4.2.3)."""
    body = bytes(range(256)) * 40  # 10240 octets: 4088 + 4088 + 2064
    method = encode_method(1, commands.Basic.Deliver("c", 1, False, "", "q"))
    header_payload = encode_header_payload(commands.Basic.Properties(), len(body))
    pieces = encode_content(1, method, header_payload, body, FRAME_MAX)
    assert pieces[0] == method
    reader = FrameReader(FRAME_MAX)
    reader.feed(b"".join(pieces))
    decoded = [reader.next_frame() for _ in range(5)]
    assert reader.next_frame() is None
    assert decoded[1] == HeaderFrame(1, BASIC_CLASS_ID, len(body), header_payload)
    assert [len(f.payload) for f in decoded[2:] if isinstance(f, BodyFrame)] == [4088, 4088, 2064]
    assert b"".join(f.payload for f in decoded[2:] if isinstance(f, BodyFrame)) == body


def test_encode_content_writes_the_parts_of_a_body_as_views_of_it():
    """A body larger than a frame goes out without being copied into frames: each body frame's
    payload is a view of the body (a large delivery is written with one writev of its pieces),
    and the octets are what pamqp writes for the same frames."""
    body = bytes(range(256)) * 40
    method = encode_method(1, commands.Basic.Deliver("c", 1, False, "", "q"))
    properties = commands.Basic.Properties()
    header_payload = encode_header_payload(properties, len(body))

    pieces = encode_content(1, method, header_payload, body, FRAME_MAX)

    parts = [piece for piece in pieces if isinstance(piece, memoryview)]
    assert [len(part) for part in parts] == [4088, 4088, 2064]
    assert all(part.obj is body for part in parts)
    chunk = FRAME_MAX - FRAME_OVERHEAD
    expected = [
        frame.marshal(commands.Basic.Deliver("c", 1, False, "", "q"), 1),
        frame.marshal(header.ContentHeader(0, len(body), properties), 1),
        *(
            frame.marshal(ContentBody(body[start : start + chunk]), 1)
            for start in range(0, len(body), chunk)
        ),
    ]
    assert b"".join(pieces) == b"".join(expected)


def test_encode_content_of_an_empty_body_has_no_body_frame():
    """Spec 4.2.6.2: the body is as many frames as its size needs; for size 0, none."""
    header_payload = encode_header_payload(commands.Basic.Properties(), 0)
    frames = encode_content(1, b"method", header_payload, b"", FRAME_MAX)
    assert frames == [b"method", encode_frame(FRAME_HEADER, 1, header_payload)]


def test_a_large_frame_in_small_reads_then_whole_publishes_in_one_read():
    """The reader keeps a long rest in a growing bytearray and goes back to bytes once a read is
    larger than the rest (FrameReader.feed); the frames come out the same either way, and the
    publishes after the large frame are taken whole by `peek_content`."""
    reader = FrameReader(1 << 20)
    big = bytes(range(256)) * 400
    stream = frame.marshal(ContentBody(big), 3)
    all_but_the_end = stream[:-1]
    for start in range(0, len(all_but_the_end), 100):
        reader.feed(all_but_the_end[start : start + 100])
        assert reader.next_frame() is None
    publish = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    content = frame.marshal(header.ContentHeader(0, 3, commands.Basic.Properties()), 1)
    triplet = publish + content + frame.marshal(ContentBody(b"abc"), 1)
    reader.feed(stream[-1:] + triplet * 2)
    assert reader.next_frame() == BodyFrame(3, big)
    for _ in range(2):
        peeked = reader.peek_content()
        assert peeked is not None
        channel, method, header_frame, body, end = peeked
        assert (channel, method.routing_key, header_frame.body_size, body) == (1, "q", 3, b"abc")
        reader.skip_to(end)
    assert reader.next_frame() is None
