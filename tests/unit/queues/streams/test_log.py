"""A stream's log in segment files, what only files do: whole segment files removed by
retention, a torn append dropped on opening, damage reported by file, a write the disk refuses
leaving nothing behind. What the log does over either medium (files, or the PostgreSQL store's
tables) is in tests/integration/store/test_stream_media.py.

RabbitMQ's streams: retention "is evaluated per segment": x-max-length-bytes and x-max-age
remove whole segments, the one being written never."""

from __future__ import annotations

import contextlib
import logging
import resource
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.files import FILE_HEADER, FileMedium
from batonmq.queues.streams.log import CHUNK_BYTES, StreamCorrupt, StreamLog
from batonmq.queues.streams.medium import StoredChunk


def record(n: int, filter_value: str | None = None) -> Record:
    return Record("", "events", b"", f"m{n}".encode() * 10, filter_value)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "stream"


@contextlib.contextmanager
def opened(directory: Path, **settings: int) -> Iterator[StreamLog]:
    log = StreamLog(FileMedium(directory), **settings)  # type: ignore[arg-type]
    try:
        yield log
    finally:
        log.close()


def bodies(log: StreamLog, offset: int, count: int = 1000) -> list[bytes]:
    return [entry.record.body for entry in log.read(offset, max_records=count)]


def test_retention_removes_whole_segment_files_never_the_newest(
    directory: Path,
) -> None:
    with opened(directory, max_segment_bytes=1000) as log:
        for n in range(50):
            log.append([record(n)], timestamp=n)
        segments = log.segment_count

        removed = log.retain(max_age=None, max_bytes=3000, now=100)

        assert removed > 0
        # Whole segment files went: as many as retain says, and what is left is on disk.
        assert len(list(directory.glob("*.segment"))) == log.segment_count == segments - removed
        assert log.size_bytes <= 3000
        first = log.first_offset
        assert first > 0
        # A reader asking for a removed offset starts at the oldest still held.
        assert log.read(0, max_records=1)[0].offset == first
        log.retain(max_age=None, max_bytes=0, now=100)
        assert log.segment_count == 1
        assert log.next_offset == 50


def test_a_torn_append_is_dropped_when_the_log_opens(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash mid-append leaves part of a chunk at the end of the newest segment: it was never
    confirmed, and the next append takes its offset."""
    with opened(directory) as log:
        log.append([record(0)], timestamp=1)
        log.append([record(1)], timestamp=2)
    segment = next(directory.glob("*.segment"))
    whole = segment.read_bytes()
    for cut in (len(whole) - 1, len(whole) - 40, len(whole) - 85):
        segment.write_bytes(whole[:cut])
        with caplog.at_level(logging.WARNING), opened(directory) as log:
            assert log.next_offset == 1
            assert bodies(log, 0) == [record(0).body]
        assert "torn chunk" in caplog.text
        caplog.clear()
        segment.write_bytes(whole)


def test_damage_before_the_end_is_corruption_not_a_torn_append(directory: Path) -> None:
    with opened(directory) as log:
        log.append([record(0)], timestamp=1)
        log.append([record(1)], timestamp=2)
    segment = next(directory.glob("*.segment"))
    data = bytearray(segment.read_bytes())
    data[len(FILE_HEADER) + 60] ^= 0xFF  # inside the first chunk's payload
    segment.write_bytes(bytes(data))

    with pytest.raises(StreamCorrupt, match=segment.name):
        StreamLog(FileMedium(directory))


def test_a_file_that_is_not_a_segment_is_refused(directory: Path) -> None:
    directory.mkdir()
    (directory / f"{0:020d}.segment").write_bytes(b"something else entirely, long enough")

    with pytest.raises(StreamCorrupt, match="not a BatonMQ stream segment"):
        StreamLog(FileMedium(directory))


def test_a_failed_append_leaves_nothing_behind(directory: Path) -> None:
    """A write the disk refuses (here the file-size limit, as a full disk would) raises, and the
    log, on disk and in memory, is as before: the next append takes the same offset."""
    with opened(directory) as log:
        log.append([record(0)], timestamp=1)
        size = next(directory.glob("*.segment")).stat().st_size
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limits = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, limits[1]))
        try:
            with pytest.raises(OSError, match="File too large"):
                log.append([record(1)], timestamp=2)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, limits)
            signal.signal(signal.SIGXFSZ, previous)

        assert next(directory.glob("*.segment")).stat().st_size == size
        assert log.next_offset == 1
        assert log.append([record(2)], timestamp=3) == 1
    with opened(directory) as log:
        assert bodies(log, 0) == [record(0).body, record(2).body]


class CountingMedium(FileMedium):
    """Segment files that count the chunk payloads they are asked for."""

    payloads_read = 0

    def payloads(self, chunks: Sequence[StoredChunk]) -> list[bytes]:
        self.payloads_read += len(chunks)
        return super().payloads(chunks)


def test_a_large_chunk_read_in_several_batches_is_read_and_decoded_once(directory: Path) -> None:
    """RabbitMQ's streams are replayed "at disk speed", their chunks read whole: a consumer
    takes a chunk of thousands of records (one batch of appends) in reads of a few hundred,
    and each read continues from the records already decoded instead of reading the chunk
    from the disk and decoding it again."""
    medium = CountingMedium(directory)
    log = StreamLog(medium)
    try:
        log.append([record(n) for n in range(2000)], timestamp=1)
        offset, read = 0, []
        while batch := log.read(offset, max_records=256):
            read += [entry.offset for entry in batch]
            offset = batch[-1].offset + 1
        assert read == list(range(2000))
        assert medium.payloads_read == 1
    finally:
        log.close()


def test_a_group_of_large_messages_is_written_as_chunks_of_at_most_chunk_bytes(
    directory: Path,
) -> None:
    """A reader takes a whole chunk at a time: one append of many large messages (group
    commit while the last fsync ran) made a 60 MB chunk, read and decoded at once while the
    consumer's socket waited. A message larger than CHUNK_BYTES is a chunk of its own."""
    body = bytes(CHUNK_BYTES // 5)
    with opened(directory) as log:
        first = log.append([Record("", "q", b"", body) for _ in range(12)], timestamp=1)
        log.append([Record("", "q", b"", bytes(CHUNK_BYTES + 1))], timestamp=2)

        assert first == 0
        assert log.chunk_count == 4  # 5 + 5 + 2 messages, then the large one
        assert [entry.offset for entry in log.read(0, max_records=100, max_bytes=1 << 40)] == (
            list(range(13))
        )
