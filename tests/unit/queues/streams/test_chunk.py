"""A chunk's bytes: records kept exactly as published, a CRC that catches any damage, and a Bloom
filter of the chunk's filter values (RabbitMQ 3.13 stream filtering: "the broker may use a
per-chunk Bloom filter to skip chunks" that hold no wanted value)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batonmq.queues.streams.chunk import (
    FILTER_VALUE_MAX,
    HEADER_SIZE,
    ChunkError,
    Record,
    decode_header,
    decode_records,
    encode,
)

RECORDS = [
    Record("amq.direct", "events", b"\x80\x00\x05\x00", b"one", "eu"),
    Record("", "events", b"", b"", None),
    Record("ex", "k\u00e9y", b"\x00\x00", b"\x00" * 1000, "us"),
]


def split(data: bytes) -> tuple[bytes, bytes]:
    return data[:HEADER_SIZE], data[HEADER_SIZE:]


def test_records_come_back_exactly_as_written() -> None:
    header_bytes, payload = split(encode(40, 1_700_000_000_000, RECORDS))
    header = decode_header(header_bytes)

    assert (header.first_offset, header.count, header.next_offset) == (40, 3, 43)
    assert header.timestamp == 1_700_000_000_000
    assert header.size == HEADER_SIZE + len(payload)
    assert list(decode_records(header, payload)) == RECORDS


@pytest.mark.parametrize("position", [0, 7, 100, -1])
def test_any_damaged_byte_fails_the_crc(position: int) -> None:
    header_bytes, payload = split(encode(0, 0, RECORDS))
    damaged = bytearray(payload)
    damaged[position] ^= 0x01

    with pytest.raises(ChunkError, match="CRC"):
        list(decode_records(decode_header(header_bytes), bytes(damaged)))


def test_a_short_payload_is_torn() -> None:
    header_bytes, payload = split(encode(0, 0, RECORDS))

    with pytest.raises(ChunkError):
        list(decode_records(decode_header(header_bytes), payload[:-1]))


def test_a_header_must_be_whole_and_marked() -> None:
    header_bytes, _ = split(encode(0, 0, RECORDS))

    with pytest.raises(ChunkError, match="48 bytes"):
        decode_header(header_bytes[:-1])
    with pytest.raises(ChunkError, match="magic"):
        decode_header(b"XXXX" + header_bytes[4:])


def test_the_bloom_filter_admits_every_value_the_chunk_holds() -> None:
    header = decode_header(split(encode(0, 0, RECORDS))[0])

    assert header.may_hold(["eu"], match_unfiltered=False)
    assert header.may_hold(["us", "nowhere"], match_unfiltered=False)
    assert header.may_hold([], match_unfiltered=True)  # the record without a filter value


def test_the_bloom_filter_rules_out_absent_values() -> None:
    """A chunk of "eu" messages only is skipped by a consumer of "us" (these two values do not
    collide in a 16-byte filter), and by one that wants only unfiltered messages."""
    only_eu = [Record("", "q", b"", b"x", "eu")] * 5
    header = decode_header(split(encode(0, 0, only_eu))[0])

    assert not header.may_hold(["us"], match_unfiltered=False)
    assert not header.may_hold([], match_unfiltered=True)


def test_a_filter_value_is_at_most_255_bytes() -> None:
    with pytest.raises(ValueError, match="255"):
        encode(0, 0, [Record("", "q", b"", b"", "x" * (FILTER_VALUE_MAX + 1))])


records = st.builds(
    Record,
    st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255),
    st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255),
    st.binary(max_size=64),
    st.binary(max_size=256),
    st.none() | st.text(max_size=20),
)


@given(st.integers(0, 2**62), st.integers(0, 2**62), st.lists(records, min_size=1, max_size=20))
def test_any_records_round_trip(first: int, timestamp: int, written: list[Record]) -> None:
    header_bytes, payload = split(encode(first, timestamp, written))
    header = decode_header(header_bytes)

    assert list(decode_records(header, payload)) == written
    for record in written:
        if record.filter_value is not None:
            assert header.may_hold([record.filter_value], match_unfiltered=False)


def test_what_a_chunk_s_records_share_is_decoded_once_and_shared() -> None:
    """Decoding the exchange, routing key, filter value and content header of every record
    took most of a small-message replay's reading: records that have the same ones share
    them, and still come back as written."""
    written = [Record("ex", "key", b"\x80\x00", f"body{n}".encode(), "eu") for n in range(3)]
    written.append(Record("ex", "other", b"\x80\x00", b"last", None))
    data = encode(0, 1, written)
    header, payload = split(data)

    first, second, third, last = decode_records(decode_header(header), payload)

    assert [first, second, third, last] == written
    assert first.header is second.header is third.header
    assert first.routing_key is third.routing_key
    assert last.routing_key == "other"


def test_a_body_read_back_is_a_view_of_its_chunk_not_a_copy() -> None:
    """Replaying at disk speed: copying each body out of its chunk cost a large-message replay
    about as much as reading the chunk, so a record read back views the payload it was read
    from, read-only (a consumer's delivery cannot change what the stream holds)."""
    header_bytes, payload = split(encode(0, 0, RECORDS))

    bodies = [record.body for record in decode_records(decode_header(header_bytes), payload)]

    assert all(isinstance(body, memoryview) and body.obj is payload for body in bodies)
    assert all(isinstance(body, memoryview) and body.readonly for body in bodies)
    assert [bytes(body) for body in bodies] == [record.body for record in RECORDS]


class UnhashablePayload(bytes):
    """A payload that says so when it is hashed."""

    def __hash__(self) -> int:
        raise AssertionError("the whole payload was hashed")


def test_decoding_never_hashes_the_whole_payload() -> None:
    """What records share is found by the few octets before each body; a slice of the payload
    as the key would hash the whole payload first (a memoryview is hashable only if what it
    views is), a second pass over every chunk read, as costly as its CRC."""
    header_bytes, payload = split(encode(0, 0, RECORDS * 2))

    records = list(decode_records(decode_header(header_bytes), UnhashablePayload(payload)))

    assert records == RECORDS * 2


def test_nothing_of_a_damaged_chunk_is_yielded() -> None:
    """A damaged chunk is refused, never delivered: its CRC is checked before its first record
    is made, not record by record as they are taken."""
    header_bytes, payload = split(encode(0, 0, RECORDS))
    damaged = bytearray(payload)
    damaged[-1] ^= 0x01
    records = decode_records(decode_header(header_bytes), bytes(damaged))

    with pytest.raises(ChunkError, match="CRC"):
        next(records)
