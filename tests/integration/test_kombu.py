"""kombu on its py-amqp transport (`pyamqp://`) against a real broker.

Written against RabbitMQ 3.10.8 first (`--amqp-url`); docstrings quote the AMQP 0-9-1 rule or the
RabbitMQ guide each test enforces. Names are unique per test and whatever is declared under a name
is deleted afterwards, because the --amqp-url broker is shared.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.message import Message
from kombu.messaging import Consumer, Producer
from kombu.simple import SimpleQueue

from tests.brokerproc import RunningBroker


def unique(kind: str) -> str:
    return f"test.kombu.{kind}.{uuid.uuid4().hex[:12]}"


def pyamqp_url(broker: RunningBroker) -> str:
    vhost = quote(broker.vhost, safe="")
    return f"pyamqp://{broker.username}:{broker.password}@{broker.host}:{broker.port}/{vhost}"


@pytest.fixture
def connection(broker: RunningBroker) -> Iterator[Connection]:
    """A connected kombu Connection whose publishes wait for the broker's publisher confirm."""
    conn = Connection(pyamqp_url(broker), transport_options={"confirm_publish": True})
    conn.connect()
    try:
        yield conn
    finally:
        conn.release()


def test_producer_and_consumer_round_trip_through_a_direct_exchange(
    connection: Connection,
) -> None:
    """A Producer's message goes through a direct exchange to the bound Queue and its Consumer.

    AMQP 0-9-1 queue.bind: "If a message queue binds to a direct exchange using routing key K and
    a publisher sends the exchange a message with routing key R, then the message MUST be passed
    to the message queue if K = R."; basic.deliver carries the exchange and routing key the
    message was published with.
    """
    exchange = Exchange(unique("direct"), type="direct", durable=False, auto_delete=True)
    queue = Queue(exclusive=True, exchange=exchange, routing_key="orders.created")
    received: list[tuple[object, Message]] = []

    def on_message(body: object, message: Message) -> None:
        received.append((body, message))
        message.ack()

    channel = connection.channel()
    try:
        with Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
            producer = Producer(connection.default_channel, exchange=exchange)
            producer.publish({"order": 1}, routing_key="orders.created", serializer="json")
            producer.publish({"order": 2}, routing_key="orders.cancelled", serializer="json")
            producer.publish({"order": 3}, routing_key="orders.created", serializer="json")
            while len(received) < 2:
                connection.drain_events(timeout=5)
        assert [body for body, _ in received] == [{"order": 1}, {"order": 3}]
        delivery_info = received[0][1].delivery_info
        assert (delivery_info["exchange"], delivery_info["routing_key"]) == (
            exchange.name,
            "orders.created",
        )
        assert received[0][1].content_type == "application/json"
    finally:
        exchange(connection.default_channel).delete()
        channel.close()


def test_simple_queue_put_get_and_empty(connection: Connection) -> None:
    """SimpleQueue put/get: basic.publish, then basic.get until get-empty.

    AMQP 0-9-1 basic.get: "This method provides a direct access to the messages in a queue using a
    synchronous dialogue"; basic.get-empty: "This method tells the client that the queue has no
    messages available for the client."
    """
    name = unique("simple")
    simple: SimpleQueue = connection.SimpleQueue(name, serializer="json")
    try:
        simple.put({"hello": "world"})
        simple.put({"hello": "again"})
        assert simple.qsize() == 2
        first = simple.get(block=True, timeout=5)
        first.ack()
        second = simple.get(block=True, timeout=5)
        second.ack()
        assert [first.payload, second.payload] == [{"hello": "world"}, {"hello": "again"}]
        with pytest.raises(simple.Empty):
            simple.get(block=False)
    finally:
        simple.close()  # cancels its consumer first: deleting the queue under it would cancel it
        with connection.channel() as cleanup:
            simple.queue(cleanup).delete()
            simple.queue.exchange(cleanup).delete()


def test_drain_events_dispatches_every_queue_then_times_out(connection: Connection) -> None:
    """drain_events hands each delivery to its consumer's callback; with nothing left it times out.

    AMQP 0-9-1 basic.consume: the server "responds with Deliver methods as and when messages
    arrive for that consumer" (basic.deliver); basic.consume-ok: "The server provides the client
    with a consumer tag, which is used by the client for methods called on the consumer".
    """
    first_name, second_name = unique("first"), unique("second")
    first = Queue(first_name, exclusive=True)
    second = Queue(second_name, exclusive=True)
    received: list[tuple[str, bytes]] = []
    channel = connection.channel()
    try:
        consumer = Consumer(
            channel,
            queues=[first, second],
            no_ack=True,
            on_message=lambda message: received.append(
                (message.delivery_info["routing_key"], message.body)
            ),
        )
        with consumer:
            producer = Producer(connection.default_channel)
            producer.publish(b"to-first", routing_key=first_name)
            producer.publish(b"to-second", routing_key=second_name)
            while len(received) < 2:
                connection.drain_events(timeout=5)
            with pytest.raises(TimeoutError):
                connection.drain_events(timeout=0.2)
        assert sorted(received) == sorted([(first_name, b"to-first"), (second_name, b"to-second")])
    finally:
        channel.close()


def test_server_generates_distinct_consumer_tags(connection: Connection) -> None:
    """basic.consume with an empty consumer tag gets a unique, server-generated tag.

    AMQP 0-9-1 basic.consume consumer-tag: "If this field is empty the server will generate a
    unique tag."; basic.consume-ok consumer-tag: "Holds the consumer tag specified by the client
    or provided by the server." (py-amqp, under kombu, leaves the tag empty unless given one.)
    """
    channel = connection.default_channel
    queue, _messages, _consumers = channel.queue_declare("", exclusive=True, auto_delete=False)
    first = channel.basic_consume(queue, callback=lambda _message: None)
    second = channel.basic_consume(queue, callback=lambda _message: None)
    assert first
    assert second
    assert first != second
    channel.basic_cancel(first)
    channel.basic_cancel(second)
    assert channel.queue_declare(queue, passive=True).consumer_count == 0
