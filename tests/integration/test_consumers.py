"""Consumer priorities (x-priority), single active consumer (x-single-active-consumer) and JMS
selectors (x-selector) with real clients: pika for priorities and single active consumer,
aio-pika for selectors.

The `broker` tests were run against RabbitMQ 3.10 too (`--amqp-url`), so they encode what it
does. x-selector is not a RabbitMQ feature, and BatonMQ hands a cancelled single active
consumer's unacked messages over where RabbitMQ leaves them with its channel: those tests use the
`batonmq` fixture. Names are unique per test and deleted afterwards (the --amqp-url broker is
shared).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import aio_pika
import pika
import pytest
from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelPreconditionFailed
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker
from pika.spec import Basic, BasicProperties

from tests.brokerproc import RunningBroker


@dataclass(frozen=True)
class Delivery:
    consumer_tag: str
    body: str
    redelivered: bool


class Consumers:
    """Everything delivered to the pika consumers a test starts, in arrival order."""

    def __init__(self) -> None:
        self.delivered: list[Delivery] = []

    def start(
        self,
        channel: BlockingChannel,
        queue: str,
        tag: str,
        arguments: dict[str, object] | None = None,
    ) -> None:
        def on_message(
            _channel: BlockingChannel,
            method: Basic.Deliver,
            _properties: BasicProperties,
            body: bytes,
        ) -> None:
            self.delivered.append(Delivery(method.consumer_tag, body.decode(), method.redelivered))

        channel.basic_consume(queue, on_message, consumer_tag=tag, arguments=arguments)

    def of(self, tag: str) -> list[tuple[str, bool]]:
        """(body, redelivered) of what consumer `tag` got."""
        return [(d.body, d.redelivered) for d in self.delivered if d.consumer_tag == tag]


def pump_until(connection: BlockingConnection, condition: Callable[[], bool]) -> None:
    """Dispatch incoming frames until `condition` holds (with a deadline)."""
    deadline = time.monotonic() + 5.0
    while not condition():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail("the broker did not deliver what the test waited for within 5 s")
        connection.process_data_events(time_limit=min(remaining, 0.05))


def publish(channel: BlockingChannel, queue: str, *bodies: str) -> None:
    """Publish on a confirm-mode channel: each is enqueued when the call returns."""
    for body in bodies:
        channel.basic_publish("", queue, body.encode())


@pytest.fixture
def connection(broker: RunningBroker) -> Iterator[BlockingConnection]:
    opened = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield opened
    finally:
        if opened.is_open:
            opened.close()


@pytest.fixture
def publisher(connection: BlockingConnection) -> BlockingChannel:
    confirming = connection.channel()
    confirming.confirm_delivery()
    return confirming


@pytest.fixture
def queue_name(broker: RunningBroker) -> Iterator[str]:
    """A unique queue name for the test; the queue is deleted afterwards if it exists."""
    name = f"test.consumers.{uuid.uuid4().hex[:12]}"
    yield name
    cleanup = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        with contextlib.suppress(ChannelClosedByBroker):
            cleanup.channel().queue_delete(name)
    finally:
        cleanup.close()


# Consumer priorities (pika) -----------------------------------------------------------------------


def test_high_priority_consumer_gets_messages_until_its_prefetch_blocks_it(
    connection: BlockingConnection, publisher: BlockingChannel, queue_name: str
) -> None:
    """RabbitMQ "Consumer Priorities": "high priority consumers receive messages while they are
    active, with messages only going to lower priority consumers when the high priority
    consumers block" (here: "reached the maximum number of unacknowledged messages after
    issuing basic.qos"); "Larger numbers indicate higher priority"."""
    publisher.queue_declare(queue_name)
    consumers = Consumers()
    low, high = connection.channel(), connection.channel()
    high.basic_qos(prefetch_count=2)
    consumers.start(low, queue_name, "low")
    consumers.start(high, queue_name, "high", {"x-priority": 10})
    publish(publisher, queue_name, "m0", "m1", "m2", "m3")
    pump_until(connection, lambda: len(consumers.delivered) == 4)
    assert consumers.of("high") == [("m0", False), ("m1", False)]
    assert consumers.of("low") == [("m2", False), ("m3", False)]
    high.basic_ack(0, multiple=True)
    publish(publisher, queue_name, "m4")
    pump_until(connection, lambda: len(consumers.delivered) == 5)
    assert consumers.delivered[-1].consumer_tag == "high"


