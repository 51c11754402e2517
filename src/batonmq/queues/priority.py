"""The ready entries of a priority queue (x-max-priority): higher priority first, FIFO within a
priority, a requeued entry back in its place within its priority.

RabbitMQ's rules (https://www.rabbitmq.com/docs/priority): a message's `priority` property is
capped at the queue's maximum, and a message without one has priority 0. Priority is honoured at
dispatch time: a consumer gets the highest-priority ready entry when it has room (seeds/004,
2.10.3.1: a low prefetch makes priorities visible to a consumer).

A priority queue keeps its ready entries in memory: it does not page them out, and after a
restart it reads its whole backlog back before serving anything, so that a high-priority entry
deep in the store is not overtaken.
"""

from __future__ import annotations

from collections.abc import Callable

from batonmq.model.message import QueueEntry
from batonmq.queues.ready import ReadyEntries


class PriorityReady:
    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        #: One FIFO per priority, highest last.
        self._levels = [ReadyEntries() for _ in range(max_priority + 1)]
        self.paged_count = 0
        self.paged_bytes = 0
        self.page_cursor = -1
        self.paged_last = -1

    def _level(self, entry: QueueEntry) -> ReadyEntries:
        return self._levels[min(entry.message.priority, self.max_priority)]

    def append(self, entry: QueueEntry) -> None:
        self._level(entry).append(entry)

    def put_back(self, entry: QueueEntry) -> None:
        self._level(entry).put_back(entry)

    def _first_level(self) -> ReadyEntries | None:
        if self.paged_count:
            return None  # the whole backlog is read back before anything is served
        for level in reversed(self._levels):
            if level:
                return level
        return None

    def pop(self) -> QueueEntry | None:
        level = self._first_level()
        return level.pop() if level is not None else None

    def peek(self) -> QueueEntry | None:
        level = self._first_level()
        return level.peek() if level is not None else None

    def take_where(self, condition: Callable[[QueueEntry], bool]) -> list[QueueEntry]:
        return [entry for level in self._levels for entry in level.take_where(condition)]

    @property
    def waiting_for_page_in(self) -> bool:
        return bool(self.paged_count)

    @property
    def bytes(self) -> int:
        return sum(level.bytes for level in self._levels) + self.paged_bytes

    def clear(self) -> tuple[int, list[QueueEntry]]:
        count = len(self)
        in_memory = [entry for level in self._levels for entry in level.clear()[1]]
        self.paged_count = self.paged_bytes = 0
        self.page_cursor = self.paged_last
        return count, in_memory

    def __len__(self) -> int:
        return self.in_memory + self.paged_count

    def __bool__(self) -> bool:
        return bool(self.paged_count) or any(self._levels)

    @property
    def in_memory(self) -> int:
        return sum(len(level) for level in self._levels)

    # Paging: only back in, after a restart --------------------------------------------------

    def to_spill(self, window: int, window_bytes: int) -> list[QueueEntry]:
        return []

    def spilled(self, entries: list[QueueEntry], committed: bool) -> None:
        raise AssertionError("a priority queue does not page out")

    def page_in_request(self, window: int) -> tuple[int, int] | None:
        if not self.paged_count:
            return None
        return self.page_cursor, min(self.paged_count, max(1, window))

    def paged_in(self, entries: list[QueueEntry]) -> None:
        for entry in entries:
            if not self.paged_count or entry.sequence <= self.page_cursor:
                break  # stale: the queue was cleared while the read was under way
            self.append(entry)
            self.page_cursor = entry.sequence
            self.paged_count -= 1
            self.paged_bytes -= entry.message.body_size

    def recovered(self, count: int, body_bytes: int, last_sequence: int) -> None:
        self.paged_count = count
        self.paged_bytes = body_bytes
        self.page_cursor = -1
        self.paged_last = last_sequence
