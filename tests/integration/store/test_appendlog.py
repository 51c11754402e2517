"""The SQLite store's append log with a real database file and real processes: what reaches the
database and when, recovery after a crash, and a replay of a log a checkpoint already wrote."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from batonmq.store.appendlog import appends_path
from batonmq.store.base import StoredQueue, WriteBatch
from batonmq.store.sqlite import SQLiteStore
from tests.batches import VHOST, acked, put


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "batonmq.sqlite3"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(db_path, broker_id="b1")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def rows(path: Path) -> tuple[int, int]:
    """(messages, entries) in the database file, read by a connection of the test's own."""
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return connection.execute(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM entries)"
        ).fetchone()
    finally:
        connection.close()


def crash_after(db_path: Path, *, count: int, acked: list[int]) -> None:
    """In a process of its own: open the store, declare queue `q`, commit `count` persistent
    messages at sequences 0 to count - 1, then the acknowledgement of the sequences `acked`,
    and die without closing the store (os._exit: no checkpoint, no clean stop)."""
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from pathlib import Path
        from batonmq.store.base import StoredEntry, StoredMessage, StoredQueue, WriteBatch
        from batonmq.store.sqlite import SQLiteStore

        async def main():
            store = SQLiteStore(Path({str(db_path)!r}), broker_id="b1")
            await store.open()
            base = (await store.recover()).message_id_base
            await store.commit(WriteBatch(queues_put=[StoredQueue("/", "q", False, {{}})]))
            await store.commit(WriteBatch(
                messages_put=[StoredMessage(base + n, "", "q", b"", b"x") for n in range({count})],
                entries_put=[StoredEntry("/", "q", n, base + n) for n in range({count})],
            ))
            acked = {acked!r}
            if acked:
                await store.commit(
                    WriteBatch(entries_deleted=[("/", "q", n, base + n) for n in acked])
                )
            os._exit(0)

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


async def test_a_message_acknowledged_before_a_checkpoint_never_reaches_the_database(
    store: SQLiteStore, db_path: Path
) -> None:
    """The append log's purpose: a confirmed message is durable in the log, and one consumed
    before the next checkpoint is written to the database neither when it comes nor when it
    goes."""
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base, base + 1))
    assert rows(db_path) == (0, 0)
    assert appends_path(db_path).stat().st_size > 0

    await store.commit(acked(base))
    await store.close()
    assert rows(db_path) == (1, 1)  # the clean stop wrote out only what is still held
    assert appends_path(db_path).stat().st_size == 0


async def test_what_a_crash_leaves_in_the_log_is_recovered(db_path: Path) -> None:
    """A broker process that dies without closing its store (os._exit: no checkpoint, no
    clean stop) loses nothing it committed: the next open replays the log."""
    crash_after(db_path, count=3, acked=[1])
    assert rows(db_path) == (0, 0)

    store = SQLiteStore(db_path, broker_id="b1")
    await store.open()
    try:
        recovery = await store.recover()
        assert recovery.unclean_stop
        [backlog] = recovery.backlogs
        assert (backlog.count, backlog.last_sequence) == (2, 2)
        page = await store.read_entries(VHOST, "q", -1, 10)
        assert [entry.sequence for entry in page] == [0, 2]
    finally:
        await store.close()


async def test_a_log_replayed_again_after_its_checkpoint_changes_nothing(db_path: Path) -> None:
    """A crash between a checkpoint's commit and the log's truncation leaves frames the database
    has already: replaying them again must neither duplicate nor bring back anything (puts are
    upserts, deletions delete by key)."""
    store = SQLiteStore(db_path, broker_id="b1")
    await store.open()
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base, base + 1, base + 2))
    await store.commit(acked(base + 1))
    frames = appends_path(db_path).read_bytes()
    await store.close()  # the checkpoint
    appends_path(db_path).write_bytes(frames)  # as if the truncation never happened

    again = SQLiteStore(db_path, broker_id="b1")
    await again.open()
    try:
        recovery = await again.recover()
        assert [backlog.count for backlog in recovery.backlogs] == [2]
        assert rows(db_path) == (2, 2)
        assert appends_path(db_path).stat().st_size == 0
    finally:
        await again.close()


async def test_entries_paged_out_and_read_back_before_a_checkpoint_stay_out_of_the_database(
    store: SQLiteStore, db_path: Path
) -> None:
    """A queue that pages its backlog out and reads it back soon after: the read comes from
    the log's pending entries, and the database sees neither the entries nor their deletion."""
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base, base + 1, base + 2))

    page = await store.read_entries(VHOST, "q", base, 10)
    assert [(entry.sequence, entry.message.body) for entry in page] == [
        (base + 1, b"body %d" % (base + 1)),
        (base + 2, b"body %d" % (base + 2)),
    ]
    assert rows(db_path) == (0, 0)
    await store.commit(acked(base, base + 1, base + 2))
    await store.close()
    assert rows(db_path) == (0, 0)


async def test_a_read_merges_the_database_and_the_log_in_order_without_a_gap(
    store: SQLiteStore,
) -> None:
    """Entries checkpointed (written out by a declare) and entries put since, interleaved: a
    read gives the next ones in sequence order, and never passes over a database entry it did
    not read."""
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base + 0, base + 2, base + 4))
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "other", False, {})]))
    await store.commit(put(base + 1, base + 3, base + 5))

    first = await store.read_entries(VHOST, "q", -1, 2)
    assert [entry.sequence for entry in first] == [base + 0, base + 1]
    rest = await store.read_entries(VHOST, "q", base + 1, 10)
    assert [entry.sequence for entry in rest] == [base + 2, base + 3, base + 4, base + 5]


async def test_a_read_after_a_change_to_the_databases_entries_sees_it(store: SQLiteStore) -> None:
    """An acknowledgement of an entry the database has: the read writes the log out first."""
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base, base + 1))
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "other", False, {})]))
    await store.commit(acked(base))

    page = await store.read_entries(VHOST, "q", -1, 10)
    assert [(entry.sequence, entry.message.body) for entry in page] == [
        (base + 1, b"body %d" % (base + 1))
    ]


async def test_a_store_made_anew_where_one_was_lost_does_not_replay_its_log(
    db_path: Path,
) -> None:
    """`db create` / `db restore` over a lost database (replace_lost): the log beside it
    belonged to the lost one, and its entries must not appear in the new store."""
    crash_after(db_path, count=1, acked=[])
    db_path.unlink()

    store = SQLiteStore(db_path, broker_id="b1")
    await store.open(replace_lost=True)
    try:
        recovery = await store.recover()
        assert (recovery.backlogs, recovery.discarded_entries) == ([], 0)
        assert rows(db_path) == (0, 0)
    finally:
        await store.close()
