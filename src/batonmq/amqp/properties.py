"""Basic properties of a content header, decoded for the broker's own decisions.

The broker forwards a content header's bytes as received (BatonMQ architecture) and decodes them
only where it must look inside: the headers exchange, the user-id check, selectors. Whatever a
publisher may send and a consumer may receive must therefore decode here too, or a message that
a direct exchange carries would close its publisher's connection when it goes through a headers
exchange. This decoder gives the values and types pamqp's does (the broker compares them with
binding arguments that pamqp decoded), with two differences where pamqp refuses a content header
that RabbitMQ, pika and aio-pika pass through:

- A short string (a property, or a field name in a table) that is not UTF-8 decodes with
  surrogate escapes, which keep its octets. Spec 4.2.5.3 says short strings carry UTF-8, but
  RabbitMQ treats them as octets, and pika sends a bytes property as it is.
- A timestamp beyond what `datetime` holds (after the year 9999; spec 4.2.5.4: "64-bit POSIX
  time_t", so any 64-bit value) decodes to its integer value. Otherwise, as pamqp does, a value
  above 2**32 - 1 is taken for milliseconds.

Malformed input (truncated, an unknown field type) raises `ValueError` or `struct.error`;
`frames.decode_properties` turns those into 502 SYNTAX_ERROR.

When the broker itself must change a message's headers (x-delivery-count, x-death), it edits the
octets (`rewrite_headers`) rather than encoding decoded properties again: pamqp would write a
double back as a 32-bit float, an unsigned octet as a short, and could not write a long string
that is not UTF-8, a surrogate-escaped short string or a timestamp past the year 9999 at all.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable, Collection, Iterable
from typing import Final

from pamqp import commands, encode
from pamqp.common import FieldArray, FieldTable, FieldValue

_OCTET: Final = struct.Struct(">B")
_SHORT_SHORT_INT: Final = struct.Struct(">b")
_SHORT_INT: Final = struct.Struct(">h")
_SHORT_UINT: Final = struct.Struct(">H")
_LONG_INT: Final = struct.Struct(">i")
_LONG_UINT: Final = struct.Struct(">I")
_LONG_LONG_INT: Final = struct.Struct(">q")
_LONG_LONG_UINT: Final = struct.Struct(">Q")
_FLOAT: Final = struct.Struct(">f")
_DOUBLE: Final = struct.Struct(">d")
_DECIMAL: Final = struct.Struct(">Bi")
#: pamqp's rule: "Anything above the year 2106 is likely milliseconds".
_LARGEST_SECONDS_TIMESTAMP: Final = 0xFFFFFFFF
_FLAGS_START: Final = 12


class _Cursor:
    """Reads `data` from `offset` on; reading past the end raises ValueError."""

    __slots__ = ("data", "offset")

    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data = data
        self.offset = offset

    def take(self, count: int) -> bytes:
        end = self.offset + count
        if end > len(self.data):
            raise ValueError(f"{count} octets needed at {self.offset}, {len(self.data)} present")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def unpack(self, layout: struct.Struct) -> int:
        value: int = layout.unpack(self.take(layout.size))[0]
        return value

    def unpack_float(self, layout: struct.Struct) -> float:
        value: float = layout.unpack(self.take(layout.size))[0]
        return value


def _short_string(cursor: _Cursor) -> str:
    return cursor.take(cursor.unpack(_OCTET)).decode("utf-8", "surrogateescape")


def _long_string(cursor: _Cursor) -> str | bytes:
    raw = cursor.take(cursor.unpack(_LONG_UINT))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw  # as pamqp: a long string may carry any octets (spec 4.2.5.3)


def _timestamp(cursor: _Cursor) -> datetime.datetime | int:
    raw = cursor.unpack(_LONG_LONG_UINT)
    seconds = raw / 1000.0 if raw > _LARGEST_SECONDS_TIMESTAMP else raw
    try:
        return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return raw


def _decimal(cursor: _Cursor) -> decimal.Decimal:
    # Spec 4.2.5.5: "an octet representing the number of places followed by a long signed
    # integer"; computed as pamqp does, so that equal wire values give equal Decimals.
    places, mantissa = _DECIMAL.unpack(cursor.take(_DECIMAL.size))
    value: decimal.Decimal = decimal.Decimal(mantissa) * (decimal.Decimal(10) ** -places)
    return value


def _field_table(cursor: _Cursor) -> FieldTable:
    """A length-prefixed table; its entries must end exactly at its length."""
    body = _Cursor(cursor.take(cursor.unpack(_LONG_UINT)))
    table: FieldTable = {}
    while body.offset < len(body.data):
        name = _short_string(body)
        table[name] = _field_value(body)
    return table


def _field_array(cursor: _Cursor) -> FieldArray:
    body = _Cursor(cursor.take(cursor.unpack(_LONG_UINT)))
    items: FieldArray = []
    while body.offset < len(body.data):
        items.append(_field_value(body))
    return items


def _byte_array(cursor: _Cursor) -> bytearray:
    return bytearray(cursor.take(cursor.unpack(_LONG_UINT)))


#: Field value types by their octet: RabbitMQ's AMQP 0-9-1 errata table, as pamqp reads it
#: (pamqp also reads 'L' as a signed 64-bit integer and the octet 0 as void).
_FIELD_TYPES: Final[dict[int, Callable[[_Cursor], FieldValue]]] = {
    ord("t"): lambda cursor: bool(cursor.unpack(_OCTET)),
    ord("b"): lambda cursor: cursor.unpack(_SHORT_SHORT_INT),
    ord("B"): lambda cursor: cursor.unpack(_OCTET),
    ord("s"): lambda cursor: cursor.unpack(_SHORT_INT),
    ord("u"): lambda cursor: cursor.unpack(_SHORT_UINT),
    ord("I"): lambda cursor: cursor.unpack(_LONG_INT),
    ord("i"): lambda cursor: cursor.unpack(_LONG_UINT),
    ord("l"): lambda cursor: cursor.unpack(_LONG_LONG_INT),
    ord("L"): lambda cursor: cursor.unpack(_LONG_LONG_INT),
    ord("f"): lambda cursor: cursor.unpack_float(_FLOAT),
    ord("d"): lambda cursor: cursor.unpack_float(_DOUBLE),
    ord("D"): _decimal,
    ord("S"): _long_string,
    ord("A"): _field_array,
    ord("T"): _timestamp,
    ord("F"): _field_table,
    ord("V"): lambda _cursor: None,
    0: lambda _cursor: None,
    ord("x"): _byte_array,
}


def _field_value(cursor: _Cursor) -> FieldValue:
    kind = cursor.unpack(_OCTET)
    decode = _FIELD_TYPES.get(kind)
    if decode is None:
        raise ValueError(f"unknown field type {bytes((kind,))!r}")
    return decode(cursor)


#: The basic class properties in flag order (amqp0-9-1.xml: the first is bit 15 of the first
#: flags word, the fourteenth, cluster-id, bit 2), as pamqp's attribute names.
_PROPERTIES: Final[tuple[tuple[str, Callable[[_Cursor], object]], ...]] = (
    ("content_type", _short_string),
    ("content_encoding", _short_string),
    ("headers", _field_table),
    ("delivery_mode", lambda cursor: cursor.unpack(_OCTET)),
    ("priority", lambda cursor: cursor.unpack(_OCTET)),
    ("correlation_id", _short_string),
    ("reply_to", _short_string),
    ("expiration", _short_string),
    ("message_id", _short_string),
    ("timestamp", _timestamp),
    ("message_type", _short_string),
    ("user_id", _short_string),
    ("app_id", _short_string),
    ("cluster_id", _short_string),
)


def decode_basic_properties(header_payload: bytes) -> commands.Basic.Properties:
    """The properties of a content header payload (class-id, weight, body-size, then the
    property flags and list, spec 4.2.6.1). Raises ValueError or struct.error when malformed."""
    cursor = _Cursor(header_payload, _FLAGS_START)
    flags = cursor.unpack(_SHORT_UINT)
    # Bit 0 says another flags word follows; the basic class has no property there to read.
    continuation = flags
    while continuation & 1:
        continuation = cursor.unpack(_SHORT_UINT)
    # Built without __init__'s validation, as pamqp's decoder does: a cluster-id or a
    # delivery-mode that pamqp would not send is still what the publisher sent.
    properties = commands.Basic.Properties()
    for bit, (name, decode) in zip(range(15, 1, -1), _PROPERTIES, strict=True):
        if flags & (1 << bit):
            setattr(properties, name, decode(cursor))
    return properties


def rewrite_headers(
    header_payload: bytes,
    set_fields: FieldTable,
    *,
    remove_fields: Collection[str] = (),
    remove_properties: Collection[str] = (),
) -> bytes:
    """`header_payload` with header fields set (in place where the name is present, else at the
    end) or removed, and whole properties (pamqp's names, not "headers") removed; every other
    octet stays as received (BatonMQ architecture: content-header bytes are forwarded unchanged).
    The values set are encoded as pamqp encodes them. Raises like `decode_basic_properties`."""
    cursor = _Cursor(header_payload, _FLAGS_START)
    flags = cursor.unpack(_SHORT_UINT)
    continuation = flags
    while continuation & 1:
        continuation = cursor.unpack(_SHORT_UINT)
    flags_end = cursor.offset
    property_list: list[bytes] = []
    for bit, (name, decode) in zip(range(15, 1, -1), _PROPERTIES, strict=True):
        mask = 1 << bit
        if name == "headers":
            if flags & mask:
                property_list.append(_rewritten_table(cursor, set_fields, remove_fields))
            elif set_fields:
                flags |= mask
                property_list.append(_table_octets(_entry(k, v) for k, v in set_fields.items()))
        elif flags & mask:
            start = cursor.offset
            decode(cursor)
            if name in remove_properties:
                flags &= ~mask
            else:
                property_list.append(header_payload[start : cursor.offset])
    return b"".join(
        (
            header_payload[:_FLAGS_START],
            _SHORT_UINT.pack(flags),
            header_payload[_FLAGS_START + _SHORT_UINT.size : flags_end],
            *property_list,
        )
    )


def _rewritten_table(cursor: _Cursor, set_fields: FieldTable, remove: Collection[str]) -> bytes:
    body = _Cursor(cursor.take(cursor.unpack(_LONG_UINT)))
    entries: list[bytes] = []
    written: set[str] = set()
    while body.offset < len(body.data):
        start = body.offset
        name = _short_string(body)
        _field_value(body)
        if name in set_fields:
            if name not in written:
                entries.append(_entry(name, set_fields[name]))
                written.add(name)
        elif name not in remove:
            entries.append(body.data[start : body.offset])
    entries.extend(_entry(k, v) for k, v in set_fields.items() if k not in written)
    return _table_octets(entries)


def _entry(name: str, value: FieldValue) -> bytes:
    return encode.short_string(name) + encode.encode_table_value(value)


def _table_octets(entries: Iterable[bytes]) -> bytes:
    octets = b"".join(entries)
    return _LONG_UINT.pack(len(octets)) + octets
