"""pika's BlockingConnection against a real broker: the AMQP 0-9-1 model, method by method.

Every test was written against RabbitMQ 3.10.8 first (`--amqp-url`), so each one encodes what
RabbitMQ does; its docstring quotes the AMQP 0-9-1 rule (amqp0-9-1.xml) or the RabbitMQ guide it
enforces. Against the shared RabbitMQ state survives between tests, so every name is unique and
whatever a test declares under a name is deleted afterwards (`created`); server-named queues are
exclusive and go with their connection.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import (
    ChannelClosedByBroker,
    ProbableAuthenticationError,
    UnroutableError,
)
from pika.spec import Basic, BasicProperties

from tests.brokerproc import RunningBroker

# --------------------------------------------------------------------------- helpers


def unique(kind: str) -> str:
    return f"test.pika-blocking.{kind}.{uuid.uuid4().hex[:12]}"


def open_connection(broker: RunningBroker) -> BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def server_named_queue(channel: BlockingChannel) -> str:
    """An exclusive queue named by the server; it goes when the test's connection closes."""
    return channel.queue_declare("", exclusive=True).method.queue


def ready_count(connection: BlockingConnection, queue: str) -> int:
    """The queue's message count from queue.declare-ok (passive) on a fresh channel."""
    probe = connection.channel()
    try:
        return probe.queue_declare(queue, passive=True).method.message_count
    finally:
        if probe.is_open:
            probe.close()


def wait_for_ready(connection: BlockingConnection, queue: str, expected: int) -> None:
    """Wait (with a deadline) until `queue` holds `expected` ready messages.

    For effects the protocol does not order against another channel's next method (a requeue
    caused by a channel or connection closing, an ack or reject on another channel).
    """
    deadline = time.monotonic() + 5.0
    while (count := ready_count(connection, queue)) != expected:
        if time.monotonic() > deadline:
            pytest.fail(f"{queue} holds {count} ready messages, expected {expected}")
        connection.sleep(0.02)


def pump_until(connection: BlockingConnection, condition: Callable[[], bool]) -> None:
    """Dispatch incoming frames (deliveries, returns, cancels) until `condition` holds."""
    deadline = time.monotonic() + 5.0
    while not condition():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail("the broker did not deliver what the test waited for within 5 s")
        connection.process_data_events(time_limit=min(remaining, 0.05))


def publish(channel: BlockingChannel, queue: str, *bodies: bytes) -> None:
    for body in bodies:
        channel.basic_publish("", queue, body)


def get(channel: BlockingChannel, queue: str) -> tuple[Basic.GetOk, bytes]:
    """basic.get without auto-ack; fails the test on get-empty."""
    method, _properties, body = channel.basic_get(queue)
    assert method is not None, f"{queue} was empty"
    return method, body


def drain(channel: BlockingChannel, queue: str) -> list[bytes]:
    """Every ready message of `queue`, taken with basic.get no-ack until get-empty."""
    bodies: list[bytes] = []
    while True:
        method, _properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


class Created:
    """Queues and exchanges a test declares under its own names, deleted at teardown."""

    def __init__(self) -> None:
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def queue(self) -> str:
        self.queues.append(unique("q"))
        return self.queues[-1]

    def exchange(self) -> str:
        self.exchanges.append(unique("x"))
        return self.exchanges[-1]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def connection(broker: RunningBroker) -> Iterator[BlockingConnection]:
    conn = open_connection(broker)
    try:
        yield conn
    finally:
        if conn.is_open:
            conn.close()


@pytest.fixture
def channel(connection: BlockingConnection) -> BlockingChannel:
    return connection.channel()


@pytest.fixture
def publisher(connection: BlockingConnection) -> BlockingChannel:
    """A channel in confirm mode: once basic_publish returns, the broker has enqueued the message,
    so a method on any other channel sees it."""
    confirming = connection.channel()
    confirming.confirm_delivery()
    return confirming


@pytest.fixture
def created(broker: RunningBroker) -> Iterator[Created]:
    names = Created()
    yield names
    if not names.queues and not names.exchanges:
        return
    conn = open_connection(broker)
    try:
        targets = [(BlockingChannel.queue_delete, name) for name in names.queues]
        targets += [(BlockingChannel.exchange_delete, name) for name in names.exchanges]
        for delete, name in targets:
            cleanup = conn.channel()
            # Already gone is fine: an auto-delete queue, or a test that deleted it itself.
            with contextlib.suppress(ChannelClosedByBroker):
                delete(cleanup, name)
            if cleanup.is_open:
                cleanup.close()
    finally:
        conn.close()


# --------------------------------------------------------------------------- connection


def test_server_properties_advertise_the_capabilities(
    broker: RunningBroker, connection: BlockingConnection
) -> None:
    """connection.start carries server-properties with a `capabilities` table.

    RabbitMQ, "Capabilities": the broker advertises the extensions it supports as booleans in
    server-properties.capabilities; clients such as pika switch on publisher confirms, basic.nack,
    consumer cancel notifications and connection.blocked only when advertised. The product is
    "BatonMQ" (checked only for the broker the tests start themselves).
    """
    # pika keeps the connection.start server-properties on the underlying connection only.
    server_properties = connection._impl.server_properties
    capabilities = server_properties["capabilities"]
    for capability in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
    ):
        assert capabilities.get(capability) is True, capability
    if broker.process is not None:
        assert server_properties["product"] == "BatonMQ"


def test_wrong_password_is_refused_with_access_refused(broker: RunningBroker) -> None:
    """A failed login is closed with connection.close 403 ACCESS_REFUSED, not a dropped socket.

    AMQP 0-9-1 reply code 403 access-refused: "The client attempted to work with a server entity to
    which it has no access due to security settings." RabbitMQ, "Authentication Failure
    Notifications": "If this capability [authentication_failure_close] is present then the broker
    will send a connection.close command to the client indicating ACCESS_REFUSED as the reason."
    pika reports it as ProbableAuthenticationError wrapping ConnectionClosedByBroker (403).
    """
    parameters = pika.URLParameters(broker.url)
    parameters.credentials = pika.PlainCredentials(broker.username, "not-the-password")
    with pytest.raises(ProbableAuthenticationError) as raised:
        pika.BlockingConnection(parameters)
    assert "ConnectionClosedByBroker: (403)" in str(raised.value)
    assert "ACCESS_REFUSED" in str(raised.value)


