"""The placement of an HA member's rows among its identities (its workers') on PostgreSQL, done
by whichever of its processes starts first, beside the other members of the cluster.

MQ 4.1 HA guide: a broker's persistent data is its own until another broker takes it over, and
the takeover broker "acquires a lock on the failed broker's data in the persistent store", so
exactly one broker takes it over; a broker that lost its data to a takeover writes no more.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from batonmq.store.base import StoredQueue, StoreFenced, WriteBatch
from batonmq.store.placement import Placement
from batonmq.store.postgres import PostgresStore
from batonmq.store.takeover import SQL as TAKEOVER_SQL

pytestmark = pytest.mark.integration

SCHEMA = "batonmq_member_place"
MEMBER = "A"
#: Virtual host "/" is worker 0's.
OWNERS = {"/": 0, "b": 1}

MakeWorker = Callable[..., PostgresStore]


def _placement(workers: int) -> Placement:
    return Placement(MEMBER, workers, OWNERS.__getitem__, Path("/nonexistent"))


@pytest.fixture
async def make_worker(postgres_dsn: str) -> AsyncIterator[MakeWorker]:
    """`make(worker, workers=2, lease_seconds=15.0, renew_every=None)`: an unopened store of
    member A's worker `worker` that places the member's rows at open, as the worker's process
    does; a short lease that is never renewed stands for a paused process."""
    made: list[PostgresStore] = []

    def make(
        worker: int,
        workers: int = 2,
        lease_seconds: float = 15.0,
        renew_every: float | None = None,
    ) -> PostgresStore:
        store = PostgresStore(
            postgres_dsn,
            broker_id=f"{MEMBER}w{worker}",
            schema=SCHEMA,
            lease_seconds=lease_seconds,
            renew_every=renew_every,
            member_of=MEMBER,
            placement=_placement(workers),
        )
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()


async def _waiting_on_a_lock(watcher: asyncpg.Connection) -> bool:
    """Whether another session of the database waits for a row lock."""
    return bool(
        await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
    )


async def test_a_placement_racing_a_survivors_claim_waits_for_it_without_a_deadlock(
    make_worker: MakeWorker, postgres_dsn: str
) -> None:
    """A survivor's claim of member A locks A's identities' rows in broker_id order (Aw0, then
    Aw1) while A's worker 1 restarts and places A's rows. The placement locks those rows in the
    same order before its epoch check locks its own (Aw1): it waits for the claim, and the
    claim goes through. (The other way round, each holds a row the other waits for, and
    PostgreSQL ends one of them with a deadlock error.) MQ 4.1 HA guide: exactly one broker
    takes a failed broker's data over, under its lock."""
    for worker in (0, 1):
        store = make_worker(worker)
        await store.open()
        await store.close()
    survivor = await asyncpg.connect(postgres_dsn)
    watcher = await asyncpg.connect(postgres_dsn)
    try:
        claim = survivor.transaction()
        await claim.start()
        # The survivor's claim has locked the first of A's rows ...
        await survivor.execute(
            f'SELECT 1 FROM "{SCHEMA}".brokers WHERE broker_id = $1 FOR UPDATE', f"{MEMBER}w0"
        )
        restart = asyncio.create_task(make_worker(1).open())
        for _ in range(200):
            if await _waiting_on_a_lock(watcher) or restart.done():
                break
            await asyncio.sleep(0.05)
        assert not restart.done()
        # ... and takes the rest of them, as its "identities" statement does.
        identities = TAKEOVER_SQL["identities"].replace("{s}", f'"{SCHEMA}"')
        rows = await asyncio.wait_for(survivor.fetch(identities, MEMBER, True, "B"), 10)
        assert [row[0] for row in rows] == [f"{MEMBER}w0", f"{MEMBER}w1"]
        await claim.rollback()
        await asyncio.wait_for(restart, 10)
    finally:
        await survivor.close()
        await watcher.close()


def _declare(vhost: str, queue: str) -> WriteBatch:
    return WriteBatch(queues_put=[StoredQueue(vhost, queue, True, {})])


async def test_a_placement_fences_a_paused_identity_whose_rows_stay(
    make_worker: MakeWorker, postgres_dsn: str
) -> None:
    """Member A's worker 1 pauses (its lease runs out, its process lives on) holding only rows
    of its own virtual host "b". Worker 0 restarts and places A's rows: nothing of worker 1's
    moves, but its append log was applied, so the placement claimed it: its next write is
    refused (StoreFenced), and the rows stay where they are. MQ 4.1 HA guide: a broker whose
    data another has taken over writes no more."""
    first = make_worker(0)
    await first.open()
    paused = make_worker(1, lease_seconds=0.3, renew_every=3600.0)
    await paused.open()
    await paused.commit(_declare("b", "kept"))
    await first.close()
    watcher = await asyncpg.connect(postgres_dsn)
    try:
        expired = f'SELECT lease_expires < now() FROM "{SCHEMA}".brokers WHERE broker_id = $1'
        for _ in range(100):
            if await watcher.fetchval(expired, f"{MEMBER}w1"):
                break
            await asyncio.sleep(0.05)
        restarted = make_worker(0)
        await restarted.open()
        owners = await watcher.fetch(
            f'SELECT broker_id FROM "{SCHEMA}".queues WHERE vhost = $1 AND name = $2', "b", "kept"
        )
        assert [row[0] for row in owners] == [f"{MEMBER}w1"]
    finally:
        await watcher.close()
    with pytest.raises(StoreFenced):
        await paused.commit(_declare("b", "later"))
