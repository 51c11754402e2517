"""Frames on the wire: a reader that turns bytes into frames, and the encoders for the way out.

Partial input is not an error (BatonMQ style §3): `FrameReader.next_frame` returns None until a
whole frame is buffered. Everything else that is wrong with the bytes raises a `ProtocolError` with
the reply code the spec gives it, never any other exception: pamqp's own exceptions stop here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, cast

from pamqp import base, commands
from pamqp import frame as pamqp_frame

from batonmq.amqp.constants import (
    BASIC_CLASS_ID,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    ReplyCode,
)
from batonmq.amqp.errors import HardError
from batonmq.amqp.properties import (
    MAX_NESTING,
    check_basic_properties,
    decode_basic_properties,
    nesting,
)

FRAME_START: Final = struct.Struct(">BHI")
#: The frame-end octet of one frame and the start of the next.
END_THEN_FRAME_START: Final = struct.Struct(">BBHI")
FRAME_END_BYTES: Final = bytes((FRAME_END,))
_CONTENT_HEADER_START: Final = struct.Struct(">HHQ")
_METHOD_INDEX: Final = struct.Struct(">I")
_SHORT: Final = struct.Struct(">h")
_LONG_LONG: Final = struct.Struct(">q")
#: A method frame's start and its class-id and method-id.
_METHOD_FRAME_START: Final = struct.Struct(">BHIHH")
#: A content header frame's start and its class-id, weight and body-size.
_HEADER_FRAME_START: Final = struct.Struct(">BHIHHQ")
_PUBLISH_CLASS_ID: Final = 60
_PUBLISH_METHOD_ID: Final = 40
#: class-id, weight, body-size and the first property-flags word.
CONTENT_HEADER_MIN_SIZE: Final = 14
HEARTBEAT_BYTES: Final = bytes((FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END))


# Frames are made for every frame read, and a frozen dataclass's __init__ costs several times a
# plain one's: they are not frozen, but are not to be changed either.


@dataclass(slots=True)
class MethodFrame:
    channel: int
    method: base.Frame


@dataclass(slots=True)
class HeaderFrame:
    """A content header. `payload` is kept exactly as received so it can be forwarded unchanged;
    its properties are checked by the connection (`amqp.properties`) before it goes further."""

    channel: int
    class_id: int
    body_size: int
    payload: bytes


@dataclass(slots=True)
class BodyFrame:
    channel: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class HeartbeatFrame:
    channel: int


Frame = MethodFrame | HeaderFrame | BodyFrame | HeartbeatFrame


class FrameReader:
    """Buffers bytes; yields whole frames no larger than `frame_max` (header and end included)."""

    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        #: Unread input from `_offset` on. Usually bytes, which slice into payloads with one
        #: copy; a bytearray only while a long rest (a large frame arriving in many small
        #: reads) grows in place, so that the bytes kept are never copied over and over.
        self._buffer: bytes | bytearray = b""
        self._offset = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        buffer, offset = self._buffer, self._offset
        rest = len(buffer) - offset
        if not rest:
            self._buffer, self._offset = bytes(data), 0
        elif rest <= len(data):
            # Each octet of the rest copied is paid for by a new one: linear overall.
            self._buffer, self._offset = b"".join((memoryview(buffer)[offset:], data)), 0
        elif isinstance(buffer, bytearray):
            buffer += data
        else:
            self._buffer, self._offset = bytearray(memoryview(buffer)[offset:]) + data, 0

    def take(self, count: int) -> bytes | None:
        """The next `count` raw bytes (the protocol header), or None until that many are here."""
        if len(self._buffer) - self._offset < count:
            return None
        start, self._offset = self._offset, self._offset + count
        return bytes(self._buffer[start : self._offset])

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None when more data is needed."""
        buffer, offset = self._buffer, self._offset
        available = len(buffer) - offset
        if available < 7:
            return None
        frame_type, channel, size = FRAME_START.unpack_from(buffer, offset)
        if size + FRAME_OVERHEAD > self.frame_max:
            raise HardError(
                ReplyCode.FRAME_ERROR,
                f"frame of {size + FRAME_OVERHEAD} octets exceeds frame_max {self.frame_max}",
            )
        if available < size + FRAME_OVERHEAD:
            self._compact()
            return None
        end = offset + 7 + size
        if buffer[end] != FRAME_END:
            raise HardError(ReplyCode.FRAME_ERROR, f"frame-end octet is {buffer[end]:#04x}")
        payload = bytes(buffer[offset + 7 : end])
        self._offset = end + 1
        return decode_frame(frame_type, channel, payload)

    def peek_content(self) -> tuple[int, commands.Basic.Publish, HeaderFrame, bytes, int] | None:
        """basic.publish, its content header and its body in one frame, when all three are
        buffered, well-formed and on one channel: (channel, method, header, body, end), where
        `end` is for `skip_to` once the caller has checked the channel. Nothing is consumed.

        The hot path: one read usually holds many whole publishes, and this takes each in one
        pass instead of three frames. None for anything else, which `next_frame` then reads
        frame by frame and so meets its exact error: a fast path that only agrees with the
        general one (tests/property/test_frame_reader.py compares them)."""
        buffer, start = self._buffer, self._offset
        limit = len(buffer)
        if limit - start < 11:
            return None
        frame_type, channel, size, class_id, method_id = _METHOD_FRAME_START.unpack_from(
            buffer, start
        )
        if (
            method_id != _PUBLISH_METHOD_ID
            or class_id != _PUBLISH_CLASS_ID
            or frame_type != FRAME_METHOD
        ):
            return None
        frame_max = self.frame_max
        header_at = start + FRAME_OVERHEAD + size
        # The header frame's start and its first 12 payload octets.
        if header_at + 19 > limit or size + FRAME_OVERHEAD > frame_max:
            return None
        header_type, header_channel, header_size, content_class, _weight, body_size = (
            _HEADER_FRAME_START.unpack_from(buffer, header_at)
        )
        body_at = header_at + FRAME_OVERHEAD + header_size
        if (
            header_type != FRAME_HEADER
            or header_channel != channel
            or content_class != BASIC_CLASS_ID
            or header_size < CONTENT_HEADER_MIN_SIZE
            or header_size + FRAME_OVERHEAD > frame_max
            or body_at + 7 > limit
        ):
            return None
        body_type, body_channel, body_frame_size = FRAME_START.unpack_from(buffer, body_at)
        end = body_at + FRAME_OVERHEAD + body_size
        if (
            body_type != FRAME_BODY
            or body_channel != channel
            or body_frame_size != body_size
            or body_size == 0
            or body_size + FRAME_OVERHEAD > frame_max
            or end > limit
            or buffer[header_at - 1] != FRAME_END
            or buffer[body_at - 1] != FRAME_END
            or buffer[end - 1] != FRAME_END
        ):
            return None
        if isinstance(buffer, bytes):
            arguments = buffer[start + 11 : header_at - 1]
            header_payload = buffer[header_at + 7 : body_at - 1]
            body = buffer[body_at + 7 : end - 1]
        else:  # a bytearray (see `feed`)
            arguments = bytes(buffer[start + 11 : header_at - 1])
            header_payload = bytes(buffer[header_at + 7 : body_at - 1])
            body = bytes(buffer[body_at + 7 : end - 1])
        try:
            method = _publish_from(arguments)
        except (IndexError, UnicodeDecodeError):
            return None
        if method is None:
            return None
        return (
            channel,
            method,
            HeaderFrame(channel, BASIC_CLASS_ID, body_size, header_payload),
            body,
            end,
        )

    def skip_to(self, end: int) -> None:
        """Consume the buffer up to `end` (from `peek_content`)."""
        self._offset = end

    def _compact(self) -> None:
        # Drop consumed bytes before waiting for the rest of a frame, so the buffer stays small
        # (bytes are dropped by the next `feed`).
        if self._offset and isinstance(self._buffer, bytearray):
            del self._buffer[: self._offset]
            self._offset = 0


