"""The SQLite store of a broker with several worker processes (README, "Worker processes"): one
database file the workers share, each a member with its own identity and append log, under the
one lock the supervisor holds; the placement of each virtual host's rows at start; and the
catalogue version the workers poll."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from batonmq.security.passwords import hash_password
from batonmq.store.appendlog import AppendLog, appends_path
from batonmq.store.base import StoredEntry, StoredMessage, StoredQueue, StoredUser, WriteBatch
from batonmq.store.placement import Placement, worker_id
from batonmq.store.sqlite import SQLiteStore, prepare_for_workers
from batonmq.store.sqlitefile import take_lock

#: Virtual host "a" is worker 0's, "b" worker 1's.
OWNERS = {"a": 0, "b": 1}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "batonmq.sqlite3"


@pytest.fixture
def lock(db_path: Path) -> Iterator[int]:
    """The store's lock, as the supervisor holds it for its workers."""
    db_path.parent.mkdir()
    fd = take_lock(db_path)
    try:
        yield fd
    finally:
        os.close(fd)


def placement(db_path: Path, workers: int) -> Placement:
    return Placement("b1", workers, OWNERS.__getitem__, db_path.parent)


def worker(db_path: Path, index: int, lock: int) -> SQLiteStore:
    return SQLiteStore(
        db_path, broker_id=worker_id("b1", index), sync=False, worker=index, held_lock=lock
    )


def queue_with(vhost: str, base: int, count: int) -> WriteBatch:
    return WriteBatch(
        queues_put=[StoredQueue(vhost, "q", False, {})],
        messages_put=[StoredMessage(base + n, "", "q", b"", b"m%d" % n) for n in range(count)],
        entries_put=[StoredEntry(vhost, "q", n, base + n) for n in range(count)],
    )


async def test_workers_write_the_one_file_through_logs_of_their_own(
    db_path: Path, lock: int
) -> None:
    """Each worker's messages go to its own append log (`-appends-w<k>`), its rows carry its
    identity, and a message id block of its own keeps ids unique in the file."""
    prepare_for_workers(
        db_path, broker_id="b1", sync=False, held_lock=lock, placement=placement(db_path, 2)
    )
    stores = [worker(db_path, index, lock) for index in (0, 1)]
    for store in stores:
        await store.open()
    try:
        bases = [(await store.recover()).message_id_base for store in stores]
        assert bases[0] != bases[1]
        for store, vhost, base in zip(stores, ("a", "b"), bases, strict=True):
            await store.commit(WriteBatch(queues_put=[StoredQueue(vhost, "q", False, {})]))
            await store.commit(
                WriteBatch(
                    messages_put=[StoredMessage(base, "", "q", b"", b"x")],
                    entries_put=[StoredEntry(vhost, "q", 0, base)],
                )
            )
        for index in (0, 1):
            assert appends_path(db_path, index).stat().st_size > 0
        assert not appends_path(db_path).exists() or not appends_path(db_path).stat().st_size
        # Each reads its own queue only.
        assert len(await stores[0].read_entries("a", "q", -1, 10)) == 1
        assert await stores[0].read_entries("b", "q", -1, 10) == []
    finally:
        for store in stores:
            await store.close()


async def test_a_catalogue_change_by_one_worker_reaches_the_others_watch(
    db_path: Path, lock: int
) -> None:
    """The catalogue is the file's, shared; a commit that changes it bumps its version, which
    the other workers read every interval (in place of PostgreSQL's notifications) and then
    read the catalogue again (GlassFish MQ Technical Overview, Table 4-1: the configuration is
    in the shared store, which every broker sees)."""
    prepare_for_workers(
        db_path, broker_id="b1", sync=False, held_lock=lock, placement=placement(db_path, 2)
    )
    writer, reader = worker(db_path, 0, lock), worker(db_path, 1, lock)
    await writer.open()
    await reader.open()
    seen: list[int] = []
    watch = asyncio.create_task(
        reader.watch_catalogue(lambda version, _writer: seen.append(version), 0.01)()
    )
    try:
        await writer.recover()
        await reader.recover()
        before = (await reader.catalogue()).version
        alice = StoredUser("alice", hash_password("pw"))
        await writer.commit(WriteBatch(users_put=[alice]))
        assert writer.catalogue_writes == 1
        deadline = asyncio.get_running_loop().time() + 5
        while before + 1 not in seen:
            assert asyncio.get_running_loop().time() < deadline, seen
            await asyncio.sleep(0.01)
        catalogue = await reader.catalogue()
        assert catalogue.version == before + 1
        assert "alice" in [user.name for user in catalogue.users]
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await writer.close()
        await reader.close()


async def test_each_virtual_host_goes_to_its_owner_and_back_with_a_crashed_workers_log(
    db_path: Path, lock: int
) -> None:
    """A store made by one process, opened with two workers: each virtual host's queue,
    entries and messages are its owner's. Then worker 1 crashes with a message only in its
    log; back to one process, the log is replayed as worker 1's and everything is the one
    process's again: nothing lost, whatever the number of workers."""
    one = SQLiteStore(db_path, broker_id="b1", sync=False, held_lock=lock)
    await one.open()
    base = (await one.recover()).message_id_base
    await one.commit(queue_with("a", base, 3))
    await one.commit(queue_with("b", base + 3, 2))
    await one.close()

    prepare_for_workers(
        db_path, broker_id="b1", sync=False, held_lock=lock, placement=placement(db_path, 2)
    )
    for index, vhost, count in ((0, "a", 3), (1, "b", 2)):
        store = worker(db_path, index, lock)
        await store.open()
        recovery = await store.recover()
        assert [(q.vhost, q.name) for q in recovery.queues] == [(vhost, "q")]
        assert [(b.vhost, b.count) for b in recovery.backlogs] == [(vhost, count)]
        await store.close()
    crashed = AppendLog(appends_path(db_path, 1), sync=False)
    crashed.append(
        WriteBatch(
            messages_put=[StoredMessage(base + 99, "", "q", b"", b"late")],
            entries_put=[StoredEntry("b", "q", 2, base + 99)],
        )
    )
    crashed.close()

    back = SQLiteStore(
        db_path, broker_id="b1", sync=False, held_lock=lock, placement=placement(db_path, 1)
    )
    await back.open()
    try:
        assert not appends_path(db_path, 1).exists()
        recovery = await back.recover()
        assert [(b.vhost, b.count) for b in recovery.backlogs] == [("a", 3), ("b", 3)]
        page = await back.read_entries("b", "q", -1, 10)
        assert [entry.message.body for entry in page] == [b"m0", b"m1", b"late"]
    finally:
        await back.close()
