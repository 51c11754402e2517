"""A stream's log: segments of chunks, appended to and read by offset, kept in a medium
(`medium.py`: segment files, or the PostgreSQL store's tables).

Only the newest segment is written to; when the next chunk would take it past
`max_segment_bytes` (x-stream-max-segment-size-bytes) a new one is started. Retention
(x-max-age, x-max-length-bytes) removes whole segments, oldest first, and never the one being
written.

Durability is the medium's: `append` returns once the chunk is durable there, so a publisher
confirm sent after it names a message that survives a crash at its offset.

Deduplication (`dedup.py`): a message whose producer's publishing id is not above the last one
the log stored for that producer is left out of its chunk; each segment begins with a snapshot of
those ids, and the newest segment's messages bring them up to date on opening.

Not thread-safe: one caller (the stream's writer) at a time. All calls block on the medium; the
broker runs them off its event loop.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count, repeat
from typing import Final, NamedTuple

from batonmq.queues.streams.chunk import ChunkError, Record, decode_header, decode_records, encode
from batonmq.queues.streams.dedup import Producers
from batonmq.queues.streams.medium import StoredChunk, StreamCorrupt, StreamMedium

__all__ = ["DEFAULT_SEGMENT_BYTES", "Entry", "Filter", "StreamCorrupt", "StreamLog"]

#: RabbitMQ's default x-stream-max-segment-size-bytes (500 MB).
DEFAULT_SEGMENT_BYTES: Final = 500_000_000
#: The most message bytes (bodies and headers) a chunk is given, unless one message has more:
#: a reader takes a whole chunk at a time, and a group of appends of large messages made chunks
#: of 60 MB, each read, checked and decoded at once while the consumer's socket waited.
CHUNK_BYTES: Final = 4 << 20
#: The payload bytes read from the medium at a time.
_READ_BYTES: Final = 1 << 20
#: Decoded chunks kept for the reads that follow: a consumer takes a large chunk (one batch of
#: appends may hold thousands of records) in several reads, and decoding it again for each
#: made replaying a stream cost its chunk size over the read batch times the decoding.
_DECODED_KEPT: Final = 8


class Entry(NamedTuple):
    """A record read at its offset (a named tuple, as `Record`: one is made per message read)."""

    offset: int
    #: When its chunk was written, in milliseconds since the epoch.
    timestamp: int
    record: Record


@dataclass(frozen=True, slots=True)
class Filter:
    """x-stream-filter and x-stream-match-unfiltered of a consumer."""

    values: frozenset[str]
    match_unfiltered: bool = False

    def matches(self, record: Record) -> bool:
        if record.filter_value is None:
            return self.match_unfiltered
        return record.filter_value in self.values


def _runs(records: Sequence[Record], most: int) -> Iterator[Sequence[Record]]:
    """`records` in order, in runs of at most `most` bytes of headers and bodies (a message
    with more is a run of its own)."""
    start = size = 0
    for index, record in enumerate(records):
        length = len(record.header) + len(record.body)
        if size and size + length > most:
            yield records[start:index]
            start = index
            size = 0
        size += length
    yield records[start:]


class _Segment:
    def __init__(self, first_offset: int, size: int) -> None:
        self.first_offset = first_offset
        self.size = size
        self.chunks = 0
        #: Timestamp of its newest chunk (0: none yet).
        self.newest = 0


class StreamLog:
    def __init__(
        self, medium: StreamMedium, *, max_segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        self.medium = medium
        self.max_segment_bytes = max_segment_bytes
        self._segments: list[_Segment] = []
        self._chunks: list[StoredChunk] = []
        #: first offsets of `_chunks`, for bisecting.
        self._firsts: list[int] = []
        #: The records of the chunks decoded last, by first offset, oldest first.
        self._decoded: dict[int, list[Record]] = {}
        #: The last publishing id stored for each producer.
        self.producers = Producers()
        self._open()

    # --- what the log holds ---------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """The offset the next message appended gets."""
        if self._chunks:
            return self._chunks[-1].header.next_offset
        return self._segments[-1].first_offset

    @property
    def first_offset(self) -> int:
        """The oldest offset still held (`next_offset` when the log holds nothing)."""
        return self._chunks[0].header.first_offset if self._chunks else self.next_offset

    @property
    def last_chunk_offset(self) -> int:
        """Where the newest chunk starts: RabbitMQ's x-stream-offset "last"."""
        return self._chunks[-1].header.first_offset if self._chunks else self.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def chunk_count(self) -> int:
        return len(self._chunks)

    def offset_at(self, timestamp: int) -> int:
        """Where a consumer attaching at `timestamp` (ms) starts: the first chunk written at or
        after it; the end of the log when every chunk is older."""
        for chunk in self._chunks:
            if chunk.header.timestamp >= timestamp:
                return chunk.header.first_offset
        return self.next_offset

    # --- writing --------------------------------------------------------------------------

    def append(self, records: Sequence[Record], timestamp: int) -> int:
        """Write `records` as chunks stamped `timestamp` (ms), one unless they hold more than
        `CHUNK_BYTES`, without those a producer published before (`dedup.py`); returns the
        offset of the first one written (the next offset if none was). If the medium fails,
        nothing of the failed chunk is kept, there or here (the chunks before it are)."""
        if not records:
            raise ValueError("a chunk holds at least one record")
        first = self.next_offset
        for run in _runs(records, CHUNK_BYTES):
            self._append_chunk(run, timestamp)
        return first

    def _append_chunk(self, records: Sequence[Record], timestamp: int) -> None:
        kept, advanced = self.producers.admit(records)
        if not kept:
            return
        data = encode(self.next_offset, timestamp, kept)
        segment = self._segments[-1]
        if segment.chunks and segment.size + len(data) > self.max_segment_bytes:
            segment = self._roll(self.next_offset)
        stored = self.medium.append(segment.first_offset, decode_header(data), data)
        segment.size += len(data)
        segment.newest = timestamp
        self._index(segment, stored)
        self.producers.advance(advanced)

    def retain(self, *, max_age: int | None, max_bytes: int | None, now: int) -> int:
        """Remove the oldest segments while the log is over `max_bytes` or their newest chunk
        is older than `max_age` ms before `now`; returns how many went. The segment being
        written always stays. The medium removes them first: if it fails, the log is as it
        was."""
        size = self.size_bytes
        going = 0
        for segment in self._segments[:-1]:
            too_big = max_bytes is not None and size > max_bytes
            too_old = max_age is not None and segment.newest < now - max_age
            if not (too_big or too_old):
                break
            size -= segment.size
            going += 1
        if not going:
            return 0
        gone = self._segments[:going]
        kept = self._segments[going].first_offset
        self.medium.drop([segment.first_offset for segment in gone], kept)
        held = bisect.bisect_left(self._firsts, kept)
        del self._chunks[:held]
        del self._firsts[:held]
        del self._segments[:going]
        return going

    def close(self) -> None:
        self.medium.close()
        self._segments.clear()
        self._chunks.clear()
        self._firsts.clear()

    # --- reading --------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        *,
        max_records: int,
        max_bytes: int = 1 << 20,
        only: Filter | None = None,
    ) -> list[Entry]:
        """Entries from `offset` on (from the first held, if that is later), whole chunks at a
        time, until `max_records` or about `max_bytes` of chunks were read. With `only`, chunks
        whose Bloom filter rules out every wanted value are skipped unread, and records that do
        not match are left out."""
        entries: list[Entry] = []
        start = max(offset, self.first_offset)
        index = max(bisect.bisect_right(self._firsts, start) - 1, 0)
        read_bytes = 0
        chunks = self._chunks
        while index < len(chunks) and len(entries) < max_records and read_bytes < max_bytes:
            # The chunks of one round trip to the medium: as many as can hold what is still
            # wanted (all their records may match), up to _READ_BYTES.
            batch: list[StoredChunk] = []
            could_hold = batch_bytes = 0
            while index < len(chunks) and could_hold < max_records - len(entries):
                header = chunks[index].header
                index += 1
                if only is not None and not header.may_hold(only.values, only.match_unfiltered):
                    continue
                batch.append(chunks[index - 1])
                could_hold += header.next_offset - max(start, header.first_offset)
                batch_bytes += header.size
                if batch_bytes >= min(_READ_BYTES, max_bytes - read_bytes):
                    break
            for chunk, records in zip(batch, self._records(batch), strict=True):
                header = chunk.header
                skipped = max(start - header.first_offset, 0)
                first = header.first_offset + skipped
                if only is None:
                    taken = records[skipped : skipped + max_records - len(entries)]
                    entries += map(Entry, count(first), repeat(header.timestamp), taken)
                else:
                    entries += (
                        Entry(position, header.timestamp, record)
                        for position, record in enumerate(records[skipped:], first)
                        if only.matches(record)
                    )
                read_bytes += header.size
                if len(entries) >= max_records or read_bytes >= max_bytes:
                    return entries[:max_records]
        return entries[:max_records]

    def _records(self, batch: list[StoredChunk]) -> list[list[Record]]:
        """The records of each chunk of `batch`: those decoded lately as they were, the others
        read from the medium in one round trip and decoded."""
        decoded = self._decoded
        missing = [chunk for chunk in batch if chunk.header.first_offset not in decoded]
        fresh: dict[int, list[Record]] = {}
        if missing:
            for chunk, payload in zip(missing, self.medium.payloads(missing), strict=True):
                fresh[chunk.header.first_offset] = self._decode(chunk, payload)
        found = [
            fresh[first] if first in fresh else decoded[first]
            for first in (chunk.header.first_offset for chunk in batch)
        ]
        for first, records in fresh.items():
            decoded[first] = records
            if len(decoded) > _DECODED_KEPT:
                del decoded[next(iter(decoded))]
        return found

    def _decode(self, chunk: StoredChunk, payload: bytes) -> list[Record]:
        try:
            return list(decode_records(chunk.header, payload))
        except ChunkError as error:
            raise StreamCorrupt(f"{self.medium.where(chunk.segment)}: {error}") from None

    # --- opening --------------------------------------------------------------------------

    def _open(self) -> None:
        stored = self.medium.open()
        if not stored:
            self._segments.append(_Segment(0, self.medium.create(0, None)))
            return
        expected: int | None = None
        for segment in stored:
            opened = _Segment(segment.first_offset, segment.size)
            self._segments.append(opened)
            for chunk in segment.chunks:
                first = chunk.header.first_offset
                wanted = segment.first_offset if expected is None else expected
                if first != wanted:
                    raise StreamCorrupt(
                        f"{self.medium.where(segment.first_offset)}: a chunk starts at offset "
                        f"{first}, expected {wanted}"
                    )
                self._index(opened, chunk)
                opened.newest = chunk.header.timestamp
                expected = chunk.header.next_offset
        # The ids the newest segment began with; its messages bring them up to date.
        newest = stored[-1]
        where = self.medium.where(newest.first_offset)
        try:
            self.producers = Producers.from_snapshot(
                self.medium.snapshot(newest.first_offset), where
            )
        except ValueError as error:
            raise StreamCorrupt(str(error)) from None
        for at in range(0, len(newest.chunks), 64):
            batch = newest.chunks[at : at + 64]
            for chunk, payload in zip(batch, self.medium.payloads(batch), strict=True):
                self.producers.replay(self._decode(chunk, payload))

    # --- bookkeeping ----------------------------------------------------------------------

    def _index(self, segment: _Segment, chunk: StoredChunk) -> None:
        segment.chunks += 1
        self._chunks.append(chunk)
        self._firsts.append(chunk.header.first_offset)

    def _roll(self, first_offset: int) -> _Segment:
        """The next segment, created with the snapshot of producers' ids."""
        size = self.medium.create(first_offset, self.producers.snapshot())
        segment = _Segment(first_offset, size)
        self._segments.append(segment)
        return segment
