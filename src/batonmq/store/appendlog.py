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

Format: frames of `length` (4 bytes), `crc32` of the payload (4 bytes), payload (a `marshal`
of the batch's four lists as plain tuples). A frame cut short at the end is a write that a crash
interrupted; nothing in it was confirmed, and replay ignores it. A complete frame whose checksum
does not match is damage: the store refuses to open (StoreCorrupt), naming the file.

A checkpoint is one database transaction, then the log is emptied (truncated and fsynced)
before the next append. Replaying a log again after a crash between the two rewrites what the
database already has: its puts are upserts, its updates set values and its deletions delete by
key, so a second replay changes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import marshal
import os
import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeAlias

from batonmq.store.base import (
    PagedEntry,
    StoreCorrupt,
    StoredEntry,
    StoredMessage,
    StoreError,
    WriteBatch,
)

_FRAME_HEAD: Final = struct.Struct(">II")
#: The payload format's version, first in every payload.
_FORMAT: Final = 1
#: A checkpoint once the log file is this large...
CHECKPOINT_LOG_BYTES: Final = 64 * 1024 * 1024
#: ... or once the entries waiting for one hold this many bytes of bodies, or this many entries:
#: what waits is kept in memory (messages paged out of a queue's memory wait here too).
CHECKPOINT_PENDING_BYTES: Final = 8 * 1024 * 1024
CHECKPOINT_PENDING_ENTRIES: Final = 20_000

QueueKey: TypeAlias = tuple[str, str]
EntryKey: TypeAlias = tuple[str, str, int]


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


def holds_only_entries(batch: WriteBatch) -> bool:
    """Whether `batch` changes only messages and entries: what the log takes."""
    return not (
        batch.vhosts_deleted
        or batch.exchanges_deleted
        or batch.queues_deleted
        or batch.bindings_deleted
        or batch.ranges_deleted
        or batch.vhosts_put
        or batch.exchanges_put
        or batch.queues_put
        or batch.bindings_put
        or batch.users_put
        or batch.users_deleted
        or batch.permissions_put
        or batch.permissions_deleted
    )


@dataclass(slots=True)
class Pending:
    """What the log holds that the database does not yet: the net effect of its batches."""

    #: Messages put since the last checkpoint, by id, with how many pending entries hold each.
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    holders: dict[int, int] = field(default_factory=dict)
    #: Entries put since the last checkpoint, by queue and sequence.
    entries: dict[QueueKey, dict[int, StoredEntry]] = field(default_factory=dict)
    entry_count: int = 0
    #: Entries of the database: their new delivery counts, and those deleted (with the message
    #: each held, which may be orphaned).
    updated: dict[EntryKey, int] = field(default_factory=dict)
    deleted: dict[EntryKey, int] = field(default_factory=dict)
    #: The queues of those entries: a read of theirs must see the database changed first.
    changed_queues: set[QueueKey] = field(default_factory=set)
    #: Entries put and deleted since the last checkpoint whose message is in the database,
    #: which may be orphaned.
    released: dict[EntryKey, int] = field(default_factory=dict)
    body_bytes: int = 0

    def __bool__(self) -> bool:
        return bool(self.messages or self.entries or self.updated or self.deleted or self.released)

    def is_full(self) -> bool:
        return (
            self.body_bytes >= CHECKPOINT_PENDING_BYTES
            or self.entry_count >= CHECKPOINT_PENDING_ENTRIES
        )

    def conflicts_with(self, batch: WriteBatch) -> bool:
        """Whether `batch` puts an entry that a pending deletion is for: the checkpoint deletes
        after it puts, so it must come first."""
        deleted = self.deleted
        return bool(deleted) and any(
            (entry.vhost, entry.queue, entry.sequence) in deleted for entry in batch.entries_put
        )

    def add(self, batch: WriteBatch) -> None:
        """Take in `batch` (which `holds_only_entries`)."""
        messages, holders, entries = self.messages, self.holders, self.entries
        for message in batch.messages_put:
            if message.id not in messages:
                messages[message.id] = message
                holders[message.id] = 0
                self.body_bytes += len(message.body)
        for entry in batch.entries_put:
            held = entries.get((entry.vhost, entry.queue))
            if held is None:
                held = entries[(entry.vhost, entry.queue)] = {}
            if entry.sequence not in held:
                self.entry_count += 1
                if entry.message_id in holders:
                    holders[entry.message_id] += 1
            held[entry.sequence] = entry
        for vhost, queue, sequence, count in batch.entries_updated:
            held = entries.get((vhost, queue))
            counted = None if held is None else held.get(sequence)
            if held is None or counted is None:
                self.updated[(vhost, queue, sequence)] = count
                self.changed_queues.add((vhost, queue))
            else:
                held[sequence] = counted._replace(delivery_count=count)
        for vhost, queue, sequence, message_id in batch.entries_deleted:
            held = entries.get((vhost, queue))
            if held is None or held.pop(sequence, None) is None:
                key = (vhost, queue, sequence)
                self.updated.pop(key, None)
                self.deleted[key] = message_id
                self.changed_queues.add((vhost, queue))
                continue
            self.entry_count -= 1
            if not held:
                del entries[(vhost, queue)]
            if message_id not in holders:
                self.released[(vhost, queue, sequence)] = message_id
                continue
            holders[message_id] -= 1
            if not holders[message_id]:
                del holders[message_id]
                self.body_bytes -= len(messages.pop(message_id).body)

    def page(
        self, vhost: str, queue: str, after: int, limit: int, priority: int | None
    ) -> list[PagedEntry] | None:
        """The first `limit` entries of a queue put since the last checkpoint, after sequence
        `after` (of level `priority`, or any), with their messages, in order; None when a read
        must go to the database after a checkpoint instead: the database's entries of that queue
        changed since (deleted, counted again), or a message is there and not here."""
        if (vhost, queue) in self.changed_queues:
            return None
        held = self.entries.get((vhost, queue))
        if not held:
            return []
        chosen = sorted(
            (
                entry
                for sequence, entry in held.items()
                if sequence > after and (priority is None or entry.priority == priority)
            ),
            key=_sequence,
        )
        page = []
        for entry in chosen[:limit]:
            message = self.messages.get(entry.message_id)
            if message is None:
                return None
            page.append(PagedEntry(entry.sequence, entry.delivery_count, message, entry.expires_at))
        return page

    def as_batch(self) -> WriteBatch:
        """The checkpoint's batch: what is still held, and what changed in the database."""
        return WriteBatch(
            messages_put=list(self.messages.values()),
            entries_put=[entry for held in self.entries.values() for entry in held.values()],
            entries_updated=[(*key, count) for key, count in self.updated.items()],
            entries_deleted=[
                (*key, message_id)
                for deletions in (self.deleted, self.released)
                for key, message_id in deletions.items()
            ],
        )

    def orphan_candidates(self) -> set[int]:
        """The messages of the database that lose an entry at the checkpoint."""
        return {*self.deleted.values(), *self.released.values()}

    def entries_gained(self) -> Counter[int]:
        """By message id: the entries put since the last checkpoint, less the database's
        deleted."""
        gained = Counter(
            entry.message_id for held in self.entries.values() for entry in held.values()
        )
        gained.subtract(self.deleted.values())
        return gained


def _sequence(entry: StoredEntry) -> int:
    return entry.sequence


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
        _check_numbers(batch)
        payload = marshal.dumps(
            (
                _FORMAT,
                [tuple(message) for message in batch.messages_put],
                [tuple(entry) for entry in batch.entries_put],
                batch.entries_updated,
                batch.entries_deleted,
            )
        )
        frame = _FRAME_HEAD.pack(len(payload), zlib.crc32(payload)) + payload
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
    offset = 0
    while offset + _FRAME_HEAD.size <= len(data):
        length, crc = _FRAME_HEAD.unpack_from(data, offset)
        start = offset + _FRAME_HEAD.size
        payload = data[start : start + length]
        if len(payload) < length:
            break  # cut short by a crash (or being written): never confirmed
        if zlib.crc32(payload) != crc:
            raise StoreCorrupt(f"{path} is damaged: the frame at byte {offset} fails its checksum")
        pending.add(_decoded(payload, path))
        offset = start + length
    return pending


def _check_numbers(batch: WriteBatch) -> None:
    """StoreError unless every number of `batch` fits the database's 64-bit integers."""
    numbers = [message.id for message in batch.messages_put]
    for entry in batch.entries_put:
        numbers += (entry.sequence, entry.message_id, entry.delivery_count, entry.priority)
        if entry.expires_at is not None:
            numbers.append(entry.expires_at)
    for _vhost, _queue, sequence, number in (*batch.entries_updated, *batch.entries_deleted):
        numbers += (sequence, number)
    try:
        struct.pack(f">{len(numbers)}q", *numbers)
    except struct.error as exc:
        raise StoreError(f"write failed: a number out of range ({exc})") from exc


def _decoded(payload: bytes, path: Path) -> WriteBatch:
    try:
        version, messages, entries, updated, deleted = marshal.loads(payload)
    except (ValueError, EOFError, TypeError) as exc:
        raise StoreCorrupt(f"{path} is damaged: a frame does not decode ({exc})") from exc
    if version != _FORMAT:
        raise StoreCorrupt(f"{path} has frames of format {version}, not {_FORMAT}")
    return WriteBatch(
        messages_put=[StoredMessage(*row) for row in messages],
        entries_put=[StoredEntry(*row) for row in entries],
        entries_updated=list(updated),
        entries_deleted=list(deleted),
    )


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
