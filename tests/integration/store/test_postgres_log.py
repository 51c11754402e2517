"""The PostgreSQL store's append log with a real PostgreSQL and real processes: what reaches the
tables and when, recovery after a SIGKILL, a log applied twice, readers that cannot checkpoint,
and the takeover of a member killed with rows in its log (`batonmq.store.postgres_log`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from batonmq.store.base import (
    StoreCorrupt,
    StoredQueue,
    StoreFenced,
    WriteBatch,
)
from batonmq.store.postgres import PostgresStore
from tests.batches import VHOST, acked, put
from tests.integration.store.conftest import CLUSTER_SCHEMA, MakeMember
from tests.members import lease_run_out

SCHEMA = "batonmq_s_b1"
MakeStore = Callable[..., PostgresStore]


@pytest.fixture
async def make_store(postgres_dsn: str) -> AsyncIterator[MakeStore]:
    """`make(lock=True)`: an unopened store of broker b1 in its own schema; all are closed
    after the test."""
    made: list[PostgresStore] = []

    def make() -> PostgresStore:
        store = PostgresStore(postgres_dsn, broker_id="b1", schema=SCHEMA)
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()


async def rows(dsn: str, schema: str, broker: str) -> tuple[int, int, int]:
    """(messages, entries, log rows) of `broker` in the tables, read by a session of the
    test's own."""
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow(
            f"SELECT (SELECT count(*) FROM {schema}.messages WHERE broker_id = $1),"
            f" (SELECT count(*) FROM {schema}.entries WHERE broker_id = $1),"
            f" (SELECT count(*) FROM {schema}.appends WHERE broker_id = $1)",
            broker,
        )
    finally:
        await connection.close()
    assert row is not None
    return row[0], row[1], row[2]


def killed_after(dsn: str, schema: str, broker: str, *, count: int, acked: list[int]) -> int:
    """In a process of its own: open `broker`'s store (a lease of 0.2 s), declare queue `q`,
    commit `count` persistent messages at sequences 0 to count - 1, then the acknowledgement of
    the sequences `acked`, and die by SIGKILL without closing the store. The message id base."""
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal, sys
        from batonmq.store.base import StoredEntry, StoredMessage, StoredQueue, WriteBatch
        from batonmq.store.postgres import PostgresStore

        async def main():
            store = PostgresStore(
                {dsn!r}, broker_id={broker!r}, schema={schema!r}, lease_seconds=0.2,
                renew_every=3600,
            )
            await store.open()
            base = (await store.recover()).message_id_base
            await store.commit(WriteBatch(queues_put=[StoredQueue("/", "q", False, {{}})]))
            await store.commit(WriteBatch(
                messages_put=[
                    StoredMessage(base + n, "", "q", b"", b"x%d" % n) for n in range({count})
                ],
                entries_put=[StoredEntry("/", "q", n, base + n) for n in range({count})],
            ))
            acked = {acked!r}
            if acked:
                await store.commit(
                    WriteBatch(entries_deleted=[("/", "q", n, base + n) for n in acked])
                )
            print(base, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == -9, done.stderr
    return int(done.stdout)


async def test_a_message_acknowledged_before_a_checkpoint_never_reaches_the_tables(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """The append log's purpose: a confirmed message is committed as one row of the log, and
    one consumed before the next checkpoint reaches the messages table neither when it comes
    nor when it goes. A clean close writes out only what is still held, and empties the log."""
    store = make_store()
    await store.open()
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base, base + 1))
    await store.commit(put(base + 2))
    assert await rows(postgres_dsn, SCHEMA, "b1") == (0, 0, 2)

    await store.commit(acked(base, base + 2))
    assert await rows(postgres_dsn, SCHEMA, "b1") == (0, 0, 3)
    await store.close()
    assert await rows(postgres_dsn, SCHEMA, "b1") == (1, 1, 0)


