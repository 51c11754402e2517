"""A stream's log on disk: segment files of chunks, appended to and read by offset.

Layout: one directory per stream holding ``<first offset, 20 digits>.segment`` files, each a
16-byte file header then chunks (`chunk.py`). Only the newest segment is written to; when the
next chunk would take it past `max_segment_bytes` (x-stream-max-segment-size-bytes) a new one is
started. Retention (x-max-age, x-max-length-bytes) removes whole segments, oldest first, and never
the one being written.

Durability: `append` writes a chunk and, with `sync`, flushes it to the disk before it returns, so
a publisher confirm sent after it names a message that survives a crash at its offset. A crash
mid-append leaves a torn chunk at the end of the newest segment: opening the log drops it (it was
never confirmed). A bad chunk anywhere else is corruption and stops the opening with an error
naming the file.

Deduplication (`dedup.py`): a message whose producer's publishing id is not above the last one
the log stored for that producer is left out of its chunk; each segment begins with a snapshot of
those ids, and the newest segment's messages bring them up to date on opening.

Not thread-safe: one caller (the stream's writer) at a time. All calls block on the disk; the
broker runs them off its event loop.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batonmq.queues.streams.chunk import (
    HEADER_SIZE,
    ChunkError,
    ChunkHeader,
    Record,
    decode_header,
    decode_records,
    encode,
)
from batonmq.queues.streams.dedup import Producers, load_snapshot, save_snapshot, snapshot_path

log = logging.getLogger(__name__)

SUFFIX: Final = ".segment"
FILE_HEADER: Final = b"BATONMQ-STREAM\x00\x01"
#: RabbitMQ's default x-stream-max-segment-size-bytes (500 MB).
DEFAULT_SEGMENT_BYTES: Final = 500_000_000


class StreamCorrupt(Exception):
    """A segment that cannot be read as the log wrote it; the message names the file."""


@dataclass(frozen=True, slots=True)
class Entry:
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


class _Segment:
    def __init__(self, path: Path, first_offset: int, fd: int, size: int) -> None:
        self.path = path
        self.first_offset = first_offset
        self.fd = fd
        self.size = size
        #: Timestamp of its newest chunk (0: none yet).
        self.newest = 0


@dataclass(frozen=True, slots=True)
class _Chunk:
    segment: _Segment
    position: int
    header: ChunkHeader


class StreamLog:
    def __init__(
        self, directory: Path, *, max_segment_bytes: int = DEFAULT_SEGMENT_BYTES, sync: bool = True
    ) -> None:
        self.directory = directory
        self.max_segment_bytes = max_segment_bytes
        self.sync = sync
        self._segments: list[_Segment] = []
        self._chunks: list[_Chunk] = []
        #: first offsets of `_chunks`, for bisecting.
        self._firsts: list[int] = []
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
        """Write `records` as one chunk stamped `timestamp` (ms), without those a producer
        published before (`dedup.py`); returns the offset of the first one written (the next
        offset if none was). On an OSError (a full disk) nothing of the chunk is kept, on disk
        or here."""
        if not records:
            raise ValueError("a chunk holds at least one record")
        first = self.next_offset
        kept, advanced = self.producers.admit(records)
        if not kept:
            return first
        data = encode(first, timestamp, kept)
        segment = self._segments[-1]
        if segment.size > len(FILE_HEADER) and segment.size + len(data) > self.max_segment_bytes:
            segment = self._roll(first)
        position = segment.size
        try:
            _write_all(segment.fd, data, position)
            if self.sync:
                os.fdatasync(segment.fd)
        except OSError:
            _truncate_quietly(segment.fd, position)
            raise
        segment.size = position + len(data)
        segment.newest = timestamp
        self._index(_Chunk(segment, position, decode_header(data)))
        self.producers.advance(advanced)
        return first

    def retain(self, *, max_age: int | None, max_bytes: int | None, now: int) -> int:
        """Remove the oldest segments while the log is over `max_bytes` or their newest chunk
        is older than `max_age` ms before `now`; returns how many went. The segment being
        written always stays."""
        removed = 0
        while len(self._segments) > 1:
            oldest = self._segments[0]
            too_big = max_bytes is not None and self.size_bytes > max_bytes
            too_old = max_age is not None and oldest.newest < now - max_age
            if not (too_big or too_old):
                break
            self._remove(oldest)
            removed += 1
        if removed:
            _fsync_directory(self.directory)
        return removed

    def close(self) -> None:
        for segment in self._segments:
            os.close(segment.fd)
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
        for chunk in self._chunks[index:]:
            header = chunk.header
            if only is not None and not header.may_hold(only.values, only.match_unfiltered):
                continue
            for number, record in enumerate(self._records(chunk)):
                position = header.first_offset + number
                if position >= start and (only is None or only.matches(record)):
                    entries.append(Entry(position, header.timestamp, record))
            read_bytes += header.size
            if len(entries) >= max_records or read_bytes >= max_bytes:
                break
        return entries[:max_records]

    def _records(self, chunk: _Chunk) -> list[Record]:
        header = chunk.header
        payload = os.pread(chunk.segment.fd, header.payload_length, chunk.position + HEADER_SIZE)
        try:
            return list(decode_records(header, payload))
        except ChunkError as error:
            raise StreamCorrupt(f"{chunk.segment.path}: {error}") from None

    # --- opening --------------------------------------------------------------------------

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = sorted(
            (int(path.stem), path)
            for path in self.directory.glob(f"*{SUFFIX}")
            if path.stem.isdigit()
        )
        if not paths:
            self._create(0)
            return
        for number, (first_offset, path) in enumerate(paths):
            newest = number == len(paths) - 1
            if newest:  # the ids it began with; `_load` adds those of its messages
                try:
                    self.producers = load_snapshot(snapshot_path(path))
                except ValueError as error:
                    raise StreamCorrupt(str(error)) from None
            self._load(path, first_offset, newest=newest)

    def _create(self, first_offset: int) -> _Segment:
        path = self.directory / _segment_name(first_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, FILE_HEADER, 0)
            os.fsync(fd)
            _fsync_directory(self.directory)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        segment = _Segment(path, first_offset, fd, len(FILE_HEADER))
        self._segments.append(segment)
        return segment

    def _load(self, path: Path, first_offset: int, *, newest: bool) -> None:
        fd = os.open(path, os.O_RDWR if newest else os.O_RDONLY)
        segment = _Segment(path, first_offset, fd, os.fstat(fd).st_size)
        self._segments.append(segment)
        if os.pread(fd, len(FILE_HEADER), 0) != FILE_HEADER:
            if newest and segment.size < len(FILE_HEADER):
                # Created by a crash-interrupted roll: nothing was ever appended to it.
                os.ftruncate(fd, 0)
                _write_all(fd, FILE_HEADER, 0)
                os.fsync(fd)
                segment.size = len(FILE_HEADER)
                return
            raise StreamCorrupt(f"{path}: not a BatonMQ stream segment")
        expected = self.next_offset if self._chunks else first_offset
        position = len(FILE_HEADER)
        while position < segment.size:
            try:
                chunk, records = self._scan(segment, position, expected, verify=newest)
            except ChunkError as error:
                if not (newest and self._torn(segment, position)):
                    raise StreamCorrupt(f"{path}: at byte {position}: {error}") from None
                log.warning(
                    "stream segment ends in a torn chunk; dropping it (it was never confirmed)",
                    extra={"segment": str(path), "at_byte": position},
                )
                os.ftruncate(fd, position)
                os.fsync(fd)
                segment.size = position
                break
            self._index(chunk)
            self.producers.replay(records)
            segment.newest = chunk.header.timestamp
            expected = chunk.header.next_offset
            position += chunk.header.size

    def _scan(
        self, segment: _Segment, position: int, expected: int, *, verify: bool
    ) -> tuple[_Chunk, list[Record]]:
        """The chunk at `position`, and its records if `verify`: ChunkError if its header is not
        where the last one ended, or (with `verify`, for the segment being written, where a
        crash can tear a chunk) if its payload fails its CRC. Older segments' payloads are
        checked when they are read."""
        header = decode_header(os.pread(segment.fd, HEADER_SIZE, position))
        if header.first_offset != expected:
            raise ChunkError(f"chunk starts at offset {header.first_offset}, expected {expected}")
        if position + header.size > segment.size:
            raise ChunkError("chunk runs past the end of the file")
        records: list[Record] = []
        if verify:
            payload = os.pread(segment.fd, header.payload_length, position + HEADER_SIZE)
            records = list(decode_records(header, payload))
        return _Chunk(segment, position, header), records

    @staticmethod
    def _torn(segment: _Segment, position: int) -> bool:
        """Whether a bad chunk at `position` is the one an interrupted append was writing: it
        reaches the end of the file (appends are sequential, so only the last one can tear)."""
        remaining = segment.size - position
        if remaining < HEADER_SIZE:
            return True
        try:
            header = decode_header(os.pread(segment.fd, HEADER_SIZE, position))
        except ChunkError:
            return False
        return position + header.size >= segment.size

    # --- bookkeeping ----------------------------------------------------------------------

    def _index(self, chunk: _Chunk) -> None:
        self._chunks.append(chunk)
        self._firsts.append(chunk.header.first_offset)

    def _roll(self, first_offset: int) -> _Segment:
        """The next segment, its snapshot of producers' ids written first (`_create` fsyncs
        the directory that holds both)."""
        current = self._segments[-1]
        os.fsync(current.fd)
        save_snapshot(snapshot_path(self.directory / _segment_name(first_offset)), self.producers)
        return self._create(first_offset)

    def _remove(self, segment: _Segment) -> None:
        held = sum(1 for chunk in self._chunks if chunk.segment is segment)
        del self._chunks[:held]
        del self._firsts[:held]
        self._segments.remove(segment)
        os.close(segment.fd)
        segment.path.unlink()
        snapshot_path(segment.path).unlink(missing_ok=True)


def _segment_name(first_offset: int) -> str:
    return f"{first_offset:020d}{SUFFIX}"


def _write_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def _truncate_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        log.exception("could not cut a failed append off a stream segment")


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
