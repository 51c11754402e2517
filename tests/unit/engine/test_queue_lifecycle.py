"""Queue lifetimes through `Session`s: exclusive queues, auto-delete queues, and queue.delete
with consumers on it."""

from __future__ import annotations

import pytest
from pamqp import base, commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from tests.memclient import MemClient, connect

Basic = commands.Basic
Queue = commands.Queue

CANCEL_NOTIFY = {"consumer_cancel_notify": True}


def exists(client: MemClient, channel: int, name: str) -> bool:
    """queue.declare passive: declare-ok if the queue exists, else channel.close 404 (the
    channel is then reopened)."""
    client.send(channel, Queue.Declare(queue=name, passive=True))
    received = client.receive()
    assert len(received) == 1
    reply = received[0].method
    if isinstance(reply, Queue.DeclareOk):
        return True
    assert isinstance(reply, commands.Channel.Close)
    assert reply.reply_code == ReplyCode.NOT_FOUND
    client.send(channel, commands.Channel.CloseOk())
    client.open_channel(channel)
    return False


# queue.delete and consumers ----------------------------------------------------------------------


def test_queue_delete_cancels_consumers_that_understand_basic_cancel():
    """RabbitMQ's consumer_cancel_notify: when a queue is deleted, a client that announced the
    capability gets basic.cancel for each of its consumers on it; others get nothing."""
    broker = Broker()
    owner, _ = connect(broker)
    notified, _ = connect(broker, capabilities=CANCEL_NOTIFY)
    silent, _ = connect(broker)
    owner.declare_queue(1, "q")
    owner.publish(1, b"m0", routing_key="q")
    owner.publish(1, b"m1", routing_key="q")
    notified.consume(1, "q", "n1")
    assert len(notified.deliveries(1)) == 2
    silent.consume(1, "q", "s1")
    delete_ok = owner.call(1, Queue.Delete(queue="q"), Queue.DeleteOk)
    assert delete_ok.message_count == 0
    cancel = notified.expect(Basic.Cancel, channel=1)
    assert cancel.consumer_tag == "n1"
    notified.expect_nothing()
    silent.expect_nothing()
    assert "q" not in broker.vhosts["/"].queues


def test_a_cancelled_consumer_gets_nothing_from_a_new_queue_of_the_same_name():
    """A consumer cancelled by queue.delete is gone for good: a new queue of the same name does not
    revive it."""
    broker = Broker()
    owner, _ = connect(broker)
    consumer, _ = connect(broker, capabilities=CANCEL_NOTIFY)
    owner.declare_queue(1, "q")
    consumer.consume(1, "q", "c")
    owner.call(1, Queue.Delete(queue="q"), Queue.DeleteOk)
    consumer.expect(Basic.Cancel, channel=1)
    owner.declare_queue(1, "q")
    owner.publish(1, b"m0", routing_key="q")
    consumer.expect_nothing()
    assert owner.get(1, "q") is not None


def test_queue_delete_reports_the_ready_messages_it_dropped():
    """queue.delete-ok, message-count: "Reports the number of messages deleted"."""
    client, _ = connect(Broker())
    client.declare_queue(1, "q")
    for body in (b"a", b"b", b"c"):
        client.publish(1, body, routing_key="q")
    assert client.call(1, Queue.Delete(queue="q"), Queue.DeleteOk).message_count == 3


def test_queue_delete_if_unused_refuses_a_queue_with_consumers():
    """queue.delete, if-unused, rule "in-use": "The server MUST NOT delete a queue that has
    consumers on it, if the if-unused field is true" - RabbitMQ: 406."""
    client, _ = connect(Broker(), channels=(1, 2))
    client.declare_queue(1, "q")
    client.consume(1, "q")
    client.send(2, Queue.Delete(queue="q", if_unused=True))
    close = client.expect(commands.Channel.Close, channel=2)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED


def test_queue_delete_if_empty_refuses_a_queue_with_messages():
    """queue.delete, if-empty, rule "not-empty": "The server MUST NOT delete a queue that has
    messages on it, if the if-empty field is true"."""
    client, _ = connect(Broker())
    client.declare_queue(1, "q")
    client.publish(1, b"x", routing_key="q")
    client.send(1, Queue.Delete(queue="q", if_empty=True))
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED


# Exclusive queues --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method",
    [
        Queue.Declare(queue="mine"),
        Queue.Declare(queue="mine", passive=True),
        Queue.Declare(queue="mine", exclusive=True),
        Basic.Consume(queue="mine"),
        Basic.Get(queue="mine"),
        Queue.Purge(queue="mine"),
        Queue.Delete(queue="mine"),
        Queue.Bind(queue="mine", exchange="amq.fanout"),
    ],
    ids=lambda method: f"{method.name}{'-passive' if getattr(method, 'passive', False) else ''}",
)
def test_another_connections_exclusive_queue_is_405(method: base.Frame):
    """queue.declare, exclusive: "Exclusive queues may only be accessed by the current
    connection"; RabbitMQ refuses others with 405 RESOURCE_LOCKED."""
    broker = Broker()
    owner, _ = connect(broker)
    other, _ = connect(broker)
    owner.declare_queue(1, "mine", exclusive=True)
    other.send(1, method)
    close = other.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.RESOURCE_LOCKED
    assert "mine" in broker.vhosts["/"].queues


def test_the_owner_uses_its_exclusive_queue_freely():
    """queue.declare, exclusive: the declaring connection may use the queue on any of its channels.
    queue.declare, exclusive: the declaring connection may use the queue on any of its channels."""
    client, _ = connect(Broker(), channels=(1, 2))
    client.declare_queue(1, "mine", exclusive=True)
    client.publish(2, b"x", routing_key="mine")
    assert client.get(2, "mine") is not None
    client.consume(2, "mine")


def test_an_exclusive_queue_goes_with_its_connection():
    """queue.declare, exclusive: exclusive queues are "deleted when the connection closes"."""
    broker = Broker()
    owner, _ = connect(broker)
    other, _ = connect(broker)
    owner.declare_queue(1, "mine", exclusive=True)
    owner.send(0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    owner.expect(commands.Connection.CloseOk)
    assert "mine" not in broker.vhosts["/"].queues
    other.declare_queue(1, "mine", exclusive=True)


def test_a_server_named_queue_gets_an_amq_gen_name():
    """queue.declare, queue, rule "default-name": "The queue name MAY be empty, in which case
    the server MUST create a new queue with a unique generated name and return this to the
    client in the Declare-Ok method"."""
    client, _ = connect(Broker())
    first = client.declare_queue(1, "", exclusive=True)
    second = client.declare_queue(1, "", exclusive=True)
    assert first.startswith("amq.gen-")
    assert first != second


def test_declaring_an_amq_queue_is_403():
    """queue.declare, queue, rule "reserved": "Queue names starting with "amq." are reserved for
    pre-declared and standardised queues" - RabbitMQ: 403 ACCESS_REFUSED."""
    client, _ = connect(Broker())
    client.send(1, Queue.Declare(queue="amq.mine"))
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED


# Auto-delete queues ------------------------------------------------------------------------------


def test_an_auto_delete_queue_goes_with_its_last_consumer():
    """queue.declare, auto-delete: "If set, the queue is deleted when all consumers have
    finished using it"."""
    client, _ = connect(Broker(), channels=(1, 2))
    client.declare_queue(1, "temp", auto_delete=True)
    client.consume(1, "temp", "a")
    client.consume(1, "temp", "b")
    client.call(1, Basic.Cancel(consumer_tag="a"), Basic.CancelOk)
    assert exists(client, 2, "temp")
    client.call(1, Basic.Cancel(consumer_tag="b"), Basic.CancelOk)
    assert not exists(client, 2, "temp")


def test_an_auto_delete_queue_goes_when_its_last_consumers_channel_closes():
    """queue.declare, auto-delete: a closed channel ends its consumers, so the queue goes with the
    last one."""
    client, _ = connect(Broker(), channels=(1, 2))
    client.declare_queue(1, "temp", auto_delete=True)
    client.consume(1, "temp")
    client.send(1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(commands.Channel.CloseOk, channel=1)
    assert not exists(client, 2, "temp")


def test_an_auto_delete_queue_that_never_had_a_consumer_stays():
    """RabbitMQ: an auto-delete queue is deleted only once it has had at least one consumer."""
    client, _ = connect(Broker())
    client.declare_queue(1, "temp", auto_delete=True)
    client.publish(1, b"x", routing_key="temp")
    assert exists(client, 1, "temp")