async def test_what_a_sigkill_leaves_in_the_log_is_recovered(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """A broker process killed without closing its store loses nothing it committed: the next
    open applies the log's rows to the tables (and the acknowledgement among them), before
    recovery reads them."""
    base = killed_after(postgres_dsn, SCHEMA, "b1", count=3, acked=[1])
    assert await rows(postgres_dsn, SCHEMA, "b1") == (0, 0, 2)

    store = make_store()
    await store.open()
    assert await rows(postgres_dsn, SCHEMA, "b1") == (2, 2, 0)
    recovery = await store.recover()
    assert recovery.unclean_stop
    [backlog] = recovery.backlogs
    assert (backlog.count, backlog.last_sequence) == (2, 2)
    page = await store.read_entries(VHOST, "q", -1, 10)
    assert [(entry.sequence, entry.message.body) for entry in page] == [(0, b"x0"), (2, b"x2")]
    assert page[0].message.id == base


async def test_a_log_applied_again_after_its_checkpoint_changes_nothing(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """A checkpoint deletes the rows it applied in its own transaction, so no row is applied
    twice; were one applied again (a row put back by hand), its puts are upserts, its updates
    set values and its deletions delete by key: nothing is duplicated or brought back."""
    store = make_store()
    await store.open()
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base, base + 1, base + 2))
    await store.commit(acked(base + 1))
    admin = await asyncpg.connect(postgres_dsn)
    try:
        frames = await admin.fetch(f"SELECT broker_id, seq, frame FROM {SCHEMA}.appends")
        await store.close()  # the checkpoint
        await admin.executemany(
            f"INSERT INTO {SCHEMA}.appends (broker_id, seq, frame) VALUES ($1, $2, $3)", frames
        )
    finally:
        await admin.close()

    again = make_store()
    await again.open()
    recovery = await again.recover()
    assert [backlog.count for backlog in recovery.backlogs] == [2]
    assert await rows(postgres_dsn, SCHEMA, "b1") == (2, 2, 0)


async def test_a_damaged_log_row_refuses_the_store_naming_it(
    make_store: MakeStore, postgres_dsn: str
) -> None:
    """Rule (hardening, defect 5): damage is never served. A log row whose frame fails its
    checksum refuses the open (StoreCorrupt) and names the row; nothing is applied."""
    base = killed_after(postgres_dsn, SCHEMA, "b1", count=2, acked=[])
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(
            f"UPDATE {SCHEMA}.appends SET frame = set_byte(frame, length(frame) - 1,"
            " get_byte(frame, length(frame) - 1) # 255)"
        )
    finally:
        await admin.close()

    store = make_store()
    with pytest.raises(StoreCorrupt, match="the append log row 1 of broker 'b1' is damaged"):
        await store.open()
    assert base and await rows(postgres_dsn, SCHEMA, "b1") == (0, 0, 1)


async def test_readers_that_cannot_checkpoint_count_what_the_log_holds(
    make_store: MakeStore, postgres_dsn: str, tmp_path: Path
) -> None:
    """`batonctl db stats` and `db backup` open the store without the lock, while the broker
    writes it: they must see what it confirmed. They read the log's rows in the snapshot they
    read the tables in: counts add what the log holds (a message put again counted once, one
    whose last entry the log deletes not at all), and a backup holds the rows, which a
    restore applies."""
    owner = make_store()
    await owner.open()
    base = (await owner.recover()).message_id_base
    await owner.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await owner.commit(put(base, base + 1))
    await owner.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "other", False, {})]))
    await owner.commit(put(base + 2, base + 3))
    await owner.commit(put(base + 2, queue="other"))  # paged out by another queue too
    await owner.commit(acked(base))  # the tables' entry: its message goes at a checkpoint
    assert (await rows(postgres_dsn, SCHEMA, "b1"))[2] == 3

    reader = make_store()
    await reader.open(lock=False)
    stats = await reader.stats()
    bodies = sum(len(b"body %d" % n) for n in (base + 1, base + 2, base + 3))
    assert (stats.messages, stats.entries, stats.message_bytes) == (3, 4, bodies)
    assert await reader.used_bytes() == bodies + 3 * len(b"\x00\x3c")
    await reader.backup(tmp_path / "backup")

    assert await owner.stats() == stats  # the owner checkpoints first
    assert await rows(postgres_dsn, SCHEMA, "b1") == (3, 4, 0)
    await owner.commit(acked(base + 1, base + 3))
    await owner.restore(tmp_path / "backup")
    assert await rows(postgres_dsn, SCHEMA, "b1") == (3, 4, 0)
    page = await owner.read_entries(VHOST, "q", -1, 10)
    assert [entry.sequence for entry in page] == [base + 1, base + 2, base + 3]


