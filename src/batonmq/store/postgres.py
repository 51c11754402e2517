"""The PostgreSQL store: the shared store of an HA cluster, and an option for a standalone broker.

Several brokers may share one database: each store lives in a PostgreSQL schema of its own (where
Open MQ suffixes table names, MQ 4.1 HA guide Table 8: S<brokerID> for a standalone store,
C<clusterID> for a cluster's shared one), and every row carries its broker's id, so brokers may
share a schema too.

A broker owns its store by a lease, and every write transaction checks the fencing epoch the
lease gave it (`batonmq.store.pglease`): a broker taken over writes nothing more (StoreFenced).
Its concerns have modules of their own: the sessions and their settings (`pgsession`), the
schema and its migrations (`pgschema`), the lease (`pglease`), a standalone broker's identities
(`pgfamily`), the append log (`postgres_log`), the shared catalogue (`postgres_catalogue`), an
HA member's takeover (`takeover`) and backups (`pgbackup`); this module is the `Store` that
runs them, each call on the right connection at the right time.

Calls go over a pool of asyncpg connections. Writes (commits, recovery, restore, upgrade) run
one at a time, in the order of the calls (an asyncio.Lock wakes its waiters first in, first out):
the journal hands batches one by one, and group commit wants one writer. Reads (a page of entries,
users, statistics) run on other connections of the pool, beside a commit, but each waits first
for the writes called before it, which is what the `Store` protocol promises: a read issued after
a commit sees it. A connection lost with PostgreSQL (restarted) fails the call under way with
StoreError; the pool connects again for the next call, and its first write checks the epoch again.
The lease is renewed on a connection of its own, outside the pool.

Every session runs with the `synchronous_commit` of the configuration's durability policy
(`batonmq.config.durability`): "off" returns from a commit before PostgreSQL has flushed its
write-ahead log, so a crash of PostgreSQL (or of its machine) may lose the last commits, while a
crash of the broker loses nothing; "on" and "remote_write" also wait for the synchronous
standbys. The database stays consistent either way.

A commit writes the rows a batch has many of (messages and entries put, entries updated and
deleted) in one statement per kind, each column an array (`batonmq.store.plan.ARRAY_STATEMENTS`):
run once per row (executemany), each row cost the server a portal and an executor start, 34.6 us
of its CPU per message of the persistent 1/1 benchmark row against 21.3 us with arrays. COPY into
a staging table, then an upsert from it, was measured no faster than executemany for batches of
100 to 5,000 messages of 1 KiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Final, TypeVar

import asyncpg

from batonmq.security.permissions import UserPermission
from batonmq.store.backup import checked_manifest, make_empty_directory, write_manifest
from batonmq.store.base import (
    MESSAGE_ID_BLOCK,
    SCHEMA_VERSION,
    ObjectKey,
    PageRead,
    QuarantinedEntry,
    Recovery,
    SchemaTooOld,
    StoreCorrupt,
    StoredMessage,
    StoredUser,
    StoreError,
    StoreFenced,
    StoreStats,
    StoreUnavailable,
    WriteBatch,
    message_id_base,
)
from batonmq.store.dialect import POSTGRES
from batonmq.store.integrity import checked_entry, report_quarantined
from batonmq.store.members import (
    Catalogue,
    CatalogueChanged,
    Member,
    StreamTail,
    TakenOver,
    as_members,
)
from batonmq.store.pending import (
    CHECKPOINT_LOG_BYTES,
    Pending,
    encode_frame,
    holds_only_entries,
)
from batonmq.store.pgbackup import backup_manifest, copy_in, copy_out, counted, restored
from batonmq.store.pgerrors import DATABASE_ERRORS
from batonmq.store.pgfamily import SQL as FAMILY_SQL
from batonmq.store.pgfamily import identities, place_rows
from batonmq.store.pglease import LEASE_SECONDS, Lease
from batonmq.store.pglease import SQL as LEASE_SQL
from batonmq.store.pgschema import migrate_schema, read_version
from batonmq.store.pgsession import (
    CLOSE_TIMEOUT,
    CONNECT_TIMEOUT,
    Connection,
    Sessions,
    row_count,
)
from batonmq.store.pgsession import close as close_session
from batonmq.store.placement import Placement, worker_index
from batonmq.store.plan import (
    RECOVERY_READS,
    STORE_WIDE_READS,
    Plan,
    recovery,
    stored_permission,
    stored_user,
)
from batonmq.store.postgres_catalogue import SQL as CATALOGUE_SQL
from batonmq.store.postgres_catalogue import (
    CatalogueWatch,
    announce,
    changes_catalogue,
    channel,
)
from batonmq.store.postgres_log import (
    MESSAGE_SIZE,
    apply_log,
    checksums_of,
    counts_with_log,
    write_batch,
)
from batonmq.store.postgres_log import SQL as LOG_SQL
from batonmq.store.takeover import SQL as TAKEOVER_SQL
from batonmq.store.takeover import (
    adopt,
    claim_lock_timeout,
    discard_streams,
    member_record,
    take_over,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_SCHEMA_NAME: Final = re.compile(r"[a-z0-9_]{1,63}")

_PLAN: Final = Plan(POSTGRES)


_CANDIDATES: Final = POSTGRES.candidates
_CANDIDATES_TABLE: Final = _CANDIDATES.removeprefix("pg_temp.")
# A page of entries: the message of each entry is looked up in a subquery fenced with OFFSET 0
# (see `batonmq.store.dialect.POSTGRES`), so that each is one probe of the index.
_READ_ENTRIES: Final = (
    "SELECT e.sequence, e.delivery_count, e.expires_at, e.priority, m.id, m.exchange, "
    "m.routing_key, m.header_payload, m.body, m.checksum FROM {s}.entries AS e "
    "CROSS JOIN LATERAL (SELECT * FROM "
    "{s}.messages AS m WHERE m.id = e.message_id OFFSET 0) AS m "
    "WHERE e.broker_id = $1 AND e.vhost = $2 AND e.queue = $3 AND e.sequence > $4"
)
_NEXT: Final = "ORDER BY e.sequence LIMIT $5"
_ORPHANS: Final = POSTGRES.orphans
#: The statements of this store's own, beside the plan's: reads of pages, the garbage collection
#: that ends a commit (ids as one array, the bytes freed returned), the lease.
_SQL: Final = {
    # Any level ($6 null) or level 0, through the primary key.
    "read_entries": f"{_READ_ENTRIES} AND ($6::integer IS NULL OR e.priority = $6) {_NEXT}",
    # A level above 0: `e.priority > 0` lets the planner prove the partial index applies.
    "read_level_entries": f"{_READ_ENTRIES} AND e.priority = $6 AND e.priority > 0 {_NEXT}",
    # Both return the bytes of the messages they delete (see `used_bytes`).
    "delete_orphans": "WITH gone AS (DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 "
    f"AND m.id = ANY($2::bigint[]) AND {_ORPHANS} RETURNING {MESSAGE_SIZE} AS size) "
    "SELECT COALESCE(sum(size), 0) FROM gone",
    "delete_orphans_too": "WITH gone AS (DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 "
    f"AND m.id IN (SELECT id FROM {_CANDIDATES} UNION ALL SELECT unnest($2::bigint[])) "
    f"AND {_ORPHANS} RETURNING {MESSAGE_SIZE} AS size) SELECT COALESCE(sum(size), 0) FROM gone",
    "message_bytes": f"SELECT COALESCE(sum({MESSAGE_SIZE}), 0) FROM {{s}}.messages AS m "
    "WHERE m.broker_id = $1",
    **TAKEOVER_SQL,
    **LOG_SQL,
    **CATALOGUE_SQL,
    **FAMILY_SQL,
    **LEASE_SQL,
    # Ids of restored messages must never be handed out again.
    "restore_block": "UPDATE {s}.counters SET value = GREATEST(value, $2::bigint, "
    "(SELECT COALESCE(max(id), 0) / $3::bigint FROM {s}.messages WHERE broker_id = $1)) "
    "WHERE name = 'message_id_block'",
}


class PostgresStore:
    """A broker's store in one schema of a PostgreSQL database (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        *,
        broker_id: str,
        schema: str,
        synchronous_commit: str = "on",
        lease_seconds: float = LEASE_SECONDS,
        renew_every: float | None = None,
        member_of: str | None = None,
        family: str | None = None,
        placement: Placement | None = None,
    ) -> None:
        """`lease_seconds`: how long the lease lasts unless renewed, every `renew_every` seconds
        (a third of it by default). An HA member renews it every monitor interval and for the
        monitor threshold's worth of them (`batonmq.store.configured`): its renewal is its
        update in the store, which the other members watch. `member_of`: the HA member whose
        worker this store's identity is (None: the identity is the broker's own), recorded
        when the lease is claimed (`batonmq.store.members.as_members`). `family`: the standalone
        broker whose identity (`broker_id` itself) or worker's identity this is (None for an HA
        member; see `batonmq.store.pgfamily`). `placement`: for the broker's own identity that
        starts (one process, or the supervisor of its workers), where each virtual host's rows
        go at open (`batonmq.store.pgfamily.place_rows`)."""
        if not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_"):
            raise StoreError(
                f"invalid PostgreSQL schema name {schema!r}: use 1 to 63 of a-z, 0-9 and _, "
                "not starting with pg_"
            )
        self._broker_id, self._schema = broker_id, schema
        self._member_of = member_of
        self._lease_seconds = lease_seconds
        self._renew_every = lease_seconds / 3 if renew_every is None else renew_every
        self._sessions = Sessions(
            dsn,
            broker_id=broker_id,
            schema=schema,
            synchronous_commit=synchronous_commit,
            lease_seconds=lease_seconds,
        )
        self._location = self._sessions.location
        self._plan = Plan(POSTGRES, schema)
        self._sql = {
            **self._plan.sql,
            **{name: text.replace("{s}", f'"{schema}"') for name, text in _SQL.items()},
        }
        self._family = family
        self._lease = Lease(
            self._sessions,
            self._sql,
            broker_id=broker_id,
            schema=schema,
            family=family,
            member_of=member_of,
            lease_seconds=lease_seconds,
            renew_every=self._renew_every,
        )
        #: Opened to write the catalogue alone (see `open`).
        self._catalogue_only = False
        self._placement = placement if family == broker_id else None
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        #: Writes run one at a time, in call order; `_last_write` is done once the last write
        #: called so far is, and the reads called after it wait for it.
        self._writes = asyncio.Lock()
        self._last_write: asyncio.Future[None] | None = None
        self._opened = self._locking = False
        self._version = 0
        #: The bytes of this broker's stored messages (`used_bytes`), kept up to date by each
        #: commit once counted; None when not known (before the first count, and after a
        #: failed commit, a recovery or a restore), when the next `used_bytes` counts again.
        self._message_bytes: int | None = None
        self._catalogue_writes = 0
        #: The append log (`batonmq.store.postgres_log`): the net effect of this broker's log
        #: rows, the sequence of the last, and their frames' bytes; changed by the writes only,
        #: once their transaction is committed.
        self._pending = Pending()
        self._log_seq = 0
        self._log_bytes = 0

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
        catalogue_only: bool = False,
    ) -> None:
        """See `Store.open`; `replace_lost` changes nothing here: a schema holds its own version,
        so a store is found whole or not at all (a dropped schema is an empty store)."""
        async with self._writes:
            if self._opened or self._pool is not None:
                raise StoreError(f"the store {self._location} is already open")
            self._locking = lock
            self._catalogue_only = catalogue_only
            pool = self._pool = await self._sessions.create_pool(
                self._prepare_session if self._locking else None
            )
            try:
                try:
                    connection = await pool.acquire(timeout=CONNECT_TIMEOUT)
                except (*DATABASE_ERRORS, ValueError) as error:
                    raise StoreUnavailable(
                        self._sessions.failure("cannot connect to", error)
                    ) from error
                try:
                    version = await read_version(
                        connection, self._sql, self._schema, self._location
                    )
                    if lock and version < SCHEMA_VERSION and (migrate if version else create):
                        version = await migrate_schema(
                            connection, self._sql, self._schema, self._location
                        )
                    if lock and version == SCHEMA_VERSION:
                        await self._lease.claim(connection, catalogue_only=self._catalogue_only)
                        await self._replay(connection)
                        if self._placement is not None:
                            await self._place(connection, self._placement)
                finally:
                    await pool.release(connection)
            except BaseException as error:
                self._pool = None
                pool.terminate()
                if isinstance(error, DATABASE_ERRORS):
                    raise StoreUnavailable(self._sessions.failure("cannot open", error)) from error
                raise
            self._version, self._opened = version, True

    async def recover(self) -> Recovery:
        async def work(connection: Connection) -> Recovery:
            self._require_current(write=True)
            broker, sql = self._broker_id, self._sql
            self._message_bytes = None
            async with connection.transaction():
                # Recovery joins whole tables (`backlogs`): with statistics taken while they were
                # empty, a nested loop walked one table per row of the other (38 s for 20,000
                # entries); hash and merge joins are linear whatever the statistics.
                await connection.execute("SET LOCAL enable_nestloop = off")
                await self._lease.check_epoch(connection)
                discarded = row_count(await connection.execute(sql["discard_entries"], broker))
                await connection.execute(sql["discard_messages"], broker)
                await discard_streams(connection, sql, broker)
                if self._lease.unclean_stop:
                    await connection.execute(sql["mark_delivered"], broker)
                block = await connection.fetchval(sql["next_block"])
                reads = {
                    name: await connection.fetch(
                        sql[name], *(() if name in STORE_WIDE_READS else (broker,))
                    )
                    for name in RECOVERY_READS
                }
            return recovery(
                reads,
                message_id_base=message_id_base(block, self._location),
                discarded_entries=discarded,
                unclean_stop=self._lease.unclean_stop,
            )

        return await self._call("recovery", work, write=True)

    async def commit(self, batch: WriteBatch) -> None:
        """Messages and entries go to the append log (`batonmq.store.postgres_log`), unless
        the batch puts an entry that the log deletes in the tables; anything else is written
        to the tables, after a checkpoint."""
        if not batch:
            return
        if holds_only_entries(batch) and not self._pending.conflicts_with(batch):
            await self._call("commit", partial(self._append, batch), write=True)
            return
        if changes_catalogue(batch):
            self._catalogue_writes += 1

        async def work(connection: Connection) -> None:
            self._require_current(write=True)
            await self._checkpoint(connection)
            await self._write_tables(connection, batch)

        await self._call("commit", work, write=True)

    async def _append(self, batch: WriteBatch, connection: Connection) -> None:
        """`batch` as one row of the log, in a transaction of one statement that checks the
        epoch; then part of what the log holds."""
        self._require_current(write=True)
        # On the event loop: marshal holds the GIL, so a thread would only add its hand-offs.
        frame = encode_frame(batch)
        seq = self._log_seq + 1
        status = await connection.execute(
            self._sql["append"], self._broker_id, self._lease.epoch, seq, frame
        )
        if row_count(status) == 0:
            raise self._lease.fence("its broker record has a newer epoch")
        self._log_seq, self._log_bytes = seq, self._log_bytes + len(frame)
        self._pending.add(batch)
        if self._log_bytes >= CHECKPOINT_LOG_BYTES or self._pending.is_full():
            try:
                await self._checkpoint(connection)
            except (StoreError, *DATABASE_ERRORS) as error:
                # The batch is committed (and will be confirmed); the next trigger tries again.
                log.debug("checkpoint of the append log deferred: %s", error)

    async def _checkpoint(self, connection: Connection) -> None:
        """Write what the log holds to the tables and delete its rows, in one transaction; in
        the writers' lane. A failed checkpoint leaves the log and `_pending` as they were."""
        if not self._log_seq:
            return
        await self._write_tables(connection, self._pending.as_batch(), log_to=self._log_seq)
        self._pending, self._log_seq, self._log_bytes = Pending(), 0, 0

    async def _checkpoint_first(self) -> None:
        """A checkpoint, called as a write, when this broker owns a log that holds anything."""
        if self._locking and self._log_seq and self._lease.fenced is None:
            await self._call("checkpoint", self._checkpoint, write=True)

    async def _replay(self, connection: Connection) -> None:
        """At open, once claimed: what a crash left in this broker's log, to the tables."""
        self._message_bytes = None
        async with connection.transaction():
            await self._lease.check_epoch(connection)
            await apply_log(connection, self._sql, self._plan, self._broker_id)
        self._pending, self._log_seq, self._log_bytes = Pending(), 0, 0

    async def _place(self, connection: Connection, placement: Placement) -> None:
        """At open, once claimed and replayed: each virtual host's rows to the identity that
        owns it now (`batonmq.store.pgfamily`)."""
        async with connection.transaction():
            await self._lease.check_epoch(connection)
            moves, streams = await place_rows(
                connection,
                self._sql,
                self._plan,
                placement,
                claimant=self._broker_id,
                claimant_unclean=self._lease.unclean_stop,
            )
        if moves:
            log.info(
                "virtual hosts moved to their owners",
                extra={
                    "vhosts": len({move.vhost for move in moves}),
                    "streams": streams,
                    "workers": placement.workers,
                },
            )

    async def _write_tables(
        self, connection: Connection, batch: WriteBatch, *, log_to: int = 0
    ) -> None:
        """`batch` written to the tables in one transaction that checks the epoch, and the
        log's rows up to `log_to` deleted in it (a checkpoint)."""
        # Off the event loop (zlib releases the GIL on large bodies).
        checksums = (
            await asyncio.to_thread(checksums_of, batch.messages_put) if batch.messages_put else []
        )
        counted, self._message_bytes = self._message_bytes, None
        async with connection.transaction():
            await self._lease.check_epoch(connection)
            growth = await write_batch(
                connection,
                self._sql,
                self._plan,
                self._broker_id,
                batch,
                checksums,
                count_bytes=counted is not None,
            )
            if log_to:
                await connection.execute(self._sql["drop_log"], self._broker_id, log_to)
            if batch.vhosts_deleted and not self._lease.workers_run:
                await self._delete_workers_vhosts(connection, batch.vhosts_deleted)
            if changes_catalogue(batch):
                # The other members hear of it at commit (`batonmq.store.postgres_catalogue`).
                await announce(connection, self._sql, self._schema, self._broker_id)
        # Known again only once the transaction is committed: a failed commit (maybe
        # committed after all, when the connection was lost) leaves it to be counted.
        if counted is not None:
            self._message_bytes = counted + growth

    async def _delete_workers_vhosts(self, connection: Connection, vhosts: list[str]) -> None:
        """For the broker's own identity, which holds the family's lock while no worker runs:
        the virtual hosts' rows that its workers left go with them, after what their logs
        hold (`batonmq.store.pgfamily`). Running workers delete their own rows of a virtual
        host deleted in the catalogue."""
        gone = WriteBatch(vhosts_deleted=vhosts)
        for worker in (await self._identities(connection))[1:]:
            await apply_log(connection, self._sql, self._plan, worker)
            await write_batch(
                connection, self._sql, self._plan, worker, gone, [], count_bytes=False
            )

    async def read_entries(
        self, vhost: str, queue: str, after_sequence: int, limit: int, priority: int | None = None
    ) -> PageRead:
        """The tables' entries, and those the append log holds: paged out and read back before
        a checkpoint, an entry never reaches the tables. A checkpoint first when the tables'
        entries of the queue changed since the last (`Pending.page`)."""
        await self._writes_called()
        held = self._pending.page(vhost, queue, after_sequence, limit, priority)
        if held is None:
            await self._checkpoint_first()

        async def work(connection: Connection) -> PageRead:
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
            return page

        page = await self._call("reading entries", work, write=False)
        quarantined = [entry for entry in page if isinstance(entry, QuarantinedEntry)]
        if quarantined:
            await self._quarantine(vhost, queue, quarantined)
        if not held:
            return page
        # The first `limit` of both: none passes over a table entry not read, as the tables
        # gave `limit` entries, or all they have, after `after_sequence`. An entry in both (a
        # checkpoint between the two reads) is taken once.
        merged = {entry.sequence: entry for entry in held} | {e.sequence: e for e in page}
        return sorted(merged.values(), key=attrgetter("sequence"))[:limit]

    async def _writes_called(self) -> None:
        """Wait for the writes called so far (as a read does)."""
        pending = self._last_write
        if pending is not None and not pending.done():
            await asyncio.wait([pending])

    async def _quarantine(self, vhost: str, queue: str, entries: list[QuarantinedEntry]) -> None:
        """Move the entries, each with a copy of its message as stored, to the quarantine; a
        message no entry holds any more goes. A write: it changes the bytes stored."""

        async def work(connection: Connection) -> None:
            self._require_current(write=True)
            self._message_bytes = None
            now = datetime.datetime.now(datetime.UTC)
            keys = [(self._broker_id, vhost, queue, entry.sequence) for entry in entries]
            async with connection.transaction():
                await self._lease.check_epoch(connection)
                await connection.executemany(
                    self._sql["quarantine_entry"], [(*key, now) for key in keys]
                )
                await connection.executemany(self._sql["delete_entry"], keys)
                await connection.executemany(
                    self._sql["delete_orphan"],
                    [(self._broker_id, entry.message_id) for entry in entries],
                )

        await self._call("quarantine", work, write=True)
        for entry in entries:
            report_quarantined(self._location, vhost, queue, entry)

    async def users(self) -> list[StoredUser]:
        rows = await self._fetch_all("reading users", "users")
        return [stored_user(row) for row in rows]

    async def vhosts(self) -> list[str]:
        return [row[0] for row in await self._fetch_all("reading virtual hosts", "vhosts")]

    async def permissions(self) -> list[UserPermission]:
        rows = await self._fetch_all("reading permissions", "permissions")
        return [stored_permission(row) for row in rows]

    async def _fetch_all(self, what: str, query: str) -> list[asyncpg.Record]:
        async def work(connection: Connection) -> list[asyncpg.Record]:
            self._require_current(write=False)
            return await connection.fetch(self._sql[query])

        return await self._call(what, work, write=False)

    async def stats(self) -> StoreStats:
        """The tables' counts: the append log checkpointed first by the broker that owns it,
        added to them by any other reader (`counts_with_log`), in one snapshot; of every
        identity of the broker (`_identities`)."""
        await self._checkpoint_first()

        async def work(connection: Connection) -> StoreStats:
            self._require_current(write=False)
            async with connection.transaction(isolation="repeatable_read", readonly=True):
                counts = await counted(connection, self._sql, await self._identities(connection))
            return StoreStats("postgres", self._location, self._version, self._broker_id, *counts)

        return await self._call("reading statistics", work, write=False)

    async def connection_settings(self) -> dict[str, str]:
        """The sessions' synchronous_commit and the server's synchronous_standby_names (which
        standbys a commit waits for), for the startup log."""

        async def work(connection: Connection) -> dict[str, str]:
            return {
                name: str(await connection.fetchval(f"SHOW {name}"))
                for name in ("synchronous_commit", "synchronous_standby_names")
            }

        return await self._call("reading the settings", work, write=False)

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
        never counts). The append log is checkpointed first, as for statistics. A store opened
        without the lock, which another process writes, counts every time, what the log holds
        with the messages. In the writers' lane, so that a count never crosses a commit."""

        async def work(connection: Connection) -> int:
            self._require_current(write=False)
            if self._locking:
                await self._checkpoint(connection)
            counted = self._message_bytes
            if counted is None or not self._locking:
                async with connection.transaction(isolation="repeatable_read", readonly=True):
                    counted = int(
                        await connection.fetchval(self._sql["message_bytes"], self._broker_id)
                    )
                    if not self._locking:
                        # Another process's log: what it holds counts too.
                        _, _, counted = await counts_with_log(
                            connection, self._sql, self._broker_id, (0, 0, counted), quota=True
                        )
                if self._locking:
                    self._message_bytes = counted
            return counted

        return await self._call("measuring the store", work, write=True)

    async def backup(self, directory: Path) -> None:
        """This broker's rows of each table as binary COPY files, read in one
        REPEATABLE READ transaction on a second connection. The snapshot is taken in call order,
        so it holds every commit made before; the copying does not hold up the broker's calls.
        The append log's rows are among them (a restore applies them): the broker that owns
        the log checkpoints it first, so that they are few."""
        if not self._opened:
            raise StoreError(f"the store {self._location} is not open")
        self._require_current(write=False)
        await self._checkpoint_first()
        await asyncio.to_thread(make_empty_directory, directory)
        connection = await self._sessions.connect()
        try:
            async with connection.transaction(isolation="repeatable_read", readonly=True):
                async with self._writes:
                    # The snapshot, taken with no write under way, holds every commit made
                    # before.
                    owners = await self._identities(connection)
                    counts = await counted(connection, self._sql, owners)
                    block = await connection.fetchval(self._sql["block"])
                await copy_out(connection, self._schema, owners, directory)
        except DATABASE_ERRORS as error:
            raise StoreError(self._sessions.failure("backup failed on", error)) from error
        finally:
            await close_session(connection)
        # Written last: a directory without a manifest is not a backup.
        await asyncio.to_thread(
            write_manifest,
            directory,
            backup_manifest(self._broker_id, self._schema, owners, counts, block),
        )

    async def restore(self, directory: Path) -> None:
        manifest = await asyncio.to_thread(checked_manifest, directory, self.kind, self._broker_id)
        block, owners = restored(directory, manifest, self._broker_id, self._is_ours)

        async def work(connection: Connection) -> None:
            self._require_current(write=True)
            broker = self._broker_id
            self._message_bytes = None
            async with connection.transaction():
                replaced = sorted({*owners, *await self._identities(connection)})
                await copy_in(connection, self._schema, replaced, directory)
                counts = await counted(connection, self._sql, owners)
                if [counts[3], counts[4]] != [manifest.get("messages"), manifest.get("entries")]:
                    raise StoreCorrupt(f"{directory}: the tables do not match manifest.json")
                for owner in owners:
                    # Enrolled, so that the broker's own identity finds its workers' rows.
                    await connection.execute(self._sql["enrol"], owner)
                    # Its log was replaced with the backup's, which goes to the tables.
                    await apply_log(connection, self._sql, self._plan, owner)
                    await connection.execute(
                        self._sql["restore_block"], owner, block, MESSAGE_ID_BLOCK
                    )
                # The users, virtual hosts and permissions were replaced: the running members
                # read them again (`batonmq.store.postgres_catalogue`).
                await announce(connection, self._sql, self._schema, broker)
            # The log's rows this broker had went with the rest.
            self._pending, self._log_seq, self._log_bytes = Pending(), 0, 0

        self._catalogue_writes += 1
        await self._call(f"restoring {directory} into", work, write=True)

    async def _identities(self, connection: Connection) -> list[str]:
        """Whose rows this store reads as its broker's: a worker's or an HA member's own; for
        a standalone broker's own identity, its workers' too (`batonmq.store.pgfamily`)."""
        if self._family != self._broker_id:
            return [self._broker_id]
        return await identities(connection, self._sql, self._broker_id)

    def _is_ours(self, owner: object) -> bool:
        """Whether `owner` is this store's identity or, for a broker's own, a worker's."""
        return owner == self._broker_id or (
            isinstance(owner, str)
            and self._family == self._broker_id
            and worker_index(self._broker_id, owner) is not None
        )

    async def upgrade(self) -> tuple[int, int]:
        async def work(connection: Connection) -> tuple[int, int]:
            if not self._locking:
                raise StoreError(f"{self._location} was opened read-only: cannot upgrade it")
            found = self._version
            if found < SCHEMA_VERSION:
                self._version = await migrate_schema(
                    connection, self._sql, self._schema, self._location
                )
                await self._lease.claim(connection, catalogue_only=self._catalogue_only)
            return found, self._version

        return await self._call("upgrade of", work, write=True)

    async def close(self) -> None:
        async with self._writes:
            pool, self._pool, self._opened = self._pool, None, False
            self._message_bytes = None
            await self._lease.stop_renewing()
            if pool is None:
                return
            try:
                if self._lease.epoch and self._lease.fenced is None:
                    # A clean stop leaves the tables complete; if it cannot, the log stays,
                    # and the next open (or a takeover) applies it. Then the lease is
                    # released: the next holder knows this stop was clean.
                    with contextlib.suppress(*DATABASE_ERRORS):
                        async with pool.acquire(timeout=CLOSE_TIMEOUT) as connection:
                            with contextlib.suppress(*DATABASE_ERRORS, StoreError):
                                await self._checkpoint(connection)
                            await self._lease.release(connection)
            finally:
                self._lease.epoch = 0
                # What the log holds is in its rows, for the next open.
                self._pending, self._log_seq, self._log_bytes = Pending(), 0, 0
                await close_session(pool)

    def on_fenced(self, handler: Callable[[StoreFenced], None]) -> None:
        self._lease.on_fenced = handler

    # Streams kept in the store's tables (`batonmq.store.streamtables`) ----------------------

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def epoch(self) -> int:
        """The fencing epoch this broker holds (0 before it claimed the store): every write of
        its streams checks it, as its commits do."""
        return self._lease.epoch

    async def session(self) -> asyncpg.Connection[asyncpg.Record]:
        """A session of its own, outside the pool, set up as the pool's writing sessions are
        (the durability policy's synchronous_commit; a stalled transaction ended after a whole
        lease, and a statement of a client that died cancelled, so that a takeover's claim is
        not held up by either)."""
        return await self._sessions.session()

    def failure(self, what: str, error: BaseException) -> StoreError:
        """A database error of a session of this store as a StoreError for an operator."""
        return StoreError(self._sessions.failure(what, error))

    def fenced_elsewhere(self, why: str) -> None:
        """A write of this broker outside the store's own calls (a stream's) found its epoch
        superseded: the store is fenced, as if one of its own writes had found it (on the
        event loop)."""
        self._lease.fence(why)

    # The members of an HA cluster (see `batonmq.store.takeover`) ----------------------------

    @property
    def broker_id(self) -> str:
        return self._broker_id

    async def register(
        self, address: str, heartbeat_address: str, version: str, settings: str
    ) -> None:
        """Record where this member serves AMQP and heartbeats, its version and the settings
        every member must share (JSON); StoreFenced if it no longer owns its record."""
        await self._write_record(
            "registering in", "register", address, heartbeat_address, version, settings
        )

    async def refuse_failover(self) -> None:
        """Mark this member's record so that no survivor takes it over once it stops (`shutdown
        bkr -nofailover`) until it starts again; StoreFenced if it no longer owns its record."""
        await self._write_record("marking no failover in", "no_failover")

    async def record_state(self, state: str) -> None:
        """Record this member's state (one of SERVING_STATES) in its record, where the other
        members list it; StoreFenced if it no longer owns its record."""
        await self._write_record("recording the state in", "record_state", state)

    async def _write_record(self, what: str, statement: str, *arguments: object) -> None:
        """Run `statement` on this identity's record in `brokers`, given its id, its epoch and
        `arguments`; StoreFenced if the record has a newer epoch."""

        async def work(connection: Connection) -> None:
            self._require_current(write=True)
            status = await connection.execute(
                self._sql[statement], self._broker_id, self._lease.epoch, *arguments
            )
            if row_count(status) == 0:
                raise self._lease.fence("its broker record has a newer epoch")

        await self._call(what, work, write=True)

    async def members(self, *, count_messages: bool = False) -> list[Member]:
        """Every member recorded in the store, by id, a member with workers once
        (`batonmq.store.members.as_members`); with `count_messages`, what each holds (a scan
        of the messages, and of its append log's rows, in one snapshot: for an operator, not
        for the failure detector)."""

        async def work(connection: Connection) -> list[Member]:
            self._require_current(write=False)
            if not count_messages:
                rows = await connection.fetch(self._sql["members"])
                return as_members(member_record(row) for row in rows)
            async with connection.transaction(isolation="repeatable_read", readonly=True):
                rows = await connection.fetch(self._sql["members_counted"])
                logging = {row[0] for row in await connection.fetch(self._sql["logging_brokers"])}
                records = [member_record(row) for row in rows]
                for index, (found, member_of) in enumerate(records):
                    if found.broker_id in logging:
                        messages, _, _ = await counts_with_log(
                            connection,
                            self._sql,
                            found.broker_id,
                            (found.messages or 0, 0, 0),
                            quota=False,
                        )
                        records[index] = dataclasses.replace(found, messages=messages), member_of
                return as_members(records)

        return await self._call("reading the members of", work, write=False)

    async def take_over(
        self,
        failed: str,
        seen_epoch: int,
        *,
        force: bool = False,
        next_sequences: Mapping[ObjectKey, int],
        stream_tails: Mapping[ObjectKey, StreamTail] | None = None,
        vhosts: list[str] | None = None,
    ) -> TakenOver | None:
        """Claim broker `failed` (seen at `seen_epoch`) and take its rows over, in one
        transaction (`batonmq.store.takeover.take_over`); None when another broker won the claim,
        or `failed` renewed its lease meanwhile (and `force` is off). StoreError when the claim
        waited longer than `claim_lock_timeout` for a lock: nothing moved. With `vhosts`, the
        rows of those virtual hosts only: this store's identity is a worker's, whose siblings
        adopt the others (`adopt`)."""
        timeout = claim_lock_timeout(self._lease_seconds, self._renew_every)
        move = partial(
            take_over,
            sql=self._sql,
            plan=self._plan,
            claimant=self._broker_id,
            member=self.member_id,
            failed=failed,
            seen_epoch=seen_epoch,
            force=force,
            next_sequences=next_sequences,
            stream_tails=stream_tails or {},
            vhosts=vhosts,
        )
        try:
            return await self._move_rows(f"takeover of {failed!r} in", move, lock_timeout=timeout)
        except StoreError as error:
            if not isinstance(error.__cause__, asyncpg.LockNotAvailableError):
                raise
            raise StoreError(
                f"the claim of broker {failed!r} waited {timeout:g} s for a lock on its record "
                f"in {self._location} (a statement of that broker, or another claim, still "
                "holds it) and was given up, so that this broker's own lease renewal is not "
                "held up; it is tried again at a later monitor round"
            ) from error

    async def adopt(
        self,
        vhosts: list[str],
        *,
        next_sequences: Mapping[ObjectKey, int],
        stream_tails: Mapping[ObjectKey, StreamTail] | None = None,
    ) -> TakenOver | None:
        """Take over the rows of `vhosts` that the identities this worker's member claimed
        still hold, in one transaction fenced by this identity's epoch
        (`batonmq.store.takeover.adopt`); None when there are none."""
        move = partial(
            adopt,
            sql=self._sql,
            claimant=self._broker_id,
            member=self.member_id,
            next_sequences=next_sequences,
            stream_tails=stream_tails or {},
            vhosts=vhosts,
        )
        return await self._move_rows("adopting taken-over rows in", move)

    async def _move_rows(
        self,
        what: str,
        move: Callable[[Connection], Awaitable[TakenOver | None]],
        *,
        lock_timeout: float | None = None,
    ) -> TakenOver | None:
        """Rows moved to this identity by `move` (a takeover's or an adoption's), in one
        transaction fenced by its epoch, whose locks are waited for `lock_timeout` seconds at
        most (None: as long as they are held)."""

        async def work(connection: Connection) -> TakenOver | None:
            self._require_current(write=True)
            async with connection.transaction():
                if lock_timeout is not None:
                    await connection.execute(
                        self._sql["claim_lock_timeout"], str(max(1, round(lock_timeout * 1000)))
                    )
                await self._lease.check_epoch(connection)
                taken = await move(connection)
                if taken is not None:
                    self._message_bytes = None
            return taken

        return await self._call(what, work, write=True)

    @property
    def member_id(self) -> str:
        """The HA member this store's identity writes for: the member whose worker it is, or
        its own."""
        return self._member_of or self._broker_id

    @property
    def catalogue_writes(self) -> int:
        return self._catalogue_writes

    async def catalogue(self) -> Catalogue:
        """The users, virtual hosts and permissions, and the catalogue version, as one snapshot
        (a repeatable-read transaction), after the writes called before."""

        async def work(connection: Connection) -> Catalogue:
            self._require_current(write=False)
            async with connection.transaction(isolation="repeatable_read", readonly=True):
                users = await connection.fetch(self._sql["users"])
                vhosts = await connection.fetch(self._sql["vhosts"])
                permissions = await connection.fetch(self._sql["permissions"])
                version = await connection.fetchval(self._sql["catalogue_version"])
            return Catalogue(
                [stored_user(row) for row in users],
                [row[0] for row in vhosts],
                [stored_permission(row) for row in permissions],
                version,
            )

        return await self._call("reading the catalogue of", work, write=False)

    def watch_catalogue(
        self, on_change: CatalogueChanged, interval: float
    ) -> Callable[[], Coroutine[object, object, None]]:
        """See `batonmq.store.members.SharedStore.watch_catalogue`."""
        return CatalogueWatch(
            self._sessions.connect,
            channel(self._schema),
            self._sql["catalogue_version"],
            on_change,
            interval,
        ).run

    async def _call(
        self, what: str, work: Callable[[Connection], Awaitable[_T]], *, write: bool
    ) -> _T:
        """Run `work` on a connection of the pool: a write after the writes called before it,
        one at a time; a read once those writes are done, beside any write called after it. A
        database error becomes StoreError."""
        if not write:
            # Read synchronously, before the first await: the writes called before this read.
            pending = self._last_write
            if pending is not None and not pending.done():
                await asyncio.wait([pending])
            return await self._run(what, work)
        done = self._last_write = asyncio.get_running_loop().create_future()
        try:
            async with self._writes:
                return await self._run(what, work)
        finally:
            done.set_result(None)

    async def _run(self, what: str, work: Callable[[Connection], Awaitable[_T]]) -> _T:
        pool = self._pool
        if not self._opened or pool is None:
            raise StoreError(f"the store {self._location} is not open")
        if self._lease.fenced is not None:
            raise StoreFenced(str(self._lease.fenced))
        try:
            # A connection lost with the server is found closed here, and the pool replaces it.
            async with pool.acquire(timeout=CONNECT_TIMEOUT) as connection:
                return await work(connection)
        except DATABASE_ERRORS as error:
            raise StoreError(self._sessions.failure(f"{what} failed on", error)) from error

    @staticmethod
    async def _prepare_session(connection: Connection) -> None:
        await connection.execute(
            f"CREATE TEMPORARY TABLE {_CANDIDATES_TABLE} (id BIGINT NOT NULL) ON COMMIT DELETE ROWS"
        )

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


def _checked_page(rows: list[asyncpg.Record]) -> PageRead:
    """Entries read by `read_entries`, each checked against its message's checksum."""
    return [
        checked_entry(row[0], row[1], row[2], row[3], StoredMessage(*row[4:9]), row[9])
        for row in rows
    ]
