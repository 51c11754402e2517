"""The PostgreSQL store: the shared store of an HA cluster, and an option for a standalone broker.

Several brokers may share one database: each store lives in a PostgreSQL schema of its own (where
Open MQ suffixes table names, MQ 4.1 HA guide Table 8: S<brokerID> for a standalone store,
C<clusterID> for a cluster's shared one), and every row carries its broker's id, so brokers may
share a schema too.

A broker owns its store by a lease: its row in `brokers` names the holder (host, pid and a token
of this process's store) and when the lease expires, on the database's clock, and carries a
fencing epoch that each start bumps. The lease is renewed on a connection of its own every third
of its length; a second broker is refused while it runs, with the holder and the expiry named.
Every write transaction first reads the epoch, FOR SHARE, and goes on only while it is still the
one this broker was given: a takeover that bumps it waits for a commit under way, and every write
after it fails with StoreFenced, whatever became of the connections in between (a session
advisory lock, used before, vanished when PostgreSQL restarted, and a second broker could then
open the store while the first kept serving). A holder on this host whose process is gone is not
waited for: a broker restarted after a crash takes its store back at once.

Everything goes over one asyncpg connection, one call at a time and in the order of the calls
(an asyncio.Lock wakes its waiters first in, first out), which is what the `Store` protocol
promises: a read issued after a commit sees it. A lost connection (PostgreSQL restarted) fails
the call under way with StoreError; the next call reconnects, and its first write checks the
epoch again.

`sync` maps onto synchronous_commit: off returns from a commit before PostgreSQL has flushed its
write-ahead log, so a crash of PostgreSQL (or of its machine) may lose the last commits, while a
crash of the broker loses nothing; the database stays consistent either way.

Puts go through executemany (pipelined): COPY into a staging table, then an upsert from it, was
measured no faster for batches of 100 to 5,000 messages of 1 KiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import operator
import os
import re
import secrets
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final, TypeAlias, TypeVar

import asyncpg

from batonmq import __version__
from batonmq.store.backup import MANIFEST, make_empty_directory, write_manifest
from batonmq.store.base import (
    GUEST_CREDENTIAL,
    GUEST_TAGS,
    LEVEL_INDEX,
    MESSAGE_ID_BLOCK,
    SCHEMA_VERSION,
    PageRead,
    QuarantinedEntry,
    QueueBacklog,
    Recovery,
    SchemaTooNew,
    SchemaTooOld,
    StoreCorrupt,
    StoredBinding,
    StoredEntry,
    StoredExchange,
    StoredMessage,
    StoredQueue,
    StoredUser,
    StoreError,
    StoreFenced,
    StoreLocked,
    StoreStats,
    StoreUnavailable,
    WriteBatch,
    message_id_base,
)
from batonmq.store.fields import decode_table, encode_table
from batonmq.store.integrity import checked_entry, checksum, report_quarantined

log = logging.getLogger(__name__)

_Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record]"
_Stored: TypeAlias = StoredExchange | StoredQueue | StoredBinding | StoredMessage | StoredEntry
_T = TypeVar("_T")

_SCHEMA_NAME: Final = re.compile(r"[a-z0-9_]{1,63}")
_CONNECT_TIMEOUT: Final = 10.0
_CLOSE_TIMEOUT: Final = 5.0
#: How long an open waits for another holder's lease to be released before StoreLocked (a
#: broker stopping while its successor starts).
_LOCK_WAIT: Final = 5.0
_LOCK_RETRY: Final = 0.1
#: Seconds a lease lasts unless renewed; it is renewed every third of that.
LEASE_SECONDS: Final = 15.0
#: What a refused or lost connection raises, besides the server's own errors.
_DATABASE_ERRORS: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)

#: Migration n (from 0) takes the schema from version n to n + 1; "{s}" is the quoted schema.
_MIGRATIONS: Final = (
    """
    CREATE SCHEMA IF NOT EXISTS {s};
    CREATE TABLE {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO {s}.meta VALUES ('created_at', now()::text);
    CREATE TABLE {s}.counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    INSERT INTO {s}.counters VALUES ('message_id_block', 0);
    CREATE TABLE {s}.brokers (broker_id TEXT PRIMARY KEY, epoch BIGINT NOT NULL,
        state TEXT NOT NULL, started_at TIMESTAMPTZ NOT NULL);
    CREATE TABLE {s}.exchanges (broker_id TEXT, vhost TEXT, name TEXT, type TEXT NOT NULL,
        auto_delete BOOLEAN NOT NULL, internal BOOLEAN NOT NULL, arguments TEXT NOT NULL,
        PRIMARY KEY (broker_id, vhost, name));
    CREATE TABLE {s}.queues (broker_id TEXT, vhost TEXT, name TEXT,
        auto_delete BOOLEAN NOT NULL, arguments TEXT NOT NULL,
        PRIMARY KEY (broker_id, vhost, name));
    CREATE TABLE {s}.bindings (broker_id TEXT, vhost TEXT, source TEXT, destination_kind TEXT,
        destination TEXT, routing_key TEXT, arguments TEXT, PRIMARY KEY (broker_id, vhost,
        source, destination_kind, destination, routing_key, arguments));
    CREATE TABLE {s}.messages (broker_id TEXT NOT NULL, id BIGINT PRIMARY KEY,
        exchange TEXT NOT NULL, routing_key TEXT NOT NULL, header_payload BYTEA NOT NULL,
        body BYTEA NOT NULL);
    CREATE TABLE {s}.entries (broker_id TEXT, vhost TEXT, queue TEXT, sequence BIGINT,
        message_id BIGINT NOT NULL, delivery_count INTEGER NOT NULL, transient BOOLEAN NOT NULL,
        PRIMARY KEY (broker_id, vhost, queue, sequence));
    CREATE INDEX entries_message_id ON {s}.entries (message_id);
    """,
    # Version 2: entries carry their expiry time (message TTL), wall-clock milliseconds.
    """
    ALTER TABLE {s}.entries ADD COLUMN IF NOT EXISTS expires_at BIGINT;
    """,
    # Version 3: entries carry their priority level, so a priority queue pages each level.
    """
    ALTER TABLE {s}.entries ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX IF NOT EXISTS entries_priority
        ON {s}.entries (broker_id, vhost, queue, priority, sequence);
    """,
    # Version 4: users (with guest/guest, as every new store) and virtual hosts, store-wide.
    f"""
    CREATE TABLE IF NOT EXISTS {{s}}.users (name TEXT PRIMARY KEY, credential TEXT NOT NULL);
    INSERT INTO {{s}}.users VALUES ('guest', '{GUEST_CREDENTIAL}') ON CONFLICT DO NOTHING;
    CREATE TABLE IF NOT EXISTS {{s}}.vhosts (name TEXT PRIMARY KEY);
    INSERT INTO {{s}}.vhosts SELECT vhost FROM {{s}}.exchanges UNION SELECT vhost FROM {{s}}.queues
        ON CONFLICT DO NOTHING;
    """,
    # Version 5: the level index holds only levels above 0 (see `LEVEL_INDEX`).
    f"""
    DROP INDEX IF EXISTS {{s}}.entries_priority;
    CREATE INDEX entries_priority ON {{s}}.entries {LEVEL_INDEX};
    """,
    # Version 6: message checksums (NULL, unchecked, for those written before; see
    # batonmq.store.integrity), and the quarantine of entries whose message fails its own.
    """
    ALTER TABLE {s}.messages ADD COLUMN IF NOT EXISTS checksum BIGINT;
    CREATE TABLE IF NOT EXISTS {s}.quarantined_messages (broker_id TEXT NOT NULL,
        vhost TEXT NOT NULL, queue TEXT NOT NULL, sequence BIGINT NOT NULL,
        delivery_count INTEGER NOT NULL, message_id BIGINT NOT NULL, exchange TEXT NOT NULL,
        routing_key TEXT NOT NULL, header_payload BYTEA NOT NULL, body BYTEA NOT NULL,
        checksum BIGINT, quarantined_at TIMESTAMPTZ NOT NULL);
    """,
    # Version 7: a broker owns its store by a lease (holder, expiry) with a fencing epoch.
    """
    ALTER TABLE {s}.brokers ADD COLUMN IF NOT EXISTS holder TEXT;
    ALTER TABLE {s}.brokers ADD COLUMN IF NOT EXISTS lease_expires TIMESTAMPTZ;
    """,
    # Version 8: users carry RabbitMQ's tags; the guest user of a schema being created (no
    # schema version written yet) is an administrator, as RabbitMQ's default user.
    f"""
    ALTER TABLE {{s}}.users ADD COLUMN IF NOT EXISTS tags TEXT NOT NULL DEFAULT '';
    UPDATE {{s}}.users SET tags = '{GUEST_TAGS}' WHERE name = 'guest'
        AND NOT EXISTS (SELECT 1 FROM {{s}}.meta WHERE key = 'schema_version');
    """,
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

#: Message ids of a commit's deleted entries, whose messages may be left without an entry.
_CANDIDATES: Final = "batonmq_orphan_candidates"
_ENTRY: Final = "broker_id = $1 AND vhost = $2 AND queue = $3"
# The statements that look up one row per row of another table keep the lookup a subquery
# fenced with OFFSET 0, which the planner cannot turn into a join: each row is one probe of the
# index, whatever the table statistics say. A queue's tables are often analysed while empty (a
# drained queue; autovacuum); a join then planned as a nested loop with the whole index as its
# inner side and the key as a filter, walking every index entry (dead ones too) per row: 73 ms
# instead of 1.4 ms for the orphans of a 1,000-message commit, growing with the table.
_READ_ENTRIES: Final = (
    "SELECT e.sequence, e.delivery_count, e.expires_at, e.priority, m.id, m.exchange, "
    "m.routing_key, m.header_payload, m.body, m.checksum FROM {s}.entries AS e "
    "CROSS JOIN LATERAL (SELECT * FROM "
    "{s}.messages AS m WHERE m.id = e.message_id OFFSET 0) AS m "
    f"WHERE e.{_ENTRY.replace(' AND ', ' AND e.')} AND e.sequence > $4"
)
_NEXT: Final = "ORDER BY e.sequence LIMIT $5"
_ORPHANS: Final = "NOT EXISTS (SELECT 1 FROM {s}.entries AS e WHERE e.message_id = m.id OFFSET 0)"
#: A stored message's bytes, as `used_bytes` counts them (octet_length reads a TOASTed value's
#: size from its pointer: the value itself is not fetched).
_MESSAGE_SIZE: Final = "octet_length(m.header_payload) + octet_length(m.body)"
_SQL: Final = {
    "delete_queue_entries": f"WITH gone AS (DELETE FROM {{s}}.entries WHERE {_ENTRY} RETURNING "
    f"message_id) INSERT INTO pg_temp.{_CANDIDATES} SELECT message_id FROM gone",
    "delete_queue_bindings": "DELETE FROM {s}.bindings WHERE broker_id = $1 AND vhost = $2 "
    "AND destination_kind = 'queue' AND destination = $3",
    "delete_queue": "DELETE FROM {s}.queues WHERE broker_id = $1 AND vhost = $2 AND name = $3",
    "delete_exchange_bindings": "DELETE FROM {s}.bindings WHERE broker_id = $1 AND vhost = $2 "
    "AND (source = $3 OR (destination_kind = 'exchange' AND destination = $3))",
    "delete_exchange": "DELETE FROM {s}.exchanges WHERE broker_id = $1 AND vhost = $2 "
    "AND name = $3",
    "delete_binding": "DELETE FROM {s}.bindings WHERE broker_id = $1 AND vhost = $2 AND "
    "source = $3 AND destination_kind = $4 AND destination = $5 AND routing_key = $6 AND "
    "arguments = $7",
    "delete_range": f"WITH gone AS (DELETE FROM {{s}}.entries WHERE {_ENTRY} AND sequence "
    "BETWEEN $4 AND $5 AND ($6::integer IS NULL OR priority = $6) RETURNING message_id) "
    f"INSERT INTO pg_temp.{_CANDIDATES} SELECT message_id FROM gone",
    "delete_vhost_entries": "WITH gone AS (DELETE FROM {s}.entries WHERE broker_id = $1 "
    f"AND vhost = $2 RETURNING message_id) INSERT INTO pg_temp.{_CANDIDATES} "
    "SELECT message_id FROM gone",
    **{
        f"delete_vhost_{table}": f"DELETE FROM {{s}}.{table} WHERE broker_id = $1 AND vhost = $2"
        for table in ("bindings", "queues", "exchanges")
    },
    "delete_vhost": "DELETE FROM {s}.vhosts WHERE name = $1",
    "put_vhost": "INSERT INTO {s}.vhosts VALUES ($1) ON CONFLICT DO NOTHING",
    "put_user": "INSERT INTO {s}.users (name, credential, tags) VALUES ($1, $2, $3) "
    "ON CONFLICT (name) DO UPDATE SET credential = EXCLUDED.credential, tags = EXCLUDED.tags",
    "delete_user": "DELETE FROM {s}.users WHERE name = $1",
    "users": "SELECT name, credential, tags FROM {s}.users ORDER BY name",
    "vhosts": "SELECT name FROM {s}.vhosts ORDER BY name",
    "put_exchange": "INSERT INTO {s}.exchanges VALUES ($1, $2, $3, $4, $5, $6, $7) "
    "ON CONFLICT (broker_id, vhost, name) DO UPDATE SET type = EXCLUDED.type, "
    "auto_delete = EXCLUDED.auto_delete, internal = EXCLUDED.internal, "
    "arguments = EXCLUDED.arguments",
    "put_queue": "INSERT INTO {s}.queues VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (broker_id, vhost, name) DO UPDATE SET auto_delete = EXCLUDED.auto_delete, "
    "arguments = EXCLUDED.arguments",
    "put_binding": "INSERT INTO {s}.bindings VALUES ($1, $2, $3, $4, $5, $6, $7) "
    "ON CONFLICT DO NOTHING",
    # Never over another broker's message (ids are unique per store; this only fences a bug).
    "put_message": "INSERT INTO {s}.messages VALUES ($1, $2, $3, $4, $5, $6, $7) "
    "ON CONFLICT (id) DO UPDATE SET exchange = EXCLUDED.exchange, "
    "routing_key = EXCLUDED.routing_key, header_payload = EXCLUDED.header_payload, "
    "body = EXCLUDED.body, checksum = EXCLUDED.checksum "
    "WHERE messages.broker_id = EXCLUDED.broker_id",
    "put_entry": "INSERT INTO {s}.entries VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
    "ON CONFLICT (broker_id, vhost, queue, sequence) DO UPDATE SET "
    "message_id = EXCLUDED.message_id, delivery_count = EXCLUDED.delivery_count, "
    "transient = EXCLUDED.transient, expires_at = EXCLUDED.expires_at, "
    "priority = EXCLUDED.priority",
    "update_entry": f"UPDATE {{s}}.entries SET delivery_count = $5 WHERE {_ENTRY} "
    "AND sequence = $4",
    "delete_entry": f"DELETE FROM {{s}}.entries WHERE {_ENTRY} AND sequence = $4",
    # The entry, with a copy of its message as stored, moves to the quarantine.
    "quarantine_entry": "WITH gone AS (DELETE FROM {s}.entries WHERE "
    f"{_ENTRY} AND sequence = $4 RETURNING *) INSERT INTO {{s}}.quarantined_messages "
    "SELECT e.broker_id, e.vhost, e.queue, e.sequence, e.delivery_count, m.id, m.exchange, "
    "m.routing_key, m.header_payload, m.body, m.checksum, now() FROM gone AS e "
    "JOIN {s}.messages AS m ON m.id = e.message_id",
    "delete_orphan": f"DELETE FROM {{s}}.messages AS m WHERE m.broker_id = $1 AND m.id = $2 "
    f"AND {_ORPHANS}",
    # Both return the bytes of the messages they delete (see `used_bytes`).
    "delete_orphans": "WITH gone AS (DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 "
    f"AND m.id = ANY($2::bigint[]) AND {_ORPHANS} RETURNING {_MESSAGE_SIZE} AS size) "
    "SELECT COALESCE(sum(size), 0) FROM gone",
    "delete_orphans_too": "WITH gone AS (DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 "
    f"AND m.id IN (SELECT id FROM pg_temp.{_CANDIDATES} UNION ALL SELECT unnest($2::bigint[])) "
    f"AND {_ORPHANS} RETURNING {_MESSAGE_SIZE} AS size) SELECT COALESCE(sum(size), 0) FROM gone",
    "message_bytes": f"SELECT COALESCE(sum({_MESSAGE_SIZE}), 0) FROM {{s}}.messages AS m "
    "WHERE m.broker_id = $1",
    "stored_bytes": f"SELECT COALESCE(sum({_MESSAGE_SIZE}), 0) FROM {{s}}.messages AS m "
    "WHERE m.broker_id = $1 AND m.id = ANY($2::bigint[])",
    "discard_entries": "DELETE FROM {s}.entries AS e WHERE e.broker_id = $1 AND (e.transient OR "
    "NOT EXISTS (SELECT 1 FROM {s}.queues AS q WHERE q.broker_id = $1 AND q.vhost = e.vhost "
    "AND q.name = e.queue))",
    "discard_messages": f"DELETE FROM {{s}}.messages AS m WHERE m.broker_id = $1 AND {_ORPHANS}",
    "exchanges": "SELECT * FROM {s}.exchanges WHERE broker_id = $1 ORDER BY vhost, name",
    "queues": "SELECT * FROM {s}.queues WHERE broker_id = $1 ORDER BY vhost, name",
    "bindings": "SELECT * FROM {s}.bindings WHERE broker_id = $1 ORDER BY vhost, source, "
    "destination_kind, destination, routing_key, arguments",
    "backlogs": "SELECT q.vhost, q.name, count(e.sequence), COALESCE(sum(octet_length(m.body)), "
    "0), COALESCE(max(e.sequence), -1), COALESCE(e.priority, 0) FROM {s}.queues AS q "
    "LEFT JOIN {s}.entries AS e ON e.broker_id = q.broker_id AND e.vhost = q.vhost "
    "AND e.queue = q.name LEFT JOIN {s}.messages AS m ON m.id = e.message_id "
    "WHERE q.broker_id = $1 GROUP BY q.vhost, q.name, e.priority "
    "ORDER BY q.vhost, q.name, e.priority",
    "next_block": "UPDATE {s}.counters SET value = value + 1 WHERE name = 'message_id_block' "
    "RETURNING value",
    "block": "SELECT value FROM {s}.counters WHERE name = 'message_id_block'",
    # Any level ($6 null) or level 0, through the primary key.
    "read_entries": f"{_READ_ENTRIES} AND ($6::integer IS NULL OR e.priority = $6) {_NEXT}",
    # A level above 0: `e.priority > 0` lets the planner prove the partial index applies.
    "read_level_entries": f"{_READ_ENTRIES} AND e.priority = $6 AND e.priority > 0 {_NEXT}",
    "counts": "SELECT (SELECT count(*) FROM {s}.exchanges WHERE broker_id = $1), "
    "(SELECT count(*) FROM {s}.queues WHERE broker_id = $1), "
    "(SELECT count(*) FROM {s}.bindings WHERE broker_id = $1), count(*), "
    "(SELECT count(*) FROM {s}.entries WHERE broker_id = $1), "
    "COALESCE(sum(octet_length(body)), 0), "
    "(SELECT count(*) FROM {s}.quarantined_messages WHERE broker_id = $1) "
    "FROM {s}.messages WHERE broker_id = $1",
    "enrol": "INSERT INTO {s}.brokers (broker_id, epoch, state, started_at) "
    "VALUES ($1, 0, 'stopped', now()) ON CONFLICT (broker_id) DO NOTHING",
    "lease": "SELECT state, holder, lease_expires, lease_expires > now() FROM {s}.brokers "
    "WHERE broker_id = $1 FOR UPDATE",
    "claim": "UPDATE {s}.brokers SET epoch = epoch + 1, state = 'running', started_at = now(), "
    "holder = $2, lease_expires = now() + $3::float8 * interval '1 second' WHERE broker_id = $1 "
    "RETURNING epoch",
    "renew": "UPDATE {s}.brokers SET lease_expires = now() + $3::float8 * interval '1 second' "
    "WHERE broker_id = $1 AND epoch = $2",
    "epoch": "SELECT epoch FROM {s}.brokers WHERE broker_id = $1 FOR SHARE",
    "stop": "UPDATE {s}.brokers SET state = 'stopped', holder = NULL, lease_expires = NULL "
    "WHERE broker_id = $1 AND epoch = $2",
    "version": "SELECT value FROM {s}.meta WHERE key = 'schema_version'",
    "set_meta": "INSERT INTO {s}.meta VALUES ($1, $2) ON CONFLICT (key) "
    "DO UPDATE SET value = EXCLUDED.value",
    # Ids of restored messages must never be handed out again.
    "restore_block": "UPDATE {s}.counters SET value = GREATEST(value, $2::bigint, "
    "(SELECT COALESCE(max(id), 0) / $3::bigint FROM {s}.messages WHERE broker_id = $1)) "
    "WHERE name = 'message_id_block'",
}
#: A snapshot's tables, in the order a restore fills them.
_SNAPSHOT: Final = (
    "exchanges",
    "queues",
    "bindings",
    "messages",
    "entries",
    "quarantined_messages",
)
#: The tables the brokers sharing the store share, restored whole.
_SHARED_SNAPSHOT: Final = ("users", "vhosts")


class PostgresStore:
    """A broker's store in one schema of a PostgreSQL database (see the module docstring)."""

    def __init__(self, dsn: str, *, broker_id: str, schema: str, sync: bool = True) -> None:
        if not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_"):
            raise StoreError(
                f"invalid PostgreSQL schema name {schema!r}: use 1 to 63 of a-z, 0-9 and _, "
                "not starting with pg_"
            )
        self._dsn, safe_dsn, self._secrets = _parse_dsn(dsn)
        self._broker_id, self._schema, self._sync = broker_id, schema, sync
        self._location = f"{safe_dsn} schema {schema}"
        self._sql = {name: text.replace("{s}", f'"{schema}"') for name, text in _SQL.items()}
        self._migration_key = _advisory_key("migrate", schema)
        self._calls = asyncio.Lock()
        self._connection: _Connection | None = None
        self._opened = self._locking = False
        self._version = 0
        #: Who holds the lease when this store does: this host, process, and store object.
        self._holder = f"{socket.gethostname()} pid {os.getpid()} #{secrets.token_hex(4)}"
        #: The fencing epoch this broker was given when it claimed the store (0: not claimed).
        self._epoch = 0
        #: Whether the previous holder stopped without releasing the lease (a crash).
        self._unclean_stop = False
        self._fenced: StoreFenced | None = None
        self._fenced_handler: Callable[[StoreFenced], None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        #: The bytes of this broker's stored messages (`used_bytes`), kept up to date by each
        #: commit once counted; None when not known (before the first count, and after a
        #: failed commit, a recovery or a restore), when the next `used_bytes` counts again.
        self._message_bytes: int | None = None

    @property
    def kind(self) -> str:
        return "postgres"

    @property
    def location(self) -> str:
        return self._location

    @property
    def schema_version(self) -> int:
        return self._version

    async def open(
        self,
        *,
        create: bool = True,
        migrate: bool = True,
        lock: bool = True,
        replace_lost: bool = False,
    ) -> None:
        """See `Store.open`; `replace_lost` changes nothing here: a schema holds its own version,
        so a store is found whole or not at all (a dropped schema is an empty store)."""
        async with self._calls:
            if self._opened:
                raise StoreError(f"the store {self._location} is already open")
            self._locking = lock
            connection = await self._connect()
            try:
                version = await self._read_version(connection)
                if lock and version < SCHEMA_VERSION and (migrate if version else create):
                    version = await self._migrate(connection)
                if lock and version == SCHEMA_VERSION:
                    await self._claim(connection)
            except _DATABASE_ERRORS as error:
                connection.terminate()
                raise StoreUnavailable(self._failure("cannot open", error)) from error
            except BaseException:
                connection.terminate()
                raise
            self._connection, self._version, self._opened = connection, version, True

    async def recover(self) -> Recovery:
        async def work(connection: _Connection) -> Recovery:
            self._require_current(write=True)
            broker, sql = self._broker_id, self._sql
            self._message_bytes = None
            async with connection.transaction():
                # Recovery joins whole tables (`backlogs`): with statistics taken while they were
                # empty, a nested loop walked one table per row of the other (38 s for 20,000
                # entries); hash and merge joins are linear whatever the statistics.
                await connection.execute("SET LOCAL enable_nestloop = off")
                await self._check_epoch(connection)
                discarded = _row_count(await connection.execute(sql["discard_entries"], broker))
                await connection.execute(sql["discard_messages"], broker)
                exchanges = await connection.fetch(sql["exchanges"], broker)
                queues = await connection.fetch(sql["queues"], broker)
                bindings = await connection.fetch(sql["bindings"], broker)
                backlogs = await connection.fetch(sql["backlogs"], broker)
                users = await connection.fetch(sql["users"])
                vhosts = await connection.fetch(sql["vhosts"])
                block = await connection.fetchval(sql["next_block"])
            first_message_id = message_id_base(block, self._location)
            return Recovery(
                exchanges=[_decode(StoredExchange, row) for row in exchanges],
                queues=[_decode(StoredQueue, row) for row in queues],
                bindings=[_decode(StoredBinding, row) for row in bindings],
                backlogs=[QueueBacklog(*row) for row in backlogs],
                message_id_base=first_message_id,
                users=[_user(row) for row in users],
                vhosts=[row[0] for row in vhosts],
                discarded_entries=discarded,
                unclean_stop=self._unclean_stop,
            )

        return await self._call("recovery", work)

    async def commit(self, batch: WriteBatch) -> None:
        async def work(connection: _Connection) -> None:
            self._require_current(write=True)
            # Off the event loop (zlib releases the GIL on large bodies), and in call order:
            # a read issued after this commit waits for it.
            checksums = (
                await asyncio.to_thread(_checksums, batch.messages_put)
                if batch.messages_put
                else []
            )
            counted, self._message_bytes = self._message_bytes, None
            growth = 0
            async with connection.transaction():
                await self._check_epoch(connection)
                if counted is not None and batch.messages_put:
                    # A message put again (another queue paging it out) replaces its row.
                    put = [message.id for message in batch.messages_put]
                    growth -= await connection.fetchval(
                        self._sql["stored_bytes"], self._broker_id, put
                    )
                    growth += sum(
                        len(message.header_payload) + len(message.body)
                        for message in batch.messages_put
                    )
                for name, rows in self._steps(batch, checksums):
                    if rows:
                        await connection.executemany(self._sql[name], rows)
                # Last, the messages no entry refers to any more, among those that lost one.
                candidates = [message_id for *_, message_id in batch.entries_deleted]
                candidates += [message.id for message in batch.messages_put]
                if batch.queues_deleted or batch.ranges_deleted or batch.vhosts_deleted:
                    growth -= await connection.fetchval(
                        self._sql["delete_orphans_too"], self._broker_id, candidates
                    )
                elif candidates:
                    growth -= await connection.fetchval(
                        self._sql["delete_orphans"], self._broker_id, candidates
                    )
            # Known again only once the transaction is committed: a failed commit (maybe
            # committed after all, when the connection was lost) leaves it to be counted.
            if counted is not None:
                self._message_bytes = counted + growth

        if batch:
            await self._call("commit", work)

    def _steps(
        self, batch: WriteBatch, checksums: list[int]
    ) -> list[tuple[str, Sequence[tuple[object, ...]]]]:
        """The batch's statements and rows, in WriteBatch's order (`checksums` those of its
        messages). Entries that go with their queue or in a range leave their message ids in a
        temporary table."""
        broker = self._broker_id
        queues = [(broker, *key) for key in batch.queues_deleted]
        exchanges = [(broker, *key) for key in batch.exchanges_deleted]
        vhosts = [(broker, vhost) for vhost in batch.vhosts_deleted]
        return [
            ("delete_vhost_entries", vhosts),
            ("delete_vhost_bindings", vhosts),
            ("delete_vhost_queues", vhosts),
            ("delete_vhost_exchanges", vhosts),
            ("delete_vhost", [(vhost,) for vhost in batch.vhosts_deleted]),
            ("delete_queue_entries", queues),
            ("delete_queue_bindings", queues),
            ("delete_queue", queues),
            ("delete_exchange_bindings", exchanges),
            ("delete_exchange", exchanges),
            ("delete_binding", [_row(broker, item) for item in batch.bindings_deleted]),
            ("delete_range", [(broker, *purge) for purge in batch.ranges_deleted]),
            ("put_vhost", [(vhost,) for vhost in batch.vhosts_put]),
            ("put_exchange", [_row(broker, item) for item in batch.exchanges_put]),
            ("put_queue", [_row(broker, item) for item in batch.queues_put]),
            ("put_binding", [_row(broker, item) for item in batch.bindings_put]),
            (
                "put_message",
                [
                    (*_row(broker, item), item_checksum)
                    for item, item_checksum in zip(batch.messages_put, checksums, strict=True)
                ],
            ),
            ("put_entry", [_row(broker, item) for item in batch.entries_put]),
            ("update_entry", [(broker, *update) for update in batch.entries_updated]),
            ("delete_entry", [(broker, *entry[:3]) for entry in batch.entries_deleted]),
            (
                "put_user",
                [(user.name, user.credential, user.tags_text) for user in batch.users_put],
            ),
            ("delete_user", [(name,) for name in batch.users_deleted]),
        ]

    async def read_entries(
        self, vhost: str, queue: str, after_sequence: int, limit: int, priority: int | None = None
    ) -> PageRead:
        async def work(connection: _Connection) -> PageRead:
            self._require_current(write=False)
            rows = await connection.fetch(
                self._sql["read_level_entries" if priority else "read_entries"],
                self._broker_id,
                vhost,
                queue,
                after_sequence,
                limit,
                priority,
            )
            # Off the event loop, as the checksums of a commit are.
            page = await asyncio.to_thread(_checked_page, rows) if rows else []
            quarantined = [entry for entry in page if isinstance(entry, QuarantinedEntry)]
            if quarantined:
                self._require_current(write=True)
                self._message_bytes = None
                async with connection.transaction():
                    await self._check_epoch(connection)
                    await connection.executemany(
                        self._sql["quarantine_entry"],
                        [(self._broker_id, vhost, queue, entry.sequence) for entry in quarantined],
                    )
                    await connection.executemany(
                        self._sql["delete_orphan"],
                        [(self._broker_id, entry.message_id) for entry in quarantined],
                    )
                for entry in quarantined:
                    report_quarantined(self._location, vhost, queue, entry)
            return page

        return await self._call("reading entries", work)

    async def users(self) -> list[StoredUser]:
        rows = await self._fetch_all("reading users", "users")
        return [_user(row) for row in rows]

    async def vhosts(self) -> list[str]:
        return [row[0] for row in await self._fetch_all("reading virtual hosts", "vhosts")]

    async def _fetch_all(self, what: str, query: str) -> list[asyncpg.Record]:
        async def work(connection: _Connection) -> list[asyncpg.Record]:
            self._require_current(write=False)
            return await connection.fetch(self._sql[query])

        return await self._call(what, work)

    async def stats(self) -> StoreStats:
        async def work(connection: _Connection) -> StoreStats:
            self._require_current(write=False)
            counts = await _fetch_row(connection, self._sql["counts"], self._broker_id)
            return StoreStats("postgres", self._location, self._version, self._broker_id, *counts)

        return await self._call("reading statistics", work)

    async def used_bytes(self) -> int:
        """The bytes of this broker's stored messages (content header and body, as received):
        counted once by a scan of its messages, then kept by each commit (the bytes of the
        messages it puts, less those of the rows it replaces and of the messages it deletes,
        which its statements return). It falls as soon as messages are deleted, where the
        tables' size on disk (pg_total_relation_size) would wait for a VACUUM FULL; it leaves
        out the rows' overhead, the indexes, TOAST compression and the other brokers sharing
        the database. Counting on every call instead was measured at 0.2 to 0.35 s for
        500,000 messages of 1 KiB (15 ms for 100,000), all of it holding the store's one
        connection: too much for a check every second; keeping the count costs a commit that
        puts messages one indexed read, lost in the noise of a 1.6 ms commit of 50 messages. A
        commit that ran while nothing was counted yet pays nothing (a broker without a quota
        never counts). A store opened without the lock, which another process writes, counts
        every time."""

        async def work(connection: _Connection) -> int:
            self._require_current(write=False)
            counted = self._message_bytes
            if counted is None or not self._locking:
                counted = int(
                    await connection.fetchval(self._sql["message_bytes"], self._broker_id)
                )
                if self._locking:
                    self._message_bytes = counted
            return counted

        return await self._call("measuring the store", work)

    async def backup(self, directory: Path) -> None:
        """This broker's rows of each table as binary COPY files, read in one
        REPEATABLE READ transaction on a second connection. The snapshot is taken in call order,
        so it holds every commit made before; the copying does not hold up the broker's calls."""
        async with self._calls:
            if not self._opened:
                raise StoreError(f"the store {self._location} is not open")
            self._require_current(write=False)
        await asyncio.to_thread(make_empty_directory, directory)
        connection = await self._connect(lock=False)
        try:
            async with connection.transaction(isolation="repeatable_read", readonly=True):
                async with self._calls:
                    counts = await _fetch_row(connection, self._sql["counts"], self._broker_id)
                    block = await connection.fetchval(self._sql["block"])
                for table in _SNAPSHOT:
                    await connection.copy_from_query(
                        f'SELECT * FROM "{self._schema}".{table} WHERE broker_id = $1',
                        self._broker_id,
                        output=directory / f"{table}.bin",
                        format="binary",
                    )
                for table in _SHARED_SNAPSHOT:
                    await connection.copy_from_query(
                        f'SELECT * FROM "{self._schema}".{table}',
                        output=directory / f"{table}.bin",
                        format="binary",
                    )
        except _DATABASE_ERRORS as error:
            raise StoreError(self._failure("backup failed on", error)) from error
        finally:
            await _close(connection)
        manifest = {
            "kind": "postgres",
            "schema_version": SCHEMA_VERSION,
            "broker_id": self._broker_id,
            "schema": self._schema,
            "created_at": datetime.datetime.now(datetime.UTC).isoformat(),
            "messages": counts[3],
            "entries": counts[4],
            "message_id_block": block,
        }
        # Written last: a directory without a manifest is not a backup.
        await asyncio.to_thread(write_manifest, directory, manifest)

    async def restore(self, directory: Path) -> None:
        manifest = await asyncio.to_thread(_read_manifest, directory)
        if manifest.get("kind") != "postgres":
            raise StoreError(f"{directory} is not a backup of a PostgreSQL store")
        if isinstance(version := manifest.get("schema_version"), int) and version > SCHEMA_VERSION:
            raise SchemaTooNew(f"the backup in {directory} has schema version {version}")
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{directory} holds schema version {manifest.get('schema_version')!r}; this "
                f"BatonMQ restores version {SCHEMA_VERSION} only"
            )
        if manifest.get("broker_id") != self._broker_id:
            raise StoreError(
                f"the backup in {directory} is broker {manifest.get('broker_id')!r}'s, "
                f"not {self._broker_id!r}'s"
            )
        block = manifest.get("message_id_block")
        if not isinstance(block, int):
            raise StoreCorrupt(f"{directory}/manifest.json: bad message_id_block {block!r}")

        async def work(connection: _Connection) -> None:
            self._require_current(write=True)
            broker = self._broker_id
            self._message_bytes = None
            async with connection.transaction():
                for table in reversed(_SNAPSHOT):
                    await connection.execute(
                        f'DELETE FROM "{self._schema}".{table} WHERE broker_id = $1', broker
                    )
                for table in _SHARED_SNAPSHOT:
                    await connection.execute(f'DELETE FROM "{self._schema}".{table}')
                for table in (*_SHARED_SNAPSHOT, *_SNAPSHOT):
                    await connection.copy_to_table(
                        table,
                        schema_name=self._schema,
                        source=directory / f"{table}.bin",
                        format="binary",
                    )
                counts = await _fetch_row(connection, self._sql["counts"], broker)
                if [counts[3], counts[4]] != [manifest.get("messages"), manifest.get("entries")]:
                    raise StoreCorrupt(f"{directory}: the tables do not match manifest.json")
                await connection.execute(
                    self._sql["restore_block"], broker, block, MESSAGE_ID_BLOCK
                )

        await self._call(f"restoring {directory} into", work)

    async def upgrade(self) -> tuple[int, int]:
        async def work(connection: _Connection) -> tuple[int, int]:
            if not self._locking:
                raise StoreError(f"{self._location} was opened read-only: cannot upgrade it")
            found = self._version
            if found < SCHEMA_VERSION:
                self._version = await self._migrate(connection)
                await self._claim(connection)
            return found, self._version

        return await self._call("upgrade of", work)

    async def close(self) -> None:
        async with self._calls:
            connection, self._connection, self._opened = self._connection, None, False
            self._message_bytes = None
            lease, self._lease_task = self._lease_task, None
            if lease is not None:
                lease.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lease
            if connection is None:
                return
            try:
                if self._epoch and self._fenced is None and not connection.is_closed():
                    # The lease is released: the next holder knows this stop was clean.
                    with contextlib.suppress(*_DATABASE_ERRORS):
                        await connection.execute(
                            self._sql["stop"], self._broker_id, self._epoch, timeout=_CLOSE_TIMEOUT
                        )
            finally:
                self._epoch = 0
                await _close(connection)

    def on_fenced(self, handler: Callable[[StoreFenced], None]) -> None:
        self._fenced_handler = handler

    # The lease ------------------------------------------------------------------------------

    async def _claim(self, connection: _Connection) -> None:
        """Take the store's lease and a new fencing epoch, waiting a little for a holder that is
        letting go; StoreLocked while another broker holds it."""
        deadline = asyncio.get_running_loop().time() + _LOCK_WAIT
        await connection.execute(self._sql["enrol"], self._broker_id)
        while True:
            async with connection.transaction():
                state, holder, expires, live = await _fetch_row(
                    connection, self._sql["lease"], self._broker_id
                )
                if not (live and state == "running" and holder != self._holder) or _gone(holder):
                    self._epoch = await connection.fetchval(
                        self._sql["claim"], self._broker_id, self._holder, LEASE_SECONDS
                    )
                    self._unclean_stop = state == "running"
                    break
            if asyncio.get_running_loop().time() >= deadline:
                raise StoreLocked(
                    f"the store of broker {self._broker_id!r} at {self._location} is in use by "
                    f"another running broker ({holder}); its lease expires at "
                    f"{expires:%Y-%m-%d %H:%M:%S %Z} unless that broker renews it"
                )
            await asyncio.sleep(_LOCK_RETRY)
        self._fenced = None
        if self._lease_task is None:
            self._lease_task = asyncio.get_running_loop().create_task(
                self._keep_lease(), name="store lease"
            )

    async def _keep_lease(self) -> None:
        """Renew the lease on a connection of its own, so that commits never delay it; find out
        there, too, that another broker took the store over."""
        connection: _Connection | None = None
        try:
            while self._fenced is None:
                await asyncio.sleep(LEASE_SECONDS / 3)
                try:
                    if connection is None or connection.is_closed():
                        connection = await self._connect(lock=False)
                    renewed = await connection.execute(
                        self._sql["renew"], self._broker_id, self._epoch, LEASE_SECONDS
                    )
                except (StoreError, *_DATABASE_ERRORS) as error:
                    # The next commit reports an outage; the lease is renewed once it is over.
                    log.debug("store lease not renewed: %s", error)
                    if connection is not None:
                        connection.terminate()
                        connection = None
                    continue
                if _row_count(renewed) == 0:
                    self._fence("its lease could not be renewed")
        finally:
            if connection is not None:
                await _close(connection)

    async def _check_epoch(self, connection: _Connection) -> None:
        """Inside a write transaction: go on only while this broker still owns the store."""
        epoch = await connection.fetchval(self._sql["epoch"], self._broker_id)
        if epoch != self._epoch:
            raise self._fence(f"its epoch {self._epoch} is now {epoch}")

    def _fence(self, why: str) -> StoreFenced:
        if self._fenced is None:
            self._fenced = StoreFenced(
                f"broker {self._broker_id!r} no longer owns its store at {self._location}: "
                f"another broker has taken it over ({why}); nothing more is written"
            )
            if self._fenced_handler is not None:
                self._fenced_handler(self._fenced)
        return StoreFenced(str(self._fenced))

    async def _call(self, what: str, work: Callable[[_Connection], Awaitable[_T]]) -> _T:
        """Run `work` in call order on a live connection (reconnecting after a lost one); a
        database error becomes StoreError, and a connection in an unknown state is dropped."""
        async with self._calls:
            if not self._opened:
                raise StoreError(f"the store {self._location} is not open")
            if self._fenced is not None:
                raise StoreFenced(str(self._fenced))
            connection = self._connection
            if connection is None or connection.is_closed():
                self._connection = None
                if connection is not None:
                    connection.terminate()
                connection = self._connection = await self._connect()
            try:
                return await work(connection)
            except BaseException as error:
                if connection.is_closed() or connection.is_in_transaction():
                    self._connection = None
                    connection.terminate()
                if isinstance(error, _DATABASE_ERRORS):
                    raise StoreError(self._failure(f"{what} failed on", error)) from error
                raise

    async def _connect(self, *, lock: bool | None = None) -> _Connection:
        """A new session; when this store writes (and `lock` is not False) it has the temporary
        table the commits use."""
        try:
            connection = await asyncpg.connect(
                self._dsn,
                timeout=_CONNECT_TIMEOUT,
                server_settings={
                    "application_name": f"batonmq {self._broker_id}"[:63],
                    "synchronous_commit": "on" if self._sync else "off",
                },
            )
        except (*_DATABASE_ERRORS, ValueError) as error:
            raise StoreUnavailable(self._failure("cannot connect to", error)) from error
        if not (self._locking if lock is None else lock):
            return connection
        try:
            await connection.execute(
                f"CREATE TEMPORARY TABLE {_CANDIDATES} (id BIGINT NOT NULL) ON COMMIT DELETE ROWS"
            )
        except BaseException as error:
            connection.terminate()
            if isinstance(error, _DATABASE_ERRORS):
                raise StoreUnavailable(self._failure("cannot prepare", error)) from error
            raise
        return connection

    async def _read_version(self, connection: _Connection) -> int:
        """0 for no schema or an empty one; StoreCorrupt for tables without a version."""
        tables = await connection.fetch(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
            self._schema,
        )
        if not tables:
            return 0
        found = "meta" in {row[0] for row in tables} and await connection.fetchval(
            self._sql["version"]
        )
        if not isinstance(found, str) or not found.isdigit():
            raise StoreCorrupt(
                f"{self._location} holds tables but no BatonMQ schema version: it is not a "
                "BatonMQ store, or it is damaged"
            )
        if int(found) > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{self._location} has schema version {found}, written by a newer BatonMQ; this "
                f"one reads up to version {SCHEMA_VERSION}"
            )
        return int(found)

    async def _migrate(self, connection: _Connection) -> int:
        """Migrate to SCHEMA_VERSION in one transaction, under a lock on the schema, so that
        brokers sharing it migrate it once."""
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock($1)", self._migration_key)
            for migration in _MIGRATIONS[await self._read_version(connection) :]:
                await connection.execute(migration.replace("{s}", f'"{self._schema}"'))
            await connection.executemany(
                self._sql["set_meta"],
                [("schema_version", str(SCHEMA_VERSION)), ("software_version", __version__)],
            )
        return SCHEMA_VERSION

    def _require_current(self, *, write: bool) -> None:
        if write and not self._locking:
            raise StoreError(f"{self._location} was opened read-only (without the lock)")
        if self._version == 0:
            raise StoreError(f"{self._location} holds no BatonMQ store")
        if self._version < SCHEMA_VERSION:
            raise SchemaTooOld(
                f"{self._location} has schema version {self._version}; this BatonMQ needs "
                f"{SCHEMA_VERSION}: run `batonctl db upgrade`"
            )

    def _failure(self, what: str, error: BaseException) -> str:
        """Text for an operator: what failed where, and why; never the password."""
        reason = str(error) or type(error).__name__
        for secret in self._secrets:
            reason = reason.replace(secret, "***")
        return f"{what} PostgreSQL at {self._location}: {reason}"


