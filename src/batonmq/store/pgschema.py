"""The schema of a PostgreSQL store: its version, and the migrations that make it current.

The tables are the write plan's (`batonmq.store.plan`), rendered for PostgreSQL. A schema holds
its own version in `meta`, so a store is found whole or not at all (a dropped schema is an empty
store). Brokers sharing a schema migrate it once: each migration runs in one transaction, under
an advisory lock of the schema.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Final

from batonmq.store.base import SCHEMA_VERSION, SchemaTooNew, StoreCorrupt
from batonmq.store.dialect import POSTGRES
from batonmq.store.pgsession import Connection, advisory_key
from batonmq.store.plan import Plan, migrated_meta

_PLAN: Final = Plan(POSTGRES)


def _migration_script(version: int) -> str:
    """The SQL that makes schema `version` (from 1), "{s}" standing for the quoted schema."""
    steps = [
        step
        if isinstance(step, str)
        else f"ALTER TABLE {{s}}.{step.table} ADD COLUMN IF NOT EXISTS {step.column}"
        f" {POSTGRES.render(step.definition)}"
        for step in _PLAN.migration(version)
    ]
    if version == 1:
        steps.insert(0, "CREATE SCHEMA IF NOT EXISTS {s}")
    return ";\n".join(steps)


#: Migration n (from 0) takes the schema from version n to n + 1 (the plan's, in PostgreSQL).
MIGRATIONS: Final = tuple(_migration_script(v) for v in range(1, SCHEMA_VERSION + 1))


async def read_version(
    connection: Connection, sql: Mapping[str, str], schema: str, location: str
) -> int:
    """The version of the store in `schema`: 0 for no schema or an empty one; StoreCorrupt for
    tables without a version, SchemaTooNew for a version newer than this BatonMQ's."""
    tables = await connection.fetch(
        "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
        schema,
    )
    if not tables:
        return 0
    found = "meta" in {row[0] for row in tables} and await connection.fetchval(sql["version"])
    if not isinstance(found, str) or not found.isdigit():
        raise StoreCorrupt(
            f"{location} holds tables but no BatonMQ schema version: it is not a "
            "BatonMQ store, or it is damaged"
        )
    if int(found) > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{location} has schema version {found}, written by a newer BatonMQ; this "
            f"one reads up to version {SCHEMA_VERSION}"
        )
    return int(found)


async def migrate_schema(
    connection: Connection, sql: Mapping[str, str], schema: str, location: str
) -> int:
    """Migrate the store in `schema` to SCHEMA_VERSION in one transaction, under a lock on the
    schema, so that brokers sharing it migrate it once."""
    async with connection.transaction():
        await connection.execute(
            "SELECT pg_advisory_xact_lock($1)", advisory_key("migrate", schema)
        )
        for migration in MIGRATIONS[await read_version(connection, sql, schema, location) :]:
            await connection.execute(migration.replace("{s}", f'"{schema}"'))
        await connection.execute(
            sql["meta_created"], datetime.datetime.now(datetime.UTC).isoformat()
        )
        await connection.executemany(sql["set_meta"], migrated_meta())
    return SCHEMA_VERSION