def decode_frame(frame_type: int, channel: int, payload: bytes) -> Frame:
    if frame_type == FRAME_METHOD:
        return MethodFrame(channel, decode_method(payload))
    if frame_type == FRAME_HEADER:
        if len(payload) < CONTENT_HEADER_MIN_SIZE:
            raise HardError(ReplyCode.FRAME_ERROR, "content header frame is truncated")
        class_id, _weight, body_size = _CONTENT_HEADER_START.unpack_from(payload)
        return HeaderFrame(channel, class_id, body_size, payload)
    if frame_type == FRAME_BODY:
        return BodyFrame(channel, payload)
    if frame_type == FRAME_HEARTBEAT:
        if channel != 0:
            raise HardError(ReplyCode.FRAME_ERROR, "heartbeat frame on a channel other than 0")
        return HeartbeatFrame(channel)
    raise HardError(ReplyCode.FRAME_ERROR, f"unknown frame type {frame_type}")


def _fast_publish(payload: bytes) -> base.Frame | None:
    """basic.publish decoded without pamqp's generic walk over its arguments (the hot path), or
    None for anything but a well-formed one, which then goes the generic way and gets its
    exact error."""
    return _publish_from(payload[4:])


def _publish_from(encoded: bytes) -> commands.Basic.Publish | None:
    """The basic.publish whose arguments are `encoded`, or None unless they fill it exactly.
    Raises IndexError or UnicodeDecodeError on some malformed ones. The same arguments give the
    same object, which nothing changes (`_publishes`)."""
    method = _publishes.get(encoded)
    if method is None:
        arguments = _decode_publish_arguments(encoded)
        if arguments is None:
            return None
        method = object.__new__(commands.Basic.Publish)
        (
            method.ticket,
            method.exchange,
            method.routing_key,
            method.mandatory,
            method.immediate,
        ) = arguments
        if len(_publishes) >= _PUBLISHES_KEPT:
            _publishes.clear()
        _publishes[encoded] = method
    return method