def test_consumers_of_the_same_high_priority_share_round_robin(
    connection: BlockingConnection, publisher: BlockingChannel, queue_name: str
) -> None:
    """RabbitMQ "Consumer Priorities": "messages are delivered round-robin if multiple active
    consumers exist with the same high priority"; the lower one, never blocked behind them
    here, gets nothing."""
    publisher.queue_declare(queue_name)
    consumers = Consumers()
    channel = connection.channel()
    consumers.start(channel, queue_name, "low", {"x-priority": -1})
    consumers.start(channel, queue_name, "a", {"x-priority": 5})
    consumers.start(channel, queue_name, "b", {"x-priority": 5})
    publish(publisher, queue_name, "m0", "m1", "m2", "m3")
    pump_until(connection, lambda: len(consumers.delivered) == 4)
    tags = [delivery.consumer_tag for delivery in consumers.delivered]
    assert sorted(tags) == ["a", "a", "b", "b"]
    assert tags[0] != tags[1] and tags[2] != tags[3], "round-robin alternates"


def test_a_non_integer_x_priority_is_refused_with_406(
    connection: BlockingConnection, publisher: BlockingChannel, queue_name: str
) -> None:
    """RabbitMQ "Consumer Priorities": "Set the x-priority argument ... to an integer value";
    RabbitMQ 3.10 refuses another type with 406 PRECONDITION_FAILED naming the argument."""
    publisher.queue_declare(queue_name)
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as refused:
        channel.basic_consume(queue_name, lambda *_: None, arguments={"x-priority": "high"})
    assert refused.value.reply_code == 406
    assert refused.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{queue_name}' in vhost '/': "
        '"expected integer, got longstr"'
    )


# Single active consumer (pika) --------------------------------------------------------------------


def declare_single_active(channel: BlockingChannel, queue: str) -> None:
    channel.queue_declare(queue, arguments={"x-single-active-consumer": True})


def test_only_the_first_registered_consumer_is_active(
    connection: BlockingConnection, publisher: BlockingChannel, queue_name: str
) -> None:
    """RabbitMQ "Single Active Consumer": "The very first registered consumer become the single
    active consumer: messages are dispatched to it and the other consumers are ignored"."""
    declare_single_active(publisher, queue_name)
    consumers = Consumers()
    consumers.start(connection.channel(), queue_name, "first")
    consumers.start(connection.channel(), queue_name, "second")
    publish(publisher, queue_name, "m0", "m1", "m2")
    pump_until(connection, lambda: len(consumers.delivered) == 3)
    assert consumers.of("first") == [("m0", False), ("m1", False), ("m2", False)]


def test_the_next_consumer_takes_over_when_the_active_ones_channel_closes(
    connection: BlockingConnection, publisher: BlockingChannel, queue_name: str
) -> None:
    """MQ 3.5 admin guide: "If an active consumer fails, then the first backup consumer is made
    active, and takes over the work of the failed consumer": the unacked messages of the closed
    channel come back, redelivered, in their original order before newer ones. (RabbitMQ 3.10 starts
    delivering to the new active consumer only at the next publish; BatonMQ at once. The test
    publishes m3 after the close, so it holds for both.)"""
    declare_single_active(publisher, queue_name)
    consumers = Consumers()
    active, backup = connection.channel(), connection.channel()
    for channel, tag in ((active, "active"), (backup, "backup")):
        channel.basic_qos(prefetch_count=2)
        consumers.start(channel, queue_name, tag)
    publish(publisher, queue_name, "m0", "m1", "m2")
    pump_until(connection, lambda: len(consumers.delivered) == 2)
    active.close()
    publish(publisher, queue_name, "m3")
    pump_until(connection, lambda: len(consumers.of("backup")) == 2)
    backup.basic_ack(0, multiple=True)
    pump_until(connection, lambda: len(consumers.of("backup")) == 4)
    assert consumers.of("backup") == [("m0", True), ("m1", True), ("m2", False), ("m3", False)]


def test_the_next_consumer_takes_over_when_the_active_ones_connection_goes(
    broker: RunningBroker,
    connection: BlockingConnection,
    publisher: BlockingChannel,
    queue_name: str,
) -> None:
    """MQ 3.5 admin guide: the first backup "takes over the work of the failed consumer", here one
    whose connection went, and the backups after it stay backups."""
    declare_single_active(publisher, queue_name)
    consumers = Consumers()
    gone = pika.BlockingConnection(pika.URLParameters(broker.url))
    consumers.start(gone.channel(), queue_name, "gone")
    consumers.start(connection.channel(), queue_name, "first-backup")
    consumers.start(connection.channel(), queue_name, "second-backup")
    publish(publisher, queue_name, "m0")
    pump_until(gone, lambda: len(consumers.delivered) == 1)
    gone.close()
    publish(publisher, queue_name, "m1")
    pump_until(connection, lambda: len(consumers.delivered) == 3)
    assert consumers.of("first-backup") == [("m0", True), ("m1", False)]


