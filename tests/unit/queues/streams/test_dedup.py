"""Deduplication in a stream, as RabbitMQ's streams deduplicate (its stream clients'
documentation, Deduplication): a named producer numbers its messages with a publishing id that
only grows, and the stream does not store a message whose id is not above the last one it
stored for that producer. Over AMQP 0-9-1 the name and id are the x-batonmq-producer and
x-batonmq-sequence headers. The last ids are kept with the segments: they survive reopening,
rolling and retention, and a failed write does not advance them."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.dedup import (
    MAX_PRODUCERS,
    PRODUCER_HEADER,
    SEQUENCE_HEADER,
    Producers,
    Publishing,
    publishing_in,
    publishing_of,
)
from batonmq.queues.streams.files import FileMedium
from batonmq.queues.streams.log import StreamCorrupt, StreamLog


def record(body: str, producer: str | None = None, sequence: object = None) -> Record:
    headers: dict[str, object] = {"other": 1}
    if producer is not None:
        headers[PRODUCER_HEADER] = producer
    if sequence is not None:
        headers[SEQUENCE_HEADER] = sequence
    properties = commands.Basic.Properties(headers=headers)
    header = ContentHeader(0, len(body), properties).marshal()
    return Record("", "events", header, body.encode())


@contextlib.contextmanager
def opened(directory: Path, **settings: int) -> Iterator[StreamLog]:
    log = StreamLog(FileMedium(directory), **settings)  # type: ignore[arg-type]
    try:
        yield log
    finally:
        log.close()


def bodies(log: StreamLog) -> list[bytes]:
    return [entry.record.body for entry in log.read(0, max_records=1000, max_bytes=1 << 30)]


@pytest.mark.parametrize(
    ("headers", "publishing"),
    [
        ({PRODUCER_HEADER: "p", SEQUENCE_HEADER: 7}, Publishing("p", 7)),
        ({PRODUCER_HEADER: b"p", SEQUENCE_HEADER: 0}, Publishing("p", 0)),
        ({PRODUCER_HEADER: "p"}, None),
        ({SEQUENCE_HEADER: 7}, None),
        ({PRODUCER_HEADER: "", SEQUENCE_HEADER: 7}, None),
        ({PRODUCER_HEADER: "p", SEQUENCE_HEADER: -1}, None),
        ({PRODUCER_HEADER: "p", SEQUENCE_HEADER: "7"}, None),
        ({PRODUCER_HEADER: "p", SEQUENCE_HEADER: True}, None),
        (None, None),
    ],
)
def test_only_a_named_producer_with_a_numeric_id_is_deduplicated(headers, publishing):
    assert publishing_of(headers) == publishing


def test_the_publishing_is_read_from_the_stored_content_header():
    assert publishing_in(record("a", "p", 2**40)) == Publishing("p", 2**40)
    assert publishing_in(record("a")) is None


def test_ids_not_above_the_last_stored_are_left_out_and_nothing_changes_until_advanced():
    """The same id twice, a lower id, and one producer's ids beside another's."""
    producers = Producers({"p": 5})
    batch = [
        record("p5", "p", 5),
        record("p6", "p", 6),
        record("p6-again", "p", 6),
        record("q0", "q", 0),
        record("plain"),
        record("p4", "p", 4),
        record("p9", "p", 9),
    ]

    kept, advanced = producers.admit(batch)

    assert [r.body for r in kept] == [b"p6", b"q0", b"plain", b"p9"]
    assert advanced == {"p": 9, "q": 0}
    assert producers.last == {"p": 5}
    producers.advance(advanced)
    assert producers.last == {"p": 9, "q": 0}


def test_a_replayed_append_stores_nothing_twice_even_after_reopening(tmp_path: Path):
    """Dropped records take no offset; the last ids come back from the newest segment."""
    directory = tmp_path / "stream"
    with opened(directory) as log:
        log.append([record(f"m{n}", "p", n) for n in range(3)], timestamp=1)
        assert log.append([record(f"m{n}", "p", n) for n in range(3)], timestamp=2) == 3
        assert log.next_offset == 3
    with opened(directory) as log:
        log.append([record(f"m{n}", "p", n) for n in range(5)], timestamp=3)
        assert bodies(log) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        assert log.producers.last == {"p": 4}


def test_the_ids_survive_rolling_and_retention_in_each_segments_snapshot(tmp_path: Path):
    """Retention removes the segments that held a producer's messages: the snapshot the newest
    segment began with still knows its last id."""
    directory = tmp_path / "stream"
    with opened(directory, max_segment_bytes=400) as log:
        for n in range(10):
            log.append([record(f"old{n}", "old", n)], timestamp=1)
        for n in range(10):
            log.append([record(f"new{n}", "new", n)], timestamp=2)
        log.retain(max_age=None, max_bytes=500, now=3)
        assert all(b"old" not in body for body in bodies(log))
        segments = sorted(directory.glob("*.segment"))
        assert len(segments) < 5
    snapshots = sorted(directory.glob("*.producers"))
    assert [path.stem for path in snapshots] == [path.stem for path in segments if int(path.stem)]
    assert json.loads(snapshots[-1].read_text())["old"] == 9
    with opened(directory, max_segment_bytes=400) as log:
        first = log.next_offset
        log.append([record("old9", "old", 9), record("old10", "old", 10)], timestamp=4)
        assert log.producers.last == {"old": 10, "new": 9}
        assert log.read(first, max_records=10)[0].record.body == b"old10"


def test_a_failed_append_does_not_advance_the_ids(tmp_path: Path):
    """State follows the store: a write the disk refuses leaves the last ids as they were, so
    the publisher's retry is stored, not dropped as a duplicate."""
    directory = tmp_path / "stream"
    with opened(directory) as log:
        log.append([record("m0", "p", 0)], timestamp=1)
        size = next(directory.glob("*.segment")).stat().st_size
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limits = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, limits[1]))
        try:
            with pytest.raises(OSError, match="File too large"):
                log.append([record("m1", "p", 1)], timestamp=2)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, limits)
            signal.signal(signal.SIGXFSZ, previous)
        assert log.producers.last == {"p": 0}
        assert log.append([record("m1", "p", 1)], timestamp=3) == 1
        assert bodies(log) == [b"m0", b"m1"]