# --------------------------------------------------------------------------- exchanges

# (exchange type, (binding key, binding arguments), [(routing key, headers, routed?)])
ROUTING_CASES = [
    pytest.param(
        "direct",
        ("invoices", None),
        [("invoices", None, True), ("receipts", None, False), ("invoices.eu", None, False)],
        id="direct",
    ),
    pytest.param(
        "fanout",
        ("bound-key", None),
        [("bound-key", None, True), ("any.other.key", None, True)],
        id="fanout",
    ),
    pytest.param(
        "topic",
        ("stock.*.nyse", None),
        [
            ("stock.ibm.nyse", None, True),
            ("stock.ibm.nasdaq", None, False),
            ("stock.nyse", None, False),
            ("stock.ibm.x.nyse", None, False),
        ],
        id="topic",
    ),
    pytest.param(
        "headers",
        ("", {"x-match": "all", "format": "pdf", "type": "report"}),
        [
            ("", {"format": "pdf", "type": "report", "pages": 3}, True),
            ("", {"format": "pdf"}, False),
            ("", {"format": "zip", "type": "report"}, False),
        ],
        id="headers-all",
    ),
    pytest.param(
        "headers",
        ("", {"x-match": "any", "format": "pdf", "type": "report"}),
        [
            ("", {"format": "pdf", "type": "log"}, True),
            ("", {"format": "zip"}, False),
            ("", None, False),
        ],
        id="headers-any",
    ),
]


@pytest.mark.parametrize(("exchange_type", "binding", "messages"), ROUTING_CASES)
def test_each_exchange_type_routes_only_matching_messages(
    channel: BlockingChannel,
    created: Created,
    exchange_type: str,
    binding: tuple[str, dict[str, object] | None],
    messages: list[tuple[str, dict[str, object] | None, bool]],
) -> None:
    """Each standard exchange type routes to a bound queue exactly the messages it matches.

    AMQP 0-9-1 exchange class: "The server MUST implement these standard exchange types: fanout,
    direct" and "SHOULD implement ... topic, headers"; queue.bind: "If a message queue binds to a
    direct exchange using routing key K and a publisher sends the exchange a message with routing
    key R, then the message MUST be passed to the message queue if K = R." Topic `*` matches
    exactly one word; headers x-match=all needs every bound header, x-match=any one of them.
    """
    exchange = created.exchange()
    channel.exchange_declare(exchange, exchange_type)
    queue = server_named_queue(channel)
    binding_key, arguments = binding
    channel.queue_bind(queue, exchange, binding_key, arguments)

    for index, (routing_key, headers, _routed) in enumerate(messages):
        properties = BasicProperties(headers=headers)
        channel.basic_publish(exchange, routing_key, str(index).encode(), properties)

    expected = [str(index).encode() for index, (*_, routed) in enumerate(messages) if routed]
    assert drain(channel, queue) == expected


def test_passive_declare_of_missing_exchange_is_not_found(channel: BlockingChannel) -> None:
    """exchange.declare passive on a missing exchange closes the channel with 404.

    AMQP 0-9-1 exchange.declare passive, rule not-found: "If set, and the exchange does not
    already exist, the server MUST raise a channel exception with reply code 404 (not found)."
    """
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.exchange_declare(unique("missing"), passive=True)
    assert raised.value.reply_code == 404


def test_redeclaring_an_exchange_with_another_type_fails_precondition(
    connection: BlockingConnection, channel: BlockingChannel, created: Created
) -> None:
    """Redeclaring an exchange with a different type is a 406 channel error; the exchange stays.

    AMQP 0-9-1 exchange.declare passive, rule equivalent: "If not set and the exchange exists, the
    server MUST check that the existing exchange has the same values for type, durable, and
    arguments fields ... and MUST raise a channel exception if not." RabbitMQ raises it as
    406 PRECONDITION_FAILED ("inequivalent arg 'type'").
    """
    exchange = created.exchange()
    channel.exchange_declare(exchange, "direct")
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.exchange_declare(exchange, "fanout")
    assert raised.value.reply_code == 406
    connection.channel().exchange_declare(exchange, "direct", passive=True)


def test_declaring_a_reserved_amq_exchange_is_refused(channel: BlockingChannel) -> None:
    """A client may not create an exchange named "amq.…".

    AMQP 0-9-1 exchange.declare exchange, rule reserved (on failure access-refused): "Exchange
    names starting with "amq." are reserved for pre-declared and standardised exchanges. The
    client MAY declare an exchange starting with "amq." if the passive option is set, or the
    exchange already exists."
    """
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.exchange_declare(f"amq.{unique('reserved')}", "direct")
    assert raised.value.reply_code == 403


def test_predeclared_amq_exchanges_exist(channel: BlockingChannel) -> None:
    """amq.direct, amq.fanout, amq.topic and amq.headers exist in every virtual host.

    AMQP 0-9-1 exchange class, rule required-instances: "The server MUST, in each virtual host,
    pre-declare an exchange instance for each standard exchange type that it implements, where
    the name of the exchange instance, if defined, is "amq." followed by the exchange type name."
    """
    for exchange_type in ("direct", "fanout", "topic", "headers"):
        channel.exchange_declare(f"amq.{exchange_type}", exchange_type, passive=True)
        channel.exchange_declare(f"amq.{exchange_type}", exchange_type, durable=True)


def test_exchange_delete_if_unused_refuses_a_bound_exchange(
    connection: BlockingConnection, channel: BlockingChannel, created: Created
) -> None:
    """exchange.delete if-unused on an exchange with a queue binding is a 406 channel error.

    AMQP 0-9-1 exchange.delete if-unused, rule in-use (on failure precondition-failed): "The
    server MUST NOT delete an exchange that has bindings on it, if the if-unused field is true."
    """
    exchange = created.exchange()
    channel.exchange_declare(exchange, "fanout")
    channel.queue_bind(server_named_queue(channel), exchange)
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.exchange_delete(exchange, if_unused=True)
    assert raised.value.reply_code == 406
    connection.channel().exchange_declare(exchange, "fanout", passive=True)


