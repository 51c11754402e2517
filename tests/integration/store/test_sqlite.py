"""What the SQLite store promises beyond the `Store` protocol: its file settings, its lock, how it
reports a damaged or foreign file, a full disk, and an online backup. Real files, real processes,
a real (small) filesystem; nothing is mocked."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from batonmq.store import sqliteschema
from batonmq.store.base import (
    SCHEMA_VERSION,
    QueueBacklog,
    SchemaTooNew,
    SchemaTooOld,
    StoreCorrupt,
    StoredEntry,
    StoredMessage,
    StoredQueue,
    StoredUser,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    WriteBatch,
)
from batonmq.store.sqlite import SQLiteStore
from batonmq.store.sqlitereads import read_entries_sql
from tests import tmpfs

VHOST = "/"
#: A content header payload with no properties, for a 2-byte body.
HEADER = b"\x00\x3c\x00\x00" + (2).to_bytes(8, "big") + b"\x00\x00"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "batonmq.sqlite3"


@pytest.fixture
async def stores() -> AsyncIterator[list[SQLiteStore]]:
    """Stores a test opens; closed after it whatever happened."""
    opened: list[SQLiteStore] = []
    try:
        yield opened
    finally:
        for store in reversed(opened):
            await store.close()


async def open_store(
    stores: list[SQLiteStore],
    path: Path,
    broker_id: str = "b1",
    *,
    sync: bool = True,
    **options: bool,
) -> SQLiteStore:
    store = SQLiteStore(path, broker_id=broker_id, sync=sync)
    stores.append(store)
    await store.open(**options)
    return store


def query(path: Path, sql: str) -> list[tuple[object, ...]]:
    """Read the file with a connection of the test's own."""
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def query_with(path: Path, sql: str, *parameters: object) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql, parameters).fetchall()
    finally:
        connection.close()


def write(path: Path, sql: str, *parameters: object) -> None:
    connection = sqlite3.connect(path)
    try:
        with connection:
            connection.execute(sql, parameters)
    finally:
        connection.close()


def one_message(queue: str, sequence: int, message_id: int, body: bytes) -> WriteBatch:
    return WriteBatch(
        messages_put=[StoredMessage(message_id, "", queue, b"\x00\x3c", body)],
        entries_put=[StoredEntry(VHOST, queue, sequence, message_id)],
    )


# -- the file --------------------------------------------------------------------------------


@pytest.mark.parametrize(("sync", "level"), [(True, "full"), (False, "normal")])
async def test_wal_mode_and_the_synchronous_level_follow_sync(
    stores: list[SQLiteStore], db_path: Path, sync: bool, level: str
) -> None:
    """Rule (BatonMQ architecture, Storage): WAL mode; `sync` chooses fsync on each commit
    (synchronous=FULL) or OS-buffered commits (NORMAL)."""
    store = await open_store(stores, db_path, sync=sync)

    assert await store.connection_settings() == {"journal_mode": "wal", "synchronous": level}
    # WAL mode is a property of the file, seen by every connection.
    assert query(db_path, "PRAGMA journal_mode") == [("wal",)]


async def test_the_schema_is_recorded_in_meta_and_the_broker_in_brokers(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (schema): meta holds the schema version, the creation time and the software version;
    each open with the lock upserts the broker's record (its epoch counts the opens), and a
    clean close marks it stopped."""
    store = await open_store(stores, db_path)
    await store.close()
    store = await open_store(stores, db_path)

    meta = {str(key): value for key, value in query(db_path, "SELECT key, value FROM meta")}
    assert meta["schema_version"] == str(SCHEMA_VERSION)
    assert {"created_at", "software_version"} <= meta.keys()
    assert query(db_path, "SELECT broker_id, epoch, state FROM brokers") == [("b1", 2, "running")]
    await store.close()
    assert query(db_path, "SELECT state FROM brokers") == [("stopped",)]


async def test_sqlite_runs_off_the_event_loop(stores: list[SQLiteStore], db_path: Path) -> None:
    """Rule (sqlite.py): the event loop never blocks on SQLite; a large commit leaves it free to
    run other tasks."""
    store = await open_store(stores, db_path)
    await store.recover()
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    batch = WriteBatch(
        messages_put=[StoredMessage(n, "", "q", b"", bytes(64 * 1024)) for n in range(1, 801)],
        entries_put=[StoredEntry(VHOST, "q", n, n) for n in range(1, 801)],
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        await store.commit(batch)
    finally:
        ticker.cancel()
    assert ticks > 10


# -- the lock --------------------------------------------------------------------------------

_HOLD_THE_LOCK = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from batonmq.store.sqlite import SQLiteStore

    async def main() -> None:
        store = SQLiteStore(Path(sys.argv[1]), broker_id="holder")
        await store.open()
        print("open", flush=True)
        sys.stdin.readline()
        await store.close()

    asyncio.run(main())
    """
)


