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

from batonmq.model.message import ENTRY_COST, Message, QueueEntry
from batonmq.model.topology import ConnectionRef
from batonmq.queues.arguments import QueueArguments
from batonmq.queues.consumers import ConsumerSet
from batonmq.queues.counters import QueueCounters
from batonmq.queues.deadletter import Reason
from batonmq.queues.expiry_watch import ExpiryWatch
from batonmq.queues.held import HeldBack
from batonmq.queues.limits import Limits
from batonmq.queues.paging import Pager, Paging
from batonmq.queues.priority import PriorityReady
from batonmq.queues.protocol import BrowsedMessage, Enqueued, QueueConsumer, QueueHooks
from batonmq.queues.ready import ReadyEntries
from batonmq.queues.redelivery import requeued
from batonmq.store.base import PagedEntry, QueueBacklog
from batonmq.timers import LoopTimers, Timers

_LOOP_TIMERS = LoopTimers()


class ClassicQueue:
    """A classic queue (see the module docstring); implements `batonmq.queues.protocol.Queue`."""

    @staticmethod
    def parse_arguments(arguments: FieldTable) -> QueueArguments:
        return QueueArguments.parse(arguments)

    @staticmethod
    def refused_property(*, durable: bool, exclusive: bool, auto_delete: bool) -> str | None:
        return None

    #: Its persistent messages are written through the journal.
    writes_itself = False

    def __init__(
        self,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: ConnectionRef | None = None,
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
        self.counters = QueueCounters()
        self.unacked = 0
        #: The channels counted as its producers (x-max-producers), kept by the engine.
        self.producers: set[object] = set()
        self.paging = paging = paging or Paging()
        self.next_sequence = 0
        self.persists = durable and exclusive_owner is None and paging.journal.enabled
        self._expiry = ExpiryWatch(self, self.ready, timers, expired=self._expired)
        self._pager = Pager(
            name,
            self.ready,
            paging,
            persists=self.persists,
            delivery_limit=options.delivery_limit,
            paged_in=self._paged_in,
            saw_expiry=self._expiry.saw_expiry,
        )
        self._limits = Limits(
            options,
            self.ready,
            self._held,
            vhost=paging.vhost,
            queue=name,
            drop=self._dropped,
            page_in=self._pager.page_in,
        )
        self._expiry.restart_unused()

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
    def memory(self) -> int:
        ready = self.ready
        return ready.in_memory * ENTRY_COST + ready.bytes - ready.paged_bytes

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
        return self._limits.overfull

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
        """Refused: larger than x-max-message-size, or the queue is full and its overflow is
        reject-publish(-dlx). Held back: see `batonmq.queues.held`."""
        entry = QueueEntry(message, self.next_sequence, expires_at=self._expiry.expiry_of(message))
        self.next_sequence += 1
        if self._limits.screens and self._limits.refuses(entry):
            return Enqueued.REFUSED
        stored = self.persists and message.persistent
        if stored:
            self._pager.store(entry, transient=False)
        if until_batch is not None or self._held.entries:
            self._held.hold(entry, until_batch)
        else:
            self._take_in(entry)
        return Enqueued.STORED if stored else Enqueued.KEPT

    def when_written(self, callback: Callable[[bool], None]) -> None:
        callback(True)  # nothing of its own to write: see `writes_itself`

    def release_held(self, batch: int, committed: bool) -> None:
        """What waited behind the entries released goes with them."""
        held = self._held
        while not self.deleted and (released := held.next_released(batch)) is not None:
            entry, waited_for_write = released
            if committed or not waited_for_write:
                self._take_in(entry)
        held.call_if_released()

    @property
    def holds_back(self) -> bool:
        return bool(self._held.entries)

    def when_released(self, callback: Callable[[], None]) -> None:
        self._held.when_released(callback)

    def when_underfull(self, callback: Callable[[], None]) -> None:
        self._limits.when_underfull(callback)

    def _take_in(self, entry: QueueEntry) -> None:
        ready = self.ready
        ready.append(entry)
        paging = self.paging
        paging.holdings.add(1, entry.message.body_size)
        if paging.journal.enabled:
            self._pager.spill()
        consumers = self.consumers
        if consumers and not consumers.saturated:
            # Saturated: none of them had room at the last hand-out, and whatever gives one
            # room (an ack, flow, a drained socket, a new consumer) dispatches: a new entry
            # need not ask every consumer again (that walk was a quarter of the broker's time
            # with 16 consumers).
            self.dispatch()
        if self._limits.in_force:
            self._limits.taken_in()
        expiry = self._expiry
        if expiry.expiring:  # no per-message timer work while nothing can expire
            expiry.watch_head()

    def _dropped(self, entry: QueueEntry) -> None:
        self._dead_letter(entry, Reason.MAXLEN)

    def _check_underfull(self) -> None:
        if self._limits.overfull:
            self._limits.check_under(deleted=self.deleted)

    # Consuming ----------------------------------------------------------------------------

    def check_consume(
        self, *, no_ack: bool, prefetch_count: int, global_prefetch: int, arguments: FieldTable
    ) -> None:
        pass  # the engine checks what every queue type shares (batonmq.engine.consumer.admitted)

    def add_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.add(consumer)
        self._expiry.restart_unused()

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.remove(consumer)
        self._expiry.restart_unused()

    def has_exclusive_consumer(self) -> bool:
        return self.consumers.has_exclusive()

    def dispatch(self) -> None:
        ready, expiry = self.ready, self._expiry
        self.consumers.hand_out(self, ready, expiry.take)
        if ready.paged_count:
            self._pager.page_in()
        if expiry.expiring:
            expiry.watch_head()
        if self._limits.overfull:
            self._check_underfull()

    def get(self) -> QueueEntry | None:
        self.touched()
        entry = self._expiry.take()
        if self.ready.paged_count:
            self._pager.page_in()
        self._expiry.watch_head()
        self._check_underfull()
        return entry

    @property
    def waiting_for_page_in(self) -> bool:
        return self.ready.waiting_for_page_in

    def when_paged_in(self, callback: Callable[[], None]) -> None:
        self._pager.when_paged_in(callback)

    def _paged_in(self) -> None:
        self.dispatch()
        if self._limits.trims:
            self._limits.make_room()
        self._expiry.watch_head()

    def delivered(self, entry: QueueEntry) -> None:
        """The count is written when it comes to matter: at once where a delivery limit counts
        deliveries, else only if the entry comes back (`requeue`). An entry still in a client's
        hands when the broker crashes comes back redelivered anyway (the store marks every
        entry of an unclean stop or a takeover delivered), and a clean stop requeues what its
        clients held. Most deliveries end in an acknowledgement, and writing each one's count
        was a third of the store's work for persistent messages."""
        entry.delivery_count += 1
        if entry.stored and self.options.delivery_limit is not None:
            self._pager.write_delivery_count(entry)

    def settled(self, entry: QueueEntry) -> None:
        self.paging.holdings.remove(1, entry.message.body_size)
        if entry.stored:
            self._pager.forget(entry)

    def rejected(self, entry: QueueEntry) -> None:
        self._dead_letter(entry, Reason.REJECTED)

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
        if self.deleted:
            return
        put_back = self.ready.put_back
        counted = self.options.delivery_limit is not None  # written at each delivery then
        for entry in requeued(entries, self.options.delivery_limit, self._over_delivery_limit):
            if entry.stored and not counted:
                self._pager.write_delivery_count(entry)
            put_back(entry)
        self.dispatch()
        self._expiry.watch_head()

    def _over_delivery_limit(self, entry: QueueEntry) -> None:
        self._dead_letter(entry, Reason.DELIVERY_LIMIT)

    def _dead_letter(self, entry: QueueEntry, reason: Reason) -> None:
        """`entry` leaves the queue dead: to the dead-letter exchange if there is one."""
        if self.hooks is not None and self.options.dead_letter_exchange is not None:
            self.hooks.dead_letter(self, entry, reason)
        self.settled(entry)

    # Expiry -------------------------------------------------------------------------------

    def _expired(self, entry: QueueEntry) -> None:
        self._dead_letter(entry, Reason.EXPIRED)

    def expire(self) -> int:
        """Paged entries are checked when they are read back."""
        if self.deleted:
            return 0
        expired = self._expiry.sweep()
        self._expiry.watch_head()
        self._check_underfull()
        return expired

    def touched(self) -> None:
        self._expiry.restart_unused()

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
        self._expiry.watch_head()
        self._check_underfull()
        return len(removed)

    def purge(self) -> int:
        count, in_memory = self._pager.purge()
        for entry in in_memory:
            self.settled(entry)  # its holding too: the pager let go of the paged ones only
        self._check_underfull()
        return count

    def page_out(self) -> None:
        if self.paging.journal.enabled:
            self._pager.spill()

    def recover(self, backlogs: list[QueueBacklog]) -> None:
        self.next_sequence = max(backlog.last_sequence for backlog in backlogs) + 1
        self._pager.recover(backlogs)

    def adopt(self, entries: list[PagedEntry]) -> None:
        if self.deleted or not entries:
            return
        self.next_sequence = max(self.next_sequence, entries[-1].sequence + 1)
        self._pager.ever_stored = True
        for stored in entries:
            self._take_in(self._pager.entry_of(stored))

    def delete(self) -> int:
        count, in_memory = self._pager.clear()
        self.paging.holdings.remove(
            len(in_memory), sum(entry.message.body_size for entry in in_memory)
        )
        self.deleted = True
        self.stop_timers()
        self._check_underfull()
        self._held.drop_all()
        return count
