"""The SQLite store's append log: message and entry writes made durable by one append and one
fsync per batch, and written to the database later, in bulk (a checkpoint).

Why: a persistent message is confirmed, and delivered, only once its batch is durable. Written
to the database, each one costs an insert of the message, an insert of its entry (two B-trees),
and, once consumed, the deletion of both: about 9 µs of the store thread's CPU per message,
more than a third of the broker's whole cost. Most persistent messages are consumed within
moments. Appended to a log instead, a message costs its share of one write and one fsync, and
when its entry is deleted before the next checkpoint, the two meet in memory (`Pending`) and
the database never sees either. What is still held at a checkpoint is written then. This is
how Artemis's journal and RabbitMQ's message store work too: the database is the compacted
form of the log.

The log relies on what the engine does: an entry is put once (it is marked stored), so an entry
put since the last checkpoint is not in the database, and deleting it there is not needed.

The log holds only what a batch of messages and entries changes: messages put, entries put,
delivery counts updated, entries deleted. Any other batch (a queue or exchange declared or
deleted, a purge, users and permissions) checkpoints first and goes to the database as before;
so do statistics, backups and a clean close. A read of a queue's entries (paging) merges the
database's with those put since the checkpoint (`Pending.page`), so that entries paged out and
read back soon after never reach the database; it checkpoints first only when the database's
entries of that queue changed since. After a crash the store replays the log at open and
checkpoints it before anything reads the database.

Frames, `Pending` and the number check do not depend on the file: the PostgreSQL store's log
shares them (`batonmq.store.pending`). A frame cut short at the end of the file is a write that
a crash interrupted; nothing in it was confirmed, and replay ignores it. A complete frame whose
checksum does not match is damage: the store refuses to open (StoreCorrupt), naming the file.

A checkpoint is one database transaction, then the log is emptied (truncated and fsynced)
before the next append. Replaying a log again after a crash between the two rewrites what the
database already has: its puts are upserts, its updates set values and its deletions delete by
key, so a second replay changes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
from collections.abc import Iterator
from pathlib import Path

from batonmq.store.base import StoreError, WriteBatch
from batonmq.store.pending import CHECKPOINT_LOG_BYTES, Pending, encode_frame


def appends_path(database: Path, worker: int | None = None) -> Path:
    """The append log of the database file `database`, beside it (as SQLite's -wal is): the
    broker's one process's, or worker `worker`'s ("-appends-w<k>": the workers share the file,
    each with a log of its own)."""
    return database.with_name(
        database.name + "-appends" + ("" if worker is None else f"-w{worker}")
    )


def appends_paths(database: Path) -> dict[int | None, Path]:
    """Every append log of `database` there is, by worker (None: the one process's)."""
    found: dict[int | None, Path] = {}
    one = appends_path(database)
    if one.exists():
        found[None] = one
    for path in database.parent.glob(f"{glob.escape(one.name)}-w*"):
        index = path.name.removeprefix(f"{one.name}-w")
        if index.isdigit():
            found[int(index)] = path
    return found


class AppendLog:
    """The log file, opened by the store's thread for as long as the store is open."""

    def __init__(self, path: Path, *, sync: bool) -> None:
        self.path = path
        self._sync = sync
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self._fd).st_size
        self.pending = Pending()

    def replay(self) -> None:
        """Take in every complete frame of the file (see the module docstring)."""
        with open(self.path, "rb") as file:
            self.pending = _pending(file.read(), self.path)

    def append(self, batch: WriteBatch) -> None:
        """Make `batch` durable, then part of `pending`; StoreError (and nothing changed) if the
        write or the fsync fails, or if the database could not take the batch at a checkpoint
        (a number out of its 64-bit range): a checkpoint must never fail on what the log took."""
        frame = encode_frame(batch)
        try:
            written = os.write(self._fd, frame)
            if written != len(frame):
                raise OSError(f"short write: {written} of {len(frame)} bytes")
            if self._sync:
                os.fdatasync(self._fd)
        except OSError as exc:
            self._cut_back()
            raise StoreError(f"write failed: {_reason(exc)} ({self.path})") from exc
        self.size += len(frame)
        self.pending.add(batch)

    def wants_checkpoint(self) -> bool:
        return self.size >= CHECKPOINT_LOG_BYTES or self.pending.is_full()

    @contextlib.contextmanager
    def checkpointing(self) -> Iterator[Pending]:
        """For a checkpoint: what to write to the database inside the block. When the block
        ends without an error, the log starts again, empty. Readers in other processes
        (`held_still`) wait meanwhile."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield self.pending
            self.discard()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def discard(self) -> None:
        """Empty the log, durably before anything is appended: a replay of old frames after
        later database writes would undo those (and a restore replaces the database the log
        belongs to)."""
        try:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
        except OSError as exc:
            raise StoreError(f"truncating {self.path} failed: {_reason(exc)}") from exc
        self.size = 0
        self.pending = Pending()

    def close(self) -> None:
        os.close(self._fd)

    def _cut_back(self) -> None:
        """Remove a frame only partly written: the next append must not follow a torn frame.
        If that fails too, the file is left as it is, and its torn tail is ignored at replay
        only while it stays the last frame; the next append fails the same way, most likely."""
        try:
            os.ftruncate(self._fd, self.size)
        except OSError:
            return


@contextlib.contextmanager
def held_still(database: Path) -> Iterator[dict[int | None, Pending]]:
    """What every append log of `database` holds, by worker (None: the one process's), for a
    reader in another process (an online backup, `db stats`). The writers' checkpoints wait
    until the block ends, so the database as read inside the block and the logs are of one
    moment: every batch appended before a log was read, and none after."""
    with contextlib.ExitStack() as held:
        logs = {}
        for worker, path in sorted(appends_paths(database).items(), key=_worker_order):
            try:
                file = held.enter_context(open(path, "rb"))
            except FileNotFoundError:
                continue  # replayed and removed meanwhile
            fcntl.flock(file, fcntl.LOCK_SH)
            logs[worker] = _pending(file.read(), path)
        yield logs


def read_log(path: Path) -> Pending:
    """What the append log at `path` holds (its owner not running)."""
    return _pending(path.read_bytes(), path)


def _worker_order(item: tuple[int | None, Path]) -> int:
    return -1 if item[0] is None else item[0]


def _pending(data: bytes, path: Path) -> Pending:
    """The net effect of the complete frames in `data`, the contents of the log at `path`."""
    pending = Pending()
    pending.take_frames(data, str(path))
    return pending


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
