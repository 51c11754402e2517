"""Connections and channels get stable ids and names, and the engine counts what passes through
it: each connection's, channel's and queue's counters, declared once in the statistics registry
(Qpid's @ManagedStatistic; RabbitMQ's management names: recv_oct, publish, deliver, get, ack,
confirm, redeliver), and the broker's totals across channels that came and went."""

from __future__ import annotations

from pamqp import commands

from batonmq.engine.broker import Broker
from batonmq.engine.counters import message_totals
from batonmq.engine.session import Session
from batonmq.stats import REGISTRY, Scope
from tests.memclient import LOOPBACK_PEER, MemClient, connect


def test_connections_and_channels_have_ids_and_rabbitmqs_names():
    broker = Broker()
    first = Session(broker, ("127.0.0.7", 41000), lambda: None, local=("127.0.0.1", 5672))
    second = Session(broker, LOOPBACK_PEER, lambda: None)
    assert first.name == "127.0.0.7:41000 -> 127.0.0.1:5672"
    assert second.id == first.id + 1
    client = MemClient(first)
    client.handshake(capabilities={"publisher_confirms": True})
    client.open_channel(3)
    assert first.channels[3].name == "127.0.0.7:41000 -> 127.0.0.1:5672 (3)"
    capabilities = first.client_properties["capabilities"]
    assert isinstance(capabilities, dict) and capabilities["publisher_confirms"] is True


def test_messages_are_counted_per_channel_and_queue_and_in_the_broker_totals():
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "work")
    client.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    for number in range(3):
        client.publish(1, f"m{number}".encode(), routing_key="work")
    client.expect(commands.Basic.Ack, 1)
    client.consume(1, "work", "c")
    deliveries = client.deliveries(1)
    client.send(1, commands.Basic.Ack(deliveries[0].method.delivery_tag))
    client.send(1, commands.Basic.Reject(deliveries[1].method.delivery_tag, requeue=True))

    counters = REGISTRY.scope(Scope.CHANNEL).read(session.channels[1])
    assert counters["publish"] == 3
    assert counters["confirm"] == 3
    assert counters["deliver"] == 4  # three, and the requeued one again
    assert counters["redeliver"] == 1
    assert counters["ack"] == 1
    assert counters["messages_unacked"] == 2
    queue = REGISTRY.scope(Scope.QUEUE).read(session.vhost.queues["work"])
    assert queue == {
        "publish": 3,
        "deliver": 4,
        "deliver_no_ack": 0,
        "get": 0,
        "get_no_ack": 0,
        "ack": 1,
        "redeliver": 1,
        "messages_ready": 0,
        "consumers": 1,
        "memory": 0,  # both messages are out with the consumer, not ready in the queue
        "messages_unacked": 2,
    }
    connection = REGISTRY.scope(Scope.CONNECTION).read(session)
    assert connection["recv_oct"] > 0 and connection["send_oct"] > 0
    assert connection["channels"] == 1

    client.send(1, commands.Channel.Close(200, "bye", 0, 0))
    assert broker.counters.channels_closed == 1
    totals = message_totals(broker.closed_channels, [])
    assert (totals.publish, totals.deliver, totals.ack) == (3, 4, 1)
    assert REGISTRY.scope(Scope.BROKER).read(broker)["connections"] == 1
    session.teardown()
    assert REGISTRY.scope(Scope.BROKER).read(broker)["connections_closed"] == 1


def test_every_statistic_has_a_unit_help_text_and_a_unique_exported_name():
    declared = list(REGISTRY.statistics())
    names = [statistic.exported_name for statistic in declared]
    assert len(names) == len(set(names))
    assert {statistic.scope for statistic in declared} == set(Scope)
    assert all(statistic.unit and statistic.help for statistic in declared)


def test_a_queue_counts_its_deliveries_not_yet_settled():
    """RabbitMQ's queue messages_unacknowledged (and rabbitmq_queue_messages_unacked): what is
    delivered or fetched and not yet settled; no-ack deliveries are never counted, a
    redelivery to the same consumer (basic.recover requeue=false) is still one, and whatever
    ends the channel puts the rest back."""
    broker = Broker()
    client, _session = connect(broker, channels=(1, 2))
    client.declare_queue(1, "work")
    for number in range(5):
        client.publish(1, f"m{number}".encode(), routing_key="work")
    queue = broker.vhosts["/"].queues["work"]
    fetched = client.get(1, "work")
    assert fetched is not None and queue.unacked == 1
    assert client.get(2, "work", no_ack=True) is not None
    client.consume(1, "work", "c")
    deliveries = client.deliveries(1)
    assert len(deliveries) == 3 and queue.unacked == 4
    last = deliveries[-1].method
    client.send(1, commands.Basic.Ack(delivery_tag=last.delivery_tag, multiple=False))
    client.send(1, commands.Basic.Recover(requeue=False))
    client.receive()
    assert queue.unacked == 3
    readings = REGISTRY.scope(Scope.QUEUE).read(queue)
    assert readings["messages_unacked"] == 3
    client.call(1, commands.Channel.Close(200, "done", 0, 0), commands.Channel.CloseOk)
    assert queue.unacked == 0


def test_a_connection_handed_to_another_worker_is_counted_once_across_both():
    """With several workers a client's connection is accepted by one and served by its virtual
    host's owner: summed over the workers (as the management API and Prometheus show one
    broker), it is one connection opened and one closed, as RabbitMQ counts a connection."""
    accepting, owner = Broker(), Broker()
    handed = Session(accepting, LOOPBACK_PEER, lambda: None, hand_off=lambda _vhost: True)
    client = MemClient(handed)
    client.start()
    client.tune_and_open(client.expect(commands.Connection.Tune, channel=0))
    handed.teardown()
    served = Session(owner, LOOPBACK_PEER, lambda: None, handed_over=True)
    served.teardown()

    totals = [
        sum(REGISTRY.scope(Scope.BROKER).read(broker)[name] for broker in (accepting, owner))
        for name in ("connections_opened", "connections_closed")
    ]
    assert handed.handed_off
    assert totals == [1, 1]
