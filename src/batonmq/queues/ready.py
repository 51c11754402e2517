"""The ready entries of a queue, in sequence order, where a requeued entry returns to its place,
and where a long backlog waits in the store instead of in memory (paging).

In sequence order, a queue's ready entries are:

    head (in memory) | paged (only in the store) | tail (in memory)

plus requeued entries (reject, nack, recover, a closed channel), which go on a heap keyed by
sequence; the next entry out is the older of the heap's head and the head's
(RabbitMQ: "requeued messages ... will be placed back in their original position where possible").

New entries join the head while nothing is paged, and the tail after. When the entries in memory
exceed the window, the newest are spilled: written to the store and, once that write is
committed, dropped from memory and counted as paged. When the head runs low, the oldest paged
entries are read back into it. These are decisions only; `Pager` (`batonmq.queues.paging`) does
the writing and reading through the journal.

Invariant: every entry with a sequence above `page_cursor` and up to `paged_last` is a paged
entry (in the store, ready, not in memory); nothing delivered has a sequence in that range,
because the tail is not served while anything is paged.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from batonmq.model.message import QueueEntry
from batonmq.store.base import QuarantinedEntry


class PageRequest(NamedTuple):
    """Entries to read back from the store: up to `limit` after sequence `after`, of priority
    level `priority` (of any, for None)."""

    after: int
    limit: int
    priority: int | None = None


class PagedRange(NamedTuple):
    """Entries `first`..`last` (inclusive) of level `priority` (any, for None) are paged."""

    first: int
    last: int
    priority: int | None = None


class ReadyEntries:
    def __init__(self) -> None:
        self._head: deque[QueueEntry] = deque()
        self._returned: list[tuple[int, QueueEntry]] = []
        self._tail: deque[QueueEntry] = deque()
        #: Bytes of every ready message body, paged ones included.
        self.bytes = 0
        self.paged_count = 0
        self.paged_bytes = 0
        #: Paged entries have sequences in (page_cursor, paged_last].
        self.page_cursor = -1
        self.paged_last = -1
        #: The oldest tail entries being written out (spilling), not yet committed.
        self._spilling = 0

    # Entering and leaving -----------------------------------------------------------------

    def level_of(self, entry: QueueEntry) -> int:
        """The priority level `entry` is stored at: a queue without priorities has one, 0."""
        return 0

    def append(self, entry: QueueEntry) -> None:
        if self.paged_count or self._tail:
            self._tail.append(entry)
        else:
            self._head.append(entry)
        self.bytes += entry.message.body_size

    def put_back(self, entry: QueueEntry) -> None:
        heapq.heappush(self._returned, (entry.sequence, entry))
        self.bytes += entry.message.body_size

    def pop(self) -> QueueEntry | None:
        """The next entry, or None when none is in memory (see `waiting_for_page_in`)."""
        returned, head = self._returned, self._head
        if returned and (not head or returned[0][0] < head[0].sequence):
            entry = heapq.heappop(returned)[1]
        elif head:
            entry = head.popleft()
        elif self._tail and not self.paged_count:
            entry = self._tail.popleft()
            if self._spilling:
                self._spilling -= 1
        else:
            return None
        self.bytes -= entry.message.body_size
        return entry

    def pop_lowest(self) -> QueueEntry | None:
        """The oldest entry of the lowest priority: without priorities, the next one."""
        return self.pop()

    def peek(self) -> QueueEntry | None:
        """The entry `pop` would return, left in place."""
        returned, head = self._returned, self._head
        if returned and (not head or returned[0][0] < head[0].sequence):
            return returned[0][1]
        if head:
            return head[0]
        if self._tail and not self.paged_count:
            return self._tail[0]
        return None

    def take_where(self, condition: Callable[[QueueEntry], bool]) -> list[QueueEntry]:
        """Remove the entries in memory that meet `condition` (an expiry sweep); the tail is left
        alone while it is being paged, and paged entries are checked when read back."""
        taken: list[QueueEntry] = []

        def keep(entry: QueueEntry) -> bool:
            if condition(entry):
                taken.append(entry)
                self.bytes -= entry.message.body_size
                return False
            return True

        self._head = deque(entry for entry in self._head if keep(entry))
        returned = [item for item in self._returned if keep(item[1])]
        heapq.heapify(returned)
        self._returned = returned
        if not self.paged_count and not self._spilling:
            self._tail = deque(entry for entry in self._tail if keep(entry))
        return taken

    def in_order(self) -> Iterator[QueueEntry]:
        """The entries in memory in the order `pop` would return them, up to the first that is
        paged (those after it are in the store, and so is what comes next)."""
        returned = (entry for _, entry in sorted(self._returned, key=lambda item: item[0]))
        yield from heapq.merge(returned, self._head, key=lambda entry: entry.sequence)
        if not self.paged_count:
            yield from self._tail

    @property
    def waiting_for_page_in(self) -> bool:
        """Entries are ready but all of the next ones are in the store."""
        return bool(self.paged_count) and not self._head and not self._returned

    def paged_ranges(self) -> list[PagedRange]:
        """Where the paged entries are in the store (for a purge to delete them)."""
        return [PagedRange(self.page_cursor + 1, self.paged_last)] if self.paged_count else []

    def clear(self) -> tuple[int, list[QueueEntry]]:
        """Empty the queue: how many entries went, and those that were in memory (the paged
        ones, `paged_ranges`, are for the caller to delete in the store; read them before
        clearing)."""
        count = len(self)
        in_memory = [*self._head, *(entry for _, entry in self._returned), *self._tail]
        self._head.clear()
        self._returned.clear()
        self._tail.clear()
        self.bytes = self.paged_count = self.paged_bytes = self._spilling = 0
        self.page_cursor = self.paged_last
        return count, in_memory

    def __len__(self) -> int:
        return len(self._head) + len(self._returned) + len(self._tail) + self.paged_count

    def __bool__(self) -> bool:
        return bool(self._head or self._returned or self._tail or self.paged_count)

    @property
    def in_memory(self) -> int:
        return len(self._head) + len(self._returned) + len(self._tail)

    # Paging out ---------------------------------------------------------------------------

    def to_spill(self, window: int, window_bytes: int) -> list[QueueEntry]:
        """Entries to write out now because memory holds more than the window (the newest, in
        order); they stay in memory until `spilled` is told the write is committed. Empty when
        nothing needs to go, or while an earlier spill is still being written."""
        if self._spilling:
            return []
        memory_bytes = self.bytes - self.paged_bytes
        head, tail = self._head, self._tail
        # `in_memory`, inline: this runs for every entry a queue takes in.
        in_memory = len(head) + len(self._returned) + len(tail)
        if in_memory <= window and memory_bytes <= window_bytes:
            return []
        if not tail:
            if self.paged_count:
                # Memory holds only entries older than the paged ones (read back, or put back
                # by a requeue): they stay, since paged entries must be the newest but the tail.
                return []
            # Start paging: the newest half of the window's worth moves from the head to the tail.
            keep = window // 2
            while len(head) > keep:
                tail.appendleft(head.pop())
        self._spilling = len(tail)
        return list(tail)

    def spilled(self, entries: list[QueueEntry], committed: bool) -> None:
        """The write of `entries` (from `to_spill`) ended; if committed, those still at the front
        of the tail leave memory and become paged."""
        tail = self._tail
        if not committed:
            self._spilling = 0
            return
        moved = 0
        moved_bytes = 0
        for entry in entries:
            if not tail or tail[0] is not entry:
                continue  # served meanwhile (nothing was paged, so the tail was being served)
            tail.popleft()
            if not self.paged_count and not moved:
                self.page_cursor = entry.sequence - 1
            moved += 1
            moved_bytes += entry.message.body_size
            self.paged_last = entry.sequence
        self._spilling = 0
        self.paged_count += moved
        self.paged_bytes += moved_bytes

    # Paging in ----------------------------------------------------------------------------

    def page_in_request(self, window: int) -> PageRequest | None:
        """What to read from the store when the head has run low, else None."""
        if not self.paged_count or len(self._head) > window // 2:
            return None
        return PageRequest(
            self.page_cursor, min(self.paged_count, max(1, window - len(self._head)))
        )

    def paged_in(
        self, entries: list[QueueEntry], quarantined: Sequence[QuarantinedEntry] = ()
    ) -> tuple[int, int]:
        """Entries read back from the store, in order, continuing from `page_cursor`; and those
        of the same read that the store quarantined instead (their message failed its
        checksum), which leave the queue. Returns how many of these left, and their body bytes
        (none that a purge during the read had already taken)."""
        gone = gone_bytes = 0
        for lost in quarantined:
            if self.paged_count and lost.sequence > self.page_cursor:
                self.paged_count -= 1
                self.paged_bytes -= lost.body_bytes
                self.bytes -= lost.body_bytes
                gone += 1
                gone_bytes += lost.body_bytes
        for entry in entries:
            if not self.paged_count or entry.sequence <= self.page_cursor:
                break  # stale: the queue was cleared while the read was under way
            self._head.append(entry)
            self.page_cursor = entry.sequence
            self.paged_count -= 1
            self.paged_bytes -= entry.message.body_size
        if not self.paged_count:
            # Nothing left in the store: the tail continues the head.
            self._head.extend(self._tail)
            self._tail.clear()
            self._spilling = 0
        return gone, gone_bytes

    def recovered(self, count: int, body_bytes: int, last_sequence: int, priority: int = 0) -> None:
        """A queue coming back from the store: all of its entries are paged. Called once per
        stored priority level (`priority`), which this queue, having a single level, merges."""
        self.paged_count += count
        self.paged_bytes += body_bytes
        self.bytes += body_bytes
        self.page_cursor = -1
        self.paged_last = max(self.paged_last, last_sequence)