def test_exchange_delete_removes_the_exchange(
    connection: BlockingConnection, channel: BlockingChannel, created: Created
) -> None:
    """exchange.delete removes an unused exchange; a passive declare then finds nothing (404).

    AMQP 0-9-1 exchange.delete: "This method deletes an exchange. When an exchange is deleted all
    queue bindings on the exchange are cancelled."
    """
    exchange = created.exchange()
    channel.exchange_declare(exchange, "topic")
    channel.exchange_delete(exchange, if_unused=True)
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.exchange_declare(exchange, passive=True)
    assert raised.value.reply_code == 404


def test_exchange_to_exchange_binding_routes_until_unbound(
    channel: BlockingChannel, created: Created
) -> None:
    """exchange.bind makes a source exchange route into a destination exchange; unbind stops it.

    RabbitMQ, "Exchange to Exchange Bindings": "The binding is semantically identical to
    exchange-to-queue bindings: unidirectional, binding keys and exchange types operate as
    normal, but both endpoints (the source and destination) of the binding are exchanges."
    """
    source, destination = created.exchange(), created.exchange()
    channel.exchange_declare(source, "direct")
    channel.exchange_declare(destination, "fanout")
    queue = server_named_queue(channel)
    channel.queue_bind(queue, destination)
    channel.exchange_bind(destination=destination, source=source, routing_key="orders")

    channel.basic_publish(source, "orders", b"through-the-binding")
    channel.basic_publish(source, "refunds", b"no-binding-for-this-key")
    channel.basic_publish(destination, "anything", b"straight-to-the-fanout")
    assert drain(channel, queue) == [b"through-the-binding", b"straight-to-the-fanout"]

    channel.exchange_unbind(destination=destination, source=source, routing_key="orders")
    channel.basic_publish(source, "orders", b"after-unbind")
    assert drain(channel, queue) == []


# --------------------------------------------------------------------------- queues


def test_server_named_queues_are_unique_and_generated(channel: BlockingChannel) -> None:
    """queue.declare with an empty name creates a queue with a fresh server-generated name.

    AMQP 0-9-1 queue.declare queue, rule default-name: "The queue name MAY be empty, in which case
    the server MUST create a new queue with a unique generated name and return this to the client
    in the Declare-Ok method." RabbitMQ prefixes such names with "amq.gen-".
    """
    first = channel.queue_declare("", exclusive=True).method
    second = channel.queue_declare("", exclusive=True).method
    assert first.queue.startswith("amq.gen-")
    assert second.queue.startswith("amq.gen-")
    assert first.queue != second.queue
    assert (first.message_count, first.consumer_count) == (0, 0)


def test_passive_declare_of_missing_queue_is_not_found(channel: BlockingChannel) -> None:
    """queue.declare passive on a missing queue closes the channel with 404.

    AMQP 0-9-1 queue.declare passive, rule passive (on failure not-found): "If the queue does not
    exist, the server treats this as a failure." Scenario: "the server must close the channel with
    the correct reply-code."
    """
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.queue_declare(unique("missing"), passive=True)
    assert raised.value.reply_code == 404


EXCLUSIVE_QUEUE_USES = [
    pytest.param(lambda ch, queue: ch.queue_declare(queue), id="declare"),
    pytest.param(lambda ch, queue: ch.queue_declare(queue, passive=True), id="passive-declare"),
    pytest.param(lambda ch, queue: ch.queue_bind(queue, "amq.fanout"), id="bind"),
    pytest.param(lambda ch, queue: ch.basic_consume(queue, lambda *_: None), id="consume"),
    pytest.param(lambda ch, queue: ch.basic_get(queue), id="get"),
    pytest.param(lambda ch, queue: ch.queue_purge(queue), id="purge"),
    pytest.param(lambda ch, queue: ch.queue_delete(queue), id="delete"),
]


@pytest.mark.parametrize("use", EXCLUSIVE_QUEUE_USES)
def test_exclusive_queue_is_locked_for_other_connections(
    broker: RunningBroker,
    channel: BlockingChannel,
    use: Callable[[BlockingChannel, str], object],
) -> None:
    """Another connection using an exclusive queue gets 405 RESOURCE_LOCKED.

    AMQP 0-9-1 queue.declare exclusive, rule exclusive (on failure resource-locked): "The client
    MAY NOT attempt to use a queue that was declared as exclusive by another still-open
    connection." Scenario: "A second client on a different connection attempts to declare, bind,
    consume, purge, delete, or declare a queue of the same name."
    """
    queue = unique("exclusive")
    channel.queue_declare(queue, exclusive=True)
    other = open_connection(broker)
    try:
        other_channel = other.channel()
        with pytest.raises(ChannelClosedByBroker) as raised:
            use(other_channel, queue)
        assert raised.value.reply_code == 405
    finally:
        other.close()


def test_exclusive_queue_accepts_messages_published_by_other_connections(
    broker: RunningBroker, channel: BlockingChannel
) -> None:
    """Exclusivity restricts access to the queue, not routing into it: others may publish to it.

    AMQP 0-9-1 queue.declare exclusive: "Exclusive queues may only be accessed by the current
    connection"; publishing goes to an exchange, which routes into the queue (RabbitMQ accepts
    it; the reply-queue pattern relies on it).
    """
    queue = server_named_queue(channel)
    other = open_connection(broker)
    try:
        other_channel = other.channel()
        other_channel.confirm_delivery()
        other_channel.basic_publish("", queue, b"reply")
    finally:
        other.close()
    assert drain(channel, queue) == [b"reply"]


def test_exclusive_queue_is_deleted_when_its_connection_closes(
    broker: RunningBroker, channel: BlockingChannel, created: Created
) -> None:
    """An exclusive queue goes with the connection that declared it.

    AMQP 0-9-1 queue.declare exclusive: "Exclusive queues may only be accessed by the current
    connection, and are deleted when that connection closes."
    """
    queue = created.queue()
    owner = open_connection(broker)
    owner.channel().queue_declare(queue, exclusive=True)
    owner.close()
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.queue_declare(queue, passive=True)
    assert raised.value.reply_code == 404