def test_a_damaged_snapshot_stops_the_opening_with_its_name(tmp_path: Path):
    directory = tmp_path / "stream"
    with opened(directory, max_segment_bytes=200) as log:
        for n in range(4):
            log.append([record(f"m{n}", "p", n)], timestamp=1)
    newest = sorted(directory.glob("*.producers"))[-1]
    newest.write_text("{not json")

    with pytest.raises(StreamCorrupt, match=newest.stem):
        StreamLog(FileMedium(directory), max_segment_bytes=200)


def test_the_least_recently_written_producer_is_forgotten_beyond_the_cap():
    """RabbitMQ's streams (osiris_tracking, max_sequences 255) keep the last id of a bounded set
    of writers and drop those that wrote least recently; so does a stream here, at the same
    default. A forgotten producer's next message is stored, whatever its id."""
    producers = Producers(limit=3)
    kept, advanced = producers.admit(
        [record("a0", "a", 0), record("b0", "b", 0), record("c0", "c", 0), record("a1", "a", 1)]
    )
    assert list(advanced) == ["b", "c", "a"]  # the order they last wrote in
    producers.advance(advanced)
    producers.advance(producers.admit([record("d0", "d", 0)])[1])

    assert producers.last == {"c": 0, "a": 1, "d": 0}
    kept, _ = producers.admit([record("b0 again", "b", 0), record("a1 again", "a", 1)])
    assert [r.body for r in kept] == [b"b0 again"]


def test_a_duplicate_does_not_make_its_producer_recent():
    producers = Producers(limit=2)
    producers.advance(producers.admit([record("a0", "a", 0), record("b0", "b", 0)])[1])
    producers.advance(producers.admit([record("a0", "a", 0), record("c0", "c", 0)])[1])

    assert producers.last == {"b": 0, "c": 0}


def test_the_cap_holds_across_rolls_and_reopening(tmp_path: Path):
    """What is forgotten depends on the stored messages only: reopening (the newest segment's
    snapshot, then its messages) gives the producers the log had."""
    directory = tmp_path / "stream"
    count = MAX_PRODUCERS + 20
    with opened(directory, max_segment_bytes=4000) as log:
        for n in range(count):
            log.append([record(f"m{n}", f"p{n}", 0)], timestamp=1)
        assert log.segment_count > 2
        tracked = log.producers.last
    assert len(tracked) == MAX_PRODUCERS
    assert "p0" not in tracked
    assert f"p{count - 1}" in tracked
    with opened(directory, max_segment_bytes=4000) as log:
        assert log.producers.last == tracked
        assert list(log.producers.last) == list(tracked)
