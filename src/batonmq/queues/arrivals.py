"""How long a queue's oldest message has waited, without a timestamp per message.

The slow consumer check (Qpid manual §2.11.5.3: "when the oldest message in the associated private
queue for the consumer ages beyond the specified value") and the maximumMessageAge alert need the
age of a queue's head entry. Stamping every message on arrival would cost the publish path a
clock read per message; instead a periodic task takes checkpoints of each queue's
`next_sequence` (the sequence the next published entry gets) and the time.

Entries get sequences in publish order, so an entry with sequence ``s`` was already in the queue
at the first checkpoint whose ``next_sequence`` is above ``s``: its age is at least ``now -`` that
checkpoint's time, and less than that plus the time between checkpoints. The estimate is the
lower bound, so that a threshold is never crossed early: a consumer is never disconnected for an
age its queue did not reach. Dropping a checkpoint only loosens the bound, never breaks it, which
is what keeps the list short (`limit`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from batonmq.queues.protocol import Queue
from batonmq.timers import Timers


class Arrivals:
    """The checkpoints of one queue: (next_sequence, time in ms), both rising, oldest first."""

    __slots__ = ("_limit", "_sequences", "_times")

    def __init__(self, limit: int = 256) -> None:
        assert limit >= 2
        self._limit = limit
        self._sequences: list[int] = []
        self._times: list[int] = []

    def __len__(self) -> int:
        return len(self._sequences)

    def checkpoint(self, next_sequence: int, now_ms: int) -> None:
        """Record that entries below `next_sequence` were published by `now_ms`."""
        sequences, times = self._sequences, self._times
        if sequences and next_sequence <= sequences[-1]:
            # Nothing published since: the earlier time already says it, and more tightly.
            # (Lower only if the queue's numbering went back, which a queue never does.)
            return
        sequences.append(next_sequence)
        times.append(now_ms)
        if len(sequences) > self._limit:
            # Thin out every other one but the oldest and the newest: the bound stays true.
            newest = (sequences[-1], times[-1])
            del sequences[1::2], times[1::2]
            if sequences[-1] != newest[0]:
                sequences.append(newest[0])
                times.append(newest[1])

    def age_ms(self, sequence: int, now_ms: int) -> int:
        """At least how long the entry with `sequence` has been in its queue (0 when it came
        after the newest checkpoint)."""
        index = bisect.bisect_right(self._sequences, sequence)
        if index == len(self._sequences):
            return 0
        return max(0, now_ms - self._times[index])

    def forget_before(self, sequence: int) -> None:
        """The queue's oldest entry has `sequence` (or later): drop the checkpoints that no entry
        from there on needs, those before the first whose next_sequence is above it. The newest
        is kept, for the entries delivered and not yet settled, which may come back."""
        index = min(bisect.bisect_right(self._sequences, sequence), len(self._sequences) - 1)
        if index > 0:
            del self._sequences[:index], self._times[:index]


class QueueAges:
    """The checkpoints of every queue; `checkpoint` runs periodically (every second)."""

    def __init__(self, timers: Timers) -> None:
        self._timers = timers
        self._arrivals: dict[Queue, Arrivals] = {}

    def checkpoint(self, queues: Iterable[Queue]) -> None:
        """Take a checkpoint of each of `queues` (all there are: the others are forgotten)."""
        now = self._timers.now_ms()
        arrivals_by_queue = self._arrivals
        kept: dict[Queue, Arrivals] = {}
        for queue in queues:
            arrivals = arrivals_by_queue.get(queue) or Arrivals()
            head = queue.oldest_sequence_bound()
            arrivals.forget_before(queue.next_sequence if head is None else head)
            arrivals.checkpoint(queue.next_sequence, now)
            kept[queue] = arrivals
        self._arrivals = kept

    def oldest_age_ms(self, queue: Queue) -> int:
        """At least how long `queue`'s head entry has waited; 0 for an empty queue or one not
        yet checkpointed."""
        head = queue.oldest_sequence_bound()
        arrivals = self._arrivals.get(queue)
        if head is None or arrivals is None:
            return 0
        return arrivals.age_ms(head, self._timers.now_ms())
