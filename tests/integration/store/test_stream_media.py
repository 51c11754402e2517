"""A stream's log over both media it can be kept in: segment files, and the PostgreSQL store's
tables (a real server, a fresh database per test). The log's logic is written once; these are
its behaviours, each run over both.

RabbitMQ's streams: "every message gets an offset", consumers attach at "first", "last" (the
start of the last chunk), "next" or an offset; retention "is evaluated per segment":
x-max-length-bytes and x-max-age remove whole segments, the one being written never. The
stream-queues issue: "PostgreSQL stores them in tables when the store is PostgreSQL".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.dedup import PRODUCER_HEADER, SEQUENCE_HEADER
from batonmq.queues.streams.files import FileMedium
from batonmq.queues.streams.log import Filter, StreamCorrupt, StreamLog
from batonmq.queues.streams.medium import StreamMedium
from batonmq.store.base import StoredQueue, StoreFenced, WriteBatch
from batonmq.store.postgres import PostgresStore
from batonmq.store.streamtables import PostgresStreamTables

SCHEMA = "batonmq_s_b1"
#: A medium for the stream of a name (the same name: the same stream, reopened).
MakeMedium = Callable[..., StreamMedium]


class Postgres:
    """A broker's store opened on an event loop of the test's own (idle between calls, as the
    stream writer's thread runs its own), and its stream tables."""

    def __init__(self, dsn: str, broker_id: str = "b1", lease_seconds: float = 15.0) -> None:
        self.dsn = dsn
        self.loop = asyncio.new_event_loop()
        self.store = PostgresStore(
            dsn, broker_id=broker_id, schema=SCHEMA, lease_seconds=lease_seconds
        )
        self.loop.run_until_complete(self.store.open())
        self.tables = PostgresStreamTables(self.store)

    def sql(self, statement: str, *arguments: object) -> list[asyncpg.Record]:
        async def run() -> list[asyncpg.Record]:
            connection = await asyncpg.connect(self.dsn)
            try:
                return await connection.fetch(statement.format(s=SCHEMA), *arguments)
            finally:
                await connection.close()

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        self.tables.close()
        self.loop.run_until_complete(self.store.close())
        self.loop.close()


@pytest.fixture(params=["files", "postgres"])
def medium_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def postgres(medium_kind: str, request: pytest.FixtureRequest) -> Iterator[Postgres | None]:
    if medium_kind != "postgres":
        yield None
        return
    opened = Postgres(request.getfixturevalue("postgres_dsn"))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def make_medium(tmp_path: Path, postgres: Postgres | None) -> MakeMedium:
    def make(name: str = "events") -> StreamMedium:
        if postgres is None:
            return FileMedium(tmp_path / name)
        return postgres.tables.medium("/", name)

    return make


@pytest.fixture
def opened(make_medium: MakeMedium) -> Callable[..., contextlib.AbstractContextManager[StreamLog]]:
    @contextlib.contextmanager
    def open_log(name: str = "events", **settings: int) -> Iterator[StreamLog]:
        log = StreamLog(make_medium(name), **settings)
        try:
            yield log
        finally:
            log.close()

    return open_log


def record(n: int, filter_value: str | None = None) -> Record:
    return Record("", "events", b"", f"m{n}".encode() * 10, filter_value)


def bodies(log: StreamLog, offset: int, count: int = 1000) -> list[bytes]:
    return [entry.record.body for entry in log.read(offset, max_records=count)]


def test_offsets_grow_from_zero_and_chunks_share_a_timestamp(opened) -> None:
    with opened() as log:
        assert (log.first_offset, log.next_offset) == (0, 0)
        assert log.append([record(0), record(1)], timestamp=1000) == 0
        assert log.append([record(2)], timestamp=2000) == 2

        entries = log.read(0, max_records=10)
        assert [(e.offset, e.timestamp) for e in entries] == [(0, 1000), (1, 1000), (2, 2000)]
        assert (log.first_offset, log.last_chunk_offset, log.next_offset) == (0, 2, 3)


def test_a_read_starts_at_its_offset_inside_a_chunk_and_stops_at_max_records(opened) -> None:
    with opened() as log:
        log.append([record(n) for n in range(10)], timestamp=1)
        log.append([record(n) for n in range(10, 20)], timestamp=2)

        assert [e.offset for e in log.read(7, max_records=5)] == [7, 8, 9, 10, 11]
        assert log.read(20, max_records=5) == []


def test_the_log_is_the_same_after_reopening(opened) -> None:
    with opened() as log:
        log.append([record(0), record(1)], timestamp=1)
    with opened() as log:
        assert log.next_offset == 2
        assert log.append([record(2)], timestamp=2) == 2
        assert bodies(log, 0) == [record(n).body for n in range(3)]


def test_streams_of_other_names_are_apart(opened) -> None:
    with opened("a") as a, opened("b") as b:
        a.append([record(0)], timestamp=1)
        b.append([record(1), record(2)], timestamp=1)
        assert bodies(a, 0) == [record(0).body]
        assert bodies(b, 0) == [record(1).body, record(2).body]


def test_segments_roll_at_their_size_and_reads_cross_them(opened) -> None:
    with opened(max_segment_bytes=1000) as log:
        for n in range(50):
            log.append([record(n)], timestamp=n)
        assert log.segment_count >= 4
        assert bodies(log, 0) == [record(n).body for n in range(50)]
    with opened(max_segment_bytes=1000) as log:
        assert bodies(log, 33, count=3) == [record(n).body for n in (33, 34, 35)]


def test_retention_by_size_removes_whole_oldest_segments_never_the_newest(opened) -> None:
    with opened(max_segment_bytes=1000) as log:
        for n in range(50):
            log.append([record(n)], timestamp=n)
        segments = log.segment_count

        removed = log.retain(max_age=None, max_bytes=3000, now=100)

        assert removed > 0
        assert log.segment_count == segments - removed
        assert log.size_bytes <= 3000
        first = log.first_offset
        assert first > 0
        # A reader asking for a removed offset starts at the oldest still held.
        assert log.read(0, max_records=1)[0].offset == first
    with opened(max_segment_bytes=1000) as log:
        # What retention removed is gone from the medium too.
        assert (log.segment_count, log.first_offset) == (segments - removed, first)
        log.retain(max_age=None, max_bytes=0, now=100)
        assert log.segment_count == 1
        assert log.next_offset == 50


def test_retention_by_age_removes_segments_whose_newest_chunk_is_too_old(opened) -> None:
    with opened(max_segment_bytes=1000) as log:
        for n in range(50):
            log.append([record(n)], timestamp=n * 1000)

        log.retain(max_age=10_000, max_bytes=None, now=50_000)

        # Every segment whose newest chunk is older than 40 s is gone; the one holding 40 s stays.
        assert 30 < log.first_offset <= 40
        assert log.read(log.first_offset, max_records=100)[-1].offset == 49
        first = log.first_offset
    with opened(max_segment_bytes=1000) as log:
        assert log.first_offset == first


def test_filters_skip_other_values_and_keep_unfiltered_on_request(opened) -> None:
    """x-stream-filter ["eu"] receives "eu" messages only; with x-stream-match-unfiltered also
    those published without a filter value."""
    with opened() as log:
        log.append([record(0, "eu"), record(1, "us"), record(2)], timestamp=1)
        log.append([record(3, "us")] * 3, timestamp=2)
        log.append([record(6, "eu")], timestamp=3)

        eu = log.read(0, max_records=10, only=Filter(frozenset({"eu"})))
        both = log.read(0, max_records=10, only=Filter(frozenset({"eu"}), match_unfiltered=True))

        assert [e.offset for e in eu] == [0, 6]
        assert [e.offset for e in both] == [0, 2, 6]


def test_a_filtered_read_finds_rare_matches_across_many_chunks(opened) -> None:
    with opened() as log:
        for n in range(300):
            log.append([record(n, "eu" if n % 100 == 99 else "us")], timestamp=n)

        found = log.read(0, max_records=10, max_bytes=1 << 62, only=Filter(frozenset({"eu"})))

        assert [e.offset for e in found] == [99, 199, 299]


def test_attaching_by_timestamp_starts_at_the_first_chunk_written_then_or_later(opened) -> None:
    with opened() as log:
        log.append([record(0), record(1)], timestamp=1000)
        log.append([record(2)], timestamp=2000)
        log.append([record(3)], timestamp=3000)

        assert log.offset_at(0) == 0
        assert log.offset_at(1500) == 2
        assert log.offset_at(3000) == 3
        assert log.offset_at(9000) == 4


def _published(body: str, producer: str, sequence: int) -> Record:
    from pamqp import commands
    from pamqp.header import ContentHeader

    properties = commands.Basic.Properties(
        headers={PRODUCER_HEADER: producer, SEQUENCE_HEADER: sequence}
    )
    return Record("", "events", ContentHeader(0, len(body), properties).marshal(), body.encode())


def test_producers_ids_survive_rolling_retention_and_reopening(opened) -> None:
    """RabbitMQ's deduplication: a producer's message whose publishing id is not above the last
    one stored is not stored; the ids live in each segment's snapshot and its messages."""
    with opened(max_segment_bytes=400) as log:
        for n in range(10):
            log.append([_published(f"old{n}", "old", n)], timestamp=1)
        for n in range(10):
            log.append([_published(f"new{n}", "new", n)], timestamp=2)
        log.retain(max_age=None, max_bytes=500, now=3)
    with opened(max_segment_bytes=400) as log:
        assert log.producers.last == {"old": 9, "new": 9}
        first = log.next_offset
        log.append([_published("old9", "old", 9), _published("old10", "old", 10)], timestamp=4)
        assert [e.record.body for e in log.read(first, max_records=10)] == [b"old10"]


def test_a_damaged_chunk_is_reported_with_its_stream_and_segment(
    opened, postgres: Postgres | None, tmp_path: Path
) -> None:
    with opened(max_segment_bytes=200) as log:
        for n in range(4):
            log.append([record(n)], timestamp=n)
    if postgres is None:
        oldest = sorted((tmp_path / "events").glob("*.segment"))[0]
        data = bytearray(oldest.read_bytes())
        data[-1] ^= 0xFF
        oldest.write_bytes(bytes(data))
        named = oldest.name
    else:
        postgres.sql(
            "UPDATE {s}.stream_chunks SET chunk = set_byte(chunk, length(chunk) - 1,"
            " get_byte(chunk, length(chunk) - 1) # 255) WHERE first_offset = 0"
        )
        named = "stream 'events' in vhost '/'.*segment 0"

    with opened(max_segment_bytes=200) as log, pytest.raises(StreamCorrupt, match=named):
        log.read(0, max_records=10)


@pytest.mark.parametrize("medium_kind", ["postgres"])
def test_the_tables_hold_a_row_per_chunk_owned_by_the_broker(opened, postgres: Postgres) -> None:
    """The stream-queues issue's layout in PostgreSQL: a table of chunks (the stream's queue,
    segment, first offset, time written, the encoded chunk as bytea), each row carrying the id
    of the broker that owns it as every owned row does; a segment's row beside them."""
    with opened(max_segment_bytes=100) as log:  # a chunk per segment
        for n in range(3):
            log.append([record(n)], timestamp=1000 + n)
        assert log.segment_count == 3

    chunks = postgres.sql(
        "SELECT broker_id, vhost, queue, segment, first_offset, written_at, length(chunk)"
        " FROM {s}.stream_chunks ORDER BY first_offset"
    )
    segments = postgres.sql(
        "SELECT broker_id, first_offset, producers IS NULL FROM {s}.stream_segments"
        " ORDER BY first_offset"
    )
    assert [tuple(row)[:6] for row in chunks] == [
        ("b1", "/", "events", n, n, 1000 + n) for n in range(3)
    ]
    assert all(row[6] > 48 for row in chunks)
    # The first segment begins with no snapshot; the others with the producers' ids.
    assert [tuple(row) for row in segments] == [("b1", 0, True), ("b1", 1, False), ("b1", 2, False)]


@pytest.mark.parametrize("medium_kind", ["postgres"])
def test_a_broker_taken_over_writes_nothing_more_to_its_streams(opened, postgres: Postgres) -> None:
    """The HA issue: "from that moment the failed broker can write nothing (the foundation
    issue's fencing)": a stream append checks the broker's epoch in its transaction, as the
    store's commits do, and fails once a takeover bumped it; nothing of it is stored."""
    with opened() as log:
        log.append([record(0)], timestamp=1)
        postgres.sql("UPDATE {s}.brokers SET epoch = epoch + 1 WHERE broker_id = 'b1'")

        with pytest.raises(StoreFenced, match="no longer owns its store"):
            log.append([record(1)], timestamp=2)

        assert log.next_offset == 1
    rows = postgres.sql("SELECT first_offset FROM {s}.stream_chunks ORDER BY first_offset")
    assert [row[0] for row in rows] == [0]


@pytest.mark.parametrize("medium_kind", ["postgres"])
def test_recovery_discards_the_rows_of_streams_that_have_no_queue(
    opened, postgres: Postgres
) -> None:
    """As a recovery discards entries of no queue: a stream deleted while the broker stopped
    before removing its rows, or whose declaration never committed, leaves nothing that a
    stream declared later under its name would find."""
    store = postgres.store
    queue = StoredQueue("/", "kept", False, {"x-queue-type": "stream"})
    postgres.loop.run_until_complete(store.commit(WriteBatch(queues_put=[queue])))
    for name in ("kept", "ghost"):
        with opened(name) as log:
            log.append([record(0)], timestamp=1)

    postgres.loop.run_until_complete(store.recover())

    rows = postgres.sql("SELECT DISTINCT queue FROM {s}.stream_chunks")
    segments = postgres.sql("SELECT DISTINCT queue FROM {s}.stream_segments")
    assert [row[0] for row in rows] == [row[0] for row in segments] == ["kept"]
