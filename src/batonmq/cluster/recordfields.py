"""The fields that the records between workers of one broker are made of
(`batonmq.cluster.peerlink`), all big-endian: a short string (`str8`, AMQP's shortstr: one
octet of length, then UTF-8), names (`names`: !I length in octets, then short strings: the
names a message crosses with, read and written whole and remembered, since the same ones come
again and again), a field table (`table`: !I length in octets, then the tagged JSON the store
keeps tables in, `batonmq.store.fields`, which brings back every value the AMQP decoder yields
as that value, a long string that is not UTF-8 too, which pamqp cannot encode) and a
connection reference (`ref`: worker, process start id, connection number; worker 0xFFFF for none).

`Fields` reads a record's payload field by field. A payload is always whole (the link's reader
waits for the rest of a record), so one that ends early, has octets left over or holds what
does not decode is malformed: `MalformedRecord`, which closes the link.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Final

from pamqp.common import FieldTable

from batonmq.amqp.connection import short_string
from batonmq.amqp.shortstr import SHORT_STRING_MAX
from batonmq.cluster.peerlink import MalformedRecord
from batonmq.model.topology import ConnectionRef
from batonmq.store.fields import decode_table, encode_table

STR8_MAX: Final = SHORT_STRING_MAX
#: A short string's length octet, by length.
_LENGTHS: Final = [bytes([length]) for length in range(STR8_MAX + 1)]
_NAMES: Final = struct.Struct("!I")
#: The most names of a names field that is remembered, and its most octets when read.
_REMEMBERED: Final = 4
_REMEMBERED_OCTETS: Final = _REMEMBERED * (1 + STR8_MAX)
_TABLE: Final = struct.Struct("!I")
_REF: Final = struct.Struct("!HQQ")
#: The worker of a `ref` that is none.
NO_WORKER: Final = 0xFFFF


@functools.lru_cache(maxsize=1024)
def str8(value: str) -> bytes:
    """`value` as a short string; ValueError when its UTF-8 is over 255 octets. Remembered:
    the names of the vhosts, exchanges, queues and routing keys that cross come again and
    again."""
    encoded = value.encode()
    length = len(encoded)
    if length > STR8_MAX:
        raise ValueError(
            f"{value[:32]!r}… is {length} octets of UTF-8: a short string holds at most {STR8_MAX}"
        )
    return _LENGTHS[length] + encoded


def names(values: tuple[str, ...]) -> bytes:
    """`values` as a names field; ValueError when one is over 255 octets of UTF-8, or is not
    UTF-8. A few names (a message's vhost, exchange, routing key and queue) are remembered;
    many (a message routed to many queues) are not, so that what is remembered stays small."""
    if len(values) <= _REMEMBERED:
        return _remembered_names(values)
    return _names(values)


def _names(values: tuple[str, ...]) -> bytes:
    encoded = b"".join(map(str8, values))
    return _NAMES.pack(len(encoded)) + encoded


_remembered_names = functools.lru_cache(maxsize=1024)(_names)


def _read_names(encoded: bytes) -> tuple[str, ...]:
    fields = Fields(encoded)
    values = []
    while not fields.done:
        values.append(fields.str8())
    return tuple(values)


_read_remembered_names = functools.lru_cache(maxsize=1024)(_read_names)


def text8(value: str) -> bytes:
    """`value` as a short string, cut to fit (a refusal's text, which AMQP cuts the same way)."""
    return str8(short_string(value))


def table(value: FieldTable) -> bytes:
    """`value` as a field table; ValueError when it nests too deep to be written (the AMQP
    decoder reads a few hundred levels, more than Python's recursion writes back)."""
    try:
        encoded = encode_table(value).encode()
    except RecursionError as error:
        raise ValueError("a field table nested too deep to cross between workers") from error
    return _TABLE.pack(len(encoded)) + encoded


def ref(value: ConnectionRef | None) -> bytes:
    if value is None:
        return _REF.pack(NO_WORKER, 0, 0)
    if value.worker == NO_WORKER:
        raise ValueError(f"worker {NO_WORKER} is how a record says 'no connection'")
    return _REF.pack(value.worker, value.start, value.connection)


class Fields:
    """A record's payload, read from the start field by field."""

    __slots__ = ("_at", "_payload")

    def __init__(self, payload: bytes) -> None:
        self._payload = payload
        self._at = 0

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        at = self._at
        if at + layout.size > len(self._payload):
            raise MalformedRecord(f"a record that ends inside a field of {layout.size} octets")
        self._at = at + layout.size
        return layout.unpack_from(self._payload, at)

    def octets(self, count: int) -> bytes:
        at, end = self._at, self._at + count
        if end > len(self._payload):
            raise MalformedRecord(f"a record that ends inside a field of {count} octets")
        self._at = end
        return self._payload[at:end]

    def str8(self) -> str:
        payload, at = self._payload, self._at
        if at >= len(payload):
            raise MalformedRecord("a record that ends before a short string")
        end = at + 1 + payload[at]
        if end > len(payload):
            raise MalformedRecord(f"a record that ends inside a short string of {end - at} octets")
        self._at = end
        try:
            return payload[at + 1 : end].decode()
        except UnicodeDecodeError as error:
            raise MalformedRecord(f"a short string that is not UTF-8: {error}") from error

    def names(self) -> tuple[str, ...]:
        [length] = self.unpack(_NAMES)
        encoded = self.octets(length)
        if length <= _REMEMBERED_OCTETS:
            return _read_remembered_names(encoded)
        return _read_names(encoded)

    def table(self) -> FieldTable:
        [length] = self.unpack(_TABLE)
        encoded = self.octets(length)
        try:
            return decode_table(encoded.decode())
        except (ValueError, RecursionError) as error:
            raise MalformedRecord(f"a field table that does not decode: {error!r}") from error

    def ref(self) -> ConnectionRef | None:
        worker, start, connection = self.unpack(_REF)
        return None if worker == NO_WORKER else ConnectionRef(worker, start, connection)

    @property
    def done(self) -> bool:
        """Whether every octet is read."""
        return self._at == len(self._payload)

    def end(self) -> None:
        """The payload is read: MalformedRecord if octets are left over."""
        if not self.done:
            raise MalformedRecord(f"{len(self._payload) - self._at} octets after a record's end")
