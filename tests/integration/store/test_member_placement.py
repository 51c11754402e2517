"""The placement of an HA member's rows among its identities (its workers') on PostgreSQL, done
by whichever of its processes starts first, beside the other members of the cluster.

MQ 4.1 HA guide: a broker's persistent data is its own until another broker takes it over, and
the takeover broker "acquires a lock on the failed broker's data in the persistent store", so
exactly one broker takes it over; a broker that lost its data to a takeover writes no more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from batonmq.store.base import StoredQueue, StoreFenced, StoreLocked, WriteBatch
from batonmq.store.placement import Placement
from batonmq.store.postgres import PostgresStore
from batonmq.store.takeover import SQL as TAKEOVER_SQL

pytestmark = pytest.mark.integration

SCHEMA = "batonmq_member_place"
MEMBER = "A"
#: Virtual host "/" is worker 0's; "c" worker 2's of three, worker 0's of two.
OWNERS = {"/": 0, "b": 1, "c": 2}
#: The token of this run of member A, which the supervisor draws and gives its workers, and
#: one of an earlier run.
RUN, EARLIER_RUN = "0123456789abcdef", "fedcba9876543210"

MakeWorker = Callable[..., PostgresStore]


def _placement(workers: int) -> Placement:
    return Placement(MEMBER, workers, lambda vhost: OWNERS[vhost] % workers, Path("/nonexistent"))


@pytest.fixture
async def make_worker(postgres_dsn: str) -> AsyncIterator[MakeWorker]:
    """`make(worker, workers=2, lease_seconds=15.0, renew_every=None, run=RUN)`: an unopened
    store of member A's worker `worker` of run `run` that places the member's rows at open, as
    the worker's process does; a short lease that is never renewed stands for a paused
    process."""
    made: list[PostgresStore] = []

    def make(
        worker: int,
        workers: int = 2,
        lease_seconds: float = 15.0,
        renew_every: float | None = None,
        run: str = RUN,
    ) -> PostgresStore:
        store = PostgresStore(
            postgres_dsn,
            broker_id=f"{MEMBER}w{worker}",
            schema=SCHEMA,
            lease_seconds=lease_seconds,
            renew_every=renew_every,
            member_of=MEMBER,
            placement=_placement(workers),
            run=run,
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


#: A worker of an earlier run of member A with three workers: worker 2, which declares a queue
#: of its virtual host "c", says so, and serves on (its lease renewed) until it is stopped.
EARLIER_WORKER = """
import asyncio, sys
from pathlib import Path
from batonmq.store.base import StoredQueue, WriteBatch
from batonmq.store.placement import Placement
from batonmq.store.postgres import PostgresStore

