"""An SQLite database file as a store's: opened and closed on the store's own thread, with its
lock, its schema and its broker record, and the transactions every call runs in.

SQLite calls block, so every one of them runs on one thread of the store's own (a single-worker
executor, the connection created on it). One thread also gives the protocol's ordering for
free: jobs run in the order they were submitted, so a read issued after a commit sees it. WAL
mode: readers (`batonctl db stats`, an online backup) never block the broker's writer.
`sync=True` is `synchronous=FULL` (each commit fsynced); `sync=False` is `NORMAL`, which in WAL
mode survives a crash of the process but not of the machine (imq.persist.file.sync.enabled).

The store is built in two layers: this one, and the `Store` protocol with its append log
(`batonmq.store.sqlite`), which opens the log once the database is open and writes it out
before the database is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

from batonmq.store.base import (
    SCHEMA_VERSION,
    SchemaTooNew,
    SchemaTooOld,
    StoreCorrupt,
    StoreError,
    StoreFenced,
    StoreUnavailable,
)
from batonmq.store.placement import Placement
from batonmq.store.sqlitefile import (
    mark_created,
    refuse_lost_store,
    release_lock,
    take_lock,
)
from batonmq.store.sqliteschema import migrate, read_version

T = TypeVar("T")

# Primary result codes (the low byte of an extended code) that mean a damaged or foreign file.
_CORRUPT_CODES: Final = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
_WAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
_SYNCHRONOUS_NAMES: Final = {0: "off", 1: "normal", 2: "full", 3: "extra"}

# Messages that may have lost their last entry in this transaction; a temp table so that deleting
# a queue of millions of entries never pulls their ids into Python.
GC_TABLE: Final = "CREATE TEMP TABLE IF NOT EXISTS gc_candidates (id INTEGER PRIMARY KEY)"


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _is_corruption(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (
        _CORRUPT_CODES
    )


class SQLiteDatabase:
    """The database of a `Store` on one SQLite file (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        broker_id: str,
        sync: bool = True,
        worker: int | None = None,
        held_lock: int | None = None,
        placement: Placement | None = None,
    ) -> None:
        """`worker`: the index of the worker process of a broker with several that the store is
        for (`broker_id` is then its identity, `batonmq.store.placement.worker_id`), which
        appends to a log of its own. `held_lock`: the lock file's descriptor, locked by this
        process already (a worker's, inherited from the supervisor, which holds the lock for
        them all): an open with the lock takes it as held and leaves it at close.
        `placement`: for a broker that starts on the store (its one process, or the supervisor
        of its workers): an open with the lock gives each virtual host's rows to its owner."""
        self._path = path
        self._broker_id = broker_id
        self._sync = sync
        self._worker = worker
        self._held_lock = held_lock
        self._placement = placement
        #: Commits handed to the store that change the catalogue (`catalogue_writes`).
        self._catalogue_writes = 0
        self._executor: ThreadPoolExecutor | None = None
        # Touched only on the executor's thread, from open to close.
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._locked = False
        #: Whether the previous holder stopped without closing the store (a crash).
        self._unclean_stop = False
        self._create = True
        self._migrate = True
        self._replace_lost = False
        self._empty = True
        self._schema_version = 0

    @property
    def kind(self) -> str:
        return "sqlite"

    @property
    def broker_id(self) -> str:
        return self._broker_id

    @property
    def location(self) -> str:
        return str(self._path)

    @property
    def schema_version(self) -> int:
        return self._schema_version

    # -- the asynchronous surface: each method submits one job before its first await ----------

    def _submit(self, job: Callable[[], T]) -> asyncio.Future[T]:
        if self._executor is None:
            raise StoreError(f"{self._path}: the store is not open")
        return asyncio.get_running_loop().run_in_executor(self._executor, job)

    async def upgrade(self) -> tuple[int, int]:
        return await self._submit(self._upgrade_sync)

    async def connection_settings(self) -> dict[str, str]:
        """The connection's journal mode and synchronous level, for the startup log line."""
        return await self._submit(self._settings_sync)

    def on_fenced(self, handler: Callable[[StoreFenced], None]) -> None:
        """Never called: the lock file is held as long as this process lives, and no other
        broker can take the file over meanwhile."""

    # -- on the store's thread ----------------------------------------------------------------

    def _lock_and_check(self) -> None:
        """Take the lock (when opened with it) and refuse a store that was lost."""
        if self._locked:
            if self._create:
                try:
                    self._path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreUnavailable(
                        f"cannot create the data directory {self._path.parent}: {exc.strerror}"
                    ) from exc
            elif not self._path.exists():
                raise StoreUnavailable(f"there is no store at {self._path}")
            self._lock_fd = take_lock(self._path) if self._held_lock is None else None
        if not self._replace_lost:
            refuse_lost_store(self._path)

    def _connect(self) -> None:
        # Without the lock the file is only read: opened read-only, so that it is never created.
        if self._locked:
            target, uri = str(self._path), False
        else:
            target, uri = f"{self._path.absolute().as_uri()}?mode=ro", True
        try:
            self._conn = conn = sqlite3.connect(target, uri=uri, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 5000")
            if self._locked:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode != "wal":
                    raise StoreUnavailable(f"{self._path}: cannot use WAL mode (got {mode})")
                # A checkpointed log is reused, not shrunk: without a limit, one huge batch
                # would leave a log file that large for good.
                conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")
                conn.execute("PRAGMA temp_store = MEMORY")
                conn.execute(GC_TABLE)
            conn.execute(f"PRAGMA synchronous = {'FULL' if self._sync else 'NORMAL'}")
            self._read_schema_version(conn)
            if self._schema_version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self._path} has schema version {self._schema_version}, newer than this"
                    f" BatonMQ's {SCHEMA_VERSION}: run a newer BatonMQ"
                )
            if self._locked and (
                (self._empty and self._create)
                or (not self._empty and self._schema_version < SCHEMA_VERSION and self._migrate)
            ):
                self._run_migrations(conn)
            if self._locked and self._schema_version == SCHEMA_VERSION:
                self._register_broker(conn)
            if self._locked and not self._empty:
                mark_created(self._path)
        except sqlite3.Error as exc:
            if _is_corruption(exc):
                raise StoreCorrupt(f"{self._path} is not a BatonMQ store: {exc}") from exc
            raise StoreUnavailable(f"cannot open {self._path}: {exc}") from exc

    def _read_schema_version(self, conn: sqlite3.Connection) -> None:
        found = read_version(conn, self._path)
        self._empty, self._schema_version = found is None, found or 0

    def _run_migrations(self, conn: sqlite3.Connection) -> None:
        self._transaction(
            "schema migration", partial(migrate, from_version=self._schema_version), conn
        )
        self._schema_version, self._empty = SCHEMA_VERSION, False

    def _register_broker(self, conn: sqlite3.Connection) -> None:
        previous = conn.execute(
            "SELECT state FROM brokers WHERE broker_id = ?", (self._broker_id,)
        ).fetchone()
        self._unclean_stop = previous is not None and previous[0] == "running"
        conn.execute(
            "INSERT INTO brokers (broker_id, epoch, state, started_at, holder)"
            " VALUES (?, 1, 'running', ?, ?) ON CONFLICT (broker_id) DO UPDATE"
            " SET epoch = epoch + 1, state = 'running', started_at = excluded.started_at,"
            " holder = excluded.holder",
            (self._broker_id, _now(), f"{socket.gethostname()} pid {os.getpid()}"),
        )

    def _close_database(self) -> None:
        """Close the connection, the broker record marked stopped, and release the lock."""
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                if self._locked and self._schema_version == SCHEMA_VERSION:
                    # Informational (a broker record left "running" means an unclean stop), so
                    # a full disk must not stop the lock from being released.
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute(
                            "UPDATE brokers SET state = 'stopped', holder = NULL"
                            " WHERE broker_id = ?",
                            (self._broker_id,),
                        )
                conn.close()
        finally:
            fd, self._lock_fd = self._lock_fd, None
            if fd is not None:
                release_lock(fd)

    def _upgrade_sync(self) -> tuple[int, int]:
        if self._conn is None or not self._locked:
            raise StoreError(f"{self._path}: upgrade needs the store open with its lock")
        found = self._schema_version
        if found < SCHEMA_VERSION:
            self._run_migrations(self._conn)
            # The broker record that open skips while the schema is old.
            self._transaction("broker registration", self._register_broker, self._conn)
        return found, SCHEMA_VERSION

    def _settings_sync(self) -> dict[str, str]:
        conn = self._reader()
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
        level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        return {"journal_mode": mode, "synchronous": _SYNCHRONOUS_NAMES.get(level, str(level))}

    def _reader(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self._path}: the store is not open")
        if self._schema_version != SCHEMA_VERSION:
            if self._empty:
                raise StoreError(f"{self._path} is empty: open it with create to make a store")
            raise SchemaTooOld(
                f"{self._path} has schema version {self._schema_version}, older than"
                f" {SCHEMA_VERSION}: run `batonctl db upgrade`"
            )
        return self._conn

    def _writer(self) -> sqlite3.Connection:
        conn = self._reader()
        if not self._locked:
            raise StoreError(f"{self._path} was opened without the lock, for reading only")
        return conn

    def _transaction(
        self, action: str, work: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection
    ) -> T:
        """Run `work` in one IMMEDIATE transaction (the write lock taken at BEGIN, so the
        transaction never fails half-way for want of it); roll back on any error."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            result = work(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            # SQLite may already have rolled back (a full disk does); ROLLBACK would then fail.
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error | OverflowError):
                error = StoreCorrupt if _is_corruption(exc) else StoreError
                raise error(f"{action} failed: {exc} ({self._path})") from exc
            raise
        return result

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return work(self._reader())
        except sqlite3.Error as exc:
            error = StoreCorrupt if _is_corruption(exc) else StoreError
            raise error(f"read failed: {exc} ({self._path})") from exc
