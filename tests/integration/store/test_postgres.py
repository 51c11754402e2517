"""What only the PostgreSQL store does: connecting to a server, sharing a database between
brokers (a schema per store, a broker id per row), the lease, surviving a restart of the
server, and a backup taken while the broker commits. The behaviour every store shares is in
test_contract.py."""

from __future__ import annotations

import asyncio
import secrets
import socket
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from batonmq.store import pglease, pgschema
from batonmq.store.base import (
    SCHEMA_VERSION,
    QueueBacklog,
    SchemaTooNew,
    StoreCorrupt,
    StoredEntry,
    StoredMessage,
    StoredQueue,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    WriteBatch,
)
from batonmq.store.postgres import PostgresStore
from tests.pgserver import ThrowawayServer

MakeStore = Callable[..., PostgresStore]


@pytest.fixture
async def make_store(postgres_dsn: str) -> AsyncIterator[MakeStore]:
    """`make(broker_id="b1", schema="batonmq_s_b1", dsn=postgres_dsn)`: an unopened store, closed
    after the test."""
    made: list[PostgresStore] = []

    def make(
        broker_id: str = "b1", schema: str = "batonmq_s_b1", dsn: str = postgres_dsn
    ) -> PostgresStore:
        store = PostgresStore(dsn, broker_id=broker_id, schema=schema)
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()


def _one_message(base: int, number: int, queue: str = "q") -> WriteBatch:
    """Queue `queue` with message `base + number` at sequence `number`."""
    message = StoredMessage(base + number, "", queue, b"header", f"body {number}".encode())
    return WriteBatch(
        queues_put=[StoredQueue("/", queue, False, {})],
        messages_put=[message],
        entries_put=[StoredEntry("/", queue, number, message.id)],
    )


async def _bodies(store: PostgresStore, queue: str = "q") -> list[bytes]:
    return [entry.message.body for entry in await store.read_entries("/", queue, -1, 1000)]


