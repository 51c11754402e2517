"""The store the configuration names (persist.store): SQLite under the data directory by
default, or PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from batonmq.config import Config
from batonmq.store.base import Store

#: The SQLite store's file in the broker's data directory.
SQLITE_FILE: Final = "batonmq.sqlite3"


def sqlite_path(data_dir: Path) -> Path:
    return data_dir / SQLITE_FILE


def postgres_schema(config: Config) -> str:
    """persist.postgres.schema, or "batonmq_s_<broker name>" (MQ 4.1 HA guide Table 8: a standalone
    broker's tables carry the suffix S<brokerID>; a cluster's shared store will use
    C<clusterID>)."""
    schema = config.persist.postgres.schema
    if schema:
        return schema
    return "batonmq_s_" + re.sub(r"[^a-z0-9_]", "_", config.broker_name.lower())


def configured_store(config: Config) -> Store:
    persist = config.persist
    if persist.store == "postgres":
        from batonmq.store.postgres import PostgresStore

        return PostgresStore(
            persist.postgres.dsn,
            broker_id=config.broker_name,
            schema=postgres_schema(config),
            sync=persist.sync,
        )
    from batonmq.store.sqlite import SQLiteStore

    return SQLiteStore(
        sqlite_path(config.data_dir), broker_id=config.broker_name, sync=persist.sync
    )
