"""The classic queue: FIFO by publish order, requeued entries back in place, consumers served
round-robin within their prefetch (AMQP 0-9-1 basic class: "the server SHOULD ... distribute
messages ... in a round-robin fashion").

Persistence: a durable queue writes its persistent messages' entries through the journal, and
deletes them when they are settled. Any queue pages a backlog longer than its window out to the
store and back in (see `ReadyEntries`); entries written only for paging are transient and do not
outlive the broker.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pamqp.common import FieldTable

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.consumers import ConsumerSet, QueueConsumer
from batonmq.queues.ready import ReadyEntries
from batonmq.store.base import PagedEntry, QueueBacklog, StoredEntry
from batonmq.store.journal import Journal

#: A journal with no store: what a queue uses when the broker persists nothing.
_NO_STORE = Journal(None)


@dataclass(frozen=True, slots=True)
class Paging:
    """Where a queue's entries are written and how many it keeps in memory."""

    journal: Journal = _NO_STORE
    vhost: str = "/"
    window: int = 10_000
    window_bytes: int = 64 * 1024 * 1024


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
    ) -> None:
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: FieldTable = arguments or {}
        self.ready = ReadyEntries()
        self.consumers = ConsumerSet()
        self.deleted = False
        self._sequence = itertools.count()
        self.paging = paging or Paging()
        #: Whether this queue's persistent messages survive a restart.
        self.persists = durable and exclusive_owner is None and self.paging.journal.enabled
        #: Whether this queue or any entry of it was ever written (deleting it must clean up).
        self.ever_stored = self.persists
        self._reading = False
        self._spill_in_flight = False
        self._page_in_waiters: list[Callable[[], None]] = []

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def publish(self, message: Message) -> bool:
        """Enqueue `message`; True when it was written to the store (its publisher confirm must
        wait for the commit)."""
        entry = QueueEntry(message, next(self._sequence))
        stored = self.persists and message.persistent
        if stored:
            self._store(entry, transient=False)
        self.ready.append(entry)
        if self.paging.journal.enabled:
            self._spill()
        if self.consumers:
            self.dispatch()
        return stored

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
        if entry.stored and not self.deleted:
            # A deleted queue's entries went with it; a new queue of the same name reuses the
            # sequence numbers, so deleting by key now would hit the new queue's entries.
            self.paging.journal.delete_entry(
                self.paging.vhost, self.name, entry.sequence, entry.message.id
            )

    def rejected(self, entry: QueueEntry) -> None:
        """`entry` was rejected without requeue (basic.reject, basic.nack requeue=false)."""
        self.settled(entry)

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

        paging.journal.when_durable(spilled)

    def _page_in(self) -> None:
        if self._reading or self.deleted:
            return
        request = self.ready.page_in_request(self.paging.window)
        if request is None:
            return
        self._reading = True
        after, limit = request
        self.paging.journal.read_entries(self.paging.vhost, self.name, after, limit, self._paged_in)

    def _paged_in(self, paged: list[PagedEntry] | None) -> None:
        self._reading = False
        if not self.deleted and paged is not None:
            self._take_paged(paged)
        # After a failed read (logged by the journal) too: a waiting basic.get tries again.
        waiters, self._page_in_waiters = self._page_in_waiters, []
        for waiter in waiters:
            waiter()
        if not self.deleted:
            self.dispatch()

    def _take_paged(self, paged: list[PagedEntry]) -> None:
        self.ready.paged_in(
            [
                QueueEntry(
                    Message(
                        stored.message.exchange,
                        stored.message.routing_key,
                        stored.message.header_payload,
                        stored.message.body,
                        id=stored.message.id,
                    ),
                    stored.sequence,
                    redelivered=stored.delivery_count > 0,
                    delivery_count=stored.delivery_count,
                    stored=True,
                )
                for stored in paged
            ]
        )

    def when_paged_in(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the entries being read back from the store have arrived."""
        self._page_in_waiters.append(callback)
        self._page_in()

    def recover(self, backlog: QueueBacklog) -> None:
        """Come back from the store holding `backlog`; its entries are read in as needed."""
        self.ready.recovered(backlog.count, backlog.bytes, backlog.last_sequence)
        self._sequence = itertools.count(backlog.last_sequence + 1)
        self.ever_stored = True

    def requeue(self, entries: Iterator[QueueEntry] | list[QueueEntry]) -> None:
        """Put delivered-but-unsettled entries back, marked redelivered, in their old places."""
        if self.deleted:
            return
        for entry in entries:
            entry.redelivered = True
            self.ready.put_back(entry)
        self.dispatch()

    def get(self) -> QueueEntry | None:
        """The next ready entry; None when empty or when the next entries are still being read
        from the store (`ready.waiting_for_page_in`: wait with `when_paged_in`)."""
        entry = self.ready.pop()
        if self.ready.paged_count:
            self._page_in()
        return entry

    def purge(self) -> int:
        """Remove every ready entry (not those delivered and unsettled, spec queue.purge)."""
        ready = self.ready
        paged_range = (ready.page_cursor + 1, ready.paged_last) if ready.paged_count else None
        count, in_memory = ready.clear()
        for entry in in_memory:
            self.settled(entry)
        if paged_range is not None and not self.deleted:
            self.paging.journal.delete_range(self.paging.vhost, self.name, *paged_range)
        return count

    def add_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.add(consumer)

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.remove(consumer)

    def has_exclusive_consumer(self) -> bool:
        return self.consumers.has_exclusive()

    def dispatch(self) -> None:
        """Hand ready entries to consumers with room until either runs out. An entry no consumer
        with room will take (a selector) is passed over and keeps its place."""
        ready, consumers = self.ready, self.consumers
        passed_over: list[QueueEntry] = []
        try:
            while ready and consumers.any_room():
                entry = ready.pop()
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
