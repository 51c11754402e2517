"""The placement of a spread virtual host's rows per queue (docs/multi-core.md, step 6), on the
SQLite file the workers share and on PostgreSQL (a standalone broker's family of identities):
each queue's rows are its owner worker's, the virtual host's exchanges and bindings its home's,
and the rows move again when the number of workers changes or the virtual host is spread no
more."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

import asyncpg
import pytest

from batonmq.store.base import (
    Store,
    StoredBinding,
    StoredEntry,
    StoredExchange,
    StoredMessage,
    StoredQueue,
    WriteBatch,
)
from batonmq.store.dialect import POSTGRES, SQLITE
from batonmq.store.placement import Placement
from batonmq.store.postgres import PostgresStore
from batonmq.store.sqlite import SQLiteStore, prepare_for_workers
from batonmq.store.sqlitefile import take_lock

#: Virtual host "a" is worker 0's (its home), "b" worker 1's.
OWNERS = {"a": 0, "b": 1}
#: Each queue's owner in a spread virtual host: the number its name ends with.
QUEUE_OWNERS = {"q0": 0, "q1": 1, "q2": 2}
SCHEMA = "batonmq_spread"


def placement(workers: int, spread: frozenset[str] = frozenset()) -> Placement:
    return Placement(
        "b1",
        workers,
        OWNERS.__getitem__,
        Path("/nonexistent"),
        spread=spread,
        queue_owner=lambda _vhost, queue: QUEUE_OWNERS[queue] % workers,
    )


class Layout(Protocol):
    async def place(self, placement: Placement) -> None:
        """Open the broker's own identity with `placement` (its rows placed), and close it."""
        ...

    def store(self, identity: str) -> Store:
        """The unopened store of one identity of the broker."""
        ...

    async def rows(self, sql: str) -> list[tuple[object, ...]]:
        """The rows of a statement in the plan's neutral form (`batonmq.store.dialect`)."""
        ...


class SQLiteLayout:
    def __init__(self, path: Path, lock: int) -> None:
        self.path, self.lock = path, lock

    async def place(self, placement: Placement) -> None:
        if placement.workers > 1:
            prepare_for_workers(
                self.path, broker_id="b1", sync=False, held_lock=self.lock, placement=placement
            )
            return
        store = SQLiteStore(
            self.path, broker_id="b1", sync=False, held_lock=self.lock, placement=placement
        )
        await store.open()
        await store.close()

    def store(self, identity: str) -> Store:
        index = None if identity == "b1" else int(identity.removeprefix("b1w"))
        return SQLiteStore(
            self.path, broker_id=identity, sync=False, worker=index, held_lock=self.lock
        )

    async def rows(self, sql: str) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.path) as conn:
            found = conn.execute(SQLITE.render(sql)).fetchall()
        conn.close()
        return found


class PostgresLayout:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def place(self, placement: Placement) -> None:
        store = PostgresStore(
            self.dsn, broker_id="b1", schema=SCHEMA, family="b1", placement=placement
        )
        await store.open()
        await store.close()

    def store(self, identity: str) -> Store:
        return PostgresStore(self.dsn, broker_id=identity, schema=SCHEMA, family="b1")

    async def rows(self, sql: str) -> list[tuple[object, ...]]:
        connection = await asyncpg.connect(self.dsn)
        try:
            return [tuple(row) for row in await connection.fetch(POSTGRES.render(sql, SCHEMA))]
        finally:
            await connection.close()


@pytest.fixture
def lock(tmp_path: Path) -> Iterator[int]:
    """The SQLite store's lock, as the supervisor holds it for its workers."""
    fd = take_lock(tmp_path / "batonmq.sqlite3")
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.fixture(params=["sqlite", "postgres"])
async def layout(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Layout]:
    if request.param == "sqlite":
        yield SQLiteLayout(tmp_path / "batonmq.sqlite3", request.getfixturevalue("lock"))
    else:
        yield PostgresLayout(request.getfixturevalue("postgres_dsn"))


