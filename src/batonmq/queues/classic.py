"""The classic queue: FIFO by publish order (or by priority, x-max-priority), requeued entries
back in place, consumers chosen by `ConsumerSet` within their prefetch.

Its optional arguments (`QueueArguments`) add RabbitMQ's behaviours: message TTL (expired entries
are dead-lettered when they reach the head, when a timer for the head's expiry fires, and by the
broker's periodic sweep), queue expiry (x-expires: an unused queue is deleted), length limits
with their overflow behaviour, and a delivery limit. What is dead-lettered goes to the virtual
host (`QueueHooks.dead_letter`), which republishes it to the dead-letter exchange.

The queue composes its parts, each a module: the ready entries (`ready`, `priority`), those held
back for their commit (`held`), the consumers (`consumers`), the limits (`limits`), the clocks
(`expiry_watch`) and the store side (`paging`). What it keeps itself is how they meet: taking an
entry in, handing entries out, and letting them go.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from pamqp.common import FieldTable

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.arguments import Overflow, QueueArguments
from batonmq.queues.consumers import ConsumerSet
from batonmq.queues.deadletter import Reason
from batonmq.queues.expiry_watch import ExpiryWatch
from batonmq.queues.held import HeldBack
from batonmq.queues.limits import Admission, FlowControl, admission, drops_head, over_limit, screens
from batonmq.queues.paging import Pager, Paging
from batonmq.queues.priority import PriorityReady
from batonmq.queues.protocol import BrowsedMessage, Enqueued, QueueConsumer, QueueHooks
from batonmq.queues.ready import ReadyEntries
from batonmq.queues.redelivery import with_delivery_count
from batonmq.store.base import QueueBacklog
from batonmq.timers import LoopTimers, Timers

_LOOP_TIMERS = LoopTimers()


class ClassicQueue:
    """A classic queue (see the module docstring); implements `batonmq.queues.protocol.Queue`."""

    @staticmethod
    def parse_arguments(arguments: FieldTable) -> QueueArguments:
        return QueueArguments.parse(arguments)

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
        self._held = HeldBack()
        self.consumers = ConsumerSet(
            single_active=options.single_active_consumer, max_active=options.max_active_consumers
        )
        self.hooks: QueueHooks | None = None
        #: The channels counted as its producers (x-max-producers), kept by the engine.
        self.producers: set[object] = set()
        self.paging = paging = paging or Paging()
        self._flow = FlowControl(options, vhost=paging.vhost, queue=name)
        self._screens = screens(options)
        self._drops_head = drops_head(options)
        self.next_sequence = 0
        self.persists = durable and exclusive_owner is None and paging.journal.enabled
        self._expiry = ExpiryWatch(
            timers,
            self.ready,
            message_ttl=options.message_ttl,
            expires=options.expires,
            expired=self._expired,
            head_expired=self._head_expired,
            unused_expired=self._unused_expired,
        )
        self._pager = Pager(
            name,
            self.ready,
            paging,
            persists=self.persists,
            delivery_limit=options.delivery_limit,
            paged_in=self._paged_in,
            saw_expiry=self._saw_expiry,
        )
        self._watch_unused()

    # Statistics ---------------------------------------------------------------------------

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready)

    @property
    def message_bytes(self) -> int:
        return self.ready.bytes

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    @property
    def head_size(self) -> int | None:
        head = self.ready.peek()
        return head.message.body_size if head is not None else None

    @property
    def deleted(self) -> bool:
        return self._pager.closed

    @deleted.setter
    def deleted(self, deleted: bool) -> None:
        self._pager.closed = deleted

    @property
    def overfull(self) -> bool:
        return self._flow.overfull

    @property
    def ever_stored(self) -> bool:
        return self._pager.ever_stored

    def oldest_sequence_bound(self) -> int | None:
        """The head itself when it is in memory; when it is paged out to the store, the newest
        paged entry (it is older than that), else the newest published one."""
        ready = self.ready
        if not ready:
            return None
        head = ready.peek()
        if head is not None:
            return head.sequence
        if isinstance(ready, ReadyEntries) and ready.paged_count:
            return ready.paged_last
        return self.next_sequence - 1

    # Publishing ---------------------------------------------------------------------------

    def publish(self, message: Message, *, until_batch: int | None = None) -> Enqueued:
        """Enqueue `message`, or refuse it: larger than x-max-message-size, or the queue is full
        and its overflow is reject-publish(-dlx).

        With `until_batch` (a journal batch number), the message is held back, seen by nobody,
        until that batch is committed (`release_held`, see `batonmq.queues.held`)."""
        entry = QueueEntry(message, self.next_sequence, expires_at=self._expiry.expiry_of(message))
        self.next_sequence += 1
        if self._screens and self._refuses(entry):
            return Enqueued.REFUSED
        stored = self.persists and message.persistent
        if stored:
            self._pager.store(entry, transient=False)
        if until_batch is not None or self._held:
            self._held.hold(entry, until_batch)
        else:
            self._take_in(entry)
        return Enqueued.STORED if stored else Enqueued.KEPT

    def _refuses(self, entry: QueueEntry) -> bool:
        ready, held = self.ready, self._held
        decision = admission(
            self.options, entry.message.body_size, len(ready) + len(held), ready.bytes + held.bytes
        )
        if decision is Admission.REFUSE_DEAD_LETTER:
            self._dead_letter(entry, Reason.MAXLEN)
        return decision is not Admission.TAKE

    def release_held(self, batch: int, committed: bool) -> None:
        """Journal batch `batch` is over: the entries held for it become ready (committed) or
        are dropped (the write failed: the store does not have them, and their publishers
        were told so), with what waited behind them."""
        held = self._held
        while not self.deleted and (released := held.next_released(batch)) is not None:
            entry, waited_for_write = released
            if committed or not waited_for_write:
                self._take_in(entry)
        held.call_if_released()

    @property
    def holds_back(self) -> bool:
        return bool(self._held)

    def when_released(self, callback: Callable[[], None]) -> None:
        self._held.when_released(callback)

    def when_underfull(self, callback: Callable[[], None]) -> None:
        self._flow.when_underfull(callback)

    def _take_in(self, entry: QueueEntry) -> None:
        ready = self.ready
        ready.append(entry)
        paging = self.paging
        paging.holdings.add(1, entry.message.body_size)
        if paging.journal.enabled:
            self._pager.spill()
        if self.consumers:
            self.dispatch()
        if self.options.overflow is Overflow.FLOW_CONTROL:
            self._flow.check_over(len(ready), ready.bytes)
        elif self._drops_head:
            self._make_room()
        self._watch_head()

    def _make_room(self) -> None:
        """drop-head (remove-low-priority): dead-letter the oldest entries (of the lowest
        priority) until the queue is within its limits; an entry to drop that is still in the
        store is dropped once it has been read back."""
        ready, options = self.ready, self.options
        lowest = options.overflow is Overflow.REMOVE_LOW_PRIORITY
        while over_limit(options, len(ready), ready.bytes):
            entry = ready.pop_lowest() if lowest else ready.pop()
            if entry is None:
                self._pager.page_in()
                return
            self._dead_letter(entry, Reason.MAXLEN)

    def _check_underfull(self) -> None:
        if self._flow.overfull:
            self._flow.check_under(len(self.ready), self.ready.bytes, deleted=self.deleted)

    # Consuming ----------------------------------------------------------------------------

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
                entry = self._expiry.take()
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
            self._pager.page_in()
        self._watch_head()
        self._check_underfull()

    def get(self) -> QueueEntry | None:
        """The next ready entry; None when empty or when the next entries are still being read
        from the store (`waiting_for_page_in`: wait with `when_paged_in`)."""
        self.touched()
        entry = self._expiry.take()
        if self.ready.paged_count:
            self._pager.page_in()
        self._watch_head()
        self._check_underfull()
        return entry

    @property
    def waiting_for_page_in(self) -> bool:
        return self.ready.waiting_for_page_in

    def when_paged_in(self, callback: Callable[[], None]) -> None:
        self._pager.when_paged_in(callback)

    def _paged_in(self) -> None:
        self.dispatch()
        if self._drops_head:
            self._make_room()
        self._watch_head()

    def delivered(self, entry: QueueEntry) -> None:
        """`entry` went to a client that must settle it: record its delivery count, so that
        after a restart it comes back marked redelivered."""
        entry.delivery_count += 1
        self._pager.delivered(entry)

    def settled(self, entry: QueueEntry) -> None:
        """`entry` is done with (acknowledged, rejected without requeue, or sent with no-ack)."""
        self.paging.holdings.remove(1, entry.message.body_size)
        self._pager.forget(entry)

    def rejected(self, entry: QueueEntry) -> None:
        """`entry` was rejected without requeue (basic.reject, basic.nack requeue=false)."""
        self._dead_letter(entry, Reason.REJECTED)

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
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

    def _dead_letter(self, entry: QueueEntry, reason: Reason) -> None:
        """`entry` leaves the queue dead: to the dead-letter exchange if there is one."""
        if self.hooks is not None and self.options.dead_letter_exchange is not None:
            self.hooks.dead_letter(self, entry, reason)
        self.settled(entry)

    # Expiry -------------------------------------------------------------------------------

    def _saw_expiry(self) -> None:
        self._expiry.expiring = True

    def _expired(self, entry: QueueEntry) -> None:
        self._dead_letter(entry, Reason.EXPIRED)

    def _watch_head(self) -> None:
        if not self.deleted:
            self._expiry.watch_head()

    def _head_expired(self) -> None:
        if self.deleted:
            return
        entry = self._expiry.take()
        if entry is not None:
            self.ready.put_back(entry)
        self._watch_head()

    def expire(self) -> int:
        """The periodic sweep: dead-letter every expired entry in memory, wherever it is (paged
        entries are checked when they are read back); how many went."""
        if self.deleted:
            return 0
        expired = self._expiry.sweep()
        self._watch_head()
        self._check_underfull()
        return expired

    def _watch_unused(self) -> None:
        if not self.deleted:
            self._expiry.restart_unused(in_use=bool(self.consumers))

    def _unused_expired(self) -> None:
        if not self.deleted and not self.consumers and self.hooks is not None:
            self.hooks.expire_queue(self)

    def touched(self) -> None:
        """The queue was used (redeclared, or read with basic.get)."""
        self._watch_unused()

    def stop_timers(self) -> None:
        self._expiry.stop()

    # Managing -----------------------------------------------------------------------------

    def browse(self, start: int = 0, count: int | None = None) -> list[BrowsedMessage]:
        """Those of a long backlog paged out to the store are not browsed: the list ends where
        the next message out is in the store."""
        stop = None if count is None else start + count
        return [
            BrowsedMessage(position, entry.message.id, entry.redelivered, entry.message)
            for position, entry in itertools.islice(enumerate(self.ready.in_order()), start, stop)
        ]

    def remove(self, message_ids: Iterable[int]) -> int:
        """Only messages in memory are found (see `browse`)."""
        wanted = set(message_ids)
        removed = self.ready.take_where(lambda entry: entry.message.id in wanted)
        for entry in removed:
            self.settled(entry)
        self._watch_head()
        self._check_underfull()
        return len(removed)

    def purge(self) -> int:
        count, in_memory = self._pager.purge()
        for entry in in_memory:
            self.settled(entry)  # its holding too: the pager let go of the paged ones only
        self._check_underfull()
        return count

    def page_out(self) -> None:
        """Write out what is over the window now (the memory guard narrowed it)."""
        if self.paging.journal.enabled:
            self._pager.spill()

    def recover(self, backlogs: list[QueueBacklog]) -> None:
        """Come back from the store holding `backlogs` (one per priority level)."""
        self.next_sequence = max(backlog.last_sequence for backlog in backlogs) + 1
        self._pager.recover(backlogs)

    def delete(self) -> int:
        """The queue is deleted: everything ready goes (the store's copies are deleted with the
        queue by the caller), the publishers it held back are released. Its ready count."""
        count, in_memory = self._pager.clear()
        self.paging.holdings.remove(
            len(in_memory), sum(entry.message.body_size for entry in in_memory)
        )
        self.deleted = True
        self.stop_timers()
        self._check_underfull()
        self._held.drop_all()
        return count