def test_auto_delete_queue_goes_after_its_last_consumer_cancels(
    connection: BlockingConnection, channel: BlockingChannel, created: Created
) -> None:
    """An auto-delete queue outlives a cancel while other consumers remain, and goes with the last.

    AMQP 0-9-1 queue.declare auto-delete: "If set, the queue is deleted when all consumers have
    finished using it. The last consumer can be cancelled either explicitly or because its channel
    is closed. If there was no consumer ever on the queue, it won't be deleted."
    """
    queue = created.queue()
    channel.queue_declare(queue, auto_delete=True)
    assert ready_count(connection, queue) == 0  # no consumer yet: it stays
    first = channel.basic_consume(queue, lambda *_: None)
    second = channel.basic_consume(queue, lambda *_: None)
    channel.basic_cancel(first)
    assert ready_count(connection, queue) == 0  # one consumer left: it stays
    channel.basic_cancel(second)
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.queue_declare(queue, passive=True)
    assert raised.value.reply_code == 404


def test_queue_bind_routes_and_unbind_stops_routing(channel: BlockingChannel) -> None:
    """queue.bind starts routing a key from an exchange into a queue, queue.unbind stops it.

    AMQP 0-9-1 queue.bind: "This method binds a queue to an exchange. Until a queue is bound it
    will not receive any messages."; queue.unbind: "This method unbinds a queue from an exchange."
    """
    queue = server_named_queue(channel)
    key = unique("key")
    channel.basic_publish("amq.direct", key, b"before-bind")
    channel.queue_bind(queue, "amq.direct", key)
    channel.queue_bind(queue, "amq.direct", key)  # rule duplicates: a repeated bind is no error
    channel.basic_publish("amq.direct", key, b"while-bound")
    channel.queue_unbind(queue, "amq.direct", key)
    channel.basic_publish("amq.direct", key, b"after-unbind")
    assert drain(channel, queue) == [b"while-bound"]


