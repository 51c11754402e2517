"""The schema of an SQLite store: its version, and the migrations that make it current.

The tables are the write plan's (`batonmq.store.plan`), rendered for SQLite. The store runs a
migration in one IMMEDIATE transaction of its own (`batonmq.store.sqlite`), with the lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Final

from batonmq.store.base import SCHEMA_VERSION, StoreCorrupt
from batonmq.store.dialect import SQLITE
from batonmq.store.plan import AddColumn, Plan, migrated_meta

_PLAN: Final = Plan(SQLITE)


def _add_column(column: AddColumn, conn: sqlite3.Connection) -> None:
    """SQLite has no ADD COLUMN IF NOT EXISTS."""
    if column.column not in {row[1] for row in conn.execute(f"PRAGMA table_info({column.table})")}:
        conn.execute(
            f"ALTER TABLE {column.table} ADD COLUMN {column.column}"
            f" {_PLAN.render(column.definition)}"
        )


#: The plan's migrations in SQLite: version n + 1 is made by the steps of `MIGRATIONS[n]`.
MIGRATIONS: Final[tuple[tuple[str | Callable[[sqlite3.Connection], None], ...], ...]] = tuple(
    tuple(
        step if isinstance(step, str) else partial(_add_column, step)
        for step in _PLAN.migration(version)
    )
    for version in range(1, SCHEMA_VERSION + 1)
)


def read_version(conn: sqlite3.Connection, path: Path) -> int | None:
    """The schema version of the database at `path`; None for an empty database, StoreCorrupt
    for one that is not a BatonMQ store."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    if "meta" not in tables:
        if tables:
            raise StoreCorrupt(f"{path} is an SQLite database but not a BatonMQ store")
        return None
    row = conn.execute(_PLAN.sql["version"]).fetchone()
    try:
        return int(row[0])
    except (TypeError, ValueError):
        raise StoreCorrupt(f"{path} has no valid schema version") from None


def migrate(conn: sqlite3.Connection, *, from_version: int) -> None:
    """Inside a transaction: the steps from schema `from_version` to SCHEMA_VERSION, and the
    meta rows that say so."""
    for version in range(from_version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[version - 1]:
            if isinstance(statement, str):
                conn.execute(statement)
            else:
                statement(conn)
    conn.execute(_PLAN.sql["meta_created"], (datetime.now(UTC).isoformat(),))
    conn.executemany(_PLAN.sql["set_meta"], migrated_meta())
