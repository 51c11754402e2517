"""The journal: the engine's changes, gathered into write batches that one task commits in turn.

The engine records changes synchronously (`put_entry`, `delete_entry`, ...) as it goes; nothing
waits. One task takes whatever has gathered, from every connection, and commits it as one
transaction while the next batch gathers (group commit, the "coalescing sync" of Qpid manual
§1.6.6.2): under load a batch holds many messages and acknowledgements, and there is never one
fsync per message.

What must wait for durability says so with `when_durable(callback)`: the callback runs once
everything recorded before it is committed, with True, or with False when that commit failed
(publisher confirms become basic.nack; a transaction's commit fails). Reads (`read_entries`) are
submitted after everything recorded before them, so they see it.

Inside the gathering batch, later changes cancel earlier ones: an entry put and then deleted
(a message consumed and acknowledged before its batch went out) never reaches the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from batonmq.logrepeat import CoalescingLog
from batonmq.model.message import Message
from batonmq.security.permissions import UserPermission
from batonmq.stats import counter
from batonmq.store.base import (
    ObjectKey,
    PageRead,
    Store,
    StoredBinding,
    StoredEntry,
    StoredExchange,
    StoredMessage,
    StoredQueue,
    StoredUser,
    StoreError,
    WriteBatch,
)
from batonmq.store.fields import encode_table

log = logging.getLogger(__name__)

DurableCallback = Callable[[bool], None]
ReadCallback = Callable[[PageRead | None], None]
_EntryKey = tuple[str, str, int]
#: A read back (paging in): vhost, queue, after_sequence, limit, priority, callback.
_Read = tuple[str, str, int, int, int | None, ReadCallback]
_T = TypeVar("_T")
_BindingKey = tuple[str, str, str, str, str, str]
#: Seconds before a failed batch's acknowledgements are written again when nothing else comes;
#: doubled after each failure, up to the last.
_FIRST_RETRY_DELAY = 0.5
_LAST_RETRY_DELAY = 10.0


def _binding_key(binding: StoredBinding) -> _BindingKey:
    return (
        binding.vhost,
        binding.source,
        binding.destination_kind,
        binding.destination,
        binding.routing_key,
        encode_table(binding.arguments),
    )


@dataclass(slots=True)
class _Gathering:
    """The batch being gathered, keyed so that later changes replace or cancel earlier ones."""

    exchanges_deleted: set[ObjectKey] = field(default_factory=set)
    queues_deleted: set[ObjectKey] = field(default_factory=set)
    exchanges_put: dict[ObjectKey, StoredExchange] = field(default_factory=dict)
    queues_put: dict[ObjectKey, StoredQueue] = field(default_factory=dict)
    #: A binding's last change: (binding, True) = put, (binding, False) = delete.
    bindings: dict[_BindingKey, tuple[StoredBinding, bool]] = field(default_factory=dict)
    ranges_deleted: list[tuple[str, str, int, int, int | None]] = field(default_factory=list)
    messages_put: dict[int, StoredMessage] = field(default_factory=dict)
    entries_put: dict[_EntryKey, StoredEntry] = field(default_factory=dict)
    entries_updated: dict[_EntryKey, int] = field(default_factory=dict)
    entries_deleted: dict[_EntryKey, int] = field(default_factory=dict)
    vhosts_put: set[str] = field(default_factory=set)
    vhosts_deleted: set[str] = field(default_factory=set)
    users_put: dict[str, StoredUser] = field(default_factory=dict)
    users_deleted: set[str] = field(default_factory=set)
    #: A permission's last change by (user, vhost): the record put, or None for a deletion.
    permissions: dict[tuple[str, str], UserPermission | None] = field(default_factory=dict)
    waiting: list[DurableCallback] = field(default_factory=list)
    reads: list[_Read] = field(default_factory=list)
    changed: bool = False

    def take_back(self, failed: _Gathering) -> bool:
        """Keep what a failed batch recorded of messages the broker has let go of or handed
        out (acknowledgements, purges, delivery counts) to write again, under anything
        recorded since; whether there was any. Nothing else is kept: the publishers of new
        messages hear that they failed (nack) and their queues drop them, and the clients of
        declarations, deletions and bindings are told they failed while memory never showed
        them."""
        if not (failed.entries_updated or failed.entries_deleted or failed.ranges_deleted):
            return False
        for key, message_id in failed.entries_deleted.items():
            if key not in self.entries_put:
                self.entries_updated.pop(key, None)
                self.entries_deleted[key] = message_id
        for key, delivery_count in failed.entries_updated.items():
            if key not in self.entries_deleted and key not in self.entries_updated:
                self.entries_updated[key] = delivery_count
        self.ranges_deleted[:0] = failed.ranges_deleted
        self.changed = True
        return True

    def seal(self) -> WriteBatch:
        referenced = {entry.message_id for entry in self.entries_put.values()}
        return WriteBatch(
            exchanges_deleted=sorted(self.exchanges_deleted),
            queues_deleted=sorted(self.queues_deleted),
            bindings_deleted=[binding for binding, put in self.bindings.values() if not put],
            ranges_deleted=self.ranges_deleted,
            exchanges_put=list(self.exchanges_put.values()),
            queues_put=list(self.queues_put.values()),
            bindings_put=[binding for binding, put in self.bindings.values() if put],
            messages_put=[
                message for message in self.messages_put.values() if message.id in referenced
            ],
            entries_put=list(self.entries_put.values()),
            entries_updated=[
                (*key, delivery_count) for key, delivery_count in self.entries_updated.items()
            ],
            entries_deleted=[
                (*key, message_id) for key, message_id in self.entries_deleted.items()
            ],
            vhosts_put=sorted(self.vhosts_put),
            vhosts_deleted=sorted(self.vhosts_deleted),
            users_put=list(self.users_put.values()),
            users_deleted=sorted(self.users_deleted),
            permissions_put=[record for record in self.permissions.values() if record],
            permissions_deleted=sorted(
                key for key, record in self.permissions.items() if record is None
            ),
        )


def _drop_permissions(gathering: _Gathering, belongs: Callable[[tuple[str, str]], bool]) -> None:
    """Permissions recorded for a user or virtual host being deleted are written as deletions
    (the deletion's own statement removes them already; one put after it must not undo it)."""
    for key in gathering.permissions:
        if belongs(key):
            gathering.permissions[key] = None


@dataclass(slots=True)
class StoreCounters:
    """The store's writes as the journal sees them (the management issue's "store latency":
    the rate of `commit_seconds` over the rate of `commits` is the mean commit time)."""

    commits: int = counter("batches", "Batches committed to the store")
    failures: int = counter("batches", "Batches the store failed to commit")
    commit_seconds: float = counter("seconds", "Time from handing a batch to the store to its end")


class Journal:
    """Records changes for `store`; with no store (a broker that persists nothing, as in unit
    tests) it records nothing and every callback runs at once."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self._gathering = _Gathering()
        #: The batch being written now, or written with its waiters not yet told, if any.
        self._committing: _Gathering | None = None
        #: The batch being committed or read for, until the next one is taken.
        self._in_hand: _Gathering | None = None
        #: The last batch handed to the store, its waiters not yet told: they are told while
        #: the next batch is written (or at once, when nothing more is to be written).
        self._written: _Gathering | None = None
        self._written_ok = True
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: The number of the batch being gathered: what is recorded now is written with it.
        self.batch = 0
        self._retry_delay = _FIRST_RETRY_DELAY
        #: Batches committed and failed since start, and the time their writes took.
        self.counters = StoreCounters()

    @property
    def enabled(self) -> bool:
        return self.store is not None

    # Recording ----------------------------------------------------------------------------

    def put_vhost(self, name: str) -> None:
        if self._changing():
            self._gathering.vhosts_put.add(name)

    def delete_vhost(self, name: str) -> None:
        """The virtual host and whatever the store still holds in it (the store deletes it
        all in one write)."""
        if self._changing():
            self._gathering.vhosts_put.discard(name)
            self._gathering.vhosts_deleted.add(name)
            _drop_permissions(self._gathering, lambda key: key[1] == name)

    def put_user(self, user: StoredUser) -> None:
        """A user's new credential (a new user, a new password, or one upgraded at login)."""
        if self._changing():
            # A deletion recorded before stays: it is written first, with the user's
            # permissions (RabbitMQ's), and this user is put after it.
            self._gathering.users_put[user.name] = user

    def delete_user(self, name: str) -> None:
        if self._changing():
            self._gathering.users_put.pop(name, None)
            self._gathering.users_deleted.add(name)
            _drop_permissions(self._gathering, lambda key: key[0] == name)

    def put_permission(self, permission: UserPermission) -> None:
        if self._changing():
            self._gathering.permissions[permission.user, permission.vhost] = permission

    def delete_permission(self, user: str, vhost: str) -> None:
        if self._changing():
            self._gathering.permissions[user, vhost] = None

    def put_exchange(self, exchange: StoredExchange) -> None:
        if self._changing():
            self._gathering.exchanges_put[(exchange.vhost, exchange.name)] = exchange

    def delete_exchange(self, vhost: str, name: str) -> None:
        if not self._changing():
            return
        gathering = self._gathering
        key = (vhost, name)
        gathering.exchanges_put.pop(key, None)
        gathering.exchanges_deleted.add(key)
        # The store drops the exchange's bindings with it; so must the bindings gathered so far.
        for binding_key, (binding, _put) in list(gathering.bindings.items()):
            if binding.vhost == vhost and (
                binding.source == name
                or (binding.destination_kind == "exchange" and binding.destination == name)
            ):
                del gathering.bindings[binding_key]

    def put_queue(self, queue: StoredQueue) -> None:
        if self._changing():
            self._gathering.queues_put[(queue.vhost, queue.name)] = queue

    def delete_queue(self, vhost: str, name: str) -> None:
        """The queue goes, and with it (in the store) its entries and the bindings to it."""
        if not self._changing():
            return
        self.forget_queue(vhost, name)
        self._gathering.queues_deleted.add((vhost, name))

    def forget_queue(self, vhost: str, name: str) -> None:
        """Drop what is gathered for a queue (its put, entries, bindings to it) whose deletion
        is recorded or committed: none of it may reach the store after that deletion."""
        gathering = self._gathering
        key = (vhost, name)
        gathering.queues_put.pop(key, None)
        for binding_key, (binding, _put) in list(gathering.bindings.items()):
            if (
                binding.vhost == vhost
                and binding.destination_kind == "queue"
                and binding.destination == name
            ):
                del gathering.bindings[binding_key]
        for entries in (
            gathering.entries_put,
            gathering.entries_updated,
            gathering.entries_deleted,
        ):
            for entry_key in [k for k in entries if k[0] == vhost and k[1] == name]:
                del entries[entry_key]
        gathering.ranges_deleted[:] = [r for r in gathering.ranges_deleted if (r[0], r[1]) != key]

    def put_binding(self, binding: StoredBinding) -> None:
        if self._changing():
            self._gathering.bindings[_binding_key(binding)] = (binding, True)

    def delete_binding(self, binding: StoredBinding) -> None:
        if self._changing():
            self._gathering.bindings[_binding_key(binding)] = (binding, False)

    def put_entry(self, entry: StoredEntry, message: Message) -> None:
        """Store an entry and its message. A message is written once per batch however many
        queues hold it; a later batch writing it again (another queue paging it out) is a no-op
        in the store, which keeps the first copy."""
        if not self._changing():
            return
        gathering = self._gathering
        queue_key = (entry.vhost, entry.queue)
        if queue_key in gathering.queues_deleted and queue_key not in gathering.queues_put:
            # The queue's deletion is in this batch and goes first: the entry would outlive it.
            # Its queue still holds it, waiting for this batch, and goes with it.
            return
        if message.id not in gathering.messages_put:
            gathering.messages_put[message.id] = StoredMessage(
                message.id,
                message.exchange,
                message.routing_key,
                message.header_payload,
                bytes(message.body),
            )
        gathering.entries_put[(entry.vhost, entry.queue, entry.sequence)] = entry

    def update_entry(self, vhost: str, queue: str, sequence: int, delivery_count: int) -> None:
        if not self._changing():
            return
        gathering = self._gathering
        key = (vhost, queue, sequence)
        put = gathering.entries_put.get(key)
        if put is not None:
            # Not dataclasses.replace: this runs for nearly every persistent message delivered.
            gathering.entries_put[key] = StoredEntry(
                vhost,
                queue,
                sequence,
                put.message_id,
                delivery_count,
                put.transient,
                put.expires_at,
                put.priority,
            )
        else:
            gathering.entries_updated[key] = delivery_count

    def delete_entry(self, vhost: str, queue: str, sequence: int, message_id: int) -> None:
        if not self._changing():
            return
        gathering = self._gathering
        key = (vhost, queue, sequence)
        gathering.entries_updated.pop(key, None)
        if gathering.entries_put.pop(key, None) is None:
            gathering.entries_deleted[key] = message_id

    def delete_range(
        self, vhost: str, queue: str, first: int, last: int, priority: int | None = None
    ) -> None:
        """Entries first..last (inclusive) of a queue, of priority level `priority` (any, for
        None), which are in the store and not in memory."""
        if self._changing():
            self._gathering.ranges_deleted.append((vhost, queue, first, last, priority))

    def _changing(self) -> bool:
        if self.store is None:
            return False
        self._gathering.changed = True
        self._wakeup.set()
        return True

    # Waiting ------------------------------------------------------------------------------

    def when_durable(self, callback: DurableCallback) -> None:
        """Call `callback(ok)` once everything recorded so far is committed (at once when
        nothing is waiting to be written, nor being written)."""
        if self.store is None:
            callback(True)
        elif self._gathering.changed:
            self._gathering.waiting.append(callback)
        elif self._committing is not None:
            self._committing.waiting.append(callback)
        else:
            callback(True)

    def when_batch_over(self, callback: DurableCallback) -> None:
        """Call `callback(ok)` once the batch being gathered (number `batch`) has been written
        (`ok`) or has failed; even if nothing is recorded in it (then `ok` at the next turn)."""
        if self.store is None:
            callback(True)
            return
        self._gathering.waiting.append(callback)
        self._wakeup.set()

    async def durable(self) -> bool:
        """`when_durable` awaited: whether everything recorded so far was committed."""
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def settle(ok: bool) -> None:
            if not written.done():  # its awaiter was cancelled (a shutdown): no one to tell
                written.set_result(ok)

        self.when_durable(settle)
        return await written

    @property
    def dirty(self) -> bool:
        """Whether changes are gathered but not yet handed to the store."""
        return self._gathering.changed

    def read_entries(
        self,
        vhost: str,
        queue: str,
        after_sequence: int,
        limit: int,
        callback: ReadCallback,
        *,
        priority: int | None = None,
    ) -> None:
        """Read entries back (paging in), after everything recorded so far, as
        `Store.read_entries` does; `callback` gets them, or None when the read failed."""
        if self.store is None:
            callback([])
            return
        self._gathering.reads.append((vhost, queue, after_sequence, limit, priority, callback))
        self._wakeup.set()

    # Running ------------------------------------------------------------------------------

    def start(self) -> None:
        if self.store is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="journal")

    async def stop(self) -> None:
        """Commit what has gathered, then stop."""
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        try:
            await self._commit_batches()
        except asyncio.CancelledError:
            # Cancelled mid-commit (a broker torn down without `stop`): whoever waits for a
            # write hears whether it happened, rather than nothing ever.
            if self._written is not None:
                self._tell(self._written, self._written_ok)
            for gathering in (self._in_hand, self._gathering):
                if gathering is not None:
                    self._tell(gathering, False)
            raise

    async def _commit_batches(self) -> None:
        assert self.store is not None
        store = self.store
        # A store that fails fails every batch: one line, then a count per 10 s, and the last
        # count when writes (reads) succeed again or the journal stops (hardening, defect 6).
        write_failures, read_failures = CoalescingLog(log), CoalescingLog(log)
        while True:
            if self._written is None:
                await self._wakeup.wait()
            self._wakeup.clear()
            # Let every connection's input of this loop turn be recorded before committing.
            await asyncio.sleep(0)
            gathering, self._gathering = self._gathering, _Gathering()
            self.batch += 1
            self._committing = self._in_hand = gathering
            batch = gathering.seal() if gathering.changed else None
            writing = asyncio.ensure_future(store.commit(batch)) if batch else None
            handed = time.monotonic()
            if self._written is not None:
                # The previous batch's waiters (confirms, deliveries) run while this one is
                # written: the store and the engine work side by side.
                if writing is not None:
                    await asyncio.sleep(0)  # the commit is handed to the store first
                written, self._written = self._written, None
                self._tell(written, self._written_ok)
            ok = True if writing is None else await self._outcome(writing, write_failures)
            if writing is not None:
                self.counters.commit_seconds += time.monotonic() - handed
            if not ok and self._gathering.take_back(gathering):
                # Written again: with the next batch, or after a pause if nothing else comes.
                self._retry_later()
            elif ok:
                self._retry_delay = _FIRST_RETRY_DELAY
            for read in gathering.reads:
                await self._read(store, read, read_failures)
            if writing is None:
                self._committing = None
                self._tell(gathering, ok)
            else:
                self._written, self._written_ok = gathering, ok
            if (
                self._stopping
                and not self._gathering.reads
                and (not self._gathering.changed or not ok)
            ):
                if self._written is not None:
                    self._committing = None
                    self._tell(self._written, self._written_ok)
                    self._written = None
                write_failures.flush()
                read_failures.flush()
                if not ok:
                    log.error(
                        "store write failed at shutdown: %d acknowledgements and deliveries "
                        "not written",
                        len(self._gathering.entries_deleted) + len(self._gathering.entries_updated),
                        extra={"store": store.location},
                    )
                return

    async def _outcome(self, writing: asyncio.Future[None], failures: CoalescingLog) -> bool:
        """Whether the commit `writing` succeeded; a failure is logged (coalesced)."""
        assert self.store is not None
        where = {"store": self.store.location}
        try:
            await writing
        except StoreError as error:
            failures.log(logging.ERROR, f"store write failed: {error}", where)
        except Exception as error:
            # A defect, not the store's state: say so, and keep the broker serving.
            failures.log(logging.ERROR, f"store write failed: {error!r}", where, exc_info=error)
        else:
            self.counters.commits += 1
            failures.flush()
            return True
        self.counters.failures += 1
        return False

    def _tell(self, gathering: _Gathering, ok: bool) -> None:
        """Call the waiters of `gathering`, now written (`ok`) or not."""
        waiting, gathering.waiting = gathering.waiting, []
        for callback in waiting:
            self._call(callback, ok)

    async def _read(self, store: Store, read: _Read, failures: CoalescingLog) -> None:
        vhost, queue, after, limit, priority, callback = read
        entries: PageRead | None
        where = {"store": store.location, "queue": queue}
        try:
            entries = await store.read_entries(vhost, queue, after, limit, priority)
        except StoreError as error:
            failures.log(logging.ERROR, f"store read failed: {error}", where)
            entries = None
        except Exception as error:
            failures.log(logging.ERROR, f"store read failed: {error!r}", where, exc_info=error)
            entries = None
        else:
            failures.flush()
        self._call(callback, entries)

    def _retry_later(self) -> None:
        delay, self._retry_delay = self._retry_delay, min(2 * self._retry_delay, _LAST_RETRY_DELAY)
        asyncio.get_running_loop().call_later(delay, self._wakeup.set)

    @staticmethod
    def _call(callback: Callable[[_T], None], value: _T) -> None:
        try:
            callback(value)
        except Exception:  # a defect in one waiter must not stop every later commit
            log.exception("journal callback failed")