def test_purge_returns_the_count_and_keeps_unacked_messages(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """queue.purge removes the ready messages, reports how many, and leaves unacked ones alone.

    AMQP 0-9-1 queue.purge: "This method removes all messages from a queue which are not awaiting
    acknowledgment." Rule 02: "The server MUST NOT purge messages that have already been sent to a
    client but not yet acknowledged." purge-ok message-count: "Reports the number of messages
    purged."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2", b"3", b"4")
    held, _ = get(channel, queue)
    assert channel.queue_purge(queue).method.message_count == 3
    assert ready_count(connection, queue) == 0
    channel.basic_reject(held.delivery_tag, requeue=True)
    assert drain(channel, queue) == [b"1"]


def test_queue_delete_if_empty_refuses_a_queue_with_messages(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """queue.delete if-empty on a queue holding messages is a 406 channel error.

    AMQP 0-9-1 queue.delete if-empty, rule not-empty (on failure precondition-failed): "The
    server MUST NOT delete a queue that has messages on it, if the if-empty field is true."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"keep-me")
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.queue_delete(queue, if_empty=True)
    assert raised.value.reply_code == 406
    assert ready_count(connection, queue) == 1


def test_queue_delete_if_unused_refuses_a_queue_with_consumers(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """queue.delete if-unused on a queue with a consumer is a 406 channel error.

    AMQP 0-9-1 queue.delete if-unused, rule in-use (on failure precondition-failed): "The server
    MUST NOT delete a queue that has consumers on it, if the if-unused field is true."
    """
    queue = server_named_queue(channel)
    channel.basic_consume(queue, lambda *_: None)
    other_channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as raised:
        other_channel.queue_delete(queue, if_unused=True)
    assert raised.value.reply_code == 406
    assert ready_count(connection, queue) == 0  # still there


def test_queue_delete_returns_the_message_count(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """queue.delete-ok reports how many messages went with the queue.

    AMQP 0-9-1 queue.delete-ok message-count: "Reports the number of messages deleted."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2", b"3")
    assert channel.queue_delete(queue).method.message_count == 3
    with pytest.raises(ChannelClosedByBroker) as raised:
        connection.channel().queue_declare(queue, passive=True)
    assert raised.value.reply_code == 404


def test_queue_delete_cancels_its_consumers_with_basic_cancel(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """Deleting a queue sends basic.cancel to each of its consumers.

    AMQP 0-9-1 queue.delete: "all consumers on the queue are cancelled". RabbitMQ, "Consumer
    Cancel Notification": "the broker will send to the client a basic.cancel in the case of such
    unexpected consumer cancellations" (to clients presenting consumer_cancel_notify, as pika does).
    """
    queue = server_named_queue(channel)
    cancels: list[Basic.Cancel] = []
    channel.add_on_cancel_callback(lambda frame: cancels.append(frame.method))
    tag = channel.basic_consume(queue, lambda *_: None)
    connection.channel().queue_delete(queue)
    pump_until(connection, lambda: bool(cancels))
    assert [cancel.consumer_tag for cancel in cancels] == [tag]
    assert tag not in channel.consumer_tags


# --------------------------------------------------------------------------- publishing


def test_publish_to_the_default_exchange_routes_by_queue_name(channel: BlockingChannel) -> None:
    """A message published to "" with the queue's name as routing key arrives in that queue.

    AMQP 0-9-1 queue.declare, rule default-binding: "The server MUST create a default binding for
    a newly-declared queue to the default exchange, which is an exchange of type 'direct' and use
    the queue name as the routing key."
    """
    queue = server_named_queue(channel)
    channel.basic_publish("", queue, b"hello")
    method, body = get(channel, queue)
    assert (method.exchange, method.routing_key, body) == ("", queue, b"hello")
    assert method.redelivered is False


def test_mandatory_unroutable_message_is_returned_no_route(
    publisher: BlockingChannel,
) -> None:
    """A mandatory message no queue takes comes back with basic.return 312 NO_ROUTE.

    AMQP 0-9-1 basic.publish mandatory: "If this flag is set, the server will return an unroutable
    message with a Return method." RabbitMQ, "Publisher Confirms": "For unroutable messages, the
    broker will issue a confirm once the exchange verifies a message won't route to any queue
    ... If the message is also published as mandatory, the basic.return is sent to the client
    before basic.ack" (pika then raises UnroutableError).
    """
    routing_key = unique("nobody-binds-this")
    with pytest.raises(UnroutableError) as raised:
        publisher.basic_publish("amq.direct", routing_key, b"lost", mandatory=True)
    [returned] = raised.value.messages
    assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
    assert (returned.method.exchange, returned.method.routing_key) == ("amq.direct", routing_key)
    assert returned.body == b"lost"


def test_unroutable_messages_are_returned_only_when_mandatory(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """Without confirms, basic.return reaches the return callback; non-mandatory ones are dropped.

    AMQP 0-9-1 basic.publish mandatory: "If this flag is set, the server will return an unroutable
    message with a Return method. If this flag is zero, the server silently drops the message."
    """
    returned: list[tuple[Basic.Return, bytes]] = []
    channel.add_on_return_callback(
        lambda _ch, method, _props, body: returned.append((method, body))
    )
    routing_key = unique("nobody-binds-this")
    channel.basic_publish("amq.direct", routing_key, b"dropped", mandatory=False)
    channel.basic_publish("amq.direct", routing_key, b"returned", mandatory=True)
    # A return for the first publish would reach the client before the second one's.
    pump_until(connection, lambda: bool(returned))
    assert [(method.reply_code, body) for method, body in returned] == [(312, b"returned")]


def test_publish_to_a_missing_exchange_is_not_found(publisher: BlockingChannel) -> None:
    """Publishing to an exchange that does not exist closes the channel with 404.

    AMQP 0-9-1 basic.publish exchange, rule must-exist (on failure not-found): "The client MUST
    NOT attempt to publish a content to an exchange that does not exist."
    """
    with pytest.raises(ChannelClosedByBroker) as raised:
        publisher.basic_publish(unique("missing"), "key", b"nowhere")
    assert raised.value.reply_code == 404


def test_user_id_must_be_the_connection_user(
    broker: RunningBroker, publisher: BlockingChannel, channel: BlockingChannel
) -> None:
    """A user-id property naming someone else is a 406 channel error; one's own name passes.

    RabbitMQ, "Validated User-ID": "if this property is set by a publisher, its value must be
    equal to the name of the connection's user. If the user-id property is not set, the
    publisher's identity remains private and no validation will be performed."
    """
    queue = server_named_queue(channel)
    publisher.basic_publish("", queue, b"mine", BasicProperties(user_id=broker.username))
    forged = BasicProperties(user_id=f"not-{broker.username}")
    with pytest.raises(ChannelClosedByBroker) as raised:
        publisher.basic_publish("", queue, b"forged", forged)
    assert raised.value.reply_code == 406
    assert drain(channel, queue) == [b"mine"]


# --------------------------------------------------------------------------- get and consume


def test_basic_get_reports_the_remaining_count_then_get_empty(channel: BlockingChannel) -> None:
    """basic.get-ok carries the count of messages left; an empty queue answers get-empty.

    AMQP 0-9-1 basic.get-ok message-count, domain message-count: "This is the number of messages
    present in the queue, and committed if the channel on which they were published is
    transacted, that are not waiting acknowledgement."; basic.get-empty: "This method tells the
    client that the queue has no messages available for the client."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2", b"3")
    counts = []
    for expected_body in (b"1", b"2", b"3"):
        method, _properties, body = channel.basic_get(queue, auto_ack=True)
        assert body == expected_body
        counts.append(method.message_count)
    assert counts == [2, 1, 0]
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)


def test_basic_cancel_stops_delivery_to_that_consumer_only(
    connection: BlockingConnection, channel: BlockingChannel, publisher: BlockingChannel
) -> None:
    """After basic.cancel-ok a consumer gets nothing more; the queue's other consumer gets it all.

    AMQP 0-9-1 basic.cancel: "This method cancels a consumer. This does not affect already
    delivered messages, but it does mean the server will not send any more messages for that
    consumer." (pika names its consumers itself; test_kombu covers server-generated tags.)
    """
    queue = server_named_queue(channel)
    received: list[tuple[str, bytes]] = []
    on_message = lambda _ch, method, _props, body: received.append((method.consumer_tag, body))  # noqa: E731
    cancelled = channel.basic_consume(queue, on_message, auto_ack=True)
    remaining = channel.basic_consume(queue, on_message, auto_ack=True)
    publisher.basic_publish("", queue, b"1")
    publisher.basic_publish("", queue, b"2")
    pump_until(connection, lambda: len(received) == 2)
    assert {tag for tag, _ in received} == {cancelled, remaining}  # both were live

    channel.basic_cancel(cancelled)
    assert channel.consumer_tags == [remaining]
    for body in (b"3", b"4", b"5"):
        publisher.basic_publish("", queue, body)
    pump_until(connection, lambda: len(received) == 5)
    assert received[2:] == [(remaining, b"3"), (remaining, b"4"), (remaining, b"5")]

    channel.basic_cancel(remaining)
    publisher.basic_publish("", queue, b"nobody-consumes-this")
    assert ready_count(connection, queue) == 1
    connection.process_data_events(time_limit=0)
    assert len(received) == 5


@pytest.mark.parametrize(
    ("first_exclusive", "second_exclusive"),
    [
        pytest.param(True, False, id="exclusive-holder"),
        pytest.param(False, True, id="late-exclusive"),
    ],
)
def test_exclusive_consumer_excludes_every_other_consumer(
    connection: BlockingConnection,
    channel: BlockingChannel,
    first_exclusive: bool,
    second_exclusive: bool,
) -> None:
    """An exclusive consumer and any other consumer of the same queue cannot coexist: 403.

    AMQP 0-9-1 basic.consume exclusive: "Request exclusive consumer access, meaning only this
    consumer can access the queue." Rule 01 (on failure access-refused): "The client MAY NOT gain
    exclusive access to a queue that already has active consumers." RabbitMQ refuses a consumer
    on a queue with an exclusive consumer with 403 ACCESS_REFUSED as well.
    """
    queue = server_named_queue(channel)
    channel.basic_consume(queue, lambda *_: None, exclusive=first_exclusive)
    other_channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as raised:
        other_channel.basic_consume(queue, lambda *_: None, exclusive=second_exclusive)
    assert raised.value.reply_code == 403


def test_no_ack_consumer_messages_are_not_requeued(
    connection: BlockingConnection, channel: BlockingChannel, publisher: BlockingChannel
) -> None:
    """A no-ack delivery is settled when sent: closing the channel does not bring it back.

    AMQP 0-9-1 domain no-ack: "If this field is set the server does not expect acknowledgements
    for messages. That is, when a message is delivered to the client the server assumes the
    delivery will succeed and immediately dequeues it."
    """
    queue = server_named_queue(publisher)
    publisher.basic_publish("", queue, b"fire-and-forget")
    consuming = connection.channel()
    deliveries = consuming.consume(queue, auto_ack=True, inactivity_timeout=5)
    method, _properties, body = next(deliveries)
    assert (method is not None, body) == (True, b"fire-and-forget")
    consuming.close()
    publisher.basic_publish("", queue, b"marker")
    assert drain(channel, queue) == [b"marker"]


# --------------------------------------------------------------------------- ack, nack, reject


def test_reject_with_requeue_keeps_the_original_position(channel: BlockingChannel) -> None:
    """A requeued message goes back where it was: it comes again before later messages.

    AMQP 0-9-1 basic.reject requeue: "If requeue is true, the server will attempt to requeue the
    message." RabbitMQ, "Negative Acknowledgements": "When a message is requeued, it will be
    placed to its original position in its queue, if possible." Domain redelivered: "This
    indicates that the message has been previously delivered to this or another client."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2", b"3")
    first, _ = get(channel, queue)
    get(channel, queue)
    channel.basic_reject(first.delivery_tag, requeue=True)
    again, body = get(channel, queue)
    assert (body, again.redelivered) == (b"1", True)
    third, body = get(channel, queue)
    assert (body, third.redelivered) == (b"3", False)


def test_nack_multiple_with_requeue_returns_all_in_order(channel: BlockingChannel) -> None:
    """basic.nack multiple requeues every unacked message up to the tag, in queue order.

    RabbitMQ, "Negative Acknowledgements": "The broker will then reject all unacknowledged,
    delivered messages up to and including the message specified in the delivery_tag field of the
    basic.nack method."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2", b"3", b"4")
    tags = [get(channel, queue)[0].delivery_tag for _ in range(3)]
    channel.basic_nack(tags[-1], multiple=True, requeue=True)
    redelivered = [get(channel, queue) for _ in range(4)]
    assert [(body, method.redelivered) for method, body in redelivered] == [
        (b"1", True),
        (b"2", True),
        (b"3", True),
        (b"4", False),
    ]


