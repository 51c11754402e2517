"""A classic queue's entries in the store: persistent entries written through the journal and
deleted when settled, and a backlog longer than the queue's window paged out to the store and
read back as the head runs low (the decisions of what to page are `ReadyEntries`'s; this part
does the writing and reading). Entries written only for paging are transient and do not outlive
the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.holdings import Holdings
from batonmq.queues.priority import PriorityReady
from batonmq.queues.ready import PagedRange, ReadyEntries
from batonmq.queues.redelivery import with_delivery_count
from batonmq.queues.streams.storage import StreamStorage
from batonmq.store.base import (
    PagedEntry,
    PageRead,
    QuarantinedEntry,
    QueueBacklog,
    StoredEntry,
)
from batonmq.store.journal import Journal

#: A journal with no store: what a queue uses when the broker persists nothing.
_NO_STORE = Journal(None)


@dataclass(slots=True)
class Paging:
    """Where a queue's entries are written, how many it keeps in memory (the memory guard
    narrows the window while memory is short), and the broker-wide count it adds to."""

    journal: Journal = _NO_STORE
    vhost: str = "/"
    window: int = 10_000
    window_bytes: int = 64 * 1024 * 1024
    holdings: Holdings = field(default_factory=Holdings)
    #: Where stream queues keep their logs (one per broker).
    streams: StreamStorage = field(default_factory=StreamStorage)


class Pager:
    """The store side of one queue's ready entries (see the module docstring).

    `paged_in` is called after each read from the store has been taken in (or failed), while
    the queue is not closed: the queue serves what arrived. `saw_expiry` is called for an entry
    read back that carries an expiry time, before anyone can take it."""

    def __init__(
        self,
        name: str,
        ready: ReadyEntries | PriorityReady,
        paging: Paging,
        *,
        persists: bool,
        delivery_limit: int | None,
        paged_in: Callable[[], None],
        saw_expiry: Callable[[], None],
    ) -> None:
        self.name = name
        self.ready = ready
        self.paging = paging
        self.journal = paging.journal
        #: Whether this queue or any entry of it was ever written (deleting it must clean up).
        self.ever_stored = persists
        #: The queue is deleted: its store rows went with it, nothing more is written or read.
        self.closed = False
        self._delivery_limit = delivery_limit
        self._after_page_in = paged_in
        self._saw_expiry = saw_expiry
        self._reading = False
        self._spill_in_flight = False
        self._page_in_waiters: list[Callable[[], None]] = []

    # Single entries -----------------------------------------------------------------------

    def store(self, entry: QueueEntry, *, transient: bool) -> None:
        message = entry.message
        self.journal.put_entry(
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

    def write_delivery_count(self, entry: QueueEntry) -> None:
        """Record the delivery count of `entry` (a stored one), so that after a restart it
        comes back marked redelivered (and counted, under a delivery limit)."""
        if not self.closed:
            self.journal.update_entry(
                self.paging.vhost, self.name, entry.sequence, entry.delivery_count
            )

    def forget(self, entry: QueueEntry) -> None:
        """`entry` (a stored one) left the queue for good: its row goes."""
        if not self.closed:
            # A deleted queue's entries went with it; a new queue of the same name reuses the
            # sequence numbers, so deleting by key now would hit the new queue's entries.
            self.journal.delete_entry(
                self.paging.vhost, self.name, entry.sequence, entry.message.id
            )

    # Emptying -----------------------------------------------------------------------------

    def clear(self) -> tuple[int, list[QueueEntry]]:
        """Empty the ready entries: how many went, and those that were in memory, for the
        caller to let go of; the holdings let go of those that were only in the store."""
        ready = self.ready
        total_bytes = ready.bytes
        count, in_memory = ready.clear()
        paged_bytes = total_bytes - sum(entry.message.body_size for entry in in_memory)
        self.paging.holdings.remove(count - len(in_memory), paged_bytes)
        return count, in_memory

    def purge(self) -> tuple[int, list[QueueEntry]]:
        """`clear`, and the entries that were only in the store are deleted there."""
        paged_ranges: list[PagedRange] = self.ready.paged_ranges()
        cleared = self.clear()
        if not self.closed:
            for paged in paged_ranges:
                self.journal.delete_range(self.paging.vhost, self.name, *paged)
        return cleared

    # Paging out ---------------------------------------------------------------------------

    def spill(self) -> None:
        """Write out what is over the window, unless a write of it is under way."""
        if self._spill_in_flight or self.closed:
            return
        entries = self.ready.to_spill(self.paging.window, self.paging.window_bytes)
        if not entries:
            return
        for entry in entries:
            if not entry.stored:
                self.store(entry, transient=True)
        self._spill_in_flight = True

        def spilled(committed: bool) -> None:
            self._spill_in_flight = False
            if not self.closed:
                self.ready.spilled(entries, committed)
                if committed:
                    self.spill()  # what arrived meanwhile (a failed write waits for more)

        self.journal.when_durable(spilled)

    # Paging in ----------------------------------------------------------------------------

    def page_in(self) -> None:
        """Read the next paged entries back if the head has run low."""
        if self._reading or self.closed:
            return
        request = self.ready.page_in_request(self.paging.window)
        if request is None:
            return
        self._reading = True
        self.journal.read_entries(
            self.paging.vhost,
            self.name,
            request.after,
            request.limit,
            self._read,
            priority=request.priority,
        )

    def when_paged_in(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the entries being read back from the store have arrived."""
        self._page_in_waiters.append(callback)
        self.page_in()

    def _read(self, paged: PageRead | None) -> None:
        self._reading = False
        if not self.closed and paged is not None:
            self._take(paged)
        # After a failed read (logged by the journal) too: a waiting basic.get tries again.
        waiters, self._page_in_waiters = self._page_in_waiters, []
        for waiter in waiters:
            waiter()
        if not self.closed:
            self._after_page_in()

    def _take(self, paged: PageRead) -> None:
        entries = []
        quarantined = []
        for stored in paged:
            if isinstance(stored, QuarantinedEntry):
                quarantined.append(stored)
            else:
                entries.append(self.entry_of(stored))
        # A quarantined entry (its message failed its checksum) leaves the queue for good.
        self.paging.holdings.remove(*self.ready.paged_in(entries, quarantined))

    def entry_of(self, stored: PagedEntry) -> QueueEntry:
        """The queue entry of an entry read back from the store."""
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
            self._saw_expiry()
        if stored.delivery_count and self._delivery_limit is not None:
            entry.message = with_delivery_count(message, stored.delivery_count)
        return entry

    def recover(self, backlogs: list[QueueBacklog]) -> None:
        """Come back from the store holding `backlogs` (one per priority level), all paged;
        the first of them are read in now (so that expired ones go and the length limits
        hold)."""
        for backlog in backlogs:
            self.ready.recovered(
                backlog.count, backlog.bytes, backlog.last_sequence, backlog.priority
            )
        self.paging.holdings.add(
            sum(backlog.count for backlog in backlogs), sum(backlog.bytes for backlog in backlogs)
        )
        self.ever_stored = True
        self.page_in()