async def write(layout: Layout, identity: str, vhost: str) -> None:
    """As the owner of `vhost` writes it: exchange "x" bound to queues q0, q1 and q2; a message
    routed to q1 and q2 (one row, two entries), one to q0 and one to q2."""
    store = layout.store(identity)
    await store.open()
    try:
        base = (await store.recover()).message_id_base
        queues = ("q0", "q1", "q2")
        await store.commit(
            WriteBatch(
                exchanges_put=[StoredExchange(vhost, "x", "direct", False, False, {})],
                queues_put=[StoredQueue(vhost, queue, False, {}) for queue in queues],
                bindings_put=[StoredBinding(vhost, "x", "queue", q, q, {}) for q in queues],
                messages_put=[
                    StoredMessage(base, "x", "k", b"", b"fanned " + vhost.encode()),
                    StoredMessage(base + 1, "x", "q0", b"", b"to q0"),
                    StoredMessage(base + 2, "x", "q2", b"", b"to q2"),
                ],
                entries_put=[
                    StoredEntry(vhost, "q1", 0, base),
                    StoredEntry(vhost, "q2", 0, base),
                    StoredEntry(vhost, "q0", 0, base + 1),
                    StoredEntry(vhost, "q2", 1, base + 2),
                ],
            )
        )
    finally:
        await store.close()


async def owners(layout: Layout) -> dict[str, list[tuple[object, ...]]]:
    """Whose each row is: exchanges and queues by name, bindings by destination, entries and
    quarantined entries by queue (entries with their delivery count)."""
    return {
        "exchanges": await layout.rows(
            "SELECT broker_id, vhost, name FROM {s}.exchanges ORDER BY 2, 3"
        ),
        "bindings": await layout.rows(
            "SELECT broker_id, vhost, destination FROM {s}.bindings ORDER BY 2, 3"
        ),
        "queues": await layout.rows("SELECT broker_id, vhost, name FROM {s}.queues ORDER BY 2, 3"),
        "entries": await layout.rows(
            "SELECT broker_id, vhost, queue, sequence, delivery_count FROM {s}.entries"
            " ORDER BY 2, 3, 4"
        ),
        "quarantined": await layout.rows(
            "SELECT broker_id, vhost, queue FROM {s}.quarantined_messages ORDER BY 2, 3"
        ),
    }


async def messages(layout: Layout) -> list[tuple[object, ...]]:
    """(owner of the entry, its queue, owner of its message row, message id, body), and checks
    that every message row belongs to an owner of entries that hold it."""
    held = await layout.rows(
        "SELECT e.broker_id, e.vhost, e.queue, m.broker_id, m.id, m.body FROM {s}.entries AS e"
        " JOIN {s}.messages AS m ON m.id = e.message_id ORDER BY 2, 3, e.sequence"
    )
    assert len(held) == len(await layout.rows("SELECT 1 FROM {s}.entries"))
    rows = await layout.rows("SELECT broker_id, id FROM {s}.messages")
    assert {(row[3], row[4]) for row in held} == set(rows)
    return held


async def bodies(layout: Layout, identity: str, vhost: str, queue: str) -> list[bytes]:
    store = layout.store(identity)
    await store.open()
    try:
        await store.recover()
        return [entry.message.body for entry in await store.read_entries(vhost, queue, -1, 10)]
    finally:
        await store.close()


def everything_of(rows: dict[str, list[tuple[object, ...]]], vhost: str) -> set[object]:
    return {row[0] for table in rows.values() for row in table if row[1] == vhost}