def _with_credentials(dsn: str, user: str, password: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    hosts = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:{password}@{hosts}"))


async def test_unreachable_server_is_unavailable_and_never_shows_the_password() -> None:
    """A server that cannot be reached is StoreUnavailable, with a text naming the location,
    and never the password (the text goes to logs)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = closed.getsockname()[1]
        dsn = f"postgresql://batonmq:pw-s3cret%21@127.0.0.1:{port}/batonmq?password=pw-other"
        store = PostgresStore(dsn, broker_id="b1", schema="batonmq_s_b1")
        with pytest.raises(StoreUnavailable) as raised:
            await store.open()
    text = str(raised.value)
    assert f"postgresql://batonmq@127.0.0.1:{port}/batonmq schema batonmq_s_b1" in text
    assert "s3cret" not in text
    assert "pw-other" not in text
    assert "s3cret" not in store.location
    await store.close()


async def test_wrong_password_is_unavailable(make_store: MakeStore, postgres_dsn: str) -> None:
    """A refused login is StoreUnavailable, naming the location but not the password. (The
    server must check passwords on TCP, as Debian's default pg_hba.conf does.)"""
    role = f"batonmq_login_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'the-right-one'")
        store = make_store(dsn=_with_credentials(postgres_dsn, role, "wrong-one"))
        with pytest.raises(StoreUnavailable) as raised:
            await store.open()
        assert role in str(raised.value)
        assert "wrong-one" not in str(raised.value)
    finally:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


async def test_a_keyword_value_dsn_connects(make_store: MakeStore, postgres_dsn: str) -> None:
    """persist.postgres.dsn may be a libpq keyword/value string as well as a URI; its location
    leaves the password out."""
    parts = urllib.parse.urlsplit(postgres_dsn)
    keywords = (
        f"host={parts.hostname} port={parts.port} dbname={parts.path.lstrip('/')} "
        f"user={parts.username} password='{urllib.parse.unquote(parts.password or '')}'"
    )
    store = make_store(dsn=keywords)
    await store.open()
    assert (await store.stats()).schema_version == SCHEMA_VERSION
    assert "password" not in store.location
    assert store.location.endswith("schema batonmq_s_b1")


def test_a_schema_name_is_checked() -> None:
    """The schema name goes into SQL: only [a-z0-9_], so that quoting it is always right."""
    with pytest.raises(StoreError, match="schema name"):
        PostgresStore("postgresql://localhost/db", broker_id="b1", schema='x"; DROP TABLE y; --')


async def test_stores_in_two_schemas_of_one_database_are_apart(make_store: MakeStore) -> None:
    """MQ 4.1 HA guide Table 8: stores in one database are told apart (by schema here), even for
    the same broker id."""
    first, second = make_store(schema="batonmq_s_one"), make_store(schema="batonmq_s_two")
    await first.open()
    await second.open()
    first_base = (await first.recover()).message_id_base
    second_base = (await second.recover()).message_id_base
    await first.commit(_one_message(first_base, 0, queue="q"))
    await second.commit(_one_message(second_base, 0, queue="other"))
    assert [queue.name for queue in (await first.recover()).queues] == ["q"]
    assert [queue.name for queue in (await second.recover()).queues] == ["other"]
    assert (await first.stats()).messages == (await second.stats()).messages == 1


async def test_broker_ids_sharing_a_schema_are_apart(make_store: MakeStore) -> None:
    """Every row carries its broker's id and every query filters by it: two brokers sharing
    one schema (an HA cluster's shared store) see only their own rows, and never get the same
    message ids (the block counter is shared). Opened at once, they create the schema once."""
    first = make_store("b1", schema="batonmq_c_shared")
    second = make_store("b2", schema="batonmq_c_shared")
    await asyncio.gather(first.open(), second.open())
    first_base = (await first.recover()).message_id_base
    second_base = (await second.recover()).message_id_base
    assert first_base != second_base
    await first.commit(_one_message(first_base, 0))
    await second.commit(_one_message(second_base, 0))
    await second.commit(_one_message(second_base, 1))

    await first.commit(WriteBatch(queues_deleted=[("/", "q")]))

    assert await _bodies(first) == []
    assert await _bodies(second) == [b"body 0", b"body 1"]
    recovery = await second.recover()
    assert [(b.queue, b.count) for b in recovery.backlogs] == [("q", 2)]
    assert (await first.stats()).queues == 0


async def test_a_second_locking_open_is_refused(make_store: MakeStore, postgres_dsn: str) -> None:
    """A store is held by one running broker at a time (StoreLocked for another, on its own
    connection); an open without the lock (batonctl's reads) works alongside, reads only, and
    the lock goes with the holder's connection."""
    holder = make_store()
    await holder.open()
    base = (await holder.recover()).message_id_base
    await holder.commit(_one_message(base, 0))

    with pytest.raises(StoreLocked, match="in use by another running broker"):
        await make_store().open()

    reader = make_store()
    await reader.open(lock=False)
    assert (await reader.stats()).messages == 1
    assert await _bodies(reader) == [b"body 0"]
    with pytest.raises(StoreError, match="read-only"):
        await reader.commit(_one_message(base, 1))

    await holder.close()
    successor = make_store()
    await successor.open()
    assert await _bodies(successor) == [b"body 0"]


async def test_an_open_waits_for_a_lock_released_meanwhile(make_store: MakeStore) -> None:
    """A broker started while its predecessor is still stopping finds the lease held until
    that one releases it: an open waits a few seconds (`LOCK_WAIT`) for the lease before it is
    StoreLocked."""
    holder = make_store()
    await holder.open()
    successor = make_store()
    opening = asyncio.create_task(successor.open())
    await asyncio.sleep(0.5)
    assert not opening.done()
    await holder.close()
    await asyncio.wait_for(opening, timeout=pglease.LOCK_WAIT)
    await successor.recover()


async def test_a_newer_schema_is_refused(make_store: MakeStore, postgres_dsn: str) -> None:
    """A schema written by a newer BatonMQ is SchemaTooNew, for a broker and for batonctl."""
    store = make_store()
    await store.open()
    await store.close()
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(
            "UPDATE batonmq_s_b1.meta SET value = $1 WHERE key = 'schema_version'",
            str(SCHEMA_VERSION + 1),
        )
    finally:
        await admin.close()
    with pytest.raises(SchemaTooNew):
        await make_store().open()
    with pytest.raises(SchemaTooNew):
        await make_store().open(lock=False)


async def test_a_version_2_schema_is_migrated_in_place(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """Rules (schema versions 3 and 5): entries carry a priority level, indexed for levels
    above 0; a schema written by version 2 is migrated when a broker opens it, and its entries
    come back at level 0."""
    admin = await asyncpg.connect(postgres_dsn)
    try:
        for migration in pgschema.MIGRATIONS[:2]:
            await admin.execute(migration.format(s="batonmq_s_b1"))
        await admin.execute(
            "INSERT INTO batonmq_s_b1.meta VALUES ('schema_version', '2');"
            "INSERT INTO batonmq_s_b1.queues VALUES ('b1', '/', 'q', false, '{}');"
            # A content header with no property (class 60, body size 2): a row of a version
            # before checksums is checked for a header that decodes when it is read.
            "INSERT INTO batonmq_s_b1.messages VALUES "
            "('b1', 7, '', 'q', '\\x003c000000000000000000020000'::bytea, 'hi');"
            "INSERT INTO batonmq_s_b1.entries VALUES ('b1', '/', 'q', 0, 7, 0, false, NULL)"
        )
    finally:
        await admin.close()

    store = make_store()
    await store.open()
    recovery = await store.recover()

    assert store.schema_version == SCHEMA_VERSION
    assert recovery.backlogs == [QueueBacklog("/", "q", 1, 2, 0, priority=0)]
    [paged] = await store.read_entries("/", "q", -1, 10, priority=0)
    assert paged.message.body == b"hi"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        level_index = await admin.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'batonmq_s_b1' "
            "AND indexname = 'entries_priority'"
        )
    finally:
        await admin.close()
    assert level_index.endswith(
        "(broker_id, vhost, queue, priority, sequence) WHERE (priority > 0)"
    )


async def test_users_of_a_version_7_schema_get_no_tags(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """Rule (schema version 8): users gain RabbitMQ's tags; those of an older schema get none,
    guest included (only the guest of a schema created at version 8 is an administrator)."""
    admin = await asyncpg.connect(postgres_dsn)
    try:
        for migration in pgschema.MIGRATIONS[:7]:
            await admin.execute(migration.replace("{s}", "batonmq_s_b1"))
        await admin.execute("INSERT INTO batonmq_s_b1.meta VALUES ('schema_version', '7')")
    finally:
        await admin.close()

    store = make_store()
    await store.open()
    await store.recover()

    assert store.schema_version == SCHEMA_VERSION
    assert [(user.name, user.tags) for user in await store.users()] == [("guest", ())]
    await store.close()


async def _generic_plan(store: PostgresStore, postgres_dsn: str, name: str, *values: str) -> str:
    """The plan PostgreSQL gives statement `name` as a generic plan: the one asyncpg's prepared
    statements run with once the server stops planning each call apart."""
    admin = await asyncpg.connect(postgres_dsn)
    try:
        async with admin.transaction():
            await admin.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await admin.execute(f"PREPARE statement AS {store._sql[name]}")
            rows = await admin.fetch(f"EXPLAIN EXECUTE statement({', '.join(values)})")
            await admin.execute("DEALLOCATE statement")
    finally:
        await admin.close()
    return "\n".join(row[0] for row in rows)


async def test_entries_are_settled_by_their_key_and_levels_read_through_the_level_index(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """Rule (schema version 5, `LEVEL_INDEX`): a statement naming an entry by its key, or a
    commit's entries by arrays of keys, goes through the primary key whatever statistics the
    planner has (never a scan of the table: joined with the arrays, it was a hash join over the
    whole table), and a read of a priority level above 0 goes through the level index. With the
    whole-table level index of version 4 and a table never analysed (every new store, for its
    first minutes), the planner deleted entries through the level index, walking every index
    entry of the queue per delete: commits of a few thousand acknowledgements took seconds, and
    the benchmark's PostgreSQL rows fell to 1,600 messages/s."""
    store = make_store()
    await store.open()
    await store.recover()
    await store.commit(
        WriteBatch(
            queues_put=[StoredQueue("/", "q", False, {})],
            messages_put=[StoredMessage(n, "", "q", b"h", b"b") for n in range(2000)],
            entries_put=[StoredEntry("/", "q", n, n, priority=n % 10) for n in range(2000)],
        )
    )
    key = ("'b1'", "'/'", "'q'", "5")
    keys = ("'b1'", "ARRAY['/', '/']", "ARRAY['q', 'q']", "ARRAY[5, 6]")

    for name, values in (
        ("delete_entry", key),
        ("update_entry", (*key, "1")),
        ("array_delete_entry", keys),
        ("array_update_entry", (*keys, "ARRAY[1, 1]")),
    ):
        plan = await _generic_plan(store, postgres_dsn, name, *values)
        assert "Index Scan using entries_pkey on entries" in plan, plan
        assert "Seq Scan" not in plan, plan
    level_plan = await _generic_plan(store, postgres_dsn, "read_level_entries", *key, "10", "7")
    assert "Index Scan using entries_priority on entries" in level_plan, level_plan
    assert [entry.sequence for entry in await store.read_entries("/", "q", 5, 3, priority=7)] == [
        7,
        17,
        27,
    ]
    assert [entry.sequence for entry in await store.read_entries("/", "q", 5, 2, priority=0)] == [
        10,
        20,
    ]


# The log listener the test puts on the pool's connection is still there when recovery gives the
# connection back to the pool, which asyncpg warns about.
@pytest.mark.filterwarnings("ignore::asyncpg.exceptions.InterfaceWarning")
async def test_a_store_analysed_while_empty_still_probes_an_index_per_row(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """A queue's tables are often analysed while empty (a drained queue; autovacuum). With those
    statistics the planner turned each lookup of one row per row of another table into a nested
    loop whose inner side was the whole index, the key a mere filter: the orphans of a commit,
    a page read and recovery's backlog count walked a table per row. Recovery of these 20,000
    entries took 38 s that way (quadratic: a 2-million backlog would never come back). Now the
    lookups are fenced subqueries (one index probe per row) and recovery plans without nested
    loops: the plan recovery ran is read from auto_explain."""
    store = make_store()
    await store.open()
    await store.recover()
    count = 20_000

    def fill(first: int) -> WriteBatch:
        return WriteBatch(
            queues_put=[StoredQueue("/", "q", False, {})],
            messages_put=[
                StoredMessage(n, "", "q", b"h", b"b" * 100) for n in range(first, first + count)
            ],
            entries_put=[
                StoredEntry("/", "q", n, n, priority=n % 2) for n in range(first, first + count)
            ],
        )

    await store.commit(fill(0))
    await store.commit(WriteBatch(entries_deleted=[("/", "q", n, n) for n in range(count)]))
    await store.stats()  # a checkpoint: the deletions, in the append log, reach the tables
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute("ANALYZE batonmq_s_b1.entries; ANALYZE batonmq_s_b1.messages")
        assert (
            await admin.fetchval(
                "SELECT reltuples FROM pg_class WHERE oid = 'batonmq_s_b1.entries'::regclass"
            )
            == 0
        )
    finally:
        await admin.close()
    await store.commit(fill(count))

    key = ("'b1'", "'/'", "'q'", str(count))
    ids = f"ARRAY[{','.join(str(n) for n in range(count, count + 1000))}]::bigint[]"
    for name, values in (
        ("delete_orphans", ("'b1'", ids)),
        ("read_entries", (*key, "100", "NULL")),
        ("read_level_entries", (*key, "100", "1")),
    ):
        plan = await _generic_plan(store, postgres_dsn, name, *values)
        assert "Join Filter" not in plan, plan
    await store.close()

    # The plans recovery runs, as auto_explain reports them to the session running them.
    database = urllib.parse.urlsplit(postgres_dsn).path.lstrip("/")
    admin = await asyncpg.connect(postgres_dsn)
    try:
        for setting in (
            "session_preload_libraries = 'auto_explain'",
            "auto_explain.log_min_duration = 0",
            "client_min_messages = log",
        ):
            await admin.execute(f'ALTER DATABASE "{database}" SET {setting}')
    finally:
        await admin.close()
    again = make_store()
    await again.open()
    reports: list[str] = []
    # Recovery runs on the pool's one connection, opened with the store and idle now.
    assert again._pool is not None
    [connection] = [holder._con for holder in again._pool._holders if holder._con is not None]
    connection.add_log_listener(lambda _c, message: reports.append(message.message))
    recovery = await again.recover()

    assert sorted((b.priority, b.count) for b in recovery.backlogs) == [
        (0, count // 2),
        (1, count // 2),
    ]
    (backlogs_plan,) = [report for report in reports if "count(e.sequence)" in report]
    assert "Nested Loop" not in backlogs_plan, backlogs_plan


async def test_a_schema_of_other_tables_is_corrupt(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """A schema holding tables but no BatonMQ schema version is StoreCorrupt: the store never
    writes into what is not its own."""
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute("CREATE SCHEMA batonmq_s_b1; CREATE TABLE batonmq_s_b1.t (x int)")
    finally:
        await admin.close()
    with pytest.raises(StoreCorrupt):
        await make_store().open()


async def test_the_store_survives_a_restart_of_the_server(
    postgres_throwaway_server: ThrowawayServer,
) -> None:
    """A broker survives PostgreSQL restarting: a commit while the server is down fails with
    StoreError and applies nothing; later commits reconnect (taking the lock again)."""
    server = postgres_throwaway_server
    store = PostgresStore(server.admin_dsn, broker_id="b1", schema="batonmq_s_b1")
    try:
        await store.open()
        base = (await store.recover()).message_id_base
        await store.commit(_one_message(base, 0))

        # In threads, as the broker's event loop goes on while PostgreSQL restarts.
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)
        await store.commit(_one_message(base, 1))  # the lost connection is replaced

        await asyncio.to_thread(server.stop)
        with pytest.raises(StoreError):
            await store.commit(_one_message(base, 2))
        await asyncio.to_thread(server.start)
        await store.commit(_one_message(base, 3))

        assert await _bodies(store) == [b"body 0", b"body 1", b"body 3"]
        with pytest.raises(StoreLocked):
            await PostgresStore(server.admin_dsn, broker_id="b1", schema="batonmq_s_b1").open()
    finally:
        await store.close()


async def test_the_lease_is_renewed_soon_after_the_server_is_back(
    postgres_throwaway_server: ThrowawayServer,
) -> None:
    """A renewal that fails while PostgreSQL is down is tried again within `RENEW_RETRY`, not a
    whole renewal period later: the member's time stamp is what an HA peer that cannot hear it
    reads (MQ 4.1 HA guide: a suspect broker has failed if it "fails to update its state
    within the number of monitor intervals"), and the outage was not its silence."""
    server = postgres_throwaway_server
    store = PostgresStore(
        server.admin_dsn, broker_id="b1", schema="batonmq_s_b1", lease_seconds=30, renew_every=8
    )

    async def stamp() -> object:
        reader = await asyncpg.connect(server.admin_dsn)
        try:
            return await reader.fetchval(
                "SELECT heartbeat_at FROM batonmq_s_b1.brokers WHERE broker_id = 'b1'"
            )
        finally:
            await reader.close()

    try:
        await store.open()
        before = await stamp()
        await asyncio.to_thread(server.stop)
        await asyncio.sleep(9)  # the renewal at 8 s fails
        await asyncio.to_thread(server.start)
        back = time.monotonic()
        while await stamp() == before:
            assert time.monotonic() - back < 4, "not renewed within 4 s of the server's return"
            await asyncio.sleep(0.2)
    finally:
        await store.close()


async def test_a_backup_taken_while_committing_restores_a_committed_state(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """A backup is a consistent snapshot taken while the broker runs: restored into a fresh
    schema it equals the state after one commit, no earlier than the last commit made before
    the backup was asked for."""
    store = make_store()
    await store.open()
    base = (await store.recover()).message_id_base
    committed = 0
    stop = asyncio.Event()

    async def write() -> None:
        # Commit n keeps entries n - 2 .. n: each state is told apart by its first and last.
        nonlocal committed
        while not stop.is_set():
            batch = _one_message(base, committed)
            if committed >= 3:
                batch.entries_deleted.append(("/", "q", committed - 3, base + committed - 3))
            await store.commit(batch)
            committed += 1
            await asyncio.sleep(0)

    writer = asyncio.create_task(write())
    try:
        while committed < 20:
            await asyncio.sleep(0.01)
        done_before = committed
        await store.backup(tmp_path / "backup")
        assert committed > done_before  # the writer went on during the backup
    finally:
        stop.set()
        await writer

    restored = make_store(schema="batonmq_s_restored")
    await restored.open()
    await restored.restore(tmp_path / "backup")
    recovery = await restored.recover()
    bodies = await _bodies(restored)
    last = int(bodies[-1].split()[1])
    assert last + 1 >= done_before
    assert bodies == [f"body {n}".encode() for n in range(max(0, last - 2), last + 1)]
    assert (await restored.stats()).messages == len(bodies)
    # Ids of restored messages are never handed out again.
    assert recovery.message_id_base > base + last


async def test_a_backup_needs_an_empty_directory(make_store: MakeStore, tmp_path: Path) -> None:
    """A backup never mixes with other files: it refuses a directory that is not empty."""
    store = make_store()
    await store.open()
    (tmp_path / "other").write_text("x")
    with pytest.raises(StoreError, match="not empty"):
        await store.backup(tmp_path)


async def test_reads_wait_for_the_writes_called_before_them_and_run_beside_later_ones(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """Rule (Store protocol: "a read issued after a commit sees that commit"; the foundation
    requirements: writes stay serialised in batch order, reads may use other pool
    connections). A commit held up by a lock in the database holds up the reads called after
    it, which then see it; a read held up runs on a connection of its own, and commits called
    after it go on beside it."""
    store = make_store()
    await store.open()
    base = (await store.recover()).message_id_base
    admin = await asyncpg.connect(postgres_dsn)
    try:
        holding = admin.transaction()
        await holding.start()
        # Every commit first reads the epoch FOR SHARE: this holds commits up.
        await admin.execute("SELECT * FROM batonmq_s_b1.brokers FOR UPDATE")
        commit = asyncio.ensure_future(store.commit(_one_message(base, 0)))
        read_after = asyncio.ensure_future(_bodies(store))
        await asyncio.sleep(0.5)
        assert not commit.done()
        assert not read_after.done()
        await holding.rollback()
        await commit
        assert await read_after == [b"body 0"]

        # A read held up in the database (statistics count the quarantine, which nothing else
        # here touches) holds up no commit: it is on another connection.
        holding = admin.transaction()
        await holding.start()
        await admin.execute("LOCK TABLE batonmq_s_b1.quarantined_messages IN ACCESS EXCLUSIVE MODE")
        read_before = asyncio.ensure_future(store.stats())
        await asyncio.sleep(0.5)
        assert not read_before.done()
        await asyncio.wait_for(store.commit(_one_message(base, 1)), 5)
        assert not read_before.done()
        await holding.rollback()
        assert (await read_before).queues == 1
    finally:
        await admin.close()
    assert await _bodies(store) == [b"body 0", b"body 1"]


_LONG_STATEMENT = """
import asyncio, sys
from batonmq.store.postgres import PostgresStore

async def main():
    store = PostgresStore(sys.argv[1], broker_id="dying", schema="batonmq_s_dying")
    session = await store.session()
    print("running", flush=True)
    await session.execute("SELECT pg_sleep(120)")

asyncio.run(main())
"""


async def test_the_statement_of_a_broker_that_died_is_cancelled(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A broker killed inside a long statement must not hold its locks until the statement
    ends (a survivor's takeover claim waits on them): PostgreSQL's
    client_connection_check_interval, set on every writing session, has the server look for
    the vanished client and cancel its statement."""
    script = tmp_path / "long_statement.py"
    script.write_text(_LONG_STATEMENT)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), postgres_dsn, stdout=asyncio.subprocess.PIPE
    )
    assert await asyncio.wait_for(process.stdout.readline(), 30) == b"running\n"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        running = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'batonmq dying' AND query LIKE 'SELECT pg_sleep%'"
        )
        for _ in range(100):
            if await admin.fetchval(running):
                break
            await asyncio.sleep(0.05)
        assert await admin.fetchval(running) == 1
        process.kill()
        await process.wait()
        for _ in range(100):  # checked every second: gone within a few
            if not await admin.fetchval(running):
                break
            await asyncio.sleep(0.1)
        assert await admin.fetchval(running) == 0
    finally:
        await admin.close()


async def test_a_batch_naming_a_row_twice_or_a_row_not_there_is_written_as_row_by_row(
    make_store: MakeStore,
) -> None:
    """Rule (WriteBatch, `Plan.write_steps`): a commit writes each kind of row a batch has many
    of in one statement, an array per column. PostgreSQL refuses a statement that changes a row
    twice ("ON CONFLICT DO UPDATE command cannot affect row a second time"), where a run per row
    let the last row win: the last row of each key is written; an entry to update or delete
    that is not there changes nothing, and a deletion named twice deletes once."""
    store = make_store()
    await store.open()
    await store.recover()
    await store.commit(
        WriteBatch(
            queues_put=[StoredQueue("/", "q", False, {})],
            messages_put=[StoredMessage(n, "", "q", b"h", b"body %d" % n) for n in (1, 2, 3)],
            entries_put=[StoredEntry("/", "q", n, n) for n in (1, 2, 3)],
        )
    )
    await store.commit(
        WriteBatch(
            messages_put=[
                StoredMessage(10, "", "q", b"h", b"first"),
                StoredMessage(10, "", "q", b"h", b"last"),
            ],
            entries_put=[
                StoredEntry("/", "q", 10, 10, delivery_count=1),
                StoredEntry("/", "q", 10, 10, delivery_count=2),
            ],
            entries_updated=[("/", "q", 1, 5), ("/", "q", 99, 1), ("/", "q", 1, 7)],
            entries_deleted=[("/", "q", 2, 2), ("/", "q", 98, 98), ("/", "q", 2, 2)],
        )
    )

    entries = await store.read_entries("/", "q", -1, 100)
    assert [(e.sequence, e.delivery_count, e.message.body) for e in entries] == [
        (1, 7, b"body 1"),
        (3, 0, b"body 3"),
        (10, 2, b"last"),
    ]
    stats = await store.stats()
    assert (stats.messages, stats.entries) == (3, 3)


async def test_names_that_an_array_text_must_quote_are_written_as_they_are(
    make_store: MakeStore,
) -> None:
    """Rule (AMQP 0-9-1, 4.2.5.3: "Short strings can carry up to 255 octets of UTF-8 data, but
    may not contain binary zero octets"): the names and routing keys a commit sends as the text
    of an array come back exactly, with the characters that text quotes (double quotes,
    backslashes, braces, commas, spaces) and a name that reads NULL unquoted."""
    names = ['q "x"', "back\\slash\\", "{a,b}", "NULL", " spaced ", "é ☃", ""]
    store = make_store()
    await store.open()
    await store.recover()
    await store.commit(
        WriteBatch(queues_put=[StoredQueue(name, name, False, {}) for name in names])
    )
    await store.commit(
        WriteBatch(
            messages_put=[
                StoredMessage(n, name, name, b"h", name.encode()) for n, name in enumerate(names)
            ],
            entries_put=[
                StoredEntry(name, name, n, n, expires_at=None if n % 2 else n)
                for n, name in enumerate(names)
            ],
        )
    )
    await store.commit(
        WriteBatch(entries_updated=[(name, name, n, 4) for n, name in enumerate(names)])
    )

    for n, name in enumerate(names):
        (entry,) = await store.read_entries(name, name, -1, 10)
        assert (entry.sequence, entry.delivery_count, entry.expires_at) == (
            n,
            4,
            None if n % 2 else n,
        )
        assert entry.message == StoredMessage(n, name, name, b"h", name.encode())
    await store.commit(
        WriteBatch(entries_deleted=[(name, name, n, n) for n, name in enumerate(names)])
    )
    stats = await store.stats()
    assert (stats.messages, stats.entries) == (0, 0)
