"""What the overload checks (slow consumers, threshold alerts) read of a queue: a snapshot of
its depth in bytes, its message count, the age of its oldest message and the size of its head
message, all cheap to take (no walk over the entries)."""

from __future__ import annotations

from dataclasses import dataclass

from batonmq.queues.arrivals import QueueAges
from batonmq.queues.protocol import Queue


@dataclass(frozen=True, slots=True)
class QueueReading:
    #: Bytes of the ready message bodies (paged ones included).
    depth: int
    #: Ready messages.
    count: int
    #: At least how long the head message has waited, in ms (`QueueAges`); 0 when not tracked.
    oldest_age_ms: int = 0
    #: Body bytes of the head message when it is in memory, else None.
    head_size: int | None = None


def read_queue(queue: Queue, ages: QueueAges | None) -> QueueReading:
    """`queue` now; `ages` is None when no check needs the oldest message's age."""
    return QueueReading(
        depth=queue.message_bytes,
        count=queue.message_count,
        oldest_age_ms=ages.oldest_age_ms(queue) if ages is not None else 0,
        head_size=queue.head_size,
    )