async def main():
    owners = {"/": 0, "b": 1, "c": 2}
    store = PostgresStore(
        sys.argv[1], broker_id="Aw2", schema=sys.argv[2], lease_seconds=float(sys.argv[3]),
        member_of="A", placement=Placement("A", 3, owners.__getitem__, Path("/nonexistent")),
        run="fedcba9876543210",
    )
    await store.open()
    await store.commit(WriteBatch(queues_put=[StoredQueue("c", "moved", True, {})]))
    print("serving", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.fixture
def earlier_worker(
    postgres_dsn: str, request: pytest.FixtureRequest
) -> Iterator[subprocess.Popen[str]]:
    """Worker 2 of an earlier run of member A, a process of its own, once serving; its lease
    is 1 s unless the test is parametrized indirectly with another."""
    lease = str(getattr(request, "param", 1.0))
    with _child("serving", EARLIER_WORKER, postgres_dsn, SCHEMA, lease) as process:
        yield process


@contextlib.contextmanager
def _child(ready: str, script: str, *arguments: str) -> Iterator[subprocess.Popen[str]]:
    """A Python process running `script` with `arguments`, once it printed the line `ready`;
    killed at the end."""
    process = subprocess.Popen(
        [sys.executable, "-c", script, *arguments], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == f"{ready}\n"
        yield process
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def test_a_paused_worker_of_an_earlier_run_is_waited_out_and_its_rows_placed(
    make_worker: MakeWorker, postgres_dsn: str, earlier_worker: subprocess.Popen[str]
) -> None:
    """Worker 2 of member A's earlier run (three workers) is paused (SIGSTOP) with its lease
    live. Member A starts again with two workers: worker 2's lease is no process's of this
    run, so the first worker to start waits it out rather than take it for a sibling that
    placed the rows, and then places them: worker 2's queue in virtual host "c" is worker 0's
    now, and worker 2 is fenced. MQ 4.1 HA guide: a broker's persistent data is its own until
    another broker takes it over; docs/multi-core.md: "What the choice means for HA clusters"
    (a member may change its number of workers between two runs)."""
    os.kill(earlier_worker.pid, signal.SIGSTOP)
    first = make_worker(0)
    await asyncio.wait_for(first.open(), 10)
    watcher = await asyncpg.connect(postgres_dsn)
    try:
        owners = await watcher.fetch(
            f'SELECT broker_id FROM "{SCHEMA}".queues WHERE vhost = $1 AND name = $2',
            "c",
            "moved",
        )
        state = await watcher.fetchval(
            f'SELECT state FROM "{SCHEMA}".brokers WHERE broker_id = $1', f"{MEMBER}w2"
        )
    finally:
        await watcher.close()
    assert [row[0] for row in owners] == [f"{MEMBER}w0"]
    assert state == "stopped"


async def test_a_worker_of_an_earlier_run_on_the_same_host_and_batonmq_pid_is_waited_out(
    make_worker: MakeWorker, postgres_dsn: str
) -> None:
    """Worker 2 of member A's earlier run (three workers) stopped renewing its lease (paused)
    in a container: the host name and the `batonmq` process's pid (1) come back with the new
    run's. Member A starts again with two workers: worker 2's lease does not name this run's
    token, so the first worker to start waits it out rather than take it for a sibling that
    placed the rows, and then places them: worker 2's queue in virtual host "c" is worker 0's
    now, and worker 2 is fenced. MQ 4.1 HA guide: a broker's persistent data is its own until
    another broker takes it over; docs/multi-core.md: "What the choice means for HA clusters"
    (a member may change its number of workers between two runs)."""
    earlier = make_worker(2, workers=3, lease_seconds=1.0, renew_every=3600.0, run=EARLIER_RUN)
    await earlier.open()
    await earlier.commit(_declare("c", "moved"))
    first = make_worker(0)
    await asyncio.wait_for(first.open(), 10)
    watcher = await asyncpg.connect(postgres_dsn)
    try:
        owners = await watcher.fetch(
            f'SELECT broker_id FROM "{SCHEMA}".queues WHERE vhost = $1 AND name = $2',
            "c",
            "moved",
        )
        state = await watcher.fetchval(
            f'SELECT state FROM "{SCHEMA}".brokers WHERE broker_id = $1', f"{MEMBER}w2"
        )
    finally:
        await watcher.close()
    assert [row[0] for row in owners] == [f"{MEMBER}w0"]
    assert state == "stopped"
    with pytest.raises(StoreFenced):
        await earlier.commit(_declare("c", "later"))


@pytest.mark.parametrize("earlier_worker", [60.0], indirect=True)
async def test_a_first_process_whose_placement_fails_gives_its_lease_back(
    make_worker: MakeWorker, postgres_dsn: str, earlier_worker: subprocess.Popen[str]
) -> None:
    """Worker 2 of an earlier run is paused with a lease longer than a start waits, so the
    first process of member A's new run fails to place the rows (StoreLocked). It gives its
    lease back before it lets go of the member's lock: the sibling that starts next must not
    find it running and take it for the process that placed the rows, and serve with the rows
    left where they were; it waits for worker 2 in its turn. MQ 4.1 HA guide: a broker's
    persistent data is its own until another broker takes it over."""
    os.kill(earlier_worker.pid, signal.SIGSTOP)
    first = make_worker(0, lease_seconds=0.5)
    with pytest.raises(StoreLocked):
        await asyncio.wait_for(first.open(), 30)
    watcher = await asyncpg.connect(postgres_dsn)
    try:
        holder = await watcher.fetchval(
            f'SELECT holder FROM "{SCHEMA}".brokers WHERE broker_id = $1', f"{MEMBER}w0"
        )
    finally:
        await watcher.close()
    assert holder is None

    sibling = make_worker(1, lease_seconds=0.5)
    with pytest.raises(StoreLocked):
        await asyncio.wait_for(sibling.open(), 30)


#: A process of member A in its claim, holding the member's lock, as its session says.
LOCK_HOLDER = """
import asyncio, sys
import asyncpg
from batonmq.store.pgsession import advisory_key

async def main():
    connection = await asyncpg.connect(
        sys.argv[1], server_settings={"application_name": "batonmq Aw1"}
    )
    await connection.execute("SELECT pg_advisory_lock($1)", advisory_key("member", *sys.argv[2:]))
    print("locked", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_start_waits_a_bounded_time_for_a_paused_sibling_holding_the_members_lock(
    make_worker: MakeWorker, postgres_dsn: str
) -> None:
    """A process of member A is paused (SIGSTOP) in its claim, holding the member's lock. A
    sibling starting waits for it no longer than twice the lease and the claim's wait, then
    fails with StoreLocked naming the session that holds the lock (its application name);
    once the paused process is gone, the sibling starts. MQ 4.1 HA guide: a broker is failed
    once it "fails to update its state within the number of monitor intervals specified by
    imq.cluster.monitor.threshold" (a lease): a paused process is not waited for without
    bound."""
    setup = make_worker(0)
    await setup.open()  # the schema, and A's worker 0 enrolled
    await setup.close()
    with _child("locked", LOCK_HOLDER, postgres_dsn, SCHEMA, MEMBER) as process:
        os.kill(process.pid, signal.SIGSTOP)
        sibling = make_worker(0, lease_seconds=0.5)
        started = asyncio.get_running_loop().time()
        with pytest.raises(StoreLocked, match=r"'batonmq Aw1'.* over 11 s"):
            await asyncio.wait_for(sibling.open(), 30)
        assert asyncio.get_running_loop().time() - started < 20
    await asyncio.wait_for(make_worker(0).open(), 30)