def test_ack_multiple_acknowledges_up_to_and_including_the_tag(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """basic.ack multiple settles every unacked message up to the tag; the rest stay unacked.

    AMQP 0-9-1 basic.ack multiple: "If set to 1, the delivery tag is treated as "up to and
    including", so that the client can acknowledge multiple messages with a single method."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2", b"3")
    consuming = connection.channel()
    tags = [get(consuming, queue)[0].delivery_tag for _ in range(3)]
    consuming.basic_ack(tags[1], multiple=True)
    consuming.close()  # requeues what is still unacked: message 3
    wait_for_ready(connection, queue, 1)
    method, body = get(channel, queue)
    assert (body, method.redelivered) == (b"3", True)


def test_reject_and_nack_without_requeue_discard(
    connection: BlockingConnection, channel: BlockingChannel, publisher: BlockingChannel
) -> None:
    """basic.reject and basic.nack with requeue=false drop the messages (no dead-lettering set).

    AMQP 0-9-1 basic.reject requeue: "If requeue is false or the requeue attempt fails the
    messages are discarded or dead-lettered."
    """
    queue = server_named_queue(publisher)
    for body in (b"1", b"2", b"3"):
        publisher.basic_publish("", queue, body)
    consuming = connection.channel()
    tags = [get(consuming, queue)[0].delivery_tag for _ in range(3)]
    consuming.basic_reject(tags[0], requeue=False)
    consuming.basic_nack(tags[2], multiple=True, requeue=False)
    consuming.close()
    publisher.basic_publish("", queue, b"marker")
    assert drain(channel, queue) == [b"marker"]


def test_ack_of_an_unknown_delivery_tag_is_precondition_failed(channel: BlockingChannel) -> None:
    """Acknowledging a tag never delivered closes the channel with 406.

    AMQP 0-9-1 basic.ack multiple, rule exists (on failure precondition-failed): "The server MUST
    validate that a non-zero delivery-tag refers to a delivered message, and raise a channel
    exception if this is not the case."
    """
    queue = server_named_queue(channel)
    channel.basic_ack(delivery_tag=42)
    # basic.ack has no reply: the channel exception surfaces on the next synchronous method.
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.queue_declare(queue, passive=True)
    assert raised.value.reply_code == 406


def test_double_ack_is_precondition_failed(channel: BlockingChannel) -> None:
    """Acknowledging the same delivery twice closes the channel with 406.

    AMQP 0-9-1 basic.ack multiple, rule exists: "Specifically, a client MUST not acknowledge the
    same message more than once."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"once")
    method, _ = get(channel, queue)
    channel.basic_ack(method.delivery_tag)
    channel.basic_ack(method.delivery_tag)
    # basic.ack has no reply: the channel exception surfaces on the next synchronous method.
    with pytest.raises(ChannelClosedByBroker) as raised:
        channel.queue_declare(queue, passive=True)
    assert raised.value.reply_code == 406


def test_recover_with_requeue_redelivers_unacked_messages(channel: BlockingChannel) -> None:
    """basic.recover requeue=true puts the channel's unacked messages back, marked redelivered.

    AMQP 0-9-1 basic.recover: "This method asks the server to redeliver all unacknowledged
    messages on a specified channel." Rule 01: "The server MUST set the redelivered flag on all
    messages that are resent." requeue: "If this bit is 1, the server will attempt to requeue the
    message, potentially then delivering it to an alternative subscriber."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2")
    get(channel, queue)
    get(channel, queue)
    channel.basic_recover(requeue=True)
    recovered = [get(channel, queue) for _ in range(2)]
    assert [(body, method.redelivered) for method, body in recovered] == [
        (b"1", True),
        (b"2", True),
    ]


def test_unacked_messages_of_a_closed_channel_are_requeued(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """Closing a channel requeues its unacked deliveries, which then come back redelivered.

    AMQP 0-9-1 basic.consume: "Consumers last as long as the channel they were declared on";
    basic class rule 10 scenario: "Consume the messages but acknowledge only half of them.
    Disconnect and reconnect, and consume from the queue. Verify that the remaining messages are
    received." Domain redelivered, rule implementation: "The server SHOULD try to signal
    redelivered messages when it can."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2", b"3")
    consuming = connection.channel()
    first, _ = get(consuming, queue)
    get(consuming, queue)
    consuming.basic_ack(first.delivery_tag)
    consuming.close()
    wait_for_ready(connection, queue, 2)
    back = [get(channel, queue) for _ in range(2)]
    assert [(body, method.redelivered) for method, body in back] == [(b"2", True), (b"3", False)]


