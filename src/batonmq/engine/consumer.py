"""A consumer on a queue (basic.consume): its tag, its channel, its share of the prefetch, and
what its arguments ask for: a priority (x-priority) and a JMS selector (x-selector); and the
rules a queue admits a new consumer by (`admitted`)."""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pamqp import commands
from pamqp.common import FieldTable, FieldValue

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.model.message import QueueEntry
from batonmq.queues.counters import QueueCounters
from batonmq.queues.protocol import Consumers, Queue, QueueConsumer
from batonmq.selectors import Selector, SelectorSyntaxError, parse_selector

if TYPE_CHECKING:
    from batonmq.engine.channel import Channel


class ConsumedQueue(Protocol):
    """What a channel's consumers, deliveries and settlements touch of a queue: a `Queue`
    this process runs, or a queue another worker runs (`batonmq.engine.remotequeue`), whose
    owner hands out and settles the entries as it is told."""

    counters: QueueCounters
    unacked: int

    @property
    def name(self) -> str: ...

    @property
    def auto_delete(self) -> bool: ...

    @property
    def deleted(self) -> bool: ...

    @property
    def consumers(self) -> Consumers: ...

    def add_consumer(self, consumer: QueueConsumer) -> None: ...

    def remove_consumer(self, consumer: QueueConsumer) -> None: ...

    def dispatch(self) -> None: ...

    def delivered(self, entry: QueueEntry) -> None: ...

    def settled(self, entry: QueueEntry) -> None: ...

    def rejected(self, entry: QueueEntry) -> None: ...

    def requeue(self, entries: Iterable[QueueEntry]) -> None: ...


@dataclass(eq=False, slots=True)
class Consumer:
    tag: str
    channel: Channel
    queue: ConsumedQueue
    no_ack: bool
    exclusive: bool
    #: The per-consumer prefetch (basic.qos global=false in force when it was created); 0 = none.
    prefetch_count: int
    arguments: FieldTable
    #: x-priority (RabbitMQ's consumer priorities): higher goes first; 0 when not given.
    priority: int = 0
    #: x-selector: the messages this consumer takes; None for all of them.
    selector: Selector | None = None
    unacked: int = 0

    def has_room(self) -> bool:
        channel = self.channel
        if not channel.can_deliver() or self.queue in channel.vhost.paused:
            return False
        if self.no_ack:
            return True  # RabbitMQ: prefetch does not apply to automatic-acknowledgement consumers
        if self.prefetch_count and self.unacked >= self.prefetch_count:
            return False
        return channel.global_room()

    def deliver(self, queue: ConsumedQueue, entry: QueueEntry) -> None:
        self.channel.deliver(self, queue, entry)

    def queue_deleted(self) -> None:
        """Its queue is going: it is no longer the channel's, and the client hears of it
        (basic.cancel) where it understands it (capability consumer_cancel_notify); its
        unsettled deliveries stay its to settle. While the channel waits for the reply to its
        own queue.delete of the queue, the basic.cancel waits to follow it."""
        channel = self.channel
        channel.consumers.pop(self.tag, None)
        session = channel.session
        if not session.connection.supports("consumer_cancel_notify"):
            return
        cancel = commands.Basic.Cancel(consumer_tag=self.tag, nowait=True)
        after_reply = channel.cancels_after_delete.get(self.queue.name)
        if after_reply is not None:
            after_reply.append(cancel)
        else:
            session.send_method(channel.number, cancel)


@runtime_checkable
class CancelledWithQueue(Protocol):
    """A consumer that hears that its queue is deleted: a channel's (`Consumer`), or one that
    another worker's channel holds (`batonmq.engine.linkedconsumers`)."""

    def queue_deleted(self) -> None: ...


def consumer_tag() -> str:
    """A server-generated consumer tag, shaped like RabbitMQ's ("amq.ctag-" and 22 characters)."""
    return "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")


def admitted(
    channel: Channel,
    queue: Queue,
    tag: str,
    *,
    no_ack: bool,
    exclusive: bool,
    arguments: FieldTable,
    where: str,
) -> Consumer:
    """A consumer of `queue` on `channel`, once the queue admits it (`check_admission`).
    Not yet started: `Channel.add_consumer` does that."""
    priority, selector = check_admission(
        queue,
        no_ack=no_ack,
        exclusive=exclusive,
        prefetch_count=channel.consumer_prefetch,
        global_prefetch=channel.channel_prefetch,
        arguments=arguments,
        where=where,
    )
    return Consumer(
        tag=tag,
        channel=channel,
        queue=queue,
        no_ack=no_ack,
        exclusive=exclusive,
        prefetch_count=channel.consumer_prefetch,
        arguments=arguments,
        priority=priority,
        selector=selector,
    )