@pytest.fixture
def lock_holder(db_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process that has opened the store with its lock, until the test ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_THE_LOCK, str(db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "open\n"
        yield holder
    finally:
        holder.communicate("stop\n", timeout=30)
    assert holder.returncode == 0


async def test_a_store_locked_by_another_process_is_refused_naming_its_pid(
    stores: list[SQLiteStore], db_path: Path, lock_holder: subprocess.Popen[str]
) -> None:
    """Rule (Store.open): with `lock`, StoreLocked if another running broker holds the store;
    the message names that process for the operator."""
    store = SQLiteStore(db_path, broker_id="b1")
    stores.append(store)

    with pytest.raises(
        StoreLocked, match=rf"locked by another running broker \(pid {lock_holder.pid}\)"
    ):
        await store.open()

    assert query(db_path, "SELECT broker_id FROM brokers") == [("holder",)]


async def test_without_the_lock_a_store_is_read_alongside_its_broker(
    stores: list[SQLiteStore], db_path: Path, lock_holder: subprocess.Popen[str]
) -> None:
    """Rule (Store.open): without `lock` only reads are allowed (stats, backup), and they work
    while the broker runs."""
    reader = await open_store(stores, db_path, "holder", lock=False)

    stats = await reader.stats()

    assert (stats.broker_id, stats.schema_version, stats.queues) == ("holder", SCHEMA_VERSION, 0)
    with pytest.raises(StoreError, match="without the lock"):
        await reader.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))


