"""A PostgreSQL store's backup: its broker's rows of each table as binary COPY files, and the
catalogue the brokers sharing the schema share, whole.

The store takes the snapshot (one REPEATABLE READ transaction on a session of its own, begun
with no write of its own under way) and writes the manifest last (`batonmq.store.backup`); this
module copies the tables out and back in, and counts what they hold. A standalone broker's
backup holds the rows of every identity of its family (`batonmq.store.pgfamily`), named in the
manifest's `identities`; a restore replaces them all.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from batonmq.store.base import SCHEMA_VERSION, StoreCorrupt, StoreError
from batonmq.store.hastore import OWNED_TABLES
from batonmq.store.pgsession import Connection, fetch_row
from batonmq.store.postgres_log import counts_with_log

#: A snapshot's tables of owned rows, in the order a restore fills them.
_SNAPSHOT: Final = OWNED_TABLES
#: The tables the brokers sharing the store share, restored whole.
_SHARED_SNAPSHOT: Final = ("users", "vhosts", "permissions")


async def copy_out(connection: Connection, schema: str, owners: list[str], directory: Path) -> None:
    """The rows of `owners`, and the shared tables, as a binary COPY file per table."""
    for table in _SNAPSHOT:
        await connection.copy_from_query(
            f'SELECT * FROM "{schema}".{table} WHERE broker_id = ANY($1)',
            owners,
            output=directory / f"{table}.bin",
            format="binary",
        )
    for table in _SHARED_SNAPSHOT:
        await connection.copy_from_query(
            f'SELECT * FROM "{schema}".{table}',
            output=directory / f"{table}.bin",
            format="binary",
        )


async def copy_in(
    connection: Connection, schema: str, replaced: list[str], directory: Path
) -> None:
    """Inside the restore's transaction: the rows of `replaced` and the shared tables deleted,
    then the files of `copy_out` copied in."""
    for table in reversed(_SNAPSHOT):
        await connection.execute(
            f'DELETE FROM "{schema}".{table} WHERE broker_id = ANY($1)', replaced
        )
    for table in _SHARED_SNAPSHOT:
        await connection.execute(f'DELETE FROM "{schema}".{table}')
    for table in (*_SHARED_SNAPSHOT, *_SNAPSHOT):
        await connection.copy_to_table(
            table, schema_name=schema, source=directory / f"{table}.bin", format="binary"
        )


async def counted(connection: Connection, sql: Mapping[str, str], owners: list[str]) -> list[int]:
    """(exchanges, queues, bindings, messages, entries, message bytes, quarantined) of
    `owners`, with what their append logs hold (`counts_with_log`), summed: read inside a
    transaction of one snapshot."""
    totals = [0] * 7
    for owner in owners:
        counts = [int(value) for value in await fetch_row(connection, sql["counts"], owner)]
        counts[3:6] = await counts_with_log(
            connection, sql, owner, (counts[3], counts[4], counts[5]), quota=False
        )
        totals = [total + part for total, part in zip(totals, counts, strict=True)]
    return totals


def backup_manifest(
    broker_id: str, schema: str, owners: list[str], counts: list[int], block: int
) -> dict[str, object]:
    """The manifest of a backup of `owners` (`counted`), taken at message id block `block`."""
    return {
        "kind": "postgres",
        "schema_version": SCHEMA_VERSION,
        "broker_id": broker_id,
        "identities": owners,
        "schema": schema,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "messages": counts[3],
        "entries": counts[4],
        "message_id_block": block,
    }


def restored(
    directory: Path,
    manifest: Mapping[str, object],
    broker_id: str,
    is_ours: Callable[[object], bool],
) -> tuple[int, list[str]]:
    """The message id block and the identities of the backup whose checked manifest is
    `manifest`, once it is one this version restores, of identities `is_ours`."""
    if manifest["schema_version"] != SCHEMA_VERSION:
        # Tables are copied whole: their columns must be this version's.
        raise StoreError(
            f"{directory} holds schema version {manifest['schema_version']}; this "
            f"BatonMQ restores version {SCHEMA_VERSION} only"
        )
    block = manifest.get("message_id_block")
    if not isinstance(block, int):
        raise StoreCorrupt(f"{directory}/manifest.json: bad message_id_block {block!r}")
    # A backup of the broker's identity alone says none.
    owners = manifest.get("identities", [broker_id])
    if not (isinstance(owners, list) and all(map(is_ours, owners))):
        raise StoreCorrupt(f"{directory}/manifest.json: bad identities {owners!r}")
    return block, owners
