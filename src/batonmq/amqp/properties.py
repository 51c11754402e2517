"""Basic properties of a content header: checked at the edge, decoded where needed, edited in place.

`check_basic_properties` is the edge (ARCHITECTURE.md: "Content-header bytes are validated once
at the edge"; issue 17: "the broker decodes and validates every property at the edge when the
message arrives and closes the publisher's connection ... if it cannot"). A header passes when
every consumer the broker may hand it to decodes it: it passes exactly when it follows the AMQP
0-9-1 grammar (spec 4.2.5 field types with RabbitMQ's errata table, 4.2.6.1 content header) and
both pika and pamqp (aio-pika's codec) decode it. Where they differ from the grammar:

- Short strings (properties and field names) must be UTF-8 (spec 4.2.5.3: "Short strings can
  carry up to 255 octets of UTF-8 data"); pamqp refuses others. A zero octet in one is let
  through (the same sentence says they "may not contain binary zero octets"), as RabbitMQ does:
  both clients decode it.
- Field types are those of RabbitMQ's errata table, t b B s u I i l L f d D S x A T F V (the
  grammar of rabbit_binary_parser); pika alone also reads 'U', pamqp alone the octet 0.
- A float or double that is NaN or infinite is refused: pika turns each into an int and fails.
- A timestamp field after 9999-12-31T23:59:59 UTC is refused: pika makes a `datetime` of it. The
  timestamp property may go further, as far as pamqp's rule (above 2**32 - 1 it is taken for
  milliseconds) gives a `datetime`.
- delivery-mode above 2 is refused (spec: "Non-persistent (1) or persistent (2)"; aio-pika fails
  on the others). 0, which both clients read as non-persistent, passes, as in RabbitMQ.
- Tables and arrays nest at most `MAX_NESTING` deep: both clients decode by recursion.
- Bits of the property flags that name no property (bit 1, and continuation words) are ignored,
  as RabbitMQ, pika and pamqp ignore them.

The outer shape of the header is the content's format: a non-zero weight ("The weight field is
unused and must be zero"), flags or a property that runs past the end of the payload, or octets
left after the last property, are 505 UNEXPECTED_FRAME (spec 4.2.6: "A peer that receives an
incomplete or badly-formatted content MUST raise a connection exception with reply code 505";
RabbitMQ refuses a weight the same way). A value that is not allowed, inside a property that
fits, is 502 SYNTAX_ERROR ("The sender sent a frame that contained illegal values for one or
more fields").

Behind the edge the properties are trusted (STYLE.md 14): `decode_basic_properties` is pamqp's
decoder, and `rewrite_headers` walks the header with the same steps as the check. When the
broker changes a message's headers (x-delivery-count, x-death), it edits the octets rather than
encoding decoded properties again: pamqp would write a double back as a 32-bit float and an
unsigned octet as a short.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Collection, Iterable
from typing import Final

from pamqp import commands, encode
from pamqp.common import FieldTable, FieldValue

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError

_SHORT_UINT: Final = struct.Struct(">H")
_LONG_UINT: Final = struct.Struct(">I")
_LONG_LONG_UINT: Final = struct.Struct(">Q")
_FLOAT: Final = struct.Struct(">f")
_DOUBLE: Final = struct.Struct(">d")
#: class-id, weight, body-size: the property flags start after them.
_FLAGS_START: Final = 12
_WEIGHT: Final = slice(2, 4)
#: How deep tables and arrays may nest in a header (the headers table is depth 1).
MAX_NESTING: Final = 100
#: 9999-12-31T23:59:59 UTC, the last second pika makes a `datetime` of (a timestamp field).
LATEST_FIELD_TIMESTAMP: Final = 253_402_300_799
#: The last millisecond of the year 9999, the last value pamqp makes a `datetime` of (the
#: timestamp property: above 2**32 - 1 pamqp takes it for milliseconds).
LATEST_PROPERTY_TIMESTAMP: Final = 253_402_300_799_999
_LATEST_DELIVERY_MODE: Final = 2


def _badly_formatted(text: str) -> HardError:
    return HardError(ReplyCode.UNEXPECTED_FRAME, f"badly-formatted content header: {text}")


def _illegal(text: str) -> HardError:
    return HardError(ReplyCode.SYNTAX_ERROR, f"content header property: {text}")


# One step of the walk: the octets `data[offset:end]` start with a value; the step checks it and
# returns the offset after it. `depth` counts the tables and arrays around it.
_Step = Callable[[bytes, int, int, int], int]


def _fixed(size: int) -> _Step:
    def step(data: bytes, offset: int, end: int, _depth: int) -> int:
        after = offset + size
        if after > end:
            raise _illegal(f"value of {size} octets cut short")
        return after

    return step


def _length_of(data: bytes, offset: int, end: int) -> int:
    """The end of the long-length-prefixed value at `offset`."""
    start = offset + 4
    if start > end:
        raise _illegal("length cut short")
    after = start + int(_LONG_UINT.unpack_from(data, offset)[0])
    if after > end:
        raise _illegal(f"length {after - start} runs past the end of its container")
    return after


def _short_string(data: bytes, offset: int, end: int, _depth: int) -> int:
    after = offset + 1 + data[offset]
    if after > end:
        raise _illegal("short string runs past the end of its container")
    try:
        data[offset + 1 : after].decode("utf-8")
    except UnicodeDecodeError:
        raise _illegal("short string is not UTF-8 (spec 4.2.5.3)") from None
    return after


def _long_string(data: bytes, offset: int, end: int, _depth: int) -> int:
    return _length_of(data, offset, end)


def _finite(layout: struct.Struct) -> _Step:
    def step(data: bytes, offset: int, end: int, _depth: int) -> int:
        after = offset + layout.size
        if after > end:
            raise _illegal("floating-point value cut short")
        if not math.isfinite(layout.unpack_from(data, offset)[0]):
            raise _illegal("floating-point value is NaN or infinite")
        return after

    return step


def _timestamp_up_to(latest: int) -> _Step:
    def step(data: bytes, offset: int, end: int, _depth: int) -> int:
        after = offset + 8
        if after > end:
            raise _illegal("timestamp cut short")
        if _LONG_LONG_UINT.unpack_from(data, offset)[0] > latest:
            raise _illegal("timestamp after the year 9999")
        return after

    return step


def _field_table(data: bytes, offset: int, end: int, depth: int) -> int:
    after = _length_of(data, offset, end)
    if depth > MAX_NESTING:
        raise _illegal(f"tables and arrays nested more than {MAX_NESTING} deep")
    position = offset + 4
    while position < after:
        position = _field_value(data, _short_string(data, position, after, depth), after, depth)
    return after


def _field_array(data: bytes, offset: int, end: int, depth: int) -> int:
    after = _length_of(data, offset, end)
    if depth > MAX_NESTING:
        raise _illegal(f"tables and arrays nested more than {MAX_NESTING} deep")
    position = offset + 4
    while position < after:
        position = _field_value(data, position, after, depth)
    return after


def _nested(step: _Step) -> _Step:
    def nested_step(data: bytes, offset: int, end: int, depth: int) -> int:
        return step(data, offset, end, depth + 1)

    return nested_step


#: Field value types by their octet: RabbitMQ's AMQP 0-9-1 errata table (rabbit_binary_parser).
_FIELD_TYPES: Final[dict[int, _Step]] = {
    ord("t"): _fixed(1),
    ord("b"): _fixed(1),
    ord("B"): _fixed(1),
    ord("s"): _fixed(2),
    ord("u"): _fixed(2),
    ord("I"): _fixed(4),
    ord("i"): _fixed(4),
    ord("l"): _fixed(8),
    ord("L"): _fixed(8),
    ord("f"): _finite(_FLOAT),
    ord("d"): _finite(_DOUBLE),
    ord("D"): _fixed(5),
    ord("S"): _long_string,
    ord("x"): _long_string,
    ord("T"): _timestamp_up_to(LATEST_FIELD_TIMESTAMP),
    ord("F"): _nested(_field_table),
    ord("A"): _nested(_field_array),
    ord("V"): _fixed(0),
}

#: The field types a header may hold, as their octets.
FIELD_TYPES: Final = frozenset(bytes((kind,)) for kind in _FIELD_TYPES)


def _field_value(data: bytes, offset: int, end: int, depth: int) -> int:
    if offset >= end:
        raise _illegal("field name without a value")
    kind = data[offset]
    step = _FIELD_TYPES.get(kind)
    if step is None:
        raise _illegal(f"unknown field type {bytes((kind,))!r}")
    return step(data, offset + 1, end, depth)


def _delivery_mode(data: bytes, offset: int, end: int, _depth: int) -> int:
    if data[offset] > _LATEST_DELIVERY_MODE:
        raise _illegal(f"delivery-mode {data[offset]} is neither 1 nor 2")
    return offset + 1


# Where a property ends, read from its first octets; past the end of the payload is 505.
_Extent = Callable[[bytes, int, int], int]


def _extent_of_short_string(data: bytes, offset: int, end: int) -> int:
    return offset + 1 + data[offset] if offset < end else end + 1


def _extent_of_table(data: bytes, offset: int, end: int) -> int:
    if offset + 4 > end:
        return end + 1
    return offset + 4 + int(_LONG_UINT.unpack_from(data, offset)[0])


def _extent_of(size: int) -> _Extent:
    def extent(_data: bytes, offset: int, _end: int) -> int:
        return offset + size

    return extent


_SHORT_STRING: Final = (_extent_of_short_string, _short_string)

#: The basic class properties in flag order (amqp0-9-1.xml: the first is bit 15 of the first
#: flags word, the fourteenth, cluster-id, bit 2), as pamqp's names, with where each ends and
#: the step that checks it.
_PROPERTIES: Final[tuple[tuple[str, _Extent, _Step], ...]] = (
    ("content_type", *_SHORT_STRING),
    ("content_encoding", *_SHORT_STRING),
    ("headers", _extent_of_table, _nested(_field_table)),
    ("delivery_mode", _extent_of(1), _delivery_mode),
    ("priority", _extent_of(1), _fixed(1)),
    ("correlation_id", *_SHORT_STRING),
    ("reply_to", *_SHORT_STRING),
    ("expiration", *_SHORT_STRING),
    ("message_id", *_SHORT_STRING),
    ("timestamp", _extent_of(8), _timestamp_up_to(LATEST_PROPERTY_TIMESTAMP)),
    ("message_type", *_SHORT_STRING),
    ("user_id", *_SHORT_STRING),
    ("app_id", *_SHORT_STRING),
    ("cluster_id", *_SHORT_STRING),
)
_Plan = tuple[tuple[str, _Extent, _Step], ...]
#: The properties each property-flags word names, by the word (filled as words are met).
_plans: dict[int, _Plan] = {}


def _plan(flags: int) -> _Plan:
    plan = _plans.get(flags)
    if plan is None:
        plan = _plans[flags] = tuple(
            entry
            for bit, entry in zip(range(15, 1, -1), _PROPERTIES, strict=True)
            if flags & (1 << bit)
        )
    return plan


def _property_list_start(header_payload: bytes) -> tuple[int, int]:
    """(the first property-flags word, where the property list starts): further flags words
    follow while bit 0 is set (spec 4.2.6.1); the basic class has no property in them."""
    end = len(header_payload)
    offset = _FLAGS_START + 2
    if offset > end:
        raise _badly_formatted("property flags cut short")
    flags = continuation = _SHORT_UINT.unpack_from(header_payload, _FLAGS_START)[0]
    while continuation & 1:
        if offset + 2 > end:
            raise _badly_formatted("property flags cut short")
        continuation = _SHORT_UINT.unpack_from(header_payload, offset)[0]
        offset += 2
    return flags, offset


def check_basic_properties(header_payload: bytes) -> None:
    """Raise a `HardError` (505 or 502, see the rules above) unless `header_payload`, a content
    header payload of the basic class (class-id, weight, body-size, property flags and list),
    decodes in every client. Nothing is decoded into objects: a header with no property costs a
    few index operations, one with a few short ones a step each."""
    flags, offset = _property_list_start(header_payload)
    if header_payload[_WEIGHT] != b"\x00\x00":
        raise _badly_formatted("the weight is not zero")
    end = len(header_payload)
    for name, extent, step in _plan(flags):
        after = extent(header_payload, offset, end)
        if after > end:
            raise _badly_formatted(f"{name} runs past the end of the property list")
        step(header_payload, offset, after, 0)
        offset = after
    if offset != end:
        raise _badly_formatted(f"{end - offset} octets after the last property")


def decode_basic_properties(header_payload: bytes) -> commands.Basic.Properties:
    """The properties of a content header payload that `check_basic_properties` passed, as
    pamqp decodes them (the values a pamqp client sees, and what binding arguments, decoded by
    pamqp too, are compared with)."""
    flags, offset = _property_list_start(header_payload)
    properties = commands.Basic.Properties()
    properties.unmarshal(flags, header_payload[offset:])
    return properties


def rewrite_headers(
    header_payload: bytes,
    set_fields: FieldTable,
    *,
    remove_fields: Collection[str] = (),
    remove_properties: Collection[str] = (),
) -> bytes:
    """`header_payload` (checked at the edge) with header fields set (in place where the name is
    present, else at the end) or removed, and whole properties (pamqp's names, not "headers")
    removed; every other octet stays as received (ARCHITECTURE.md: content-header bytes are
    forwarded unchanged). The values set are encoded as pamqp encodes them."""
    flags, flags_end = _property_list_start(header_payload)
    offset, end = flags_end, len(header_payload)
    property_list: list[bytes] = []
    for bit, (name, extent, _step) in zip(range(15, 1, -1), _PROPERTIES, strict=True):
        mask = 1 << bit
        if name == "headers":
            if flags & mask:
                after = extent(header_payload, offset, end)
                property_list.append(
                    _rewritten_table(header_payload, offset, after, set_fields, remove_fields)
                )
                offset = after
            elif set_fields:
                flags |= mask
                property_list.append(_table_octets(_entry(k, v) for k, v in set_fields.items()))
        elif flags & mask:
            after = extent(header_payload, offset, end)
            if name in remove_properties:
                flags &= ~mask
            else:
                property_list.append(header_payload[offset:after])
            offset = after
    return b"".join(
        (
            header_payload[:_FLAGS_START],
            _SHORT_UINT.pack(flags),
            header_payload[_FLAGS_START + 2 : flags_end],
            *property_list,
        )
    )


def _rewritten_table(
    data: bytes, offset: int, end: int, set_fields: FieldTable, remove: Collection[str]
) -> bytes:
    entries: list[bytes] = []
    written: set[str] = set()
    position = offset + 4
    while position < end:
        start = position
        value_at = _short_string(data, position, end, 1)
        name = data[start + 1 : value_at].decode("utf-8")
        position = _field_value(data, value_at, end, 1)
        if name in set_fields:
            if name not in written:
                entries.append(_entry(name, set_fields[name]))
                written.add(name)
        elif name not in remove:
            entries.append(data[start:position])
    entries.extend(_entry(k, v) for k, v in set_fields.items() if k not in written)
    return _table_octets(entries)


def _entry(name: str, value: FieldValue) -> bytes:
    return encode.short_string(name) + encode.encode_table_value(value)


def _table_octets(entries: Iterable[bytes]) -> bytes:
    octets = b"".join(entries)
    return _LONG_UINT.pack(len(octets)) + octets