#: ticket, exchange, routing-key, mandatory, immediate.
_PublishArguments = tuple[int, str, str, bool, bool]
#: Decoded basic.publish methods by the bytes of their arguments: a publisher repeats its
#: exchange and routing key, and decoding them, or making a method object, is most of the cost
#: of a publish method. The engine reads a method's arguments and never changes them, so one
#: object serves every publish with the same bytes. Emptied when full.
_publishes: dict[bytes, commands.Basic.Publish] = {}
_PUBLISHES_KEPT: Final = 1024


def _decode_publish_arguments(encoded: bytes) -> _PublishArguments | None:
    exchange_end = 3 + encoded[2]
    key_end = exchange_end + 1 + encoded[exchange_end]
    if len(encoded) != key_end + 1:
        return None
    bits = encoded[key_end]
    return (
        _SHORT.unpack_from(encoded)[0],
        encoded[3:exchange_end].decode("utf-8"),
        encoded[exchange_end + 1 : key_end].decode("utf-8"),
        bool(bits & 1),
        bool(bits & 2),
    )


def _fast_ack(payload: bytes) -> base.Frame | None:
    """basic.ack decoded directly (the hot path); None unless well-formed."""
    if len(payload) != 13:
        return None
    method = object.__new__(commands.Basic.Ack)
    method.delivery_tag = _LONG_LONG.unpack_from(payload, 4)[0]
    method.multiple = bool(payload[12] & 1)
    return method


_FAST_METHODS: Final = {
    commands.Basic.Publish.index: _fast_publish,
    commands.Basic.Ack.index: _fast_ack,
}


def decode_method(payload: bytes) -> base.Frame:
    if len(payload) < 4:
        raise HardError(ReplyCode.FRAME_ERROR, "method frame is truncated")
    (index,) = _METHOD_INDEX.unpack_from(payload)
    fast = _FAST_METHODS.get(index)
    if fast is not None:
        try:
            decoded = fast(payload)
        except (IndexError, UnicodeDecodeError):
            decoded = None
        if decoded is not None:
            return decoded
    method_class = commands.INDEX_MAPPING.get(index)
    if method_class is None:
        unknown = HardError(
            ReplyCode.NOT_IMPLEMENTED,
            f"unknown method: class {index >> 16}, method {index & 0xFFFF}",
        )
        unknown.class_id, unknown.method_id = index >> 16, index & 0xFFFF
        raise unknown
    # Without __init__: unmarshal sets every attribute, and pamqp's __init__ of
    # basic.recover-async emits a DeprecationWarning the client's use is not ours to raise.
    method = cast(base.Frame, object.__new__(method_class))
    try:
        method.unmarshal(payload[4:])
    except Exception as error:
        # pamqp raises struct.error, ValueError, IndexError, UnicodeDecodeError and more for
        # arguments it cannot decode: a frame "the recipient could not decode" is 501.
        raise HardError(
            ReplyCode.FRAME_ERROR, f"malformed {method.name} arguments: {error}", method_class
        ) from error
    # As in a content header (`batonmq.amqp.properties`): the broker writes such a table back
    # (to the store, to another worker, to its clients) by recursion too.
    for name in _TABLES:
        table = getattr(method, name, None)
        if table and nesting(table) > MAX_NESTING:
            raise HardError(
                ReplyCode.SYNTAX_ERROR,
                f"{method.name} {name}: tables and arrays nested more than {MAX_NESTING} deep",
                method_class,
            )
    return method


#: The field-table arguments of methods (queue.declare, basic.consume, connection.start-ok, ...).
_TABLES: Final = ("arguments", "client_properties")


def decode_properties(header_payload: bytes) -> commands.Basic.Properties:
    """The basic properties of a content header payload from the wire: a `HardError` (505 or
    502, amqp/properties.py) unless every client can decode them."""
    check_basic_properties(header_payload)
    return decode_basic_properties(header_payload)


def encode_header_payload(properties: commands.Basic.Properties, body_size: int) -> bytes:
    return _CONTENT_HEADER_START.pack(BASIC_CLASS_ID, 0, body_size) + properties.marshal()


def encode_method(channel: int, method: base.Frame) -> bytes:
    return pamqp_frame.marshal(method, channel)


def encode_frame(frame_type: int, channel: int, payload: bytes | memoryview) -> bytes:
    return b"".join((FRAME_START.pack(frame_type, channel, len(payload)), payload, FRAME_END_BYTES))


def encode_content(
    channel: int,
    method_frame: bytes,
    header_payload: bytes,
    body: bytes | memoryview,
    frame_max: int,
) -> list[bytes | memoryview]:
    """The frames of one content-carrying method: method, header, and the body split to fit,
    as pieces to be written one after the other: each part of the body is a view of it, between
    the octets that frame it, so that a body larger than a frame is not copied into frames
    first."""
    pieces: list[bytes | memoryview] = [
        method_frame,
        encode_frame(FRAME_HEADER, channel, header_payload),
    ]
    view = memoryview(body)
    chunk = frame_max - FRAME_OVERHEAD
    for start in range(0, len(view), chunk):
        part = view[start : start + chunk]
        pieces += (FRAME_START.pack(FRAME_BODY, channel, len(part)), part, FRAME_END_BYTES)
    return pieces
