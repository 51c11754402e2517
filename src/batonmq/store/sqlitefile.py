"""The files of an SQLite store beside its database: the lock, the marker that a store was made,
and the database file a restore installs.

- The lock is an `flock` on `<file>.lock`, not SQLite's own locking: SQLite lets two processes
  write one file in turn, but two brokers recovering and committing the same queues would
  corrupt each other's view. The lock file names the holder's pid for the error an operator
  reads.
- A store that is lost is not started anew: a missing or zero-length database file where a
  store was made (SQLite would create a new empty database in its place, and a broker would
  start empty as if it had never held anything) is StoreCorrupt, naming the file. What says a
  store was made there is the marker file `<file>.created`, written (and fsynced, with its
  directory) once the schema is committed, and by any later open that finds it missing. Not
  the lock file, which an open that failed before creating anything leaves too; not the -wal
  and -shm files, which a clean close removes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Final

from batonmq import __version__
from batonmq.fsync import fsync_directory
from batonmq.store.base import StoreCorrupt, StoreError, StoreLocked, StoreUnavailable

#: Appended to the database file's name: the marker that says a store was made there.
CREATED_SUFFIX: Final = ".created"


def take_lock(database: Path) -> int:
    """Lock the store at `database` for this process (the file `<database>.lock`, which names
    the holder's pid); the lock file's descriptor, which holds the lock until it is closed (in
    every process that inherited it too). StoreLocked if another process holds it."""
    lock_path = f"{database}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreUnavailable(f"cannot open the lock file {lock_path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise StoreLocked(
                f"{database} is locked by another running broker (pid {holder})"
            ) from None
        raise StoreUnavailable(f"cannot lock {lock_path}: {exc.strerror}") from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release_lock(fd: int) -> None:
    """Release the lock `take_lock` returned."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def holds_nothing(database: Path) -> bool:
    """Whether the database file is missing or empty (0 bytes)."""
    try:
        return not database.stat().st_size
    except FileNotFoundError:
        return True


def refuse_lost_store(database: Path) -> None:
    """StoreCorrupt if a store was made at `database` (its marker) but its file is gone or
    empty."""
    marker = _marker(database)
    if not marker.exists():
        return
    try:
        if database.stat().st_size:
            return
        state = "is empty (0 bytes)"
    except FileNotFoundError:
        state = "is missing"
    raise StoreCorrupt(
        f"{database} {state}, but a store was made there ({marker} says so): restore"
        " it with `batonctl db restore`, or run `batonctl db create` to start an empty store"
    )


def mark_created(database: Path) -> None:
    """Write the marker that a store was made at `database`, durably, unless it is there."""
    marker = _marker(database)
    if marker.exists():
        return
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, f"BatonMQ store {database.name} made by {__version__}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_directory(database.parent)
    except OSError as exc:
        raise StoreUnavailable(f"cannot write {marker}: {exc.strerror}") from exc


def check_backup(source: Path) -> None:
    """Refuse a backup file that is missing, foreign or damaged before the store is replaced."""
    if not source.is_file():
        raise StoreError(f"{source} does not exist")
    try:
        check = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True)
        try:
            result = check.execute("PRAGMA quick_check").fetchone()[0]
            check.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        finally:
            check.close()
    except sqlite3.Error as exc:
        raise StoreCorrupt(f"{source} is not a BatonMQ store: {exc}") from exc
    if result != "ok":
        raise StoreCorrupt(f"{source} is damaged: {result}")


def install(source: Path, database: Path) -> None:
    """Replace the closed database at `database` with a copy of `source`, durably: copied
    beside it and fsynced, then renamed over it. OSError if it cannot."""
    staged = database.with_name(database.name + ".restoring")
    shutil.copyfile(source, staged)
    with open(staged, "rb") as staged_file:
        os.fsync(staged_file.fileno())
    # The store's connection was the last one, so the -wal is checkpointed; a stale one must
    # not be read as the log of the new file.
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    os.replace(staged, database)
    # The rename is durable only once the directory is.
    fsync_directory(database.parent)


def _marker(database: Path) -> Path:
    return database.with_name(database.name + CREATED_SUFFIX)