def _row(broker_id: str, item: _Stored) -> tuple[object, ...]:
    """A row of `item`'s table: broker_id, then the fields, an arguments table as text."""
    values = _FIELDS[type(item)](item)
    if isinstance(item, StoredMessage | StoredEntry):
        return (broker_id, *values)
    return (broker_id, *values[:-1], encode_table(item.arguments))


#: Each stored class's fields, in the order of its table's columns after broker_id.
_FIELDS: Final[dict[type[_Stored], Callable[[_Stored], tuple[object, ...]]]] = {
    kind: operator.attrgetter(*(field.name for field in dataclasses.fields(kind)))
    for kind in (StoredExchange, StoredQueue, StoredBinding, StoredMessage, StoredEntry)
}


def _checksums(messages: list[StoredMessage]) -> list[int]:
    return [checksum(message) for message in messages]


def _checked_page(rows: list[asyncpg.Record]) -> PageRead:
    """Entries read by `read_entries`, each checked against its message's checksum."""
    return [
        checked_entry(row[0], row[1], row[2], row[3], StoredMessage(*row[4:9]), row[9])
        for row in rows
    ]


def _decode(kind: Callable[..., _T], row: asyncpg.Record) -> _T:
    """`kind` from a row of its table: the columns after broker_id are the fields, arguments
    last."""
    return kind(*row[1:-1], decode_table(row[-1]))