def test_unacked_messages_of_a_closed_connection_are_requeued(
    broker: RunningBroker,
    connection: BlockingConnection,
    channel: BlockingChannel,
    created: Created,
) -> None:
    """Closing a connection requeues the unacked deliveries of all its channels.

    AMQP 0-9-1 domain redelivered, rule implementation scenario: "Consume the message using
    explicit acknowledgements, but do not acknowledge the message. Close the connection,
    reconnect, and consume from the queue again. The message should arrive with the redelivered
    flag set."
    """
    queue = created.queue()
    channel.queue_declare(queue)
    publish(channel, queue, b"1", b"2")
    other = open_connection(broker)
    other_channel = other.channel()
    get(other_channel, queue)
    get(other_channel, queue)
    other.close()
    wait_for_ready(connection, queue, 2)
    back = [get(channel, queue) for _ in range(2)]
    assert [(body, method.redelivered) for method, body in back] == [(b"1", True), (b"2", True)]


# --------------------------------------------------------------------------- qos and dispatch


def test_prefetch_count_limits_each_consumer_separately(
    connection: BlockingConnection, channel: BlockingChannel, publisher: BlockingChannel
) -> None:
    """basic.qos prefetch-count 2 (global=false): each consumer holds at most 2 unacked messages.

    AMQP 0-9-1 basic.qos prefetch-count, rule 01: "The server may send less data in advance than
    allowed by the client's specified prefetch windows but it MUST NOT send more." RabbitMQ,
    "Consumer Prefetch": with global=false prefetch_count is "applied separately to each new
    consumer on the channel".
    """
    queue = server_named_queue(publisher)
    for index in range(5):
        publisher.basic_publish("", queue, str(index).encode())
    channel.basic_qos(prefetch_count=2)
    held: dict[str, list[int]] = defaultdict(list)
    on_message = lambda _ch, method, _props, _body: held[method.consumer_tag].append(  # noqa: E731
        method.delivery_tag
    )

    first = channel.basic_consume(queue, on_message)
    pump_until(connection, lambda: len(held[first]) == 2)
    assert ready_count(connection, queue) == 3

    second = channel.basic_consume(queue, on_message)
    pump_until(connection, lambda: len(held[second]) == 2)
    assert ready_count(connection, queue) == 1
    assert len(held[first]) == 2

    channel.basic_ack(held[first][0])
    pump_until(connection, lambda: len(held[first]) == 3)
    assert ready_count(connection, queue) == 0
    assert len(held[second]) == 2


def test_global_prefetch_count_is_shared_by_the_channel_consumers(
    connection: BlockingConnection, channel: BlockingChannel, publisher: BlockingChannel
) -> None:
    """basic.qos global=true: prefetch-count 2 caps all consumers of the channel together.

    RabbitMQ, "Consumer Prefetch": with global=true prefetch_count is "shared across all consumers
    on the channel" (RabbitMQ's reading of the AMQP 0-9-1 global flag: "By default the QoS
    settings apply to the current channel only. If this field is set, they are applied to the
    entire connection.").
    """
    queue = server_named_queue(publisher)
    for index in range(5):
        publisher.basic_publish("", queue, str(index).encode())
    channel.basic_qos(prefetch_count=2, global_qos=True)
    held: list[int] = []
    on_message = lambda _ch, method, _props, _body: held.append(method.delivery_tag)  # noqa: E731
    channel.basic_consume(queue, on_message)
    channel.basic_consume(queue, on_message)
    pump_until(connection, lambda: len(held) == 2)
    assert ready_count(connection, queue) == 3
    assert len(held) == 2

    channel.basic_ack(held[0])
    pump_until(connection, lambda: len(held) == 3)
    assert ready_count(connection, queue) == 2


def test_messages_are_dispatched_round_robin_over_two_consumers(
    connection: BlockingConnection, channel: BlockingChannel, publisher: BlockingChannel
) -> None:
    """Two consumers of one queue take turns: each gets every other message.

    RabbitMQ tutorial "Work Queues": "By default, RabbitMQ will send each message to the next
    consumer, in sequence. On average every consumer will get the same number of messages. This
    way of distributing messages is called round-robin."
    """
    queue = server_named_queue(publisher)
    received: dict[str, list[bytes]] = defaultdict(list)
    on_message = lambda _ch, method, _props, body: received[method.consumer_tag].append(body)  # noqa: E731
    channel.basic_consume(queue, on_message, auto_ack=True)
    channel.basic_consume(queue, on_message, auto_ack=True)
    for body in (b"1", b"2", b"3", b"4", b"5", b"6"):
        publisher.basic_publish("", queue, body)
    pump_until(connection, lambda: sum(map(len, received.values())) == 6)
    assert sorted(received.values()) == [[b"1", b"3", b"5"], [b"2", b"4", b"6"]]


# --------------------------------------------------------------------------- confirms and tx


def test_every_publish_on_a_confirm_channel_is_acked(
    connection: BlockingConnection, publisher: BlockingChannel
) -> None:
    """In confirm mode each published message is confirmed with basic.ack (none nacked).

    RabbitMQ, "Publisher Confirms": "The broker then confirms messages as it handles them by
    sending a basic.ack on the same channel. The delivery-tag field contains the sequence number
    of the confirmed message." pika's basic_publish returns only once the ack arrived and raises
    NackError on basic.nack.
    """
    queue = server_named_queue(publisher)
    for index in range(50):
        publisher.basic_publish("", queue, str(index).encode())
    assert ready_count(connection, queue) == 50


