"""Basic properties of a content header: checked at the edge, decoded where needed, edited in place.

`check_basic_properties` is the edge (BatonMQ architecture: "Content-header bytes are validated once
at the edge"; hardening: "the broker decodes and validates every property at the edge when the
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

Behind the edge the properties are trusted (How BatonMQ code reads, 14: validate at the edge,
trust inside): `decode_basic_properties` is pamqp's decoder, and `rewrite_headers` walks the
header with the same steps as the check. When the broker changes a message's headers
(x-delivery-count, x-death), it edits the octets rather than encoding decoded properties again:
pamqp would write a double back as a 32-bit float and an unsigned octet as a short.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Final

from pamqp import commands, encode
from pamqp.common import FieldTable, FieldValue

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError

_SHORT_UINT: Final = struct.Struct(">H")
_LONG_UINT: Final = struct.Struct(">I")
_LONG_LONG_UINT: Final = struct.Struct(">Q")
_LONG_LONG: Final = struct.Struct(">q")
_FLOAT: Final = struct.Struct(">f")
_DOUBLE: Final = struct.Struct(">d")
#: class-id, weight, body-size: the property flags start after them.
_FLAGS_START: Final = 12
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


def nesting(value: object) -> int:
    """How deep tables and arrays nest in decoded field value `value` (a table of plain values:
    1), found a level at a time, not by recursion."""
    depth, level = 0, [value]
    while containers := [item for item in level if isinstance(item, dict | list)]:
        depth += 1
        level = [
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        ]
    return depth


def _illegal(text: str) -> HardError:
    return HardError(ReplyCode.SYNTAX_ERROR, f"content header property: {text}")


# One step of the walk: the octets `data[offset:end]` start with a value; the step checks it and
# returns the offset after it. `depth` counts the tables and arrays around it.
_Step = Callable[[bytes, int, int, int], int]


def _length_of(data: bytes, offset: int, end: int) -> int:
    """The end of the long-length-prefixed value at `offset`."""
    start = offset + 4
    if start > end:
        raise _illegal("length cut short")
    after = start + int(_LONG_UINT.unpack_from(data, offset)[0])
    if after > end:
        raise _illegal(f"length {after - start} runs past the end of its container")
    return after


def _check_utf8(octets: bytes) -> None:
    """For short strings that are not ASCII: ASCII, the common case, is told by `isascii` at a
    fraction of the cost of decoding (and of calling this)."""
    try:
        octets.decode("utf-8")
    except UnicodeDecodeError:
        raise _illegal("short string is not UTF-8 (spec 4.2.5.3)") from None


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
    return _table_entries(data, offset + 4, _length_of(data, offset, end), depth)


def _table_entries(data: bytes, position: int, after: int, depth: int) -> int:
    """The entries of a table, from `position` to `after`: the end of the table."""
    if depth > MAX_NESTING:
        raise _illegal(f"tables and arrays nested more than {MAX_NESTING} deep")
    while position < after:
        # The field name, a short string.
        value_at = position + 1 + data[position]
        if value_at > after:
            raise _illegal("field name runs past the end of its table")
        name = data[position + 1 : value_at]
        if not name.isascii():
            _check_utf8(name)
        position = _field_value(data, value_at, after, depth)
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


#: Field value types of RabbitMQ's AMQP 0-9-1 errata table (rabbit_binary_parser), by their
#: octet: those of a fixed size, any value of which every client decodes, with their size...
_FIXED_SIZES: Final[dict[int, int]] = {
    ord("t"): 1,
    ord("b"): 1,
    ord("B"): 1,
    ord("s"): 2,
    ord("u"): 2,
    ord("I"): 4,
    ord("i"): 4,
    ord("l"): 8,
    ord("L"): 8,
    ord("D"): 5,
    ord("V"): 0,
}
#: ... those that are a long length and any octets (spec 4.2.5.3: "Long strings can contain any
#: data"), long strings and byte arrays...
_OCTET_STRINGS: Final = frozenset((ord("S"), ord("x")))
#: ... and the others, with the step that checks one.
_CHECKED_TYPES: Final[dict[int, _Step]] = {
    ord("f"): _finite(_FLOAT),
    ord("d"): _finite(_DOUBLE),
    ord("T"): _timestamp_up_to(LATEST_FIELD_TIMESTAMP),
    ord("F"): _nested(_field_table),
    ord("A"): _nested(_field_array),
}


def _field_value(data: bytes, offset: int, end: int, depth: int) -> int:
    if offset >= end:
        raise _illegal("field name without a value")
    kind = data[offset]
    size = _FIXED_SIZES.get(kind)
    if size is not None:  # the common cases, checked here rather than by a step
        after = offset + 1 + size
        if after > end:
            raise _illegal(f"value of {size} octets cut short")
        return after
    if kind in _OCTET_STRINGS:
        return _length_of(data, offset + 1, end)
    step = _CHECKED_TYPES.get(kind)
    if step is None:
        raise _illegal(f"unknown field type {bytes((kind,))!r}")
    return step(data, offset + 1, end, depth)


# A property of the property list: `data[offset:end]` starts with it, `end` being the end of the
# payload; the check returns the offset after it. A property that runs past the end is 505, a
# value it may not hold 502.
_Property = Callable[[bytes, int, int], int]


def _short_string_property(data: bytes, offset: int, end: int) -> int:
    after = offset + 1 + data[offset] if offset < end else end + 1
    if after > end:
        raise _badly_formatted("a short string runs past the end of the property list")
    octets = data[offset + 1 : after]
    if not octets.isascii():
        _check_utf8(octets)
    return after


def _table_property(data: bytes, offset: int, end: int) -> int:
    start = offset + 4
    after = start + int(_LONG_UINT.unpack_from(data, offset)[0]) if start <= end else end + 1
    if after > end:
        raise _badly_formatted("the headers table runs past the end of the property list")
    return _table_entries(data, start, after, 1)


def _octet_property(data: bytes, offset: int, end: int) -> int:
    if offset >= end:
        raise _badly_formatted("an octet property runs past the end of the property list")
    return offset + 1


def _delivery_mode_property(data: bytes, offset: int, end: int) -> int:
    after = _octet_property(data, offset, end)
    if data[offset] > _LATEST_DELIVERY_MODE:
        raise _illegal(f"delivery-mode {data[offset]} is neither 1 nor 2")
    return after


_property_timestamp: Final = _timestamp_up_to(LATEST_PROPERTY_TIMESTAMP)


def _timestamp_property(data: bytes, offset: int, end: int) -> int:
    if offset + 8 > end:
        raise _badly_formatted("the timestamp runs past the end of the property list")
    return _property_timestamp(data, offset, end, 0)


#: The basic class properties in flag order (amqp0-9-1.xml: the first is bit 15 of the first
#: flags word, the fourteenth, cluster-id, bit 2), as pamqp's names, with their checks.
_PROPERTIES: Final[tuple[tuple[str, _Property], ...]] = (
    ("content_type", _short_string_property),
    ("content_encoding", _short_string_property),
    ("headers", _table_property),
    ("delivery_mode", _delivery_mode_property),
    ("priority", _octet_property),
    ("correlation_id", _short_string_property),
    ("reply_to", _short_string_property),
    ("expiration", _short_string_property),
    ("message_id", _short_string_property),
    ("timestamp", _timestamp_property),
    ("message_type", _short_string_property),
    ("user_id", _short_string_property),
    ("app_id", _short_string_property),
    ("cluster_id", _short_string_property),
)
#: The checks of the properties each first property-flags word names, by the word (filled as
#: words are met: at most 2**16 of them).
_plans: dict[int, tuple[_Property, ...]] = {}


def _plan(flags: int) -> tuple[_Property, ...]:
    plan = _plans[flags] = tuple(
        check
        for bit, (_name, check) in zip(range(15, 1, -1), _PROPERTIES, strict=True)
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


#: Content header payloads that passed `check_basic_properties`, up to `_PASSED_SIZE` octets
#: each: a publisher repeats its header (the same properties, the same body size), and finding
#: it here costs a tenth of checking it again. Emptied when it holds `_PASSED_KEPT`.
_passed: set[bytes] = set()
_PASSED_SIZE: Final = 128
_PASSED_KEPT: Final = 4096


def check_basic_properties(header_payload: bytes) -> None:
    """Raise a `HardError` (505 or 502, see the rules above) unless `header_payload`, a content
    header payload of the basic class (class-id, weight, body-size, property flags and list),
    decodes in every client. Nothing is decoded into objects, a header that passed before is
    not checked again, and the common cases are read inline: this runs for every message
    published."""
    if header_payload in _passed:
        return
    _check_basic_properties(header_payload)
    if len(header_payload) <= _PASSED_SIZE:
        if len(_passed) >= _PASSED_KEPT:
            _passed.clear()
        _passed.add(header_payload)


def _check_basic_properties(header_payload: bytes) -> None:
    end = len(header_payload)
    if end < _FLAGS_START + 2:
        raise _badly_formatted("property flags cut short")
    if header_payload[2] or header_payload[3]:
        raise _badly_formatted("the weight is not zero")
    flags = header_payload[_FLAGS_START] << 8 | header_payload[_FLAGS_START + 1]
    if not flags and end == _FLAGS_START + 2:
        return  # no property: the most common header of all
    if flags & 1:
        flags, offset = _property_list_start(header_payload)
    else:
        offset = _FLAGS_START + 2
    plan = _plans.get(flags)
    if plan is None:
        plan = _plan(flags)
    for check in plan:
        offset = check(header_payload, offset, end)
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
    long_fields: Mapping[str, int] | None = None,
) -> bytes:
    """`header_payload` (checked at the edge) with header fields set (in place where the name is
    present, else at the end) or removed, and whole properties (pamqp's names, not "headers")
    removed; every other octet stays as received (BatonMQ architecture: content-header bytes are
    forwarded unchanged). The values set are encoded as pamqp encodes them (an integer in the
    fewest octets), those of `long_fields` as a long-long-int ('l', as RabbitMQ sends
    x-stream-offset, which a client may read as a 64-bit integer whatever its value)."""
    new_entries = {name: _entry(name, value) for name, value in set_fields.items()}
    for name, number in (long_fields or {}).items():
        new_entries[name] = encode.short_string(name) + b"l" + _LONG_LONG.pack(number)
    flags, flags_end = _property_list_start(header_payload)
    offset, end = flags_end, len(header_payload)
    property_list: list[bytes] = []
    for bit, (name, check) in zip(range(15, 1, -1), _PROPERTIES, strict=True):
        mask = 1 << bit
        if name == "headers":
            if flags & mask:
                after = check(header_payload, offset, end)
                property_list.append(
                    _rewritten_table(header_payload, offset, after, new_entries, remove_fields)
                )
                offset = after
            elif new_entries:
                flags |= mask
                property_list.append(_table_octets(new_entries.values()))
        elif flags & mask:
            after = check(header_payload, offset, end)
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
    data: bytes, offset: int, end: int, new_entries: dict[str, bytes], remove: Collection[str]
) -> bytes:
    entries: list[bytes] = []
    written: set[str] = set()
    position = offset + 4
    while position < end:
        start = position
        value_at = position + 1 + data[position]
        name = data[start + 1 : value_at].decode("utf-8")
        position = _field_value(data, value_at, end, 1)
        if name in new_entries:
            if name not in written:
                entries.append(new_entries[name])
                written.add(name)
        elif name not in remove:
            entries.append(data[start:position])
    entries.extend(entry for name, entry in new_entries.items() if name not in written)
    return _table_octets(entries)


def _entry(name: str, value: FieldValue) -> bytes:
    return encode.short_string(name) + encode.encode_table_value(value)


def _table_octets(entries: Iterable[bytes]) -> bytes:
    octets = b"".join(entries)
    return _LONG_UINT.pack(len(octets)) + octets
