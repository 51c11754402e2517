"""The classic queue: FIFO by publish order (or by priority, x-max-priority), requeued entries
back in place, consumers chosen by `ConsumerSet` within their prefetch.

Its optional arguments (`QueueArguments`) add RabbitMQ's behaviours: message TTL (expired entries
are dead-lettered when they reach the head, when a timer for the head's expiry fires, and by the
broker's periodic sweep), queue expiry (x-expires: an unused queue is deleted), length limits
with their overflow behaviour, and a delivery limit. What is dead-lettered goes to the virtual
host (`QueueHooks.dead_letter`), which republishes it to the dead-letter exchange.

Persistence: a durable queue writes its persistent messages' entries through the journal, and
deletes them when they are settled. Any queue pages a backlog longer than its window out to the
store and back in (see `ReadyEntries`); entries written only for paging are transient and do not
outlive the broker.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from pamqp.common import FieldTable

from batonmq.model.message import FLAG_EXPIRATION, Message, QueueEntry
from batonmq.queues.arguments import Overflow, QueueArguments
from batonmq.queues.consumers import ConsumerSet, QueueConsumer
from batonmq.queues.deadletter import Reason
from batonmq.queues.expiry import InvalidExpiration, expires_at, is_expired, parse_expiration
from batonmq.queues.holdings import Holdings
from batonmq.queues.priority import PriorityReady
from batonmq.queues.ready import ReadyEntries
from batonmq.queues.redelivery import with_delivery_count
from batonmq.store.base import PageRead, QuarantinedEntry, QueueBacklog, StoredEntry
from batonmq.store.journal import Journal
from batonmq.timers import LoopTimers, Timer, Timers

log = logging.getLogger(__name__)
#: The overflows that refuse a message when the queue is full.
_REFUSING = frozenset({Overflow.REJECT_PUBLISH, Overflow.REJECT_PUBLISH_DLX})

#: A journal with no store: what a queue uses when the broker persists nothing.
_NO_STORE = Journal(None)
_LOOP_TIMERS = LoopTimers()


@dataclass(slots=True)
class Paging:
    """Where a queue's entries are written, how many it keeps in memory (the memory guard
    narrows the window while memory is short), and the broker-wide count it adds to."""

    journal: Journal = _NO_STORE
    vhost: str = "/"
    window: int = 10_000
    window_bytes: int = 64 * 1024 * 1024
    holdings: Holdings = field(default_factory=Holdings)


class Enqueued(Enum):
    """What became of a message published to a queue."""

    KEPT = "kept"
    #: Kept and written to the store: a publisher confirm waits for the commit.
    STORED = "stored"
    #: Refused: the queue is full and its overflow is reject-publish(-dlx).
    REFUSED = "refused"


class QueueHooks(Protocol):
    """What a queue asks of its virtual host."""

    def dead_letter(self, queue: ClassicQueue, entry: QueueEntry, reason: Reason) -> None:
        """Republish `entry`'s message to the queue's dead-letter exchange (if it has one)."""

    def expire_queue(self, queue: ClassicQueue) -> None:
        """Delete `queue`: it was unused for its x-expires."""


class ClassicQueue:
    def __init__(
        self,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
        paging: Paging | None = None,
        timers: Timers = _LOOP_TIMERS,
        options: QueueArguments | None = None,
    ) -> None:
        """`timers`: the clock that message and queue expiry run on (the event loop's);
        `options`: what the queue works by, when not just its `arguments` (a policy's limits)."""
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: FieldTable = arguments or {}
        #: Checked by the virtual host before it creates the queue.
        self.options = options = options or QueueArguments.parse(self.arguments)
        self.ready: ReadyEntries | PriorityReady = (
            PriorityReady(options.max_priority) if options.max_priority else ReadyEntries()
        )
        #: Entries not yet visible, in publish order: each waits for the journal batch it names
        #: to commit (None: for the entries before it).
        self._held: deque[tuple[QueueEntry, int | None]] = deque()
        self._held_bytes = 0
        self._release_waiters: list[Callable[[], None]] = []
        self.consumers = ConsumerSet(
            single_active=options.single_active_consumer, max_active=options.max_active_consumers
        )
        self.hooks: QueueHooks | None = None
        self.deleted = False
        #: x-overflow flow-control: the queue is over its limits, and whoever publishes to it
        #: is held back (`when_underfull`) until it is under its resume capacity again.
        self.overfull = False
        #: The channels counted as its producers (x-max-producers), kept by the engine.
        self.producers: set[object] = set()
        self._underfull_waiters: list[Callable[[], None]] = []
        #: Whether a publish must be checked before it is taken (a size limit, or a full queue
        #: that refuses).
        self._screens = options.max_message_size is not None or (
            options.limits_length and options.overflow in _REFUSING
        )
        #: The sequence the next published entry gets (publish order).
        self.next_sequence = 0
        self.paging = paging or Paging()
        self._timers = timers
        #: Whether this queue's persistent messages survive a restart.
        self.persists = durable and exclusive_owner is None and self.paging.journal.enabled
        #: Whether this queue or any entry of it was ever written (deleting it must clean up).
        self.ever_stored = self.persists
        self._reading = False
        self._spill_in_flight = False
        self._page_in_waiters: list[Callable[[], None]] = []
        #: Entries may carry an expiry: the head's is watched by a timer.
        self._expiring = options.message_ttl is not None
        self._head_timer: Timer | None = None
        self._head_timer_at = 0
        self._unused_timer: Timer | None = None
        self._watch_unused()

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def publish(self, message: Message, *, until_batch: int | None = None) -> Enqueued:
        """Enqueue `message`, or refuse it: larger than x-max-message-size, or the queue is full
        and its overflow is reject-publish(-dlx).

        With `until_batch` (a journal batch number), the message is held back, seen by nobody,
        until that batch is committed (`release_held`): a publish that must be durable becomes
        visible only after its write commits, and a failed write leaves no trace of it (a
        nack means the message is on no queue). What arrives after a held entry waits behind
        it, so that the queue keeps publish order."""
        entry = QueueEntry(message, self.next_sequence, expires_at=self._expiry_of(message))
        self.next_sequence += 1
        if self._screens and self._refuses(entry):
            return Enqueued.REFUSED
        stored = self.persists and message.persistent
        if stored:
            self._store(entry, transient=False)
        if until_batch is not None or self._held:
            self._held.append((entry, until_batch))
            self._held_bytes += message.body_size
        else:
            self._take_in(entry)
        return Enqueued.STORED if stored else Enqueued.KEPT

    def release_held(self, batch: int, committed: bool) -> None:
        """Journal batch `batch` is over: the entries held for it become ready (committed) or
        are dropped (the write failed: the store does not have them, and their publishers
        were told so), with what waited behind them."""
        held = self._held
        while held and not self.deleted and (held[0][1] is None or held[0][1] <= batch):
            entry, until_batch = held.popleft()
            self._held_bytes -= entry.message.body_size
            if until_batch is None or committed:
                self._take_in(entry)
        if not held and self._release_waiters:
            waiters, self._release_waiters = self._release_waiters, []
            for waiter in waiters:
                waiter()

    @property
    def holds_back(self) -> bool:
        """Whether messages published to it wait for their commit before anyone sees them."""
        return bool(self._held)

    def when_released(self, callback: Callable[[], None]) -> None:
        """Call `callback` once nothing is held back (`holds_back` is False), or the queue is
        deleted."""
        self._release_waiters.append(callback)

    def _take_in(self, entry: QueueEntry) -> None:
        options = self.options
        self.ready.append(entry)
        paging = self.paging
        paging.holdings.add(1, entry.message.body_size)
        if paging.journal.enabled:
            self._spill()
        if self.consumers:
            self.dispatch()
        if options.overflow is Overflow.FLOW_CONTROL:
            if not self.overfull and self._over_capacity():
                self._become_overfull()
        elif options.limits_length:
            self._make_room()
        self._watch_head()

    def _expiry_of(self, message: Message) -> int | None:
        message_ttl = None
        if message.has_property(FLAG_EXPIRATION):
            # An invalid expiration is refused at publish; one from the store was checked then.
            with contextlib.suppress(InvalidExpiration):
                message_ttl = parse_expiration(message.properties.expiration or "")
            self._expiring = True
        queue_ttl = self.options.message_ttl
        if queue_ttl is None and message_ttl is None:
            return None
        return expires_at(self._timers.now_ms(), queue_ttl, message_ttl)

    # Limits -------------------------------------------------------------------------------

    def _refuses(self, entry: QueueEntry) -> bool:
        options, size = self.options, entry.message.body_size
        if options.max_message_size is not None and size > options.max_message_size:
            return True
        if options.overflow not in _REFUSING or not self._full_for(size):
            return False
        if options.overflow is Overflow.REJECT_PUBLISH_DLX:
            self._dead_letter(entry, Reason.MAXLEN)
        return True

    def _full_for(self, size: int) -> bool:
        """reject-publish: there is no room for a body of `size` (RabbitMQ counts ready
        messages)."""
        options, ready = self.options, self.ready
        # Held entries count: they become ready as soon as their batch commits.
        return (
            options.max_length is not None and len(ready) + len(self._held) >= options.max_length
        ) or (
            options.max_length_bytes is not None
            and ready.bytes + self._held_bytes + size > options.max_length_bytes
        )

    def _over_limit(self) -> bool:
        options, ready = self.options, self.ready
        return (options.max_length is not None and len(ready) > options.max_length) or (
            options.max_length_bytes is not None and ready.bytes > options.max_length_bytes
        )

    def _make_room(self) -> None:
        """drop-head (remove-low-priority): dead-letter the oldest entries (of the lowest
        priority) until the queue is within its limits; an entry to drop that is still in the
        store is dropped once it has been read back."""
        ready = self.ready
        lowest = self.options.overflow is Overflow.REMOVE_LOW_PRIORITY
        while self._over_limit():
            entry = ready.pop_lowest() if lowest else ready.pop()
            if entry is None:
                self._page_in()
                return
            self._dead_letter(entry, Reason.MAXLEN)

    def _over_capacity(self) -> bool:
        """flow-control: over x-max-length or the capacity (QUE-1003 Overfull)."""
        options, ready = self.options, self.ready
        return (options.max_length is not None and len(ready) > options.max_length) or (
            options.capacity is not None and ready.bytes > options.capacity
        )

    def _under_resume_capacity(self) -> bool:
        """QUE-1004 Underfull: "when its size becomes less than the flowResumeCapacity"."""
        options, ready = self.options, self.ready
        return (options.max_length is None or len(ready) < options.max_length) and (
            options.flow_resume_capacity is None or ready.bytes < options.flow_resume_capacity
        )

    def _become_overfull(self) -> None:
        self.overfull = True
        log.warning(
            "QUE-1003 : Overfull : Size : %d bytes, Capacity : %s",
            self.ready.bytes,
            self.options.capacity,
            extra={"vhost": self.paging.vhost, "queue": self.name, "messages": len(self.ready)},
        )

    def when_underfull(self, callback: Callable[[], None]) -> None:
        """Call `callback` once this overfull queue is underfull again (or deleted)."""
        self._underfull_waiters.append(callback)

    def _check_underfull(self) -> None:
        if self.overfull and (self.deleted or self._under_resume_capacity()):
            self.overfull = False
            if not self.deleted:
                log.info(
                    "QUE-1004 : Underfull : Size : %d bytes, Resume Capacity : %s",
                    self.ready.bytes,
                    self.options.flow_resume_capacity,
                    extra={"vhost": self.paging.vhost, "queue": self.name},
                )
            waiters, self._underfull_waiters = self._underfull_waiters, []
            for waiter in waiters:
                waiter()

    def _dead_letter(self, entry: QueueEntry, reason: Reason) -> None:
        """`entry` leaves the queue dead: to the dead-letter exchange if there is one."""
        if self.hooks is not None and self.options.dead_letter_exchange is not None:
            self.hooks.dead_letter(self, entry, reason)
        self.settled(entry)

    # Expiry -------------------------------------------------------------------------------

    def _take(self) -> QueueEntry | None:
        """The next ready entry that has not expired; expired ones on the way are dead-lettered
        (RabbitMQ: an expired message is never delivered)."""
        ready = self.ready
        entry = ready.pop()
        if not self._expiring:
            return entry
        now = self._timers.now_ms()
        while entry is not None and is_expired(entry.expires_at, now):
            self._dead_letter(entry, Reason.EXPIRED)
            entry = ready.pop()
        return entry

    def _watch_head(self) -> None:
        """Have a timer fire when the head entry expires, so that it is dead-lettered then even
        with no consumer about (RabbitMQ does the same)."""
        if not self._expiring or self.deleted:
            return
        head = self.ready.peek()
        if head is None or head.expires_at is None:
            return
        if self._head_timer is not None:
            if self._head_timer_at <= head.expires_at:
                return
            self._head_timer.cancel()
        timers = self._timers
        self._head_timer_at = head.expires_at
        self._head_timer = timers.call_later(
            head.expires_at - timers.now_ms() + 1, self._head_expired
        )

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.deleted:
            return
        entry = self._take()
        if entry is not None:
            self.ready.put_back(entry)
        self._watch_head()

    def expire(self) -> int:
        """The periodic sweep: dead-letter every expired entry in memory, wherever it is (paged
        entries are checked when they are read back); how many went."""
        if not self._expiring or self.deleted:
            return 0
        now = self._timers.now_ms()
        expired = self.ready.take_where(lambda entry: is_expired(entry.expires_at, now))
        for entry in expired:
            self._dead_letter(entry, Reason.EXPIRED)
        self._watch_head()
        self._check_underfull()
        return len(expired)

    def _watch_unused(self) -> None:
        """x-expires: (re)start the countdown to deleting this queue while it is unused (no
        consumers, no basic.get, no redeclaration)."""
        expires = self.options.expires
        if expires is None or self.deleted:
            return
        if self._unused_timer is not None:
            self._unused_timer.cancel()
            self._unused_timer = None
        if not self.consumers:
            self._unused_timer = self._timers.call_later(expires, self._unused_expired)

    def _unused_expired(self) -> None:
        self._unused_timer = None
        if not self.deleted and not self.consumers and self.hooks is not None:
            self.hooks.expire_queue(self)

    def touched(self) -> None:
        """The queue was used (redeclared, or read with basic.get)."""
        self._watch_unused()

    def stop_timers(self) -> None:
        for timer in (self._head_timer, self._unused_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._unused_timer = None

    # Persistence --------------------------------------------------------------------------

    def _store(self, entry: QueueEntry, *, transient: bool) -> None:
        message = entry.message
        self.paging.journal.put_entry(
            StoredEntry(
                self.paging.vhost,
                self.name,
                entry.sequence,
                message.id,
                entry.delivery_count,
                transient,
                entry.expires_at,
                self.ready.level_of(entry),
            ),
            message,
        )
        entry.stored = True
        self.ever_stored = True

    def delivered(self, entry: QueueEntry) -> None:
        """`entry` went to a client that must settle it: record its delivery count, so that
        after a restart it comes back marked redelivered."""
        entry.delivery_count += 1
        if entry.stored and not self.deleted:
            self.paging.journal.update_entry(
                self.paging.vhost, self.name, entry.sequence, entry.delivery_count
            )

    def settled(self, entry: QueueEntry) -> None:
        """`entry` is done with (acknowledged, rejected without requeue, or sent with no-ack)."""
        self.paging.holdings.remove(1, entry.message.body_size)
        if entry.stored and not self.deleted:
            # A deleted queue's entries went with it; a new queue of the same name reuses the
            # sequence numbers, so deleting by key now would hit the new queue's entries.
            self.paging.journal.delete_entry(
                self.paging.vhost, self.name, entry.sequence, entry.message.id
            )

    def rejected(self, entry: QueueEntry) -> None:
        """`entry` was rejected without requeue (basic.reject, basic.nack requeue=false)."""
        self._dead_letter(entry, Reason.REJECTED)

    def page_out(self) -> None:
        """Write out what is over the window now (the memory guard narrowed it)."""
        if self.paging.journal.enabled and not self.deleted:
            self._spill()

    def _spill(self) -> None:
        paging = self.paging
        if self._spill_in_flight:
            return
        entries = self.ready.to_spill(paging.window, paging.window_bytes)
        if not entries:
            return
        for entry in entries:
            if not entry.stored:
                self._store(entry, transient=True)
        self._spill_in_flight = True

        def spilled(committed: bool) -> None:
            self._spill_in_flight = False
            if not self.deleted:
                self.ready.spilled(entries, committed)
                if committed:
                    self._spill()  # what arrived meanwhile (a failed write waits for more)

        paging.journal.when_durable(spilled)

    def _page_in(self) -> None:
        if self._reading or self.deleted:
            return
        request = self.ready.page_in_request(self.paging.window)
        if request is None:
            return
        self._reading = True
        self.paging.journal.read_entries(
            self.paging.vhost,
            self.name,
            request.after,
            request.limit,
            self._paged_in,
            priority=request.priority,
        )

    def _paged_in(self, paged: PageRead | None) -> None:
        self._reading = False
        if not self.deleted and paged is not None:
            self._take_paged(paged)
        # After a failed read (logged by the journal) too: a waiting basic.get tries again.
        waiters, self._page_in_waiters = self._page_in_waiters, []
        for waiter in waiters:
            waiter()
        if not self.deleted:
            self.dispatch()
            if self.options.limits_length and self.options.overflow is not Overflow.FLOW_CONTROL:
                self._make_room()
            self._watch_head()

    def _take_paged(self, paged: PageRead) -> None:
        entries = []
        quarantined = []
        for stored in paged:
            if isinstance(stored, QuarantinedEntry):
                quarantined.append(stored)
                continue
            message = Message(
                stored.message.exchange,
                stored.message.routing_key,
                stored.message.header_payload,
                stored.message.body,
                id=stored.message.id,
            )
            entry = QueueEntry(
                message,
                stored.sequence,
                redelivered=stored.delivery_count > 0,
                delivery_count=stored.delivery_count,
                stored=True,
                expires_at=stored.expires_at,
            )
            if stored.expires_at is not None:
                self._expiring = True
            if stored.delivery_count and self.options.delivery_limit is not None:
                entry.message = with_delivery_count(message, stored.delivery_count)
            entries.append(entry)
        # A quarantined entry (its message failed its checksum) leaves the queue for good.
        self.paging.holdings.remove(*self.ready.paged_in(entries, quarantined))

    def when_paged_in(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the entries being read back from the store have arrived."""
        self._page_in_waiters.append(callback)
        self._page_in()

    def recover(self, backlogs: list[QueueBacklog]) -> None:
        """Come back from the store holding `backlogs` (one per priority level); the entries
        are read in as needed, the first of them now (so that expired ones go and the length
        limits hold)."""
        for backlog in backlogs:
            self.ready.recovered(
                backlog.count, backlog.bytes, backlog.last_sequence, backlog.priority
            )
        self.next_sequence = max(b.last_sequence for b in backlogs) + 1
        self.paging.holdings.add(
            sum(backlog.count for backlog in backlogs), sum(backlog.bytes for backlog in backlogs)
        )
        self.ever_stored = True
        self._page_in()

    def requeue(self, entries: Iterator[QueueEntry] | list[QueueEntry]) -> None:
        """Put delivered-but-unsettled entries back, marked redelivered, in their old places."""
        if self.deleted:
            return
        limit = self.options.delivery_limit
        for entry in entries:
            if limit is not None:
                # x-delivery-limit: "the number of allowed unsuccessful delivery attempts"
                if entry.delivery_count > limit:
                    self._dead_letter(entry, Reason.DELIVERY_LIMIT)
                    continue
                entry.message = with_delivery_count(entry.message, entry.delivery_count)
            entry.redelivered = True
            self.ready.put_back(entry)
        self.dispatch()
        self._watch_head()

    def get(self) -> QueueEntry | None:
        """The next ready entry; None when empty or when the next entries are still being read
        from the store (`ready.waiting_for_page_in`: wait with `when_paged_in`)."""
        self.touched()
        entry = self._take()
        if self.ready.paged_count:
            self._page_in()
        self._watch_head()
        self._check_underfull()
        return entry

    def purge(self) -> int:
        """Remove every ready entry (not those delivered and unsettled, spec queue.purge)."""
        ready = self.ready
        paged_ranges = ready.paged_ranges()
        count, in_memory = self._clear()
        for entry in in_memory:
            self.settled(entry)  # its holding too: `_clear` let go of the paged ones only
        if not self.deleted:
            for paged in paged_ranges:
                self.paging.journal.delete_range(self.paging.vhost, self.name, *paged)
        self._check_underfull()
        return count

    def _clear(self) -> tuple[int, list[QueueEntry]]:
        """Empty `ready`; the holdings let go of the entries that were only in the store."""
        ready = self.ready
        total_bytes = ready.bytes
        count, in_memory = ready.clear()
        paged_bytes = total_bytes - sum(entry.message.body_size for entry in in_memory)
        self.paging.holdings.remove(count - len(in_memory), paged_bytes)
        return count, in_memory

    def delete(self) -> int:
        """The queue is deleted: everything ready goes (the store's copies are deleted with the
        queue by the caller), the publishers it held back are released. Its ready count."""
        count, in_memory = self._clear()
        self.paging.holdings.remove(
            len(in_memory), sum(entry.message.body_size for entry in in_memory)
        )
        self._held.clear()
        self._held_bytes = 0
        self.deleted = True
        self.stop_timers()
        self._check_underfull()
        waiters, self._release_waiters = self._release_waiters, []
        for waiter in waiters:
            waiter()
        return count

    def add_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.add(consumer)
        self._watch_unused()

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.remove(consumer)
        self._watch_unused()

    def has_exclusive_consumer(self) -> bool:
        return self.consumers.has_exclusive()

    def dispatch(self) -> None:
        """Hand ready entries to consumers with room until either runs out. An entry no consumer
        with room will take (a selector) is passed over and keeps its place."""
        ready, consumers = self.ready, self.consumers
        passed_over: list[QueueEntry] = []
        try:
            while ready and consumers.any_room():
                entry = self._take()
                if entry is None:
                    break  # the next entries are in the store
                consumer = consumers.choose(entry)
                if consumer is None:
                    passed_over.append(entry)
                    continue
                try:
                    consumer.deliver(self, entry)
                except BaseException:
                    ready.put_back(entry)  # never lose a message to a failed hand-over
                    raise
        finally:
            for entry in passed_over:
                ready.put_back(entry)
        if ready.paged_count:
            self._page_in()
        self._watch_head()
        if self.overfull:
            self._check_underfull()
