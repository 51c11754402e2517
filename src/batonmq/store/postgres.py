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
runs them, each call on the right connection at the right time (`pgcalls`, and
`pgmember` for an HA member's calls).

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
import datetime
import logging
from collections.abc import Sequence
from functools import partial
from operator import attrgetter
from pathlib import Path

import asyncpg

from batonmq.security.permissions import UserPermission
from batonmq.store.backup import checked_manifest, make_empty_directory, write_manifest
from batonmq.store.base import (
    MESSAGE_ID_BLOCK,
    SCHEMA_VERSION,
    PageRead,
    QuarantinedEntry,
    Recovery,
    StoreCorrupt,
    StoredDefinitions,
    StoredMessage,
    StoredUser,
    StoreError,
    StoreStats,
    StoreUnavailable,
    WriteBatch,
    message_id_base,
)
from batonmq.store.integrity import checked_entry, report_quarantined
from batonmq.store.pending import CHECKPOINT_LOG_BYTES, Pending, encode_frame, holds_only_entries
from batonmq.store.pgbackup import backup_manifest, copy_in, copy_out, counted, restored
from batonmq.store.pgerrors import DATABASE_ERRORS
from batonmq.store.pgfamily import lock_member, place_member, place_rows
from batonmq.store.pglease import LOCK_WAIT
from batonmq.store.pgmember import PostgresMember
from batonmq.store.pgschema import migrate_schema, read_version
from batonmq.store.pgsession import (
    CLOSE_TIMEOUT,
    CONNECT_TIMEOUT,
    Connection,
    advisory_key,
    row_count,
)
from batonmq.store.pgsession import close as close_session
from batonmq.store.placement import Placement
from batonmq.store.plan import (
    DEFINITION_READS,
    RECOVERY_READS,
    STORE_WIDE_READS,
    recovery,
    stored_definitions,
    stored_permission,
    stored_user,
)
from batonmq.store.postgres_catalogue import announce, changes_catalogue
from batonmq.store.postgres_log import apply_log, checksums_of, counts_with_log, write_batch
from batonmq.store.takeover import discard_streams

log = logging.getLogger(__name__)


class PostgresStore(PostgresMember):
    """A broker's store in one schema of a PostgreSQL database (see the module docstring)."""

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
                        await self._claim(connection)
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

    async def _claim(self, connection: Connection) -> None:
        """At open: claim the lease, replay the append log, and place the rows. An identity
        of an HA member holds the member's lock (a session's advisory lock) from before its
        claim until its rows are placed, so that the member's first process to start places
        every identity's rows while none of the others runs, and the others find it running
        (`batonmq.store.pgfamily.place_member`)."""
        member = self._placement is not None and self._family is None
        key = advisory_key("member", self._schema, self.member_id)
        if member:
            # Its holder claims (LOCK_WAIT), may wait out a lease (`_place`), then places.
            wait = 2 * (self._lease_seconds + LOCK_WAIT)
            await lock_member(connection, self._sql, key, member=self.member_id, wait=wait)
        try:
            await self._lease.claim(connection, catalogue_only=self._catalogue_only)
            try:
                await self._replay(connection)
                if self._placement is not None:
                    await self._place(connection, self._placement)
            except BaseException:
                # Before the member's lock goes: the sibling that takes it next places the rows
                # rather than find this process running and take it for the one that did.
                await self._lease.give_back(connection)
                raise
        finally:
            if member and not connection.is_closed():
                await connection.execute(self._sql["member_unlock"], key)

    async def _place(self, connection: Connection, placement: Placement) -> None:
        """At open, once claimed and replayed: each virtual host's rows to the identity that
        owns it now (`batonmq.store.pgfamily`): a standalone broker's own identity places its
        workers' rows, an HA member's first process to start its member's."""
        if self._family is None:
            # A paused holder's lease runs out within its length.
            placed = await place_member(
                connection,
                self._sql,
                self._plan,
                placement,
                claimant=self._broker_id,
                claimant_unclean=self._lease.unclean_stop,
                gone=self._lease.holder_gone,
                same_run=self._lease.same_run,
                check_epoch=self._lease.check_epoch,
                wait=self._lease_seconds + LOCK_WAIT,
            )
        else:
            async with connection.transaction():
                await self._lease.check_epoch(connection)
                placed = await place_rows(
                    connection,
                    self._sql,
                    self._plan,
                    placement,
                    claimant=self._broker_id,
                    claimant_unclean=self._lease.unclean_stop,
                    ours=await self._identities(connection),
                )
        if placed is None:
            return
        moves, streams = placed
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

    async def definitions_of(self, broker_ids: Sequence[str]) -> dict[str, StoredDefinitions]:
        async def work(connection: Connection) -> dict[str, StoredDefinitions]:
            self._require_current(write=False)
            found = {}
            async with connection.transaction(readonly=True):
                for broker_id in broker_ids:
                    rows = {
                        name: await connection.fetch(self._sql[name], broker_id)
                        for name in DEFINITION_READS
                    }
                    found[broker_id] = stored_definitions(rows)
            return found

        return await self._call("reading other workers' definitions", work, write=False)

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
                await self._lease.check_epoch(connection)
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


def _checked_page(rows: list[asyncpg.Record]) -> PageRead:
    """Entries read by `read_entries`, each checked against its message's checksum."""
    return [
        checked_entry(row[0], row[1], row[2], row[3], StoredMessage(*row[4:9]), row[9])
        for row in rows
    ]