def check_admission(
    queue: Queue,
    *,
    no_ack: bool,
    exclusive: bool,
    prefetch_count: int,
    global_prefetch: int,
    arguments: FieldTable,
    where: str,
) -> tuple[int, Selector | None]:
    """The priority and selector of a new consumer of `queue`, once the queue admits it: its
    arguments are valid, the queue is not in another consumer's exclusive use, it is under its
    limit of consumers, and its queue type takes the acknowledgement mode and prefetch
    (`Queue.check_consume`). `where` names the queue in refusals."""
    priority = consumer_priority(arguments, where)
    selector = consumer_selector(arguments, where)
    # RabbitMQ's "Single Active Consumer": "Trying to register a consumer with the exclusive
    # consume flag set to true will result in an error if single active consumer is enabled".
    exclusive_refused = queue.consumers or queue.consumers.single_active
    if (exclusive and exclusive_refused) or queue.has_exclusive_consumer():
        raise amqp_error(ReplyCode.ACCESS_REFUSED, f"{where} in exclusive use")
    options = queue.options
    if options.max_active_consumers is not None and options.max_backup_consumers is not None:
        # MQ 3.5 admin guide: "New consumers will be rejected if the number of consumers exceeds the
        # sum of these two attributes."
        limit = options.max_active_consumers + options.max_backup_consumers
        if len(queue.consumers) >= limit:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"{where} has reached its limit of {limit} consumers "
                "(x-max-active-consumers plus x-max-backup-consumers)",
            )
    queue.check_consume(
        no_ack=no_ack,
        prefetch_count=prefetch_count,
        global_prefetch=global_prefetch,
        arguments=arguments,
    )
    return priority, selector


# Arguments ------------------------------------------------------------------------------------


def consumer_priority(arguments: FieldTable, queue: str) -> int:
    """x-priority, "an integer value ... Consumers which do not specify a value have priority 0"
    (RabbitMQ's "Consumer Priorities"); `queue` names the queue for the error."""
    value = arguments.get("x-priority", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid_argument("x-priority", queue, f'"expected integer, got {_type_name(value)}"')
    return value


def consumer_selector(arguments: FieldTable, queue: str) -> Selector | None:
    """x-selector, a JMS message selector; None when there is none or it is empty (JMS 1.1:
    "If the value of a message selector is an empty string ... there is no message selector")."""
    if "x-selector" not in arguments:
        return None
    text = arguments["x-selector"]
    if not isinstance(text, str):
        raise _invalid_argument("x-selector", queue, f'"expected string, got {_type_name(text)}"')
    try:
        selector = parse_selector(text)
    except SelectorSyntaxError as error:
        raise _invalid_argument("x-selector", queue, str(error)) from None
    return None if selector.selects_everything else selector


def _invalid_argument(name: str, queue: str, problem: str) -> ProtocolError:
    # RabbitMQ's text (rabbit_amqqueue:check_consume_arguments), e.g. "invalid arg 'x-priority'
    # for queue 'q' in vhost '/': "expected integer, got longstr"".
    return amqp_error(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{name}' for {queue}: {problem}")


#: The AMQP field types, by RabbitMQ's names, of the values pamqp decodes; "integer" and "double"
#: stand for all widths, which pamqp does not keep.
_TYPE_NAMES: dict[type, str] = {
    bool: "bool",
    int: "integer",
    float: "double",
    Decimal: "decimal",
    datetime.datetime: "timestamp",
    str: "longstr",
    bytes: "longstr",  # a long string that is not UTF-8
    bytearray: "binary",
    dict: "table",
    list: "array",
    type(None): "void",
}


def _type_name(value: FieldValue) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def cancel_consumers_of(queue: Queue) -> None:
    """The queue is going: its consumers get basic.cancel, where the client understands it
    (capability consumer_cancel_notify); their unsettled deliveries stay theirs to settle."""
    for consumer in queue.consumers:
        assert isinstance(consumer, CancelledWithQueue)
        consumer.queue_deleted()
    queue.consumers.clear()
