"""Declaring, binding, publishing, getting and consuming through a `Session`, in memory: routing,
round-robin between consumers, and prefetch."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from tests.memclient import LOOPBACK_PEER, MemClient, bodies, connect

Basic = commands.Basic
Queue = commands.Queue


def ack(client: MemClient, channel: int, tag: int, multiple: bool = False) -> None:
    client.send(channel, Basic.Ack(delivery_tag=tag, multiple=multiple))


def publish_many(client: MemClient, channel: int, queue: str, count: int) -> None:
    for number in range(count):
        client.publish(channel, f"m{number}".encode(), routing_key=queue)


def test_declare_bind_publish_get_round_trip():
    """queue.bind, routing-key, rule "direct-exchange-key-matching": a message published to a
    direct exchange with routing key R goes to the queue bound with K = R. basic.get-ok carries
    the message as published: exchange, routing key, properties and body unchanged (spec
    3.1.1: "The server MUST NOT modify message content bodies")."""
    client, _session = connect(Broker())
    declare_ok = client.call(1, Queue.Declare(queue="orders"), Queue.DeclareOk)
    assert (declare_ok.queue, declare_ok.message_count, declare_ok.consumer_count) == (
        "orders",
        0,
        0,
    )
    client.call(
        1, Queue.Bind(queue="orders", exchange="amq.direct", routing_key="new"), Queue.BindOk
    )
    properties = Basic.Properties(
        content_type="application/json", delivery_mode=2, headers={"attempt": 1}, app_id="shop"
    )
    client.publish(1, b'{"id": 7}', exchange="amq.direct", routing_key="new", properties=properties)
    client.publish(1, b"unrouted", exchange="amq.direct", routing_key="old")
    client.expect_nothing()
    got = client.get(1, "orders")
    assert got is not None
    get_ok = got.method
    assert isinstance(get_ok, Basic.GetOk)
    assert (get_ok.exchange, get_ok.routing_key, get_ok.redelivered) == ("amq.direct", "new", False)
    assert get_ok.delivery_tag == 1
    assert get_ok.message_count == 0, "message-count is what remains in the queue"
    assert got.body == b'{"id": 7}'
    assert got.properties == properties
    assert client.get(1, "orders") is None


def test_the_default_exchange_routes_by_queue_name():
    """Spec 3.1.3.1: "message queues MUST BE automatically bound to the nameless exchange using
    the message queue's name as routing key"."""
    client, _session = connect(Broker())
    client.declare_queue(1, "a")
    client.declare_queue(1, "b")
    client.publish(1, b"to-b", routing_key="b")
    assert client.get(1, "a") is None
    got = client.get(1, "b")
    assert got is not None
    assert got.body == b"to-b"


def test_get_ok_message_count_is_the_number_remaining():
    """Domain message-count: "The number of messages in the queue ... that are not waiting
    acknowledgement"; get-ok reports what remains after the message it carries."""
    client, _session = connect(Broker())
    client.declare_queue(1, "q")
    publish_many(client, 1, "q", 3)
    counts = []
    for _ in range(3):
        got = client.get(1, "q", no_ack=True)
        assert got is not None
        assert isinstance(got.method, Basic.GetOk)
        counts.append(got.method.message_count)
    assert counts == [2, 1, 0]


def test_publish_to_a_missing_exchange_closes_the_channel_only():
    """basic.publish, exchange, rule "must-exist": "The client MUST NOT attempt to publish a
    content to an exchange that does not exist" - 404, a channel error."""
    client, session = connect(Broker(), channels=(1, 2))
    client.publish(1, b"x", exchange="nowhere", routing_key="k")
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert (close.class_id, close.method_id) == (60, 40)
    client.send(1, commands.Channel.CloseOk())
    client.declare_queue(2, "still-works")
    assert session.connection.is_open


def test_a_large_body_is_delivered_split_to_the_negotiated_frame_max():
    """Spec 4.2.3: "A peer MUST NOT send frames larger than the agreed-upon size"; this client
    tunes frame-max down to 4096, so 10240 octets go in 3 body frames."""
    client = MemClient(Session(Broker(), LOOPBACK_PEER, lambda: None))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    client.declare_queue(1, "big")
    body = bytes(range(256)) * 40
    client.publish(1, body, routing_key="big")
    got = client.get(1, "big")
    assert got is not None
    assert got.body == body
    assert got.body_frames == 3


# Consumers ---------------------------------------------------------------------------------------


def test_round_robin_over_two_consumers_on_two_sessions():
    """AMQP 0-9-1 basic class: with several consumers on a queue the server distributes
    messages among them; classic queues go round-robin."""
    broker = Broker()
    alice, _ = connect(broker)
    bob, _ = connect(broker)
    alice.declare_queue(1, "work")
    alice.consume(1, "work", "alice")
    bob.consume(1, "work", "bob")
    publish_many(alice, 1, "work", 6)
    to_alice, to_bob = alice.deliveries(1), bob.deliveries(1)
    assert bodies(to_alice) == [b"m0", b"m2", b"m4"]
    assert bodies(to_bob) == [b"m1", b"m3", b"m5"]
    assert {d.method.consumer_tag for d in to_alice} == {"alice"}
    assert [d.method.delivery_tag for d in to_bob] == [1, 2, 3]