def test_tx_commit_publishes_and_rollback_discards(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """Messages published in a transaction appear at tx.commit and vanish at tx.rollback.

    AMQP 0-9-1 basic.publish: messages are "distributed to any active consumers when the
    transaction, if any, is committed"; tx.commit: "This method commits all message publications
    and acknowledgments performed in the current transaction."; tx.rollback: "This method abandons
    all message publications and acknowledgments performed in the current transaction."
    """
    queue = server_named_queue(channel)
    transacted = connection.channel()
    transacted.tx_select()
    publish(transacted, queue, b"1", b"2")
    assert ready_count(connection, queue) == 0
    transacted.tx_commit()
    wait_for_ready(connection, queue, 2)
    publish(transacted, queue, b"rolled-back")
    transacted.tx_rollback()
    transacted.tx_commit()  # a new transaction started at rollback; committing it adds nothing
    assert drain(channel, queue) == [b"1", b"2"]


def test_acks_in_a_transaction_take_effect_at_commit_only(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """An ack inside a transaction settles nothing until tx.commit; rollback abandons it.

    AMQP 0-9-1 tx class: "The Tx class allows publish and ack operations to be batched into atomic
    units of work."; tx.rollback: "This method abandons all message publications and
    acknowledgments performed in the current transaction ... Note that unacked messages will not
    be automatically redelivered by rollback."
    """
    queue = server_named_queue(channel)
    publish(channel, queue, b"1", b"2")

    transacted = connection.channel()
    transacted.tx_select()
    first, _ = get(transacted, queue)
    transacted.basic_ack(first.delivery_tag)
    transacted.tx_rollback()  # the ack is abandoned: message 1 is unacked again, so it can be
    transacted.basic_ack(first.delivery_tag)  # acked again without a 406
    transacted.tx_commit()
    second, _ = get(transacted, queue)
    transacted.basic_ack(second.delivery_tag)
    transacted.close()  # without commit: the ack of message 2 never took effect

    wait_for_ready(connection, queue, 1)
    method, body = get(channel, queue)
    assert (body, method.redelivered) == (b"2", True)


def test_channel_flow_active_is_acknowledged_and_deliveries_continue(
    connection: BlockingConnection, channel: BlockingChannel, publisher: BlockingChannel
) -> None:
    """channel.flow active=true is answered with flow-ok active=true and deliveries go on.

    AMQP 0-9-1 channel.flow, rule initial-state: "When a new channel is opened, it is active (flow
    is active)."; flow-ok active: "1 means the peer will start sending or continue to send content
    frames". (RabbitMQ 3.10 refuses active=false with 540 NOT_IMPLEMENTED, so pausing is not
    tested here.)
    """
    queue = server_named_queue(publisher)
    assert channel.flow(True) is True
    received: list[bytes] = []
    channel.basic_consume(queue, lambda _ch, _m, _p, body: received.append(body), auto_ack=True)
    publisher.basic_publish("", queue, b"flowing")
    pump_until(connection, lambda: received == [b"flowing"])


# --------------------------------------------------------------------------- content


def test_all_basic_properties_and_header_field_types_round_trip(
    broker: RunningBroker, channel: BlockingChannel
) -> None:
    """Every basic property and every field-table value type pika can encode comes back as sent.

    AMQP 0-9-1 basic class properties: content-type, content-encoding, headers, delivery-mode,
    priority, correlation-id, reply-to, expiration, message-id, timestamp, type, user-id, app-id
    and the reserved cluster-id ("reserved, must be empty"); the broker passes them through
    unchanged. user-id is the connection's user (RabbitMQ, "Validated User-ID"); the expiration
    is long enough that nothing expires. pika 1.4 cannot encode floats
    (UnsupportedAMQPFieldException) and decodes doubles as ints, so test_aio_pika covers floats.
    """
    headers = {
        "table": {"inner": {"deep": 1}, "text": "nested"},
        "array": [1, "two", [3], {"four": b"4"}, None],
        "bytes": b"\x00\xff raw",
        "int": 42,
        "negative": -7,
        "long": 2**40,
        "true": True,
        "false": False,
        "decimal": decimal.Decimal("3.14"),
        "datetime": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "none": None,
        "text": "héllo wörld",
    }
    sent = BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers=headers,
        delivery_mode=2,
        priority=5,
        correlation_id="correlation-1",
        reply_to="reply.queue",
        expiration="600000",
        message_id="message-1",
        timestamp=1_700_000_000,
        type="order.created",
        user_id=broker.username,
        app_id="batonmq-tests",
    )
    queue = server_named_queue(channel)
    channel.basic_publish("", queue, b'{"id": 1}', sent)
    _method, received, body = channel.basic_get(queue, auto_ack=True)
    assert body == b'{"id": 1}'
    assert received.headers == headers
    for name in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
        "cluster_id",
    ):
        assert getattr(received, name) == getattr(sent, name), name


def test_empty_body_round_trips(channel: BlockingChannel) -> None:
    """A message with an empty body arrives with an empty body and its properties.

    AMQP 0-9-1 content framing (section 4.2.6): content is one content header frame followed by
    zero or more body frames; a body size of 0 means no body frame follows.
    """
    queue = server_named_queue(channel)
    channel.basic_publish("", queue, b"", BasicProperties(message_id="empty"))
    _method, properties, body = channel.basic_get(queue, auto_ack=True)
    assert (body, properties.message_id) == (b"", "empty")


def test_body_larger_than_frame_max_arrives_intact(
    connection: BlockingConnection, channel: BlockingChannel
) -> None:
    """A 1 MiB body, split over many body frames both ways, arrives byte for byte.

    AMQP 0-9-1 content framing (section 4.2.6): a body larger than one frame is carried by as
    many body frames as needed, none larger than the frame-max negotiated in connection.tune.
    """
    body = os.urandom(1024 * 1024 + 7)
    assert len(body) > 4 * connection._impl.params.frame_max
    queue = server_named_queue(channel)
    channel.basic_publish("", queue, body)
    _method, _properties, received = channel.basic_get(queue, auto_ack=True)
    assert received == body
