"""A stream's log on real files: offsets that only grow, reads by offset across segments, whole
segments removed by retention, a torn append dropped on opening, damage reported by file.

RabbitMQ's streams: "every message gets an offset", consumers attach at "first", "last" (the start
of the last chunk), "next" or an offset; retention "is evaluated per segment": x-max-length-bytes
and x-max-age remove whole segments, the one being written never."""

from __future__ import annotations

import contextlib
import logging
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.files import FILE_HEADER, FileMedium
from batonmq.queues.streams.log import Filter, StreamCorrupt, StreamLog


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


def test_offsets_grow_from_zero_and_chunks_share_a_timestamp(directory: Path) -> None:
    with opened(directory) as log:
        assert (log.first_offset, log.next_offset) == (0, 0)
        assert log.append([record(0), record(1)], timestamp=1000) == 0
        assert log.append([record(2)], timestamp=2000) == 2

        entries = log.read(0, max_records=10)
        assert [(e.offset, e.timestamp) for e in entries] == [(0, 1000), (1, 1000), (2, 2000)]
        assert (log.first_offset, log.last_chunk_offset, log.next_offset) == (0, 2, 3)


def test_a_read_starts_at_its_offset_inside_a_chunk_and_stops_at_max_records(
    directory: Path,
) -> None:
    with opened(directory) as log:
        log.append([record(n) for n in range(10)], timestamp=1)
        log.append([record(n) for n in range(10, 20)], timestamp=2)

        assert [e.offset for e in log.read(7, max_records=5)] == [7, 8, 9, 10, 11]
        assert log.read(20, max_records=5) == []


def test_the_log_is_the_same_after_reopening(directory: Path) -> None:
    with opened(directory) as log:
        log.append([record(0), record(1)], timestamp=1)
    with opened(directory) as log:
        assert log.next_offset == 2
        assert log.append([record(2)], timestamp=2) == 2
        assert bodies(log, 0) == [record(n).body for n in range(3)]


def test_segments_roll_at_their_size_and_reads_cross_them(directory: Path) -> None:
    with opened(directory, max_segment_bytes=1000) as log:
        for n in range(50):
            log.append([record(n)], timestamp=n)
        assert log.segment_count >= 4
        assert bodies(log, 0) == [record(n).body for n in range(50)]
    with opened(directory, max_segment_bytes=1000) as log:
        assert bodies(log, 33, count=3) == [record(n).body for n in (33, 34, 35)]


def test_retention_by_size_removes_whole_oldest_segments_never_the_newest(
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


def test_retention_by_age_removes_segments_whose_newest_chunk_is_too_old(
    directory: Path,
) -> None:
    with opened(directory, max_segment_bytes=1000) as log:
        for n in range(50):
            log.append([record(n)], timestamp=n * 1000)

        log.retain(max_age=10_000, max_bytes=None, now=50_000)

        # Every segment whose newest chunk is older than 40 s is gone; the one holding 40 s stays.
        assert 30 < log.first_offset <= 40
        assert log.read(log.first_offset, max_records=100)[-1].offset == 49


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


def test_damage_in_an_older_segment_is_reported_when_read(directory: Path) -> None:
    with opened(directory, max_segment_bytes=200) as log:
        for n in range(4):
            log.append([record(n)], timestamp=n)
    oldest = sorted(directory.glob("*.segment"))[0]
    data = bytearray(oldest.read_bytes())
    data[-1] ^= 0xFF
    oldest.write_bytes(bytes(data))

    with (
        opened(directory, max_segment_bytes=200) as log,
        pytest.raises(StreamCorrupt, match=oldest.name),
    ):
        log.read(0, max_records=10)


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


def test_filters_skip_other_values_and_keep_unfiltered_on_request(directory: Path) -> None:
    """x-stream-filter ["eu"] receives "eu" messages only; with x-stream-match-unfiltered also
    those published without a filter value."""
    with opened(directory) as log:
        log.append([record(0, "eu"), record(1, "us"), record(2)], timestamp=1)
        log.append([record(3, "us")] * 3, timestamp=2)
        log.append([record(6, "eu")], timestamp=3)

        eu = log.read(0, max_records=10, only=Filter(frozenset({"eu"})))
        both = log.read(0, max_records=10, only=Filter(frozenset({"eu"}), match_unfiltered=True))

        assert [e.offset for e in eu] == [0, 6]
        assert [e.offset for e in both] == [0, 2, 6]


def test_attaching_by_timestamp_starts_at_the_first_chunk_written_then_or_later(
    directory: Path,
) -> None:
    with opened(directory) as log:
        log.append([record(0), record(1)], timestamp=1000)
        log.append([record(2)], timestamp=2000)
        log.append([record(3)], timestamp=3000)

        assert log.offset_at(0) == 0
        assert log.offset_at(1500) == 2
        assert log.offset_at(3000) == 3
        assert log.offset_at(9000) == 4