async def _close(connection: _Connection) -> None:
    """Close gracefully, or abort (asyncpg aborts when it cannot close); the server then ends
    the session, and with it the broker's lock."""
    with contextlib.suppress(*_DATABASE_ERRORS):
        await connection.close(timeout=_CLOSE_TIMEOUT)


async def _fetch_row(connection: _Connection, query: str, *arguments: object) -> asyncpg.Record:
    row = await connection.fetchrow(query, *arguments)
    assert row is not None  # an aggregate query always returns a row
    return row


def _gone(holder: str | None) -> bool:
    """Whether the lease holder `holder` ("host pid N #token") is a process of this host that no
    longer runs: its lease need not be waited out."""
    host, _, rest = (holder or "").partition(" pid ")
    pid = rest.split(" ", 1)[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _row_count(status: str) -> int:
    """The row count of a command status such as "DELETE 3"."""
    return int(status.rsplit(" ", 1)[-1])


def _advisory_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key for `parts` (the lock space is per database)."""
    digest = hashlib.blake2b("\0".join(("batonmq", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


#: One pair of a libpq keyword/value connection string: a value is quoted ('a b', with \' and
#: \\ escapes) or ends at white space.
_KEYWORD_VALUE: Final = r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)"


def _parse_dsn(dsn: str) -> tuple[str, str, list[str]]:
    """(a DSN asyncpg accepts, the DSN without its password, the password's spellings).

    asyncpg takes URIs only; a libpq keyword/value string ("host=db dbname=mq") becomes a URI
    whose query holds the keywords, which asyncpg reads the same way."""
    if "://" not in dsn:
        if not re.fullmatch(rf"\s*(?:{_KEYWORD_VALUE}\s*)*", dsn):
            # Not echoed: it may hold a password.
            raise StoreError("invalid PostgreSQL DSN: neither a URI nor keyword=value pairs")
        values = [
            (key, re.sub(r"\\(.)", r"\1", value[1:-1]) if value.startswith("'") else value)
            for key, value in re.findall(_KEYWORD_VALUE, dsn)
        ]
        secrets = [value for key, value in values if key == "password" and value]
        safe = " ".join(f"{key}={value}" for key, value in values if key != "password")
        return "postgresql://?" + urllib.parse.urlencode(values), safe, secrets
    parts = urllib.parse.urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    secrets = [password, urllib.parse.unquote(password)] if colon and password else []
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    secrets += [value for key, value in query if key == "password" and value]
    safe_query = urllib.parse.urlencode([(key, value) for key, value in query if key != "password"])
    safe_netloc = f"{user}@{hosts}" if at and user else hosts
    safe = urllib.parse.urlunsplit(parts._replace(netloc=safe_netloc, query=safe_query))
    return dsn, safe, secrets


def _read_manifest(directory: Path) -> dict[str, object]:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise StoreError(f"{directory} is not a BatonMQ backup: {error}") from error
    if not isinstance(manifest, dict):
        raise StoreCorrupt(f"{directory}/manifest.json is not a JSON object")
    return manifest


def _user(row: asyncpg.Record) -> StoredUser:
    name, credential, tags = row
    return StoredUser(name, credential, StoredUser.parse_tags(tags))
