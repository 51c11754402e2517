"""The checksum both stores keep with each message (`batonmq.store.integrity`)."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st

from batonmq.queues.streams.chunk import Record, decode_header
from batonmq.queues.streams.chunk import encode as encode_chunk
from batonmq.store.base import StoredMessage
from batonmq.store.integrity import checksum


@given(header=st.binary(max_size=300), body=st.binary(max_size=5000))
def test_a_checksum_is_the_one_stores_already_hold(header: bytes, body: bytes) -> None:
    """Stores written before the checksum came from zlib-ng hold the standard library's
    CRC-32 of the header payload followed by the body: the same value must check them."""
    message = StoredMessage(1, "", "q", header, body)

    assert checksum(message) == zlib.crc32(body, zlib.crc32(header))


def test_a_stream_chunk_keeps_the_standard_crc_of_its_payload() -> None:
    """Segment files written before hold zlib.crc32 of each chunk's payload: they still read."""
    chunk = encode_chunk(0, 1, [Record("", "s", b"header", b"body" * 1000)])
    header = decode_header(chunk)

    assert header.crc == zlib.crc32(chunk[header.size - header.payload_length :])
