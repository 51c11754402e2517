"""The classic queue: FIFO by publish order, requeued entries back in place, consumers served
round-robin within their prefetch (AMQP 0-9-1 basic class: "the server SHOULD ... distribute
messages ... in a round-robin fashion")."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from pamqp.common import FieldTable

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.ready import ReadyEntries


class QueueConsumer(Protocol):
    """What a queue needs of a consumer: whether it can take one more, and a way to hand it one."""

    @property
    def tag(self) -> str: ...

    @property
    def exclusive(self) -> bool: ...

    def has_room(self) -> bool: ...

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None: ...


class ClassicQueue:
    def __init__(
        self,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: FieldTable = arguments or {}
        self.ready = ReadyEntries()
        self.consumers: deque[QueueConsumer] = deque()
        self.deleted = False
        self._sequence = itertools.count()

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def publish(self, message: Message) -> None:
        self.ready.append(QueueEntry(message, next(self._sequence)))
        if self.consumers:
            self.dispatch()

    def requeue(self, entries: Iterator[QueueEntry] | list[QueueEntry]) -> None:
        """Put delivered-but-unsettled entries back, marked redelivered, in their old places."""
        if self.deleted:
            return
        for entry in entries:
            entry.redelivered = True
            self.ready.put_back(entry)
        self.dispatch()

    def get(self) -> QueueEntry | None:
        return self.ready.pop()

    def purge(self) -> int:
        return self.ready.clear()

    def add_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.remove(consumer)

    def has_exclusive_consumer(self) -> bool:
        return any(consumer.exclusive for consumer in self.consumers)

    def dispatch(self) -> None:
        """Hand ready entries to consumers with room, round-robin, until either runs out."""
        ready, consumers = self.ready, self.consumers
        while ready and consumers:
            for _ in range(len(consumers)):
                consumer = consumers[0]
                consumers.rotate(-1)
                if consumer.has_room():
                    break
            else:
                return
            entry = ready.pop()
            assert entry is not None
            try:
                consumer.deliver(self, entry)
            except BaseException:
                ready.put_back(entry)  # never lose a message to a failed hand-over
                raise
