"""What an append log holds that the database does not yet, whatever the medium (the SQLite
store's file, `batonmq.store.appendlog`; the PostgreSQL store's table, `batonmq.store.
postgres_log`): the batches of message and entry changes it takes, their frames, and their net
effect in memory (`Pending`), which a checkpoint writes to the tables in bulk.

The log holds only what a batch of messages and entries changes (`holds_only_entries`):
messages put, entries put, delivery counts updated, entries deleted. Any other batch
checkpoints first. It relies on what the engine does: an entry is put once (it is marked
stored), so an entry put since the last checkpoint is not in the database, and deleting it
there is not needed; a put and its deletion before a checkpoint meet here, and the database
sees neither.

A frame is `length` (4 bytes), `crc32` of the payload (4 bytes), payload (a `marshal` of the
batch's four lists as plain tuples, after the format's version). A frame cut short at the end
of a file is a write that a crash interrupted (`take_frames` stops there); a complete frame
whose checksum does not match is damage (StoreCorrupt, naming where it was read). Every number
of a batch is checked against the database's 64-bit integers before its frame is made: a
checkpoint must never fail on what the log took.
"""

from __future__ import annotations

import marshal
import struct
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from zlib_ng.zlib_ng import crc32

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
#: A checkpoint once the log is this large...
CHECKPOINT_LOG_BYTES: Final = 64 * 1024 * 1024
#: ... or once the entries waiting for one hold this many bytes of bodies, or this many entries:
#: what waits is kept in memory (messages paged out of a queue's memory wait here too).
CHECKPOINT_PENDING_BYTES: Final = 8 * 1024 * 1024
CHECKPOINT_PENDING_ENTRIES: Final = 20_000

QueueKey: TypeAlias = tuple[str, str]
EntryKey: TypeAlias = tuple[str, str, int]
#: (messages, entries, message bytes) of a store's tables.
Counts: TypeAlias = tuple[int, int, int]


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
            # A put replaces what was put under its id, as the tables' upsert does.
            replaced = messages.get(message.id)
            if replaced is None:
                holders[message.id] = 0
            else:
                self.body_bytes -= len(replaced.body)
            messages[message.id] = message
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

    def take_frames(self, data: bytes, source: str) -> int:
        """Take in the batches of the complete frames at the start of `data` (read from
        `source`, for the error); the bytes they take: a frame cut short ends them."""
        offset = 0
        while offset + _FRAME_HEAD.size <= len(data):
            length, crc = _FRAME_HEAD.unpack_from(data, offset)
            start = offset + _FRAME_HEAD.size
            payload = data[start : start + length]
            if len(payload) < length:
                break  # cut short by a crash (or being written): never confirmed
            if crc32(payload) != crc:
                raise StoreCorrupt(
                    f"{source} is damaged: the frame at byte {offset} fails its checksum"
                )
            self.add(_decoded(payload, source))
            offset = start + length
        return offset

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

    def counted(
        self,
        tables: Counts,
        size: Callable[[StoredMessage], int],
        stored: Mapping[int, int],
        candidates: Mapping[int, tuple[int, int]],
    ) -> Counts:
        """The (messages, entries, message bytes) of the tables (`tables`) once this is
        checkpointed into them, a message's bytes measured by `size`: its messages and entries
        added, the entries it deletes taken away, and the messages of the tables that no entry
        holds then. `stored`: the bytes of those of its messages the tables have already (put
        again by another queue paging them out); `candidates`: for those of
        `orphan_candidates` the tables have, how many entries of theirs hold each, and its
        bytes."""
        messages, entries, stored_bytes = tables
        entries += self.entry_count - len(self.deleted)
        messages += len(self.messages) - len(stored)
        stored_bytes += sum(map(size, self.messages.values())) - sum(stored.values())
        gained = self.entries_gained()
        for message_id, (held, message_bytes) in candidates.items():
            if held + gained[message_id] <= 0:
                messages -= 1
                stored_bytes -= message_bytes
        return messages, entries, stored_bytes


def encode_frame(batch: WriteBatch) -> bytes:
    """The frame of `batch`; StoreError, before anything is written, if the database could not
    take the batch at a checkpoint (a number out of its 64-bit range)."""
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
    return _FRAME_HEAD.pack(len(payload), crc32(payload)) + payload


def body_size(message: StoredMessage) -> int:
    """A message's bytes as the statistics count them: its body."""
    return len(message.body)


def _sequence(entry: StoredEntry) -> int:
    return entry.sequence


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


def _decoded(payload: bytes, source: str) -> WriteBatch:
    try:
        version, messages, entries, updated, deleted = marshal.loads(payload)
    except (ValueError, EOFError, TypeError) as exc:
        raise StoreCorrupt(f"{source} is damaged: a frame does not decode ({exc})") from exc
    if version != _FORMAT:
        raise StoreCorrupt(f"{source} has frames of format {version}, not {_FORMAT}")
    return WriteBatch(
        messages_put=[StoredMessage(*row) for row in messages],
        entries_put=[StoredEntry(*row) for row in entries],
        entries_updated=list(updated),
        entries_deleted=list(deleted),
    )
