"""Which of a queue's consumers gets the next entry.

A classic queue serves its consumers round-robin, each within its own room (AMQP 0-9-1 basic
class: "the server SHOULD ... distribute messages ... in a round-robin fashion").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from batonmq.model.message import QueueEntry

if TYPE_CHECKING:
    from batonmq.queues.classic import ClassicQueue


class QueueConsumer(Protocol):
    """What a queue needs of a consumer: whether it can take one more, and a way to hand it one."""

    @property
    def tag(self) -> str: ...

    @property
    def exclusive(self) -> bool: ...

    def has_room(self) -> bool: ...

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None: ...


class ConsumerSet:
    """A queue's consumers, and the choice of which one gets an entry."""

    def __init__(self) -> None:
        self._consumers: deque[QueueConsumer] = deque()

    def add(self, consumer: QueueConsumer) -> None:
        self._consumers.append(consumer)

    def remove(self, consumer: QueueConsumer) -> None:
        self._consumers.remove(consumer)

    def clear(self) -> None:
        self._consumers.clear()

    def __len__(self) -> int:
        return len(self._consumers)

    def __bool__(self) -> bool:
        return bool(self._consumers)

    def __iter__(self) -> Iterator[QueueConsumer]:
        return iter(list(self._consumers))

    def has_exclusive(self) -> bool:
        return any(consumer.exclusive for consumer in self._consumers)

    def any_room(self) -> bool:
        """Some consumer could take an entry now."""
        return any(consumer.has_room() for consumer in self._consumers)

    def choose(self, entry: QueueEntry) -> QueueConsumer | None:
        """The consumer to hand `entry` to, moving the round-robin on; None when no consumer
        that has room will take it."""
        consumers = self._consumers
        for _ in range(len(consumers)):
            consumer = consumers[0]
            consumers.rotate(-1)
            if consumer.has_room():
                return consumer
        return None
