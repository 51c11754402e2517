"""Reads of an SQLite store on one of its connections: a page of a queue's entries, the
catalogue and its version, what the store holds (with what an append log adds), and the bytes
of the pages in use.

Each takes the connection and returns plain data; the store runs them on its thread
(`batonmq.store.sqlite`), and a backup on the copy it makes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Final

from batonmq.security.permissions import UserPermission
from batonmq.store.base import StoredDefinitions, StoredUser
from batonmq.store.dialect import SQLITE
from batonmq.store.members import Catalogue
from batonmq.store.pending import Pending, body_size
from batonmq.store.plan import (
    DEFINITION_READS,
    Plan,
    chunks,
    stored_definitions,
    stored_permission,
    stored_user,
)

_SQL: Final = Plan(SQLITE).sql

#: How many entries of the database hold a message, and its body's length (None: no message).
_HELD_MESSAGE: Final = (
    "SELECT (SELECT count(*) FROM entries WHERE broker_id = ?1 AND message_id = ?2),"
    " (SELECT length(body) FROM messages WHERE broker_id = ?1 AND id = ?2)"
)
_CATALOGUE_VERSION: Final = (
    "SELECT COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'catalogue_version'), 0)"
)


def read_entries_sql(priority: int | None) -> str:
    """The read of a queue's entries after a sequence: of any level (`priority` None), or of
    one. A level above 0 is read through the partial index (LEVEL_INDEX), named: without
    statistics (the store never runs ANALYZE) SQLite prefers the primary key of a WITHOUT ROWID
    table, which would walk every level's entries; `priority > 0` is the index's condition,
    which SQLite must find in the query to use it. Level 0 is read through the primary key."""
    index, level = "", "" if priority is None else " AND e.priority = ?"
    if priority:
        index, level = " INDEXED BY entries_priority", level + " AND e.priority > 0"
    return (
        "SELECT e.sequence, e.delivery_count, e.expires_at, e.priority, m.id, m.exchange,"
        f" m.routing_key, m.header_payload, m.body, m.checksum FROM entries e{index}"
        " JOIN messages m"
        " ON m.broker_id = e.broker_id AND m.id = e.message_id"
        f" WHERE e.broker_id = ? AND e.vhost = ? AND e.queue = ?{level}"
        " AND e.sequence > ? ORDER BY e.sequence LIMIT ?"
    )


def catalogue(conn: sqlite3.Connection) -> Catalogue:
    """The users, virtual hosts, permissions and catalogue version, in one read transaction."""
    conn.execute("BEGIN")
    try:
        return Catalogue(users(conn), vhosts(conn), permissions(conn), catalogue_version(conn))
    finally:
        conn.execute("COMMIT")


def catalogue_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute(_CATALOGUE_VERSION).fetchone()[0])


def definitions_of(
    broker_ids: Iterable[str], conn: sqlite3.Connection
) -> dict[str, StoredDefinitions]:
    """The exchanges, queues and bindings of each of `broker_ids`, as recovery reads them."""
    return {
        broker_id: stored_definitions(
            {name: conn.execute(_SQL[name], (broker_id,)).fetchall() for name in DEFINITION_READS}
        )
        for broker_id in broker_ids
    }


def users(conn: sqlite3.Connection) -> list[StoredUser]:
    return [stored_user(row) for row in conn.execute(_SQL["users"])]


def vhosts(conn: sqlite3.Connection) -> list[str]:
    return [name for (name,) in conn.execute(_SQL["vhosts"])]


def permissions(conn: sqlite3.Connection) -> list[UserPermission]:
    return [stored_permission(row) for row in conn.execute(_SQL["permissions"])]


def _count_rows(
    conn: sqlite3.Connection, broker: str, pending: Pending | None = None
) -> tuple[int, int, int, int, int, int, int]:
    """(exchanges, queues, bindings, messages, entries, message bytes, quarantined entries) of
    one broker, with what `pending` (its append log) changes: its messages and entries, less
    the entries it deletes and the messages of the database that no entry holds then."""
    row = conn.execute(_SQL["counts"], (broker,)).fetchone()
    exchanges, queues, bindings, messages, entries, size, quarantined = (int(v) for v in row)
    if pending:
        stored: dict[int, int] = {}
        for chunk in chunks(list(pending.messages)):
            # Put again while the database has them already (another queue paging them out).
            stored.update(
                conn.execute(
                    f"SELECT id, length(body) FROM messages"
                    f" WHERE broker_id = ? AND id IN ({', '.join(['?'] * len(chunk))})",
                    (broker, *chunk),
                ).fetchall()
            )
        candidates: dict[int, tuple[int, int]] = {}
        for message_id in pending.orphan_candidates():
            held, body = conn.execute(_HELD_MESSAGE, (broker, message_id)).fetchone()
            if body is not None:
                candidates[message_id] = (held, body)
        messages, entries, size = pending.counted(
            (messages, entries, size), body_size, stored, candidates
        )
    return exchanges, queues, bindings, messages, entries, size, quarantined


def counted(
    conn: sqlite3.Connection, identities: Iterable[tuple[str, Pending | None]]
) -> list[int]:
    """(exchanges, queues, bindings, messages, entries, message bytes, quarantined entries) of
    the identities, each with what its append log holds (None: nothing), summed."""
    totals = [0] * 7
    for broker, pending in identities:
        counts = _count_rows(conn, broker, pending)
        totals = [total + part for total, part in zip(totals, counts, strict=True)]
    return totals


def pages_in_use(conn: sqlite3.Connection) -> int:
    """The bytes of the database's pages that hold data: its pages less the free ones, as this
    connection sees the database (WAL frames included). A deletion puts pages on the freelist,
    where the next writes reuse them, so this falls as messages go although the file never
    shrinks. The WAL file is not counted: it is reused after each checkpoint (1,000 pages, about
    4 MiB, by default; cut back to 64 MiB after a larger batch), so it does not grow with the
    backlog, and the free-disk alarm watches the disk as a whole. Two reads of the file header:
    no scan."""
    page_count = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free_pages = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return (page_count - free_pages) * page_size