def test_consume_delivers_what_was_already_queued():
    """basic.consume "asks the server to start a consumer ... for messages from a specific queue",
    the messages already there included; a server-named consumer gets an amq.ctag- tag as in
    RabbitMQ."""
    client, _session = connect(Broker())
    client.declare_queue(1, "q")
    publish_many(client, 1, "q", 2)
    tag = client.consume(1, "q")
    assert tag.startswith("amq.ctag-")
    delivered = client.deliveries(1)
    assert bodies(delivered) == [b"m0", b"m1"]
    assert [d.method.redelivered for d in delivered] == [False, False]
    assert [d.method.routing_key for d in delivered] == ["q", "q"]


def test_a_consumer_with_prefetch_2_gets_exactly_2_until_it_acks():
    """basic.qos, prefetch-count, rule: the server "MUST NOT send more" than the prefetch window
    in advance of acknowledgements."""
    client, _session = connect(Broker())
    client.declare_queue(1, "q")
    client.qos(1, 2)
    client.consume(1, "q")
    publish_many(client, 1, "q", 5)
    assert bodies(client.deliveries(1)) == [b"m0", b"m1"]
    client.expect_nothing()
    ack(client, 1, 1)
    assert bodies(client.deliveries(1)) == [b"m2"]
    ack(client, 1, 3, multiple=True)
    assert bodies(client.deliveries(1)) == [b"m3", b"m4"]


def test_per_consumer_prefetch_applies_to_consumers_created_after_it():
    """RabbitMQ's per-consumer QoS: basic.qos global=false limits each new consumer."""
    client, _session = connect(Broker())
    client.declare_queue(1, "a")
    client.declare_queue(1, "b")
    client.consume(1, "a", "unlimited")
    client.qos(1, 1)
    client.consume(1, "b", "limited")
    publish_many(client, 1, "a", 3)
    publish_many(client, 1, "b", 3)
    delivered = client.deliveries(1)
    assert [(d.method.consumer_tag, d.body) for d in delivered] == [
        ("unlimited", b"m0"),
        ("unlimited", b"m1"),
        ("unlimited", b"m2"),
        ("limited", b"m0"),
    ]


def test_global_qos_is_shared_by_the_channels_consumers():
    """basic.qos global=true (RabbitMQ): one prefetch window shared by all consumers of the
    channel."""
    client, _session = connect(Broker())
    client.declare_queue(1, "a")
    client.declare_queue(1, "b")
    client.qos(1, 3, global_=True)
    client.consume(1, "a", "ca")
    client.consume(1, "b", "cb")
    publish_many(client, 1, "a", 3)
    publish_many(client, 1, "b", 3)
    first = client.deliveries(1)
    assert len(first) == 3
    client.expect_nothing()
    ack(client, 1, first[0].method.delivery_tag)
    assert len(client.deliveries(1)) == 1
    ack(client, 1, 0, multiple=True)
    assert len(client.deliveries(1)) == 2
    client.expect_nothing()


def test_prefetch_does_not_limit_no_ack_consumers():
    """RabbitMQ: prefetch applies to deliveries that await acknowledgement only."""
    client, _session = connect(Broker())
    client.declare_queue(1, "q")
    client.qos(1, 1)
    client.consume(1, "q", no_ack=True)
    publish_many(client, 1, "q", 4)
    assert len(client.deliveries(1)) == 4


def test_basic_cancel_stops_deliveries():
    """basic.cancel: "This method cancels a consumer. This does not affect already delivered
    messages, but it does mean the server will not send any more messages for that consumer"."""
    client, _session = connect(Broker())
    client.declare_queue(1, "q")
    tag = client.consume(1, "q", "c1")
    cancel_ok = client.call(1, Basic.Cancel(consumer_tag=tag), Basic.CancelOk)
    assert cancel_ok.consumer_tag == "c1"
    publish_many(client, 1, "q", 1)
    client.expect_nothing()
    assert client.get(1, "q") is not None


def test_reusing_a_consumer_tag_on_a_channel_is_530():
    """basic.consume, consumer-tag, rule 01: "The client MUST NOT specify a tag that refers to
    an existing consumer" - RabbitMQ: 530 NOT_ALLOWED, a connection error."""
    client, _session = connect(Broker())
    client.declare_queue(1, "q")
    client.consume(1, "q", "dup")
    client.send(1, Basic.Consume(queue="q", consumer_tag="dup"))
    close = client.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED


def test_consume_from_a_missing_queue_is_404():
    """basic.consume, queue: the queue must exist; 404 NOT_FOUND naming basic.consume (class 60,
    method 20)."""
    client, _session = connect(Broker())
    client.send(1, Basic.Consume(queue="missing"))
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert (close.class_id, close.method_id) == (60, 20)
