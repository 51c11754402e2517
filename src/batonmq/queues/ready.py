"""The ready entries of a queue, in sequence order, where a requeued entry returns to its place.

New entries arrive with ever higher sequence numbers, so they append to a deque; entries that come
back (reject, nack, recover, a closed channel) go on a heap keyed by sequence. The next entry out
is whichever of the two heads is older, so requeued messages keep their original position
(RabbitMQ: "requeued messages ... will be placed back in their original position where possible").
"""

from __future__ import annotations

import heapq
from collections import deque

from batonmq.model.message import QueueEntry


class ReadyEntries:
    def __init__(self) -> None:
        self._tail: deque[QueueEntry] = deque()
        self._returned: list[tuple[int, QueueEntry]] = []
        self.bytes = 0

    def append(self, entry: QueueEntry) -> None:
        self._tail.append(entry)
        self.bytes += entry.message.body_size

    def put_back(self, entry: QueueEntry) -> None:
        heapq.heappush(self._returned, (entry.sequence, entry))
        self.bytes += entry.message.body_size

    def pop(self) -> QueueEntry | None:
        returned, tail = self._returned, self._tail
        if returned and (not tail or returned[0][0] < tail[0].sequence):
            entry = heapq.heappop(returned)[1]
        elif tail:
            entry = tail.popleft()
        else:
            return None
        self.bytes -= entry.message.body_size
        return entry

    def clear(self) -> int:
        count = len(self)
        self._tail.clear()
        self._returned.clear()
        self.bytes = 0
        return count

    def __len__(self) -> int:
        return len(self._tail) + len(self._returned)

    def __bool__(self) -> bool:
        return bool(self._tail) or bool(self._returned)
