"""The takeover of a failed member's streams kept in the shared PostgreSQL store: brokers as
stores of one schema, each with its own broker id, and the stream logs on their tables.

The HA issue: the takeover broker takes over the failed broker's persistent state "so that no
persistent message is stranded"; a stream's rows are owned rows like its queues'.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.dedup import PRODUCER_HEADER, SEQUENCE_HEADER
from batonmq.queues.streams.log import Filter, StreamLog
from batonmq.store.base import ObjectKey, StoredQueue, StoreError, StoreFenced, WriteBatch
from batonmq.store.hastore import SharedStoreAdmin
from batonmq.store.members import MergedStream, StreamTail
from batonmq.store.streamtables import PostgresStreamTables
from tests.integration.store.conftest import CLUSTER_SCHEMA, MakeMember
from tests.members import lease_run_out

SCHEMA = CLUSTER_SCHEMA


def _stream(name: str) -> StoredQueue:
    return StoredQueue("/", name, False, {"x-queue-type": "stream"})


def _record(body: str) -> Record:
    return Record("", "events", b"", body.encode())


def _write(tables: PostgresStreamTables, queue: str, bodies: list[str]) -> int:
    """Append `bodies` one chunk each to stream `queue` (small segments); its next offset."""
    log = StreamLog(tables.medium("/", queue), max_segment_bytes=150)
    try:
        for body in bodies:
            log.append([_record(body)], timestamp=1)
        return log.next_offset
    finally:
        log.close()


def _append(tables: PostgresStreamTables, queue: str, records: list[Record], time: int) -> None:
    """Append `records` one chunk each (small segments), stamped `time`, `time` + 1, ..."""
    log = StreamLog(tables.medium("/", queue), max_segment_bytes=150)
    try:
        for number, record in enumerate(records):
            log.append([record], timestamp=time + number)
    finally:
        log.close()


def _published(body: str, producer: str, sequence: int) -> Record:
    """A message naming its producer and publishing id (`batonmq.queues.streams.dedup`)."""
    properties = commands.Basic.Properties(
        headers={PRODUCER_HEADER: producer, SEQUENCE_HEADER: sequence}
    )
    return Record("", "s", ContentHeader(0, len(body), properties).marshal(), body.encode())


def _tails(tables: PostgresStreamTables, queue: str) -> dict[ObjectKey, StreamTail]:
    """Where stream `queue` ends, as a claimant names it."""
    log = StreamLog(tables.medium("/", queue), max_segment_bytes=150)
    try:
        return {("/", queue): StreamTail(log.next_offset, log.producers.snapshot())}
    finally:
        log.close()


def _read(tables: PostgresStreamTables, queue: str) -> list[tuple[int, bytes]]:
    log = StreamLog(tables.medium("/", queue), max_segment_bytes=150)
    try:
        return [(e.offset, e.record.body) for e in log.read(0, max_records=1000)]
    finally:
        log.close()


async def test_a_failed_member_s_streams_move_to_the_claimant_at_their_offsets(
    make_member: MakeMember, postgres_dsn: str
) -> None:
    """A stream only the failed member had becomes the claimant's, every segment and chunk at
    its offset; a stream both had is merged, the failed member's records after the claimant's
    (at their offsets when the claimant's holds nothing yet); the failed member owns nothing
    more (`remove bkr` may remove it)."""
    failed, claimant = make_member("A", lease_seconds=0.5), make_member("B")
    await failed.open()
    await claimant.open()
    failed_tables = PostgresStreamTables(failed)
    claimant_tables = PostgresStreamTables(claimant)
    streams = [_stream("only-a"), _stream("both"), _stream("empty-b")]
    await failed.commit(WriteBatch(queues_put=streams))
    await claimant.commit(WriteBatch(queues_put=streams[1:]))
    try:
        await asyncio.to_thread(_write, failed_tables, "only-a", [f"a{n}" for n in range(8)])
        await asyncio.to_thread(_write, failed_tables, "both", ["a-both"])
        await asyncio.to_thread(_write, failed_tables, "empty-b", ["a0", "a1"])
        await asyncio.to_thread(_write, claimant_tables, "both", ["b-both"])
        assert await asyncio.to_thread(_write, claimant_tables, "empty-b", []) == 0
        tails = await asyncio.to_thread(_tails, claimant_tables, "both")
        tails |= await asyncio.to_thread(_tails, claimant_tables, "empty-b")
        epoch = await lease_run_out(claimant, "A")

        taken = await claimant.take_over("A", epoch, next_sequences={}, stream_tails=tails)

        assert taken is not None
        assert sorted(taken.merged_streams, key=lambda m: m.queue) == [
            MergedStream("/", "both", 0, 1, 1, 2),
            MergedStream("/", "empty-b", 0, 2, 0, 2),
        ]
        empty = await asyncio.to_thread(_read, claimant_tables, "empty-b")
        assert empty == [(0, b"a0"), (1, b"a1")]
        moved = await asyncio.to_thread(_read, claimant_tables, "only-a")
        assert moved == [(n, f"a{n}".encode()) for n in range(8)]
        both = await asyncio.to_thread(_read, claimant_tables, "both")
        assert both == [(0, b"b-both"), (1, b"a-both")]
        # The claimant appends after what it took over.
        assert await asyncio.to_thread(_write, claimant_tables, "only-a", ["b8"]) == 9
        assert await asyncio.to_thread(_write, claimant_tables, "both", ["b2"]) == 3
        assert (await SharedStoreAdmin(postgres_dsn).removable(SCHEMA, "A")).broker_id == "A"
    finally:
        for tables in (failed_tables, claimant_tables):
            await asyncio.to_thread(tables.close)


async def test_a_stream_both_had_gets_the_failed_member_s_records_after_the_claimant_s(
    make_member: MakeMember,
) -> None:
    """The HA issue: the winner "takes over its destinations, persistent messages ..."; a
    stream's confirmed messages must not be left unserved. The failed member's records follow
    the claimant's, in their order, each once, their offsets renumbered from the claimant's
    next; they keep their timestamps (x-stream-offset as a timestamp still finds them), their
    filter values (x-stream-filter still skips and matches them), and the producers' ids both
    logs stored (RabbitMQ's deduplication: "a message whose publishing id is not above the last
    one stored is dropped")."""
    failed, claimant = make_member("A", lease_seconds=0.5), make_member("B")
    await failed.open()
    await claimant.open()
    failed_tables = PostgresStreamTables(failed)
    claimant_tables = PostgresStreamTables(claimant)
    await failed.commit(WriteBatch(queues_put=[_stream("s")]))
    await claimant.commit(WriteBatch(queues_put=[_stream("s")]))
    a_records = [
        Record("", "s", b"", f"a{n}".encode(), "red" if n % 3 == 0 else "blue") for n in range(20)
    ]
    a_records += [_published("a-p", "p", 7), _published("a-q", "q", 3)]
    b_records = [_record(f"b{n}") for n in range(5)] + [_published("b-p", "p", 2)]
    try:
        await asyncio.to_thread(_append, claimant_tables, "s", b_records, 1000)
        await asyncio.to_thread(_append, failed_tables, "s", a_records, 5000)
        tails = await asyncio.to_thread(_tails, claimant_tables, "s")
        assert tails["/", "s"].next_offset == 6
        epoch = await lease_run_out(claimant, "A")

        taken = await claimant.take_over("A", epoch, next_sequences={}, stream_tails=tails)

        assert taken is not None
        assert taken.merged_streams == [MergedStream("/", "s", 0, 22, 6, 28)]
        await asyncio.to_thread(_check_merged, claimant_tables, [*b_records, *a_records])
    finally:
        for tables in (failed_tables, claimant_tables):
            await asyncio.to_thread(tables.close)


def _check_merged(tables: PostgresStreamTables, records: list[Record]) -> None:
    """The claimant's records 0-5 stamped 1000 on, then the failed member's 6-27 from 5000."""
    log = StreamLog(tables.medium("/", "s"), max_segment_bytes=150)
    try:
        entries = log.read(0, max_records=1000)
        assert [(e.offset, e.record) for e in entries] == list(enumerate(records))
        assert [e.timestamp for e in entries] == [1000 + n for n in range(6)] + [
            5000 + n for n in range(22)
        ]
        assert log.offset_at(5005) == 11
        red = log.read(0, max_records=1000, only=Filter(frozenset({"red"})))
        assert [e.offset for e in red] == [6 + n for n in range(0, 20, 3)]
        assert log.producers.last == {"p": 7, "q": 3}
        # Repeats of either log's producers are not stored again; a new id is, at 28.
        assert log.append([_published("again", "p", 7), _published("again", "q", 3)], 9000) == 28
        assert log.next_offset == 28
        assert log.append([_published("new", "p", 8)], 9000) == 28
        assert log.next_offset == 29
    finally:
        log.close()


async def test_a_stream_write_that_finds_the_broker_fenced_fences_its_store(
    make_member: MakeMember, postgres_dsn: str
) -> None:
    """The HA issue: "A broker that finds itself fenced stops serving": a stream's append that
    finds the epoch superseded (a takeover claimed the broker) fails, and the store's fencing
    handler, which stops the broker, is told on the broker's event loop, as when one of the
    store's own writes finds it."""
    store = make_member("A")
    await store.open()
    await store.commit(WriteBatch(queues_put=[_stream("s")]))
    told: list[StoreError] = []
    store.on_fenced(told.append)
    tables = PostgresStreamTables(store)
    medium = tables.medium("/", "s")  # on the broker's loop
    try:
        log = await asyncio.to_thread(StreamLog, medium)
        await asyncio.to_thread(log.append, [_record("before")], 1)
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute(
                f'UPDATE "{SCHEMA}".brokers SET epoch = epoch + 1 WHERE broker_id = $1', "A"
            )
        finally:
            await connection.close()

        with pytest.raises(StoreFenced):
            await asyncio.to_thread(log.append, [_record("after")], 2)
        await asyncio.sleep(0)  # the loop runs what the writer thread handed it

        assert len(told) == 1
        assert "no longer owns its store" in str(told[0])
        with pytest.raises(StoreFenced):
            await store.commit(WriteBatch(queues_put=[_stream("t")]))
    finally:
        await asyncio.to_thread(tables.close)
