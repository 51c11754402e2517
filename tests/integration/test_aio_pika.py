"""aio-pika (on aiormq and pamqp) against a real broker: robust connection, confirms, consumers.

Written against RabbitMQ 3.10.8 first (`--amqp-url`); docstrings quote the AMQP 0-9-1 rule or the
RabbitMQ guide each test enforces. Names are unique per test and whatever is declared under a name
is deleted afterwards, because the --amqp-url broker is shared.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import time
import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
    HeadersType,
)
from pamqp.commands import Basic

from tests.brokerproc import RunningBroker


def unique(kind: str) -> str:
    return f"test.aio-pika.{kind}.{uuid.uuid4().hex[:12]}"


async def publish(channel: AbstractChannel, queue: str, *bodies: bytes) -> None:
    """Publish to the default exchange and wait for each publisher confirm."""
    for body in bodies:
        confirmation = await channel.default_exchange.publish(
            aio_pika.Message(body), routing_key=queue
        )
        assert isinstance(confirmation, Basic.Ack), confirmation


async def ready_count(connection: AbstractRobustConnection, queue: str) -> int:
    """The queue's message count from a passive queue.declare-ok on a fresh channel."""
    async with connection.channel() as probe:
        declared = await probe.declare_queue(queue, passive=True)
        assert declared.declaration_result.message_count is not None
        return declared.declaration_result.message_count


async def drain(queue: AbstractQueue) -> list[bytes]:
    bodies: list[bytes] = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        bodies.append(message.body)
    return bodies


@pytest.fixture
async def connection(broker: RunningBroker) -> AsyncIterator[AbstractRobustConnection]:
    robust = await aio_pika.connect_robust(broker.url)
    try:
        yield robust
    finally:
        await robust.close()


@pytest.fixture
async def channel(connection: AbstractRobustConnection) -> AbstractChannel:
    """A channel in confirm mode (aio-pika's default): publish returns the broker's basic.ack."""
    return await connection.channel()


async def test_robust_connection_publishes_with_confirms_and_iterates_a_queue(
    connection: AbstractRobustConnection, channel: AbstractChannel
) -> None:
    """Publishes on a confirm channel are each acked; a queue iterator gets them in order.

    RabbitMQ, "Publisher Confirms": "The broker then confirms messages as it handles them by
    sending a basic.ack on the same channel." AMQP 0-9-1 basic.consume: "This method asks the
    server to start a "consumer", which is a transient request for messages from a specific
    queue."; basic.ack acknowledges "one or more messages delivered via the Deliver or Get-Ok
    methods".
    """
    queue = await channel.declare_queue(exclusive=True)
    bodies = [f"message-{index}".encode() for index in range(5)]
    await publish(channel, queue.name, *bodies)

    received: list[tuple[bytes, bool | None]] = []
    async with asyncio.timeout(5), queue.iterator() as messages:
        async for message in messages:
            async with message.process():  # acks on leaving the block
                received.append((message.body, message.redelivered))
            if len(received) == len(bodies):
                break
    assert received == [(body, False) for body in bodies]

    await channel.close()  # would requeue anything the broker still counted as unacked
    assert await ready_count(connection, queue.name) == 0


async def test_ack_nack_and_reject(channel: AbstractChannel) -> None:
    """reject/nack with requeue bring messages back redelivered, in place; without requeue drop.

    AMQP 0-9-1 basic.reject requeue: "If requeue is true, the server will attempt to requeue the
    message. If requeue is false or the requeue attempt fails the messages are discarded or
    dead-lettered." RabbitMQ, "Negative Acknowledgements": basic.nack with multiple rejects "all
    unacknowledged, delivered messages up to and including the message specified in the
    delivery_tag"; "When a message is requeued, it will be placed to its original position in its
    queue, if possible."
    """
    queue = await channel.declare_queue(exclusive=True)
    await publish(channel, queue.name, b"1", b"2", b"3", b"4")

    first = await queue.get()
    await first.reject(requeue=True)
    again = await queue.get()
    assert (again.body, again.redelivered) == (b"1", True)
    await again.ack()

    second = await queue.get()
    await second.nack(requeue=False)

    third = await queue.get()
    fourth = await queue.get()
    assert (third.body, fourth.body) == (b"3", b"4")
    await fourth.nack(multiple=True, requeue=True)  # third and fourth both go back
    back = [await queue.get(no_ack=True) for _ in range(2)]
    assert [(message.body, message.redelivered) for message in back] == [
        (b"3", True),
        (b"4", True),
    ]
    assert await queue.get(fail=False) is None


async def test_qos_prefetch_count_caps_unacked_deliveries(
    connection: AbstractRobustConnection, channel: AbstractChannel
) -> None:
    """With basic.qos prefetch-count 2 a consumer holds two unacked messages; each ack admits one.

    AMQP 0-9-1 basic.qos prefetch-count, rule 01: "The server may send less data in advance than
    allowed by the client's specified prefetch windows but it MUST NOT send more." RabbitMQ,
    "Consumer Prefetch": with global=false the limit is "applied separately to each new consumer
    on the channel".
    """
    queue = await channel.declare_queue(exclusive=True)
    await publish(channel, queue.name, *(str(index).encode() for index in range(5)))
    consuming = await connection.channel()
    await consuming.set_qos(prefetch_count=2)
    consumed_queue = await consuming.get_queue(queue.name, ensure=False)
    deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
    await consumed_queue.consume(deliveries.put)

    async with asyncio.timeout(5):
        held = [await deliveries.get(), await deliveries.get()]
    assert await ready_count(connection, queue.name) == 3
    assert deliveries.empty()

    await held[0].ack()
    async with asyncio.timeout(5):
        third = await deliveries.get()
    assert third.body == b"2"
    assert await ready_count(connection, queue.name) == 2
    assert deliveries.empty()