def test_an_exclusive_consumer_is_refused_on_a_single_active_consumer_queue(
    connection: BlockingConnection, publisher: BlockingChannel, queue_name: str
) -> None:
    """RabbitMQ "Single Active Consumer": "Trying to register a consumer with the exclusive
    consume flag set to true will result in an error if single active consumer is enabled on
    the queue" (RabbitMQ 3.10: 403 ACCESS_REFUSED, "in exclusive use")."""
    declare_single_active(publisher, queue_name)
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as refused:
        channel.basic_consume(queue_name, lambda *_: None, exclusive=True)
    assert refused.value.reply_code == 403
    assert refused.value.reply_text == (
        f"ACCESS_REFUSED - queue '{queue_name}' in vhost '/' in exclusive use"
    )


def test_a_cancelled_active_consumers_unacked_messages_go_to_the_next_one(
    batonmq: RunningBroker, queue_name: str
) -> None:
    """MQ 3.5 admin guide: the first backup "takes over the work of the failed consumer", after a
    basic.cancel too: BatonMQ requeues the cancelled active consumer's unacked messages for it,
    in their places (RabbitMQ leaves them with the cancelled consumer's channel, as spec
    basic.cancel does for other consumers). The old channel may still ack them: a no-op."""
    connection = pika.BlockingConnection(pika.URLParameters(batonmq.url))
    try:
        publisher = connection.channel()
        publisher.confirm_delivery()
        declare_single_active(publisher, queue_name)
        consumers = Consumers()
        active, backup = connection.channel(), connection.channel()
        for channel, tag in ((active, "active"), (backup, "backup")):
            channel.basic_qos(prefetch_count=2)
            consumers.start(channel, queue_name, tag)
        publish(publisher, queue_name, "m0", "m1", "m2")
        pump_until(connection, lambda: len(consumers.delivered) == 2)
        active.basic_cancel("active")
        pump_until(connection, lambda: len(consumers.of("backup")) == 2)
        active.basic_ack(0, multiple=True)
        backup.basic_ack(0, multiple=True)
        pump_until(connection, lambda: len(consumers.of("backup")) == 3)
        assert consumers.of("backup") == [("m0", True), ("m1", True), ("m2", False)]
        assert active.is_open
    finally:
        connection.close()


# Selectors (aio-pika) -----------------------------------------------------------------------------


async def test_a_selector_consumer_gets_only_the_messages_it_selects(
    batonmq: RunningBroker, queue_name: str
) -> None:
    """JMS 1.1 (javax.jms.Message, "Message Selectors"): a selector selects by "header field
    references and property references" (AMQP headers, and JMSPriority from the priority
    property); what it does not select stays in the queue, in order."""
    connection = await aio_pika.connect(batonmq.url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name)
        selected: list[bytes] = []
        both_selected = asyncio.Event()

        async def on_message(message: AbstractIncomingMessage) -> None:
            selected.append(message.body)
            await message.ack()
            if len(selected) == 2:
                both_selected.set()

        await queue.consume(
            on_message, arguments={"x-selector": "region IN ('eu', 'uk') AND JMSPriority >= 5"}
        )
        for body, region, priority in [
            (b"eu-urgent", "eu", 9),
            (b"us-urgent", "us", 9),
            (b"uk-low", "uk", 1),
            (b"uk-urgent", "uk", 5),
        ]:
            await channel.default_exchange.publish(
                aio_pika.Message(body, headers={"region": region}, priority=priority),
                routing_key=queue_name,
            )
        await asyncio.wait_for(both_selected.wait(), timeout=5)
        probe = await (await connection.channel()).get_queue(queue_name)
        left = []
        while (message := await probe.get(no_ack=True, fail=False)) is not None:
            left.append(message.body)
        assert (selected, left) == ([b"eu-urgent", b"uk-urgent"], [b"us-urgent", b"uk-low"])


async def test_a_selector_that_does_not_parse_closes_the_channel_with_406(
    batonmq: RunningBroker, queue_name: str
) -> None:
    """JMS 1.1 (Session.createConsumer): InvalidSelectorException "if the message selector is
    invalid"; BatonMQ answers 406 PRECONDITION_FAILED naming the position of the error."""

    async def never_called(message: AbstractIncomingMessage) -> None:
        raise AssertionError(message)

    connection = await aio_pika.connect(batonmq.url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name)
        with pytest.raises(ChannelPreconditionFailed) as refused:
            await queue.consume(never_called, arguments={"x-selector": "colour = "})
        assert "invalid arg 'x-selector'" in str(refused.value)
        assert "selector syntax error at position 9" in str(refused.value)