async def test_a_read_merges_the_tables_and_the_log_in_order(make_store: MakeStore) -> None:
    """Entries checkpointed (written out before a declaration) and entries put since,
    interleaved: a read gives the next ones in sequence order, and never passes over an entry
    of the tables it did not read; an acknowledgement of a table's entry checkpoints first."""
    store = make_store()
    await store.open()
    base = (await store.recover()).message_id_base
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    await store.commit(put(base + 0, base + 2, base + 4))
    await store.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "other", False, {})]))
    await store.commit(put(base + 1, base + 3, base + 5))

    first = await store.read_entries(VHOST, "q", -1, 2)
    assert [entry.sequence for entry in first] == [base + 0, base + 1]
    rest = await store.read_entries(VHOST, "q", base + 1, 10)
    assert [entry.sequence for entry in rest] == [base + 2, base + 3, base + 4, base + 5]
    await store.commit(acked(base + 2))
    after = await store.read_entries(VHOST, "q", base + 1, 10)
    assert [entry.sequence for entry in after] == [base + 3, base + 4, base + 5]


async def test_a_member_killed_with_rows_in_its_log_is_taken_over_with_all_it_confirmed(
    make_member: MakeMember, postgres_dsn: str
) -> None:
    """MQ 4.1 HA guide: "When a broker fails, another broker in the cluster takes over its
    persistent data". A member SIGKILLed between an append and its checkpoint has confirmed
    messages only in its log: the claim applies the log, inside its own transaction, before
    the rows move, so the survivor holds every one (less the acknowledged), and the log is
    empty after. Counting the members' messages meanwhile sees what the log holds."""
    survivor = make_member("brokerB")
    await survivor.open()
    await survivor.recover()
    base = killed_after(postgres_dsn, CLUSTER_SCHEMA, "brokerA", count=50, acked=[0, 1, 2])
    assert await rows(postgres_dsn, CLUSTER_SCHEMA, "brokerA") == (0, 0, 2)
    counted = {m.broker_id: m.messages for m in await survivor.members(count_messages=True)}
    assert counted["brokerA"] == 47

    seen = await lease_run_out(survivor, "brokerA")
    taken = await survivor.take_over("brokerA", seen, next_sequences={})

    assert taken is not None and taken.messages == 47
    assert await rows(postgres_dsn, CLUSTER_SCHEMA, "brokerA") == (0, 0, 0)
    page = await survivor.read_entries(VHOST, "q", -1, 100)
    assert [entry.message.id for entry in page] == [base + n for n in range(3, 50)]
    assert all(entry.delivery_count == 1 for entry in page)


async def _paused_and_taken_over(
    make_member: MakeMember, backup: Path | None = None
) -> tuple[PostgresStore, PostgresStore, int]:
    """Member brokerA (a lease of 0.2 s, not renewed: paused) with queue `q` holding one
    message, taken over by member brokerB: (brokerA, brokerB, the message's id). `backup`:
    where brokerA backs its store up before the message, if anywhere."""
    paused = make_member("brokerA", lease_seconds=0.2)
    survivor = make_member("brokerB")
    await paused.open()
    await survivor.open()
    base = (await paused.recover()).message_id_base
    await survivor.recover()
    await paused.commit(WriteBatch(queues_put=[StoredQueue(VHOST, "q", False, {})]))
    if backup is not None:
        await paused.backup(backup)
    await paused.commit(put(base))
    seen = await lease_run_out(survivor, "brokerA")
    assert await survivor.take_over("brokerA", seen, next_sequences={}) is not None
    return paused, survivor, base


async def test_an_append_after_a_takeover_is_fenced_and_writes_nothing(
    make_member: MakeMember, postgres_dsn: str
) -> None:
    """Fencing (Kleppmann's tokens): the append is a transaction of one statement that inserts
    only while the broker's record holds its epoch; once a takeover bumped it, the paused
    broker's next batch is refused (StoreFenced) and no row of it is written."""
    paused, survivor, base = await _paused_and_taken_over(make_member)

    with pytest.raises(StoreFenced):
        await paused.commit(put(base + 1))
    assert await rows(postgres_dsn, CLUSTER_SCHEMA, "brokerA") == (0, 0, 0)
    assert [e.message.id for e in await survivor.read_entries(VHOST, "q", -1, 10)] == [base]


async def test_a_restore_after_a_takeover_is_fenced_and_replaces_nothing(
    make_member: MakeMember, postgres_dsn: str, tmp_path: Path
) -> None:
    """Fencing (Kleppmann's tokens), for the restore as for any write: a member whose store was
    taken over while it was paused is refused (StoreFenced) when it then restores a backup, and
    what the survivor took over stays as it is."""
    paused, survivor, base = await _paused_and_taken_over(make_member, tmp_path / "empty-queue")

    with pytest.raises(StoreFenced):
        await paused.restore(tmp_path / "empty-queue")
    assert [e.message.id for e in await survivor.read_entries(VHOST, "q", -1, 10)] == [base]
