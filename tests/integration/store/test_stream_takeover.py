"""The takeover of a failed member's streams kept in the shared PostgreSQL store: brokers as
stores of one schema, each with its own broker id, and the stream logs on their tables.

The HA issue: the takeover broker takes over the failed broker's persistent state "so that no
persistent message is stranded"; a stream's rows are owned rows like its queues'.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.log import StreamLog
from batonmq.store.base import StoredQueue, StoreError, StoreFenced, WriteBatch
from batonmq.store.hastore import SharedStoreAdmin
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
    its offset; a stream both had is not merged (two logs' offsets cannot both be kept): the
    failed member's rows of it stay its own, and `remove bkr` names them as records it still
    owns."""
    failed, claimant = make_member("A", lease_seconds=0.5), make_member("B")
    await failed.open()
    await claimant.open()
    failed_tables = PostgresStreamTables(failed)
    claimant_tables = PostgresStreamTables(claimant)
    await failed.commit(WriteBatch(queues_put=[_stream("only-a"), _stream("both")]))
    await claimant.commit(WriteBatch(queues_put=[_stream("both")]))
    try:
        await asyncio.to_thread(_write, failed_tables, "only-a", [f"a{n}" for n in range(8)])
        await asyncio.to_thread(_write, failed_tables, "both", ["a-both"])
        await asyncio.to_thread(_write, claimant_tables, "both", ["b-both"])
        epoch = await lease_run_out(claimant, "A")

        taken = await claimant.take_over("A", epoch, next_sequences={})

        assert taken is not None
        moved = await asyncio.to_thread(_read, claimant_tables, "only-a")
        assert moved == [(n, f"a{n}".encode()) for n in range(8)]
        assert await asyncio.to_thread(_read, claimant_tables, "both") == [(0, b"b-both")]
        # The claimant appends after what it took over.
        assert await asyncio.to_thread(_write, claimant_tables, "only-a", ["b8"]) == 9
        with pytest.raises(StoreError, match=r"still owns records .*stream segments"):
            await SharedStoreAdmin(postgres_dsn).removable(SCHEMA, "A")
    finally:
        for tables in (failed_tables, claimant_tables):
            await asyncio.to_thread(tables.close)


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
