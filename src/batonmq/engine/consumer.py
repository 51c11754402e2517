"""A consumer on a queue (basic.consume): its tag, its channel, and its share of the prefetch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.model.message import QueueEntry
from batonmq.queues.classic import ClassicQueue

if TYPE_CHECKING:
    from batonmq.engine.channel import Channel


@dataclass(eq=False, slots=True)
class Consumer:
    tag: str
    channel: Channel
    queue: ClassicQueue
    no_ack: bool
    exclusive: bool
    #: The per-consumer prefetch (basic.qos global=false in force when it was created); 0 = none.
    prefetch_count: int
    arguments: FieldTable
    unacked: int = 0

    def has_room(self) -> bool:
        if not self.channel.can_deliver():
            return False
        if self.no_ack:
            return True  # RabbitMQ: prefetch does not apply to automatic-acknowledgement consumers
        if self.prefetch_count and self.unacked >= self.prefetch_count:
            return False
        return self.channel.global_room()

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None:
        self.channel.deliver(self, queue, entry)


def cancel_consumers_of(queue: ClassicQueue) -> None:
    """The queue is going: its consumers get basic.cancel, where the client understands it
    (capability consumer_cancel_notify); their unsettled deliveries stay theirs to settle."""
    for consumer in queue.consumers:
        assert isinstance(consumer, Consumer)
        channel = consumer.channel
        channel.consumers.pop(consumer.tag, None)
        session = channel.session
        if session.connection.supports("consumer_cancel_notify"):
            session.send_method(
                channel.number, commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True)
            )
    queue.consumers.clear()