async def test_a_spread_virtual_hosts_queues_go_to_their_owners_and_come_back(
    layout: Layout,
) -> None:
    """docs/multi-core.md, step 6: each queue of a spread virtual host has one owner worker,
    and the virtual host one home for its exchanges and bindings; a message routed to queues
    of two owners is held by both (one row each, as message ids are unique in the store), and
    the identity rows leave is recovered first as its own start would (after an unclean stop
    its entries count as delivered: RabbitMQ's classic queues redeliver on a dirty recovery).
    Spread on three workers, then on one process, then not spread on two: nothing is lost."""
    await layout.place(placement(2))
    await write(layout, "b1w0", "a")
    await write(layout, "b1w1", "b")
    # A quarantined entry of a/q2, and worker 0 stopped uncleanly (its record says running).
    await layout.rows(
        "INSERT INTO {s}.quarantined_messages (broker_id, vhost, queue, sequence,"
        " delivery_count, message_id, exchange, routing_key, header_payload, body, checksum,"
        " quarantined_at) VALUES ('b1w0', 'a', 'q2', 7, 0, 1, 'x', 'q2', '', '', 0,"
        " CURRENT_TIMESTAMP)"
    )
    await layout.rows("UPDATE {s}.brokers SET state = 'running' WHERE broker_id = 'b1w0'")

    await layout.place(placement(3, frozenset({"a"})))

    rows = await owners(layout)
    assert rows["exchanges"] == [("b1w0", "a", "x"), ("b1w1", "b", "x")]
    assert [row for row in rows["bindings"] if row[1] == "a"] == [
        ("b1w0", "a", "q0"),
        ("b1w0", "a", "q1"),
        ("b1w0", "a", "q2"),
    ]
    assert [row for row in rows["queues"] if row[1] == "a"] == [
        ("b1w0", "a", "q0"),
        ("b1w1", "a", "q1"),
        ("b1w2", "a", "q2"),
    ]
    assert [row for row in rows["entries"] if row[1] == "a"] == [
        ("b1w0", "a", "q0", 0, 1),
        ("b1w1", "a", "q1", 0, 1),
        ("b1w2", "a", "q2", 0, 1),
        ("b1w2", "a", "q2", 1, 1),
    ]
    assert rows["quarantined"] == [("b1w2", "a", "q2")]
    # "b" is not spread: every row of it stays with its owner, its entries untouched.
    assert everything_of(rows, "b") == {"b1w1"}
    assert {row[4] for row in rows["entries"] if row[1] == "b"} == {0}
    held = await messages(layout)
    fanned = [row for row in held if row[5] == b"fanned a"]
    assert [(row[0], row[3]) for row in fanned] == [("b1w1", "b1w1"), ("b1w2", "b1w2")]
    assert fanned[0][4] != fanned[1][4]
    assert await bodies(layout, "b1w1", "a", "q1") == [b"fanned a"]
    assert await bodies(layout, "b1w2", "a", "q2") == [b"fanned a", b"to q2"]
    assert await bodies(layout, "b1w0", "a", "q0") == [b"to q0"]

    await layout.place(placement(1, frozenset({"a"})))

    rows = await owners(layout)
    assert everything_of(rows, "a") | everything_of(rows, "b") == {"b1"}
    assert {row[3] for row in await messages(layout)} == {"b1"}
    assert await bodies(layout, "b1", "a", "q2") == [b"fanned a", b"to q2"]
    assert await bodies(layout, "b1", "a", "q1") == [b"fanned a"]

    await layout.place(placement(2))

    rows = await owners(layout)
    assert (everything_of(rows, "a"), everything_of(rows, "b")) == ({"b1w0"}, {"b1w1"})
    assert len(rows["entries"]) == 8
    held = await messages(layout)
    assert {(row[1], row[3]) for row in held} == {("a", "b1w0"), ("b", "b1w1")}
    assert await bodies(layout, "b1w0", "a", "q1") == [b"fanned a"]


async def test_the_home_reads_the_other_workers_definitions(layout: Layout) -> None:
    """docs/multi-core.md, step 6: a spread virtual host's home keeps its bindings, also those
    to queues another worker owns, whose rows are that worker's; so that they come back when
    the home starts, it reads the other identities' exchanges, queues and bindings as their
    own recoveries read them (`Store.definitions_of`), without writing them."""
    await layout.place(placement(2))
    await write(layout, "b1w0", "a")
    await write(layout, "b1w1", "b")
    await layout.place(placement(2, frozenset({"a"})))
    home = layout.store("b1w0")
    await home.open()
    try:
        await home.recover()
        found = await home.definitions_of(["b1w1", "b1w7"])
    finally:
        await home.close()

    assert sorted(found) == ["b1w1", "b1w7"]
    other = found["b1w1"]
    assert [(queue.vhost, queue.name) for queue in other.queues] == [
        ("a", "q1"),
        ("b", "q0"),
        ("b", "q1"),
        ("b", "q2"),
    ]
    assert other.exchanges == [StoredExchange("b", "x", "direct", False, False, {})]
    assert [(b.vhost, b.destination) for b in other.bindings] == [
        ("b", "q0"),
        ("b", "q1"),
        ("b", "q2"),
    ]
    assert (found["b1w7"].exchanges, found["b1w7"].queues, found["b1w7"].bindings) == ([], [], [])
    # Read only: the rows are where they were.
    rows = await owners(layout)
    assert [row for row in rows["queues"] if row[1] == "a"] == [
        ("b1w0", "a", "q0"),
        ("b1w1", "a", "q1"),
        ("b1w0", "a", "q2"),
    ]