async def test_topic_exchange_star_and_hash_bindings(channel: AbstractChannel) -> None:
    """Topic bindings: `*` is exactly one word, `#` zero or more; one copy per queue.

    RabbitMQ tutorial "Topics": "* (star) can substitute for exactly one word. # (hash) can
    substitute for zero or more words." AMQP 0-9-1 queue.bind, rule unique: "A server MUST not
    deliver the same message more than once to a queue, even if the queue has multiple bindings
    that match the message."
    """
    exchange = await channel.declare_exchange(
        unique("topic"), aio_pika.ExchangeType.TOPIC, auto_delete=True
    )
    try:
        orange = await channel.declare_queue(exclusive=True)
        await orange.bind(exchange, "*.orange.*")
        rabbits = await channel.declare_queue(exclusive=True)
        await rabbits.bind(exchange, "*.*.rabbit")
        await rabbits.bind(exchange, "lazy.#")
        everything = await channel.declare_queue(exclusive=True)
        await everything.bind(exchange, "#")

        routing_keys = [
            "quick.orange.rabbit",  # orange, rabbits
            "lazy.orange.elephant",  # orange, rabbits
            "quick.orange.fox",  # orange
            "lazy.brown.fox",  # rabbits
            "lazy.pink.rabbit",  # rabbits, once although both bindings match
            "quick.brown.fox",  # nobody but everything
            "orange",  # `*.orange.*` needs three words
            "quick.orange.new.rabbit",  # `*` never stands for two words
            "lazy.orange.new.rabbit",  # rabbits: `#` takes any number of words
            "lazy",  # rabbits: `#` may stand for zero words
        ]
        for key in routing_keys:
            await exchange.publish(aio_pika.Message(key.encode()), routing_key=key)

        assert await drain(orange) == [
            b"quick.orange.rabbit",
            b"lazy.orange.elephant",
            b"quick.orange.fox",
        ]
        assert await drain(rabbits) == [
            b"quick.orange.rabbit",
            b"lazy.orange.elephant",
            b"lazy.brown.fox",
            b"lazy.pink.rabbit",
            b"lazy.orange.new.rabbit",
            b"lazy",
        ]
        assert await drain(everything) == [key.encode() for key in routing_keys]
    finally:
        await exchange.delete()


async def test_unacked_messages_are_requeued_when_the_connection_closes(
    broker: RunningBroker, connection: AbstractRobustConnection, channel: AbstractChannel
) -> None:
    """connection.close requeues the connection's unacked deliveries, which come back redelivered.

    AMQP 0-9-1 basic class rule 10 scenario: "Consume the messages but acknowledge only half of
    them. Disconnect and reconnect, and consume from the queue. Verify that the remaining messages
    are received."; domain redelivered, rule implementation scenario: "Consume the message using
    explicit acknowledgements, but do not acknowledge the message. Close the connection,
    reconnect, and consume from the queue again. The message should arrive with the redelivered
    flag set."
    """
    queue = await channel.declare_queue(unique("requeue"))
    try:
        await publish(channel, queue.name, b"1", b"2", b"3")
        other = await aio_pika.connect_robust(broker.url)
        other_channel = await other.channel()
        other_queue = await other_channel.get_queue(queue.name, ensure=False)
        acked = await other_queue.get()
        await other_queue.get()
        await acked.ack()
        await other.close()

        deadline = time.monotonic() + 5
        while (count := await ready_count(connection, queue.name)) != 2:
            assert time.monotonic() < deadline, f"{count} ready messages, expected 2"
            await asyncio.sleep(0.02)
        back = [await queue.get(no_ack=True) for _ in range(2)]
        assert [(message.body, message.redelivered) for message in back] == [
            (b"2", True),
            (b"3", False),
        ]
    finally:
        await queue.delete(if_unused=False, if_empty=False)


async def test_header_values_of_every_table_type_round_trip(channel: AbstractChannel) -> None:
    """Field-table values pamqp encodes (floats included, which pika cannot) come back unchanged.

    AMQP 0-9-1 basic property headers (domain table: "message header field table"); the broker
    passes the table through. Here: float, negative float, nested table and array, byte array,
    decimal, timestamp, 64-bit integer, void, boolean and text.
    """
    headers: HeadersType = {
        "float": 1.5,
        "negative-float": -0.25,
        "nested": {"floats": [0.5, 2.0], "deeper": {"flag": True}},
        "bytes": bytearray(b"\x00\x01\xff"),
        "decimal": decimal.Decimal("1.25"),
        "timestamp": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "long": 2**40,
        "none": None,
        "text": "ünïcode",
    }
    queue = await channel.declare_queue(exclusive=True)
    await channel.default_exchange.publish(
        aio_pika.Message(b"", headers=headers, content_type="text/plain"), routing_key=queue.name
    )
    message = await queue.get(no_ack=True)
    assert message.headers == headers
    assert (message.body, message.content_type) == (b"", "text/plain")
