"""nowait: the method takes effect and the server sends no reply (AMQP 0-9-1, domain no-wait:
"If set, the server will not respond to the method. The client should not wait for a reply
method. If the server could not complete the method it will raise a channel or connection
exception")."""

from __future__ import annotations

import pytest
from pamqp import base, commands

from batonmq.engine.broker import Broker
from batonmq.engine.vhost import VirtualHost
from tests.memclient import connect, describe

Basic, Exchange, Queue = commands.Basic, commands.Exchange, commands.Queue


def exchange_declared(vhost: VirtualHost) -> bool:
    return "x" in vhost.exchanges


def queue_declared(vhost: VirtualHost) -> bool:
    return "q" in vhost.queues


def bound(vhost: VirtualHost) -> bool:
    return len(vhost.exchanges["amq.direct"].router) == 1


def consuming(vhost: VirtualHost) -> bool:
    return vhost.queues["q"].consumer_count == 1


@pytest.mark.parametrize(
    ("method", "took_effect"),
    [
        (Exchange.Declare(exchange="x", exchange_type="fanout", nowait=True), exchange_declared),
        (Queue.Declare(queue="q", nowait=True), queue_declared),
        (Queue.Bind(queue="q", exchange="amq.direct", routing_key="k", nowait=True), bound),
        (Basic.Consume(queue="q", consumer_tag="mine", nowait=True), consuming),
    ],
    ids=lambda value: value.name if isinstance(value, base.Frame) else "",
)
def test_a_nowait_method_takes_effect_without_a_reply(method, took_effect):
    broker = Broker()
    client, _session = connect(broker)
    if not isinstance(method, Exchange.Declare | Queue.Declare):
        client.declare_queue(1, "q")
    client.send(1, method)
    client.send(1, Basic.Qos(prefetch_count=5))
    assert describe(client.receive()) == ["1:Basic.QosOk"]
    assert took_effect(broker.vhosts["/"])


@pytest.mark.parametrize(
    ("method", "gone"),
    [
        (
            Basic.Cancel(consumer_tag="mine", nowait=True),
            lambda v: v.queues["q"].consumer_count == 0,
        ),
        (Queue.Purge(queue="q", nowait=True), lambda v: v.queues["q"].message_count == 0),
        (Queue.Delete(queue="q", nowait=True), lambda v: "q" not in v.queues),
        (Exchange.Delete(exchange="x", nowait=True), lambda v: "x" not in v.exchanges),
    ],
    ids=lambda value: value.name if isinstance(value, base.Frame) else "",
)
def test_a_nowait_removal_takes_effect_without_a_reply(method, gone):
    broker = Broker()
    client, _session = connect(broker, channels=(1, 2))
    client.declare_queue(1, "q")
    client.call(1, Exchange.Declare(exchange="x", exchange_type="fanout"), Exchange.DeclareOk)
    client.qos(2, 1)
    client.consume(2, "q", tag="mine")
    client.publish(1, b"delivered", routing_key="q")
    client.publish(1, b"ready", routing_key="q")
    client.receive()  # the delivery to "mine"
    assert broker.vhosts["/"].queues["q"].message_count == 1
    client.send(2, method)
    client.send(1, Basic.Qos(prefetch_count=5))
    assert describe(client.receive()) == ["1:Basic.QosOk"]
    assert gone(broker.vhosts["/"])