async def test_the_lock_is_released_on_close_and_names_its_holder(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (Store.close): close releases the lock (safe to call twice); the lock file names the
    holding process."""
    store = await open_store(stores, db_path)
    assert Path(f"{db_path}.lock").read_text().strip() == str(os.getpid())
    await store.close()
    await store.close()

    again = await open_store(stores, db_path)
    assert again.schema_version == SCHEMA_VERSION


async def test_without_the_lock_a_missing_store_is_not_created(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (sqlite.py): a store opened without the lock is only read, so never created."""
    store = SQLiteStore(db_path, broker_id="b1")
    stores.append(store)

    with pytest.raises(StoreUnavailable):
        await store.open(lock=False)

    assert not db_path.exists()


async def test_without_create_a_missing_store_is_unavailable(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (Store.open): only `create` makes a store."""
    store = SQLiteStore(db_path, broker_id="b1")
    stores.append(store)

    with pytest.raises(StoreUnavailable, match="no store"):
        await store.open(create=False)

    assert not db_path.exists()


async def test_a_data_directory_that_cannot_be_created_is_unavailable(
    stores: list[SQLiteStore], tmp_path: Path
) -> None:
    """Rule (Store.open): StoreUnavailable when the file cannot be opened; here its directory
    cannot be made because a regular file has its name."""
    (tmp_path / "data").write_text("not a directory\n")
    store = SQLiteStore(tmp_path / "data" / "batonmq.sqlite3", broker_id="b1")
    stores.append(store)

    with pytest.raises(StoreUnavailable, match="cannot create the data directory"):
        await store.open()


# -- foreign, damaged and other-version files -------------------------------------------------


async def test_a_file_that_is_not_sqlite_is_corrupt(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (Store.open): StoreCorrupt, naming the file, when it is not a BatonMQ store."""
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is a log file, not a database\n" * 200)
    store = SQLiteStore(db_path, broker_id="b1")
    stores.append(store)

    with pytest.raises(StoreCorrupt, match=str(db_path)):
        await store.open()


async def test_an_sqlite_database_of_another_program_is_corrupt(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (Store.open): a non-empty SQLite database without BatonMQ's meta table is not a
    BatonMQ store; it is never given our schema."""
    db_path.parent.mkdir(parents=True)
    write(db_path, "CREATE TABLE photos (id INTEGER PRIMARY KEY, jpeg BLOB)")
    store = SQLiteStore(db_path, broker_id="b1")
    stores.append(store)

    with pytest.raises(StoreCorrupt, match=str(db_path)):
        await store.open()

    assert query(db_path, "SELECT name FROM sqlite_master") == [("photos",)]


async def test_a_newer_schema_is_refused(stores: list[SQLiteStore], db_path: Path) -> None:
    """Rule (Store.open): SchemaTooNew when the schema is newer than SCHEMA_VERSION, with or
    without the lock."""
    await (await open_store(stores, db_path)).close()
    write(db_path, "UPDATE meta SET value = ? WHERE key = 'schema_version'", SCHEMA_VERSION + 1)
    locked = SQLiteStore(db_path, broker_id="b1")
    unlocked = SQLiteStore(db_path, broker_id="b1")
    stores.extend([locked, unlocked])

    with pytest.raises(SchemaTooNew):
        await locked.open()
    with pytest.raises(SchemaTooNew):
        await unlocked.open(lock=False)


async def test_upgrade_of_a_current_store_does_nothing(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (Store.upgrade): returns (from, to); a current store is already at SCHEMA_VERSION."""
    store = await open_store(stores, db_path)

    assert await store.upgrade() == (SCHEMA_VERSION, SCHEMA_VERSION)


async def test_an_older_schema_waits_for_upgrade_when_migrate_is_off(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (Store.open): an older schema is migrated at open when `migrate` is true and left for
    `upgrade` otherwise; a broker cannot run on it meanwhile (SchemaTooOld)."""
    first = await open_store(stores, db_path)
    await first.recover()
    await first.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "kept", False, {})]))
    await first.close()
    write(db_path, "UPDATE meta SET value = ? WHERE key = 'schema_version'", SCHEMA_VERSION - 1)

    store = await open_store(stores, db_path, migrate=False)
    assert store.schema_version == SCHEMA_VERSION - 1
    with pytest.raises(SchemaTooOld, match="batonctl db upgrade"):
        await store.recover()

    assert await store.upgrade() == (SCHEMA_VERSION - 1, SCHEMA_VERSION)
    assert store.schema_version == SCHEMA_VERSION
    assert [q.name for q in (await store.recover()).queues] == ["kept"]
    await store.close()
    assert query(db_path, "SELECT value FROM meta WHERE key = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]


async def test_an_older_schema_is_migrated_at_open(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (Store.open): with `migrate` (as a broker starts), an older schema is migrated."""
    await (await open_store(stores, db_path)).close()
    write(db_path, "UPDATE meta SET value = ? WHERE key = 'schema_version'", SCHEMA_VERSION - 1)

    store = await open_store(stores, db_path)

    assert store.schema_version == SCHEMA_VERSION
    assert (await store.stats()).schema_version == SCHEMA_VERSION


async def test_users_of_a_version_7_store_get_no_tags(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (schema version 8): users gain RabbitMQ's tags; those of an older store get none,
    guest included (only the guest of a store created at version 8 is an administrator)."""
    first = await open_store(stores, db_path)
    await first.recover()
    await first.commit(WriteBatch(users_put=[StoredUser("alice", "x")]))
    await first.close()
    write(db_path, "ALTER TABLE users DROP COLUMN tags")
    write(db_path, "UPDATE meta SET value = ? WHERE key = 'schema_version'", 7)

    store = await open_store(stores, db_path)

    assert store.schema_version == SCHEMA_VERSION
    assert [(user.name, user.tags) for user in await store.users()] == [
        ("alice", ()),
        ("guest", ()),
    ]


# -- a full disk ------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem: a tmpfs, which needs root (skipped, saying so, without it)."""
    with tmpfs.small_disk(tmp_path / "small-disk", "1m") as mount_point:
        yield mount_point


async def test_a_full_disk_fails_a_commit_whole_and_the_store_goes_on(small_disk: Path) -> None:
    """Rule (Store.commit): a write that fails on a full disk raises StoreError saying so and
    applies nothing of its batch; once space is freed, commits (deletions too) work again.

    Space is freed outside the store, as an operator would: in WAL mode a deletion needs free
    space itself (its pages go to the log first), and so does the checkpoint that copies the log
    into the file, so the other data freed is more than the store wrote."""
    other_data = small_disk / "other-data"
    other_data.write_bytes(b"\xff" * 640 * 1024)
    path = small_disk / "batonmq.sqlite3"
    store = SQLiteStore(path, broker_id="b1")
    try:
        await store.open()
        base = (await store.recover()).message_id_base
        await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
        failure: StoreError | None = None
        written = 0
        while written < 1000 and failure is None:
            batch = one_message("q", written, base + written, bytes([written % 256]) * 16_000)
            batch.queues_put.append(StoredQueue(VHOST, f"never-{written}", False, {}))
            try:
                await store.commit(batch)
                written += 1
            except StoreError as exc:
                failure = exc

        assert failure is not None and "disk is full" in str(failure)
        assert written > 0
        entries = await store.read_entries(VHOST, "q", -1, 10_000)
        assert [paged.sequence for paged in entries] == list(range(written))
        stats = await store.stats()
        assert (stats.queues, stats.messages, stats.entries) == (1 + written, written, written)

        other_data.unlink()
        half = written // 2
        await store.commit(WriteBatch(ranges_deleted=[(VHOST, "q", 0, half - 1, None)]))
        await store.commit(one_message("q", written, base + written, b"after the full disk"))
    finally:
        await store.close()

    reopened = SQLiteStore(path, broker_id="b1")
    try:
        await reopened.open()
        recovery = await reopened.recover()
        entries = await reopened.read_entries(VHOST, "q", -1, 10_000)
    finally:
        await reopened.close()
    assert [paged.sequence for paged in entries] == list(range(half, written + 1))
    assert QueueBacklog(
        VHOST, "q", written - half + 1, 16_000 * (written - half) + 19, written
    ) in (recovery.backlogs)


# -- backup and restore ------------------------------------------------------------------------


def _round(base: int, k: int) -> WriteBatch:
    """Round k of the writer: message 2k in q1 and q2, message 2k+1 in q1; so any state between
    two commits has messages = 2k and entries = 3k."""
    first, second = base + 2 * k, base + 2 * k + 1
    return WriteBatch(
        messages_put=[
            StoredMessage(first, "", "", b"", bytes(2048)),
            StoredMessage(second, "", "", b"", bytes(2048)),
        ],
        entries_put=[
            StoredEntry(VHOST, "q1", 2 * k, first),
            StoredEntry(VHOST, "q2", k, first),
            StoredEntry(VHOST, "q1", 2 * k + 1, second),
        ],
    )


async def test_a_backup_taken_while_the_broker_commits_is_consistent(
    stores: list[SQLiteStore], tmp_path: Path, db_path: Path
) -> None:
    """Rule (Store.backup): a consistent snapshot while the broker may be running: it holds
    what the writer had committed at one moment, whole batches only, and restores."""
    writer = await open_store(stores, db_path, sync=False)
    base = (await writer.recover()).message_id_base
    await writer.commit(
        WriteBatch(
            queues_put=[StoredQueue(VHOST, "q1", False, {}), StoredQueue(VHOST, "q2", False, {})]
        )
    )
    for k in range(2000):
        await writer.commit(_round(base, k))
    committed = [2000]
    stop = asyncio.Event()

    async def keep_committing() -> None:
        # The writer's commits run on its store's own thread, concurrently with the backup on
        # the reader's thread.
        while not stop.is_set():
            k = committed[-1]
            await writer.commit(_round(base, k))
            committed.append(k + 1)

    writing = asyncio.create_task(keep_committing())
    reader = await open_store(stores, db_path, lock=False)
    while len(committed) < 5:
        await asyncio.sleep(0.001)
    before = committed[-1]
    directory = tmp_path / "backup"
    started = time.monotonic()
    await reader.backup(directory)
    during = committed[-1] - before
    stop.set()
    await writing

    manifest = json.loads((directory / "manifest.json").read_text())
    rounds = manifest["messages"] // 2
    assert manifest["messages"] == 2 * rounds and manifest["entries"] == 3 * rounds
    assert before <= rounds <= committed[-1]
    assert during > 0, f"no commit during the {time.monotonic() - started:.3f}s backup"

    restored = await open_store(stores, tmp_path / "restored" / "batonmq.sqlite3")
    await restored.restore(directory)
    recovery = await restored.recover()
    assert [(b.queue, b.count, b.last_sequence) for b in recovery.backlogs] == [
        ("q1", 2 * rounds, 2 * rounds - 1),
        ("q2", rounds, rounds - 1),
    ]


async def test_a_backup_is_one_file_and_a_manifest(
    stores: list[SQLiteStore], tmp_path: Path, db_path: Path
) -> None:
    """Rule (backup format): directory/batonmq.sqlite3, self-contained (no -wal beside it), and
    directory/manifest.json with kind, schema_version, broker_id, created_at and counts."""
    store = await open_store(stores, db_path)
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(one_message("q", 1, base + 1, b"kept"))
    directory = tmp_path / "backup"

    await store.backup(directory)

    assert sorted(path.name for path in directory.iterdir()) == ["batonmq.sqlite3", "manifest.json"]
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest.pop("created_at")
    assert manifest == {
        "kind": "sqlite",
        "schema_version": SCHEMA_VERSION,
        "broker_id": "b1",
        "messages": 1,
        "entries": 1,
    }
    assert query(directory / "batonmq.sqlite3", "PRAGMA journal_mode") == [("delete",)]


async def test_restore_refuses_what_is_not_this_stores_backup(
    stores: list[SQLiteStore], tmp_path: Path, db_path: Path
) -> None:
    """Rule (Store.restore): the store is replaced only by a readable sqlite backup of the same
    broker at a schema this code knows; anything else leaves it as it was."""
    store = await open_store(stores, db_path)
    await store.recover()
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "mine", False, {})]))
    directory = tmp_path / "backup"
    await store.backup(directory)
    manifest_path = directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text())

    manifest_path.write_text(json.dumps(manifest | {"kind": "postgres"}))
    with pytest.raises(StoreError, match="postgres backup"):
        await store.restore(directory)
    manifest_path.write_text(json.dumps(manifest | {"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(SchemaTooNew):
        await store.restore(directory)
    manifest_path.write_text(json.dumps(manifest | {"broker_id": "b2"}))
    with pytest.raises(StoreError, match="b2"):
        await store.restore(directory)
    manifest_path.write_text(json.dumps(manifest))
    (directory / "batonmq.sqlite3").write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreCorrupt):
        await store.restore(directory)

    assert [q.name for q in (await store.recover()).queues] == ["mine"]


async def test_restore_needs_the_lock(
    stores: list[SQLiteStore], tmp_path: Path, db_path: Path
) -> None:
    """Rule (Store.restore): the broker must not be running, so only a store opened with the
    lock may be restored."""
    store = await open_store(stores, db_path)
    directory = tmp_path / "backup"
    await store.backup(directory)
    await store.close()
    reader = await open_store(stores, db_path, lock=False)

    with pytest.raises(StoreError, match="lock"):
        await reader.restore(directory)


async def test_a_version_1_store_gains_entry_expiry_times_and_priority_levels(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rules (schema versions 2, 3 and 5): entries carry an expiry time and a priority level,
    indexed for levels above 0 only (`LEVEL_INDEX`: plain queues' entries cost no second
    index); a store written by version 1 keeps its entries, which come back with no expiry, at
    level 0."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        for statement in sqliteschema.MIGRATIONS[0]:
            conn.execute(str(statement))
        conn.executemany(
            "INSERT INTO meta VALUES (?, ?)", [("schema_version", "1"), ("created_at", "then")]
        )
        conn.execute("INSERT INTO queues VALUES ('b1', ?, 'q', 0, '{}')", (VHOST,))
        conn.execute("INSERT INTO messages VALUES ('b1', 7, 'ex', 'rk', ?, x'6869')", (HEADER,))
        conn.execute("INSERT INTO entries VALUES ('b1', ?, 'q', 0, 7, 0, 0)", (VHOST,))

    store = await open_store(stores, db_path)
    recovery = await store.recover()

    assert store.schema_version == SCHEMA_VERSION
    assert recovery.backlogs == [QueueBacklog(VHOST, "q", 1, 2, 0, priority=0)]
    [paged] = await store.read_entries(VHOST, "q", -1, 10, priority=0)
    assert (paged.message.body, paged.expires_at) == (b"hi", None)
    assert query(db_path, "SELECT sql FROM sqlite_master WHERE name = 'entries_priority'") == [
        (
            "CREATE INDEX entries_priority ON entries "
            "(broker_id, vhost, queue, priority, sequence) WHERE priority > 0",
        )
    ]


async def test_a_level_above_0_is_read_through_the_level_index_and_entries_by_their_key(
    stores: list[SQLiteStore], db_path: Path
) -> None:
    """Rule (schema version 5, `LEVEL_INDEX`): a read of a priority level above 0 goes through
    the partial level index, and a read of any level, or of level 0, and a delete of an entry by
    its key go through the primary key. Without statistics SQLite's own choice for a level read
    was the primary key, walking the entries of every level."""
    await open_store(stores, db_path)

    def plan(sql: str, *parameters: object) -> str:
        rows = query_with(db_path, f"EXPLAIN QUERY PLAN {sql}", *parameters)
        return " / ".join(str(row[-1]) for row in rows)

    key = ("b1", VHOST, "q")
    assert "USING INDEX entries_priority" in plan(read_entries_sql(7), *key, 7, 0, 10)
    for level in (None, 0):
        parameters = (*key, *(() if level is None else (level,)), 0, 10)
        assert "USING PRIMARY KEY" in plan(read_entries_sql(level), *parameters)
    deleting = plan(
        "DELETE FROM entries WHERE broker_id = ? AND vhost = ? AND queue = ? AND sequence = ?",
        *key,
        5,
    )
    assert "USING PRIMARY KEY" in deleting
