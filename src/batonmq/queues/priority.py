"""The ready entries of a priority queue (x-max-priority): higher priority first, FIFO within a
priority, a requeued entry back in its place within its priority.

RabbitMQ's rules (https://www.rabbitmq.com/docs/priority): a message's `priority` property is
capped at the queue's maximum, and a message without one has priority 0. Priority is honoured at
dispatch time: a consumer gets the highest-priority ready entry when it has room (Qpid manual,
2.10.3.1: a low prefetch makes priorities visible to a consumer).

Each priority level is a `ReadyEntries` of its own, paged on its own: the store keeps each
entry's level, so a level's backlog is read back in its own order. The queue's window is shared
out among the levels, and the lowest levels are paged out first. The highest level that holds
anything is served; when its next entries are in the store, nothing is served until they are
read back, so that no lower-priority entry overtakes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from batonmq.model.message import QueueEntry
from batonmq.queues.ready import PagedRange, PageRequest, ReadyEntries
from batonmq.store.base import QuarantinedEntry

#: The fewest entries a level keeps in memory, however many levels share the window.
MIN_LEVEL_WINDOW = 16


class PriorityReady:
    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        #: One FIFO per priority, highest last.
        self._levels = [ReadyEntries() for _ in range(max_priority + 1)]

    def level_of(self, entry: QueueEntry) -> int:
        return min(entry.message.priority, self.max_priority)

    def append(self, entry: QueueEntry) -> None:
        self._levels[self.level_of(entry)].append(entry)

    def put_back(self, entry: QueueEntry) -> None:
        self._levels[self.level_of(entry)].put_back(entry)

    def _top(self) -> ReadyEntries | None:
        """The highest level holding anything, in memory or in the store."""
        priority = self._top_priority()
        return None if priority is None else self._levels[priority]

    def _top_priority(self) -> int | None:
        for priority in range(self.max_priority, -1, -1):
            if self._levels[priority]:
                return priority
        return None

    def pop(self) -> QueueEntry | None:
        top = self._top()
        return top.pop() if top is not None else None

    def pop_lowest(self) -> QueueEntry | None:
        """The oldest entry of the lowest level that has one in memory (remove-low-priority: a
        level whose next entries are all in the store is passed over)."""
        for level in self._levels:
            entry = level.pop()
            if entry is not None:
                return entry
        return None

    def peek(self) -> QueueEntry | None:
        top = self._top()
        return top.peek() if top is not None else None

    def take_where(self, condition: Callable[[QueueEntry], bool]) -> list[QueueEntry]:
        return [entry for level in self._levels for entry in level.take_where(condition)]

    def in_order(self) -> Iterator[QueueEntry]:
        """The entries in memory, highest level first, up to the first that is paged."""
        for level in reversed(self._levels):
            yield from level.in_order()
            if level.paged_count:
                return

    @property
    def waiting_for_page_in(self) -> bool:
        top = self._top()
        return top is not None and top.waiting_for_page_in

    @property
    def bytes(self) -> int:
        return sum(level.bytes for level in self._levels)

    @property
    def paged_count(self) -> int:
        return sum(level.paged_count for level in self._levels)

    @property
    def paged_bytes(self) -> int:
        return sum(level.paged_bytes for level in self._levels)

    def paged_ranges(self) -> list[PagedRange]:
        return [
            PagedRange(paged.first, paged.last, priority)
            for priority, level in enumerate(self._levels)
            for paged in level.paged_ranges()
        ]

    def clear(self) -> tuple[int, list[QueueEntry]]:
        count = len(self)
        in_memory = [entry for level in self._levels for entry in level.clear()[1]]
        return count, in_memory

    def __len__(self) -> int:
        return sum(len(level) for level in self._levels)

    def __bool__(self) -> bool:
        return any(self._levels)

    @property
    def in_memory(self) -> int:
        return sum(level.in_memory for level in self._levels)

    # Paging -------------------------------------------------------------------------------

    def _level_window(self, window: int) -> int:
        return max(MIN_LEVEL_WINDOW, window // len(self._levels))

    def to_spill(self, window: int, window_bytes: int) -> list[QueueEntry]:
        """The next level over its share of the window spills, the lowest first."""
        level_window = self._level_window(window)
        level_bytes = window_bytes // len(self._levels)
        for level in self._levels:
            entries = level.to_spill(level_window, level_bytes)
            if entries:
                return entries
        return []

    def spilled(self, entries: list[QueueEntry], committed: bool) -> None:
        self._levels[self.level_of(entries[0])].spilled(entries, committed)

    def page_in_request(self, window: int) -> PageRequest | None:
        """Only the level being served reads back: a lower one waits until it is the highest."""
        priority = self._top_priority()
        if priority is None:
            return None
        request = self._levels[priority].page_in_request(self._level_window(window))
        return None if request is None else request._replace(priority=priority)

    def paged_in(
        self, entries: list[QueueEntry], quarantined: Sequence[QuarantinedEntry] = ()
    ) -> tuple[int, int]:
        """Entries of one level, read back by a `page_in_request` (see ReadyEntries.paged_in)."""
        if entries:
            level = self.level_of(entries[0])
        elif quarantined:
            level = min(quarantined[0].priority, self.max_priority)
        else:
            return 0, 0
        return self._levels[level].paged_in(entries, quarantined)

    def recovered(self, count: int, body_bytes: int, last_sequence: int, priority: int = 0) -> None:
        """A level's backlog in the store, as the broker starts."""
        self._levels[min(priority, self.max_priority)].recovered(count, body_bytes, last_sequence)
