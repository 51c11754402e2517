"""The default store: one SQLite file in the broker's data directory.

Why it is built this way:

- The database: one thread of the store's own runs every SQLite call, in the order submitted,
  in WAL mode, with the lock and the schema (`batonmq.store.sqlitedb`). This module is the
  `Store` on it, with the append log.
- Messages and entries go to an append log first (`batonmq.store.appendlog`, the file
  `<file>-appends`): one write and one fsync per batch, and a message consumed before the next
  checkpoint never reaches the database. Everything else checkpoints the log first, and so do
  statistics, backups and a clean close; paging reads merge the log's entries with the
  database's. An online reader in another process (a backup, `db stats`) adds what the log
  holds to what it reads.
- The lock is an `flock` on `<file>.lock`, not SQLite's own locking (`batonmq.store.sqlitefile`).
- The worker processes of one broker (`broker.workers` above 1) share the file: the supervisor
  holds the lock for them (`held_lock`), each worker is a member with an identity of its own
  (`<broker>w<k>`) whose rows it alone writes, and appends to a log of its own
  (`<file>-appends-w<k>`), so that group commits never wait for one another; the workers meet on
  SQLite's write lock only at checkpoints and declarations (BEGIN IMMEDIATE, `busy_timeout`).
  Before they start, and at the open of a broker of one process, every log is replayed and each
  virtual host's rows go to the identity that owns it now (`placement`,
  `batonmq.store.placement`). The catalogue is the file's, shared; its version, bumped by each
  commit that changes it, is what the workers poll (`watch_catalogue`).
- No `PRAGMA quick_check` at open: it reads the whole file, minutes for a large backlog. SQLite
  reports damage on the pages it reads (SQLITE_CORRUPT, raised as StoreCorrupt); `restore` does
  check the backup it is about to install.
- A store that is lost is not started anew: a missing or zero-length database file where a store
  was made (its marker file says so, `batonmq.store.sqlitefile`) is StoreCorrupt, naming the
  file. A brand-new data directory has no marker and starts empty. `batonctl db create` and `db
  restore` (`replace_lost`) make a store where one was lost: an operator's decision.
- A full disk: a failed commit is rolled back and the store stays usable, but in WAL mode a
  deletion needs free space too (its pages go to the WAL first), so it is space freed outside the
  store, or a broker that stops accepting messages before the disk fills, that gets it going.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Final

from batonmq.fsync import fsync_directory
from batonmq.security.permissions import UserPermission
from batonmq.store import sqlitereads
from batonmq.store.appendlog import (
    AppendLog,
    appends_path,
    appends_paths,
    held_still,
    read_log,
)
from batonmq.store.backup import checked_manifest, make_empty_directory, write_manifest
from batonmq.store.base import (
    SCHEMA_VERSION,
    PageRead,
    QuarantinedEntry,
    Recovery,
    StoredDefinitions,
    StoredMessage,
    StoredUser,
    StoreError,
    StoreStats,
    StoreUnavailable,
    WriteBatch,
    message_id_base,
)
from batonmq.store.dialect import SQLITE
from batonmq.store.integrity import checked_entry, checksum, report_quarantined
from batonmq.store.members import Catalogue, CatalogueChanged, changes_catalogue
from batonmq.store.pending import Pending, holds_only_entries
from batonmq.store.placement import Placement, place_rows, place_streams, worker_id, worker_index
from batonmq.store.plan import (
    RECOVERY_READS,
    STORE_WIDE_READS,
    Plan,
    chunks,
    orphan_candidates,
    recovery,
)
from batonmq.store.sqlitedb import GC_TABLE, SQLiteDatabase
from batonmq.store.sqlitefile import check_backup, holds_nothing, install

log = logging.getLogger(__name__)

#: The file a backup directory holds, next to its manifest.json.
BACKUP_FILE: Final = "batonmq.sqlite3"

_PLAN: Final = Plan(SQLITE)
_SQL: Final = _PLAN.sql

#: The messages no entry holds any more among the candidates of `GC_TABLE`.
_DELETE_CANDIDATE_ORPHANS: Final = _PLAN.render(
    "DELETE FROM {s}.messages AS m WHERE m.broker_id = $1"
    " AND m.id IN (SELECT id FROM {candidates}) AND {orphans}"
)
#: The catalogue's version (users, virtual hosts, permissions): bumped by every commit that
#: changes it, and read by the workers that share the file (`watch_catalogue`).
_CATALOGUE_BUMP: Final = (
    "INSERT INTO meta (key, value) VALUES ('catalogue_version', '1') ON CONFLICT (key)"
    " DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
)


class SQLiteStore(SQLiteDatabase):
    """`Store` on one SQLite file; see the module docstring for the choices made."""

    #: Message and entry writes, ahead of the database (`batonmq.store.appendlog`); open while
    #: the store is, with its lock and its current schema.
    _appends: AppendLog | None = None

    async def open(
        self,
        *,
        create: bool = True,
        migrate: bool = True,
        lock: bool = True,
        replace_lost: bool = False,
        catalogue_only: bool = False,
    ) -> None:
        del catalogue_only  # the lock is the file's, whatever is written
        if self._executor is not None:
            raise StoreError(f"{self._path}: the store is already open")
        self._create, self._migrate, self._locked = create, migrate, lock
        self._replace_lost = replace_lost
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batonmq-sqlite")
        try:
            await self._submit(self._open_sync)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            # Shielded: a cancelled close must still release the lock and the connection.
            await asyncio.shield(
                asyncio.get_running_loop().run_in_executor(executor, self._close_sync)
            )
        finally:
            executor.shutdown(wait=False)

    async def recover(self) -> Recovery:
        return await self._submit(self._recover_sync)

    async def commit(self, batch: WriteBatch) -> None:
        if changes_catalogue(batch):
            self._catalogue_writes += 1
        await self._submit(partial(self._commit_sync, batch))

    async def read_entries(
        self, vhost: str, queue: str, after_sequence: int, limit: int, priority: int | None = None
    ) -> PageRead:
        return await self._submit(
            partial(self._read_sync, vhost, queue, after_sequence, limit, priority)
        )

    async def definitions_of(self, broker_ids: Sequence[str]) -> dict[str, StoredDefinitions]:
        read = partial(sqlitereads.definitions_of, tuple(broker_ids))
        return await self._submit(partial(self._read, read))

    async def users(self) -> list[StoredUser]:
        return await self._submit(partial(self._read, sqlitereads.users))

    async def vhosts(self) -> list[str]:
        return await self._submit(partial(self._read, sqlitereads.vhosts))

    async def permissions(self) -> list[UserPermission]:
        return await self._submit(partial(self._read, sqlitereads.permissions))

    async def stats(self) -> StoreStats:
        return await self._submit(self._stats_sync)

    async def used_bytes(self) -> int:
        return await self._submit(self._used_bytes_sync)

    async def backup(self, directory: Path) -> None:
        await self._submit(partial(self._backup_sync, directory))

    async def restore(self, directory: Path) -> None:
        await self._submit(partial(self._restore_sync, directory))

    # -- the catalogue the workers of a broker share (`batonmq.cluster.catalogue`) -------------

    @property
    def catalogue_writes(self) -> int:
        return self._catalogue_writes

    async def catalogue(self) -> Catalogue:
        """The users, virtual hosts and permissions, and the catalogue version, as one snapshot
        (one read transaction), after the writes called before."""
        return await self._submit(partial(self._read, sqlitereads.catalogue))

    def watch_catalogue(
        self, on_change: CatalogueChanged, interval: float
    ) -> Callable[[], Coroutine[object, object, None]]:
        """The catalogue's version read every `interval` seconds: SQLite has no notifications,
        and the read is one row of a table that only catalogue changes write."""

        async def watch() -> None:
            while True:
                try:
                    version = await self._submit(partial(self._read, sqlitereads.catalogue_version))
                except StoreError:
                    pass  # the next round reads it again
                else:
                    on_change(version, None)
                await asyncio.sleep(interval)

        return watch

    # -- open and close, on the store's thread --------------------------------------------------

    def open_and_close_here(self) -> None:
        """Open the store with the lock, and close it, on the calling thread (with no executor:
        for a process that must start no thread, see `prepare_for_workers`)."""
        self._locked = True
        try:
            self._open_sync()
        finally:
            self._close_sync()

    def _open_sync(self) -> None:
        """The database opened, then its append log (`_open_appends`)."""
        self._lock_and_check()
        if self._replace_lost and holds_nothing(self._path):
            # The logs of the database that was lost: nothing to replay into a new one.
            for path in appends_paths(self._path).values():
                path.unlink(missing_ok=True)
        self._connect()
        self._open_appends()

    def _open_appends(self) -> None:
        """Open the append log beside the database, and write what a crash left in it to the
        database before anything reads it; opened for anything but a worker, the workers' logs
        too (no worker runs: the lock is held), then give each virtual host's rows to its
        owner (`placement`)."""
        if not self._locked or self._schema_version != SCHEMA_VERSION:
            return
        path = appends_path(self._path, self._worker)
        try:
            self._appends = AppendLog(path, sync=self._sync)
            self._appends.replay()
        except OSError as exc:
            raise StoreUnavailable(f"cannot open {path}: {exc}") from exc
        self._checkpoint()
        if self._worker is None:
            self._replay_workers_logs()
            if self._placement is not None:
                self._place(self._placement)

    def _replay_workers_logs(self) -> None:
        """Write what each worker's append log holds to the database, as that worker's, and
        remove the log: a replay after a crash between the two rewrites the same rows."""
        for worker, path in appends_paths(self._path).items():
            if worker is None:
                continue
            try:
                pending = read_log(path)
                if pending:
                    self._write(pending.as_batch(), worker_id(self._broker_id, worker))
                path.unlink()
                fsync_directory(path.parent)
            except OSError as exc:
                raise StoreUnavailable(f"cannot replay {path}: {exc}") from exc

    def _place(self, placement: Placement) -> None:
        """Each virtual host's rows and stream directories to the identity that owns it now
        (`batonmq.store.placement`)."""
        conn = self._writer()
        unclean = {
            broker_id
            for (broker_id,) in conn.execute(
                "SELECT broker_id FROM brokers WHERE state = 'running'"
            )
            if broker_id != self._broker_id
        }
        if self._unclean_stop:
            unclean.add(self._broker_id)
        moves = self._transaction(
            "placement of the virtual hosts",
            partial(place_rows, placement=placement, recovery=_SQL, unclean=unclean),
            conn,
        )
        try:
            streams = place_streams(placement)
        except OSError as exc:
            raise StoreUnavailable(f"cannot move the stream directories: {exc}") from exc
        if moves or streams:
            log.info(
                "virtual hosts moved to their owners",
                extra={
                    "vhosts": len({move.vhost for move in moves}),
                    "streams": len(streams),
                    "workers": placement.workers,
                },
            )

    def _checkpoint(self) -> None:
        """Write what the append log holds to the database, and empty the log."""
        appends = self._appends
        if appends is None or not appends.size:
            return
        with appends.checkpointing() as pending:
            if pending:
                self._write(pending.as_batch())

    def _close_sync(self) -> None:
        appends = self._appends
        if appends is not None:
            try:
                # A clean stop leaves the database complete. If it cannot (a full disk), the
                # log stays, and the next open writes it.
                with contextlib.suppress(StoreError):
                    self._checkpoint()
            finally:
                self._appends = None
                appends.close()
        self._close_database()

    # -- the protocol's work, on the store's thread --------------------------------------------

    def _recover_sync(self) -> Recovery:
        broker = (self._broker_id,)

        def recover(conn: sqlite3.Connection) -> Recovery:
            discarded = conn.execute(_SQL["discard_entries"], broker).rowcount
            conn.execute(_SQL["discard_messages"], broker)
            if self._unclean_stop:
                conn.execute(_SQL["mark_delivered"], broker)
            rows = conn.execute(_SQL["next_block"]).fetchall()
            first_message_id = message_id_base(rows[0][0] if rows else None, self.location)
            reads = {
                name: conn.execute(
                    _SQL[name], () if name in STORE_WIDE_READS else broker
                ).fetchall()
                for name in RECOVERY_READS
            }
            return recovery(
                reads,
                message_id_base=first_message_id,
                discarded_entries=discarded,
                unclean_stop=self._unclean_stop,
            )

        return self._transaction("recovery", recover, self._writer())

    def _commit_sync(self, batch: WriteBatch) -> None:
        appends = self._appends
        if appends is None:
            self._write(batch)
        elif holds_only_entries(batch) and not appends.pending.conflicts_with(batch):
            appends.append(batch)
            if appends.wants_checkpoint():
                self._checkpoint()
        else:
            self._checkpoint()
            self._write(batch)

    def _write(self, batch: WriteBatch, broker_id: str | None = None) -> None:
        """`batch` in one database transaction, as this store's identity or `broker_id`'s."""
        self._transaction("write", partial(self._apply, batch, broker_id=broker_id), self._writer())

    def _apply(
        self, batch: WriteBatch, conn: sqlite3.Connection, broker_id: str | None = None
    ) -> None:
        broker = self._broker_id if broker_id is None else broker_id
        checksums = [checksum(message) for message in batch.messages_put]
        for statement, rows in _PLAN.write_steps(broker, batch, checksums):
            conn.executemany(statement, rows)
        if changes_catalogue(batch):
            conn.execute(_CATALOGUE_BUMP)
        # Last, the messages no entry refers to any more, among those that lost one.
        for chunk in chunks(orphan_candidates(batch)):
            conn.execute(
                "INSERT INTO temp.gc_candidates (id) VALUES"
                f" {', '.join(['(?)'] * len(chunk))} ON CONFLICT DO NOTHING",
                chunk,
            )
        conn.execute(_DELETE_CANDIDATE_ORPHANS, (broker,))
        conn.execute("DELETE FROM temp.gc_candidates")
        if batch.vhosts_deleted and broker_id is None and self._worker is None:
            # The broker's own identity, holding the lock: the virtual hosts' rows that
            # workers of an earlier run left go with them.
            gone = WriteBatch(vhosts_deleted=batch.vhosts_deleted)
            for worker, _ in self._identities(conn, {})[1:]:
                self._apply(gone, conn, broker_id=worker)

    def _read_sync(
        self, vhost: str, queue: str, after: int, limit: int, priority: int | None
    ) -> PageRead:
        """The database's entries, and those the append log holds: paged out and read back
        before a checkpoint, an entry never reaches the database."""
        held = (
            None
            if self._appends is None
            else self._appends.pending.page(vhost, queue, after, limit, priority)
        )
        if held is None:
            self._checkpoint()

        def read(conn: sqlite3.Connection) -> PageRead:
            rows = conn.execute(
                sqlitereads.read_entries_sql(priority),
                (
                    self._broker_id,
                    vhost,
                    queue,
                    *(() if priority is None else (priority,)),
                    after,
                    limit,
                ),
            )
            return [
                checked_entry(sequence, count, expires_at, level, StoredMessage(*message), stored)
                for sequence, count, expires_at, level, *message, stored in rows
            ]

        page = self._read(read)
        quarantined = [entry for entry in page if isinstance(entry, QuarantinedEntry)]
        if quarantined:
            self._transaction(
                "quarantine",
                partial(self._quarantine, vhost, queue, quarantined),
                self._writer(),
            )
            for entry in quarantined:
                report_quarantined(self.location, vhost, queue, entry)
        if not held:
            return page
        # The first `limit` of both: none passes over a database entry not read, as the
        # database gave `limit` entries, or all it has, after `after`.
        return sorted([*page, *held], key=attrgetter("sequence"))[:limit]

    def _quarantine(
        self, vhost: str, queue: str, entries: list[QuarantinedEntry], conn: sqlite3.Connection
    ) -> None:
        """Move the entries, each with a copy of its message as stored, to the quarantine; a
        message no entry holds any more goes."""
        now = SQLITE.timestamp(datetime.now(UTC))
        keys = [(self._broker_id, vhost, queue, entry.sequence) for entry in entries]
        conn.executemany(_SQL["quarantine_entry"], [(*key, now) for key in keys])
        conn.executemany(_SQL["delete_entry"], keys)
        conn.executemany(
            _SQL["delete_orphan"], [(self._broker_id, entry.message_id) for entry in entries]
        )

    def _stats_sync(self) -> StoreStats:
        self._checkpoint()

        def count(conn: sqlite3.Connection) -> StoreStats:
            with held_still(self._path) as logs:
                totals = sqlitereads.counted(conn, self._identities(conn, logs))
            return StoreStats(
                self.kind, self.location, self._schema_version, self._broker_id, *totals
            )

        return self._read(count)

    def _identities(
        self, conn: sqlite3.Connection, logs: dict[int | None, Pending]
    ) -> list[tuple[str, Pending]]:
        """The store identities whose rows this store reads as its broker's, each with what its
        append log holds (`logs`, by worker): a worker's own; for anything else, the broker's
        one process's and every worker's (whatever number of workers it ran with)."""
        if self._worker is not None:
            return [(self._broker_id, logs.get(self._worker, Pending()))]
        workers = {
            index
            for (broker_id,) in conn.execute("SELECT broker_id FROM brokers")
            if (index := worker_index(self._broker_id, broker_id)) is not None
        } | {worker for worker in logs if worker is not None}
        return [(self._broker_id, logs.get(None, Pending()))] + [
            (worker_id(self._broker_id, worker), logs.get(worker, Pending()))
            for worker in sorted(workers)
        ]

    def _backup_sync(self, directory: Path) -> None:
        self._reader()
        # A reader in another process copies what the database has and adds what the broker's
        # append log holds (`held_still`); this store, holding the log, writes it out first.
        self._checkpoint()
        make_empty_directory(directory)
        try:
            # A connection of its own: its one backup step reads a single snapshot of the file
            # while the broker (this store or another process) goes on committing. The snapshot
            # starts while the broker's checkpoints are held back, with the log read.
            source = sqlite3.connect(
                f"{self._path.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None
            )
            try:
                target = sqlite3.connect(directory / BACKUP_FILE, isolation_level=None)
                try:
                    with held_still(self._path) as logs:
                        source.execute("BEGIN")
                        source.execute("SELECT count(*) FROM meta").fetchone()
                    source.backup(target)
                    source.execute("COMMIT")
                    identities = self._identities(target, logs)
                    target.execute(GC_TABLE)
                    for broker_id, pending in identities:
                        if pending:
                            self._transaction(
                                "backup",
                                partial(self._apply, pending.as_batch(), broker_id=broker_id),
                                target,
                            )
                    # One self-contained file, with no -wal beside it.
                    target.execute("PRAGMA journal_mode = DELETE")
                    version = target.execute(
                        "SELECT value FROM meta WHERE key = 'schema_version'"
                    ).fetchone()[0]
                    # What the logs held is in the copy now.
                    counts = sqlitereads.counted(
                        target, [(broker_id, None) for broker_id, _ in identities]
                    )
                finally:
                    target.close()
            finally:
                source.close()
            manifest = {
                "kind": self.kind,
                "schema_version": int(version),
                "broker_id": self._broker_id,
                "created_at": datetime.now(UTC).isoformat(),
                "messages": counts[3],
                "entries": counts[4],
            }
            write_manifest(directory, manifest)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"backup of {self._path} to {directory} failed: {exc}") from exc

    def _restore_sync(self, directory: Path) -> None:
        if self._conn is None or not self._locked:
            raise StoreError(f"{self._path}: restore needs the store open with its lock")
        source = directory / BACKUP_FILE
        checked_manifest(directory, self.kind, self._broker_id)
        check_backup(source)
        if self._appends is not None:
            self._appends.discard()
        self._conn.close()
        self._conn = None
        try:
            install(source, self._path)
        except OSError as exc:
            raise StoreError(f"restore of {self._path} from {directory} failed: {exc}") from exc
        finally:
            self._connect()
        assert self._conn is not None
        self._transaction("restore", self._stopped_workers, self._conn)

    def _stopped_workers(self, conn: sqlite3.Connection) -> None:
        """The worker identities of a restored backup as stopped cleanly, as this store's own
        is at its close: the backup's records say how the broker ran when it was taken, not how
        the restored store was left (its entries were not delivered since)."""
        for worker, _ in self._identities(conn, {})[1:]:
            conn.execute(
                "UPDATE brokers SET state = 'stopped', holder = NULL WHERE broker_id = ?",
                (worker,),
            )

    def _used_bytes_sync(self) -> int:
        """The database's pages in use (`sqlitereads.pages_in_use`), the append log written out
        first: a measure that falls as consumers acknowledge, which producers held over
        disk.store_overfull wait for (measured only when that is set)."""
        self._checkpoint()
        return self._read(sqlitereads.pages_in_use)


def prepare_for_workers(
    database: Path, *, broker_id: str, sync: bool, held_lock: int, placement: Placement
) -> None:
    """On this thread (the supervisor of a broker's workers, which runs no other): open the
    store with the lock this process holds, write every append log a crash left to the
    database, give each virtual host's rows to the worker that owns it now, and close it."""
    store = SQLiteStore(
        database, broker_id=broker_id, sync=sync, held_lock=held_lock, placement=placement
    )
    store.open_and_close_here()
