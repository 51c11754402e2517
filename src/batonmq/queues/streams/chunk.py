"""The bytes of one chunk: a header that can be read without the payload (offsets, time, a Bloom
filter of the chunk's filter values, the payload's length and CRC-32), then the records. Pure:
bytes in, values out; `ChunkError` for bytes that are not a whole, intact chunk."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from zlib_ng.zlib_ng import crc32

MAGIC: Final = b"BSC1"
#: magic, first offset, record count, timestamp (ms since the epoch), Bloom filter, payload
#: length, payload CRC-32.
HEADER: Final = struct.Struct("<4sQIQ16sII")
HEADER_SIZE: Final = HEADER.size
#: RabbitMQ's default x-stream-filter-size-bytes.
BLOOM_BYTES: Final = 16
_BLOOM_BITS: Final = BLOOM_BYTES * 8
_BLOOM_HASHES: Final = 3
#: The longest x-stream-filter-value a record keeps.
FILTER_VALUE_MAX: Final = 255
#: Stands in the Bloom filter for "a message with no filter value" (x-stream-match-unfiltered).
_UNFILTERED: Final = b""
_RECORD: Final = struct.Struct(
    "<IBBHI"
)  # length of the rest, exchange, routing key, filter, header


class ChunkError(ValueError):
    """Bytes that are not a whole, intact chunk (torn by a crash, or corrupted)."""


class Record(NamedTuple):
    """One message as a stream keeps it: where it was published, its content header as received
    (kept as bytes, forwarded unchanged), its body, and its x-stream-filter-value if any. A named
    tuple: a replay makes one per message, and a frozen dataclass took several times longer to
    make. A record read back has for body a view of its chunk's payload (`decode_records`), not
    a copy."""

    exchange: str
    routing_key: str
    header: bytes
    body: bytes | memoryview
    filter_value: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    first_offset: int
    count: int
    timestamp: int
    bloom: bytes
    payload_length: int
    crc: int

    @property
    def next_offset(self) -> int:
        return self.first_offset + self.count

    @property
    def size(self) -> int:
        return HEADER_SIZE + self.payload_length

    def may_hold(self, filter_values: Iterable[str], match_unfiltered: bool) -> bool:
        """False when no record of the chunk can have one of `filter_values` (or, with
        `match_unfiltered`, no filter value at all); True may be a false positive."""
        wanted = [value.encode("utf-8") for value in filter_values]
        if match_unfiltered:
            wanted.append(_UNFILTERED)
        return any(_in_bloom(self.bloom, value) for value in wanted)


def encode(first_offset: int, timestamp: int, records: Sequence[Record]) -> bytes:
    parts: list[bytes | memoryview] = []
    bloom = bytearray(BLOOM_BYTES)
    for record in records:
        exchange = record.exchange.encode("utf-8")
        routing_key = record.routing_key.encode("utf-8")
        filter_value = (record.filter_value or "").encode("utf-8")
        if len(filter_value) > FILTER_VALUE_MAX:
            raise ValueError(f"a filter value is at most {FILTER_VALUE_MAX} bytes")
        _add_to_bloom(bloom, filter_value if record.filter_value is not None else _UNFILTERED)
        rest = len(exchange) + len(routing_key) + len(filter_value) + len(record.header)
        rest += len(record.body) + _RECORD.size - 4
        flag = 0 if record.filter_value is None else 1
        parts.append(
            _RECORD.pack(
                rest,
                len(exchange),
                len(routing_key),
                len(filter_value) << 1 | flag,
                len(record.header),
            )
        )
        parts += (exchange, routing_key, filter_value, record.header, record.body)
    payload = b"".join(parts)
    header = HEADER.pack(
        MAGIC,
        first_offset,
        len(records),
        timestamp,
        bytes(bloom),
        len(payload),
        crc32(payload),
    )
    return header + payload


def decode_header(data: bytes) -> ChunkHeader:
    if len(data) < HEADER_SIZE:
        raise ChunkError(f"a chunk header is {HEADER_SIZE} bytes, got {len(data)}")
    magic, first, count, timestamp, bloom, length, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ChunkError(f"not a chunk: magic {magic!r}")
    return ChunkHeader(first, count, timestamp, bloom, length, crc)


def decode_records(header: ChunkHeader, payload: bytes) -> Iterator[Record]:
    """The chunk's records, in offset order; ChunkError if the payload is torn or corrupted.
    The CRC is checked before the first record is made, so nothing of a damaged chunk is ever
    delivered. Bodies are read-only views of `payload`, not copies (copying each body out of
    the chunk cost a large-message replay about as much as reading the chunk): `payload`
    lives as long as one of them does."""
    if len(payload) != header.payload_length or crc32(payload) != header.crc:
        raise ChunkError(f"chunk at offset {header.first_offset}: payload fails its CRC")
    view = memoryview(payload)
    # A chunk's messages mostly share their exchange, routing key, filter value and content
    # header: those are decoded once per distinct set, found by the octets that hold them.
    # Decoding them for each record took most of a small-message replay's reading. The key is
    # a copy of those few octets: a slice of the payload would hash the whole payload first (a
    # memoryview is hashable only if what it views is, which hashing it checks), a second
    # pass over each chunk as costly as its CRC.
    shared: dict[bytes, tuple[str, str, bytes, str | None]] = {}
    position = 0
    for _ in range(header.count):
        rest, exchange_length, key_length, filter_field, header_length = _RECORD.unpack_from(
            view, position
        )
        end = position + 4 + rest
        body = position + _RECORD.size + exchange_length + key_length
        body += (filter_field >> 1) + header_length
        described = payload[position + 4 : body]
        fields = shared.get(described)
        if fields is None:
            fields = shared[described] = _fields(described)
        exchange, routing_key, message_header, filter_value = fields
        yield Record(exchange, routing_key, message_header, view[body:end], filter_value)
        position = end


def _fields(described: bytes) -> tuple[str, str, bytes, str | None]:
    """Exchange, routing key, content header and filter value of a record, from its octets
    after the length of its rest, up to its body."""
    _, exchange_length, key_length, filter_field, header_length = _RECORD.unpack_from(
        b"\0\0\0\0" + described[: _RECORD.size - 4]
    )
    position = _RECORD.size - 4
    exchange = described[position : position + exchange_length].decode("utf-8")
    position += exchange_length
    routing_key = described[position : position + key_length].decode("utf-8")
    position += key_length
    filter_length = filter_field >> 1
    filter_value = (
        described[position : position + filter_length].decode("utf-8") if filter_field & 1 else None
    )
    position += filter_length
    return exchange, routing_key, described[position : position + header_length], filter_value


def _bits(value: bytes) -> Iterator[int]:
    digest = hashlib.blake2b(value, digest_size=8).digest()
    first, second = struct.unpack("<II", digest)
    for index in range(_BLOOM_HASHES):
        yield (first + index * second) % _BLOOM_BITS


def _add_to_bloom(bloom: bytearray, value: bytes) -> None:
    for bit in _bits(value):
        bloom[bit >> 3] |= 1 << (bit & 7)


def _in_bloom(bloom: bytes, value: bytes) -> bool:
    return all(bloom[bit >> 3] & (1 << (bit & 7)) for bit in _bits(value))
