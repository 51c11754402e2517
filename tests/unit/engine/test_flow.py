"""What holds deliveries back, and what lets them go again: channel.flow from the client, a
session's output budget (its socket not keeping up), a paused transport; and the largest message
the broker accepts."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.engine.session import Session
from tests.memclient import MemClient, bodies, connect

Basic = commands.Basic


def consuming(output_budget: int | None = None) -> tuple[MemClient, Session]:
    client, session = connect(Broker(), output_budget=output_budget)
    client.declare_queue(1, "q")
    client.consume(1, "q")
    return client, session


def publish_three(client: MemClient, channel: int = 1) -> None:
    for number in range(3):
        client.publish(channel, f"m{number}".encode(), routing_key="q")


def test_channel_flow_false_stops_deliveries_and_true_resumes_them():
    """channel.flow: "This method asks the peer to pause or restart the flow of content data
    sent by a consumer"; flow-ok carries the state now in force."""
    client, _ = consuming()
    flow_ok = client.call(1, commands.Channel.Flow(active=False), commands.Channel.FlowOk)
    assert flow_ok.active is False
    publish_three(client)
    client.expect_nothing()
    flow_ok = client.call(1, commands.Channel.Flow(active=True), commands.Channel.FlowOk)
    assert flow_ok.active is True
    assert bodies(client.deliveries(1)) == [b"m0", b"m1", b"m2"]


def test_channel_flow_does_not_stop_basic_get():
    """channel.flow: "It does not affect contents returned by Basic.Get-Ok methods"."""
    client, _ = connect(Broker())
    client.declare_queue(1, "q")
    client.call(1, commands.Channel.Flow(active=False), commands.Channel.FlowOk)
    publish_three(client)
    got = client.get(1, "q")
    assert got is not None
    assert got.body == b"m0"


def test_a_full_output_budget_holds_deliveries_until_flush():
    """Deliveries stop while a session has more than its output budget queued, and resume when
    the server layer has taken the output (`flush`)."""
    client, session = consuming(output_budget=1)
    publish_three(client)
    assert not session.writable
    assert bodies(client.deliveries(1)) == [b"m0"]
    assert bodies(client.deliveries(1)) == [b"m1"]
    assert bodies(client.deliveries(1)) == [b"m2"]
    client.expect_nothing()
    assert session.writable


def test_a_full_output_budget_holds_deliveries_on_every_channel():
    """The budget is the session's: a full one holds deliveries on all its channels, one per flush.
    The budget is the session's: a full one holds deliveries on all its channels, one per flush."""
    client, _ = connect(Broker(), channels=(1, 2), output_budget=1)
    client.declare_queue(1, "a")
    client.declare_queue(1, "b")
    client.consume(1, "a")
    client.consume(2, "b")
    client.publish(1, b"to-a", routing_key="a")
    client.publish(1, b"to-b", routing_key="b")
    assert bodies(client.deliveries()) == [b"to-a"]
    assert bodies(client.deliveries()) == [b"to-b"]


def test_a_paused_transport_holds_deliveries_until_resumed():
    """A transport that cannot take more (the socket's buffer is full) holds deliveries; resuming it
    delivers what waited."""
    client, session = consuming()
    session.set_transport_paused(True)
    publish_three(client)
    client.expect_nothing()
    session.set_transport_paused(False)
    assert bodies(client.deliveries(1)) == [b"m0", b"m1", b"m2"]


def test_a_message_above_max_message_size_closes_the_channel_with_406():
    """RabbitMQ's max_message_size: a content header announcing a larger body is refused with
    406 PRECONDITION_FAILED on the channel, before any body frame; the connection goes on, and
    the channel's unsettled deliveries are requeued."""
    broker = Broker(BrokerSettings(max_message_size=100))
    client, session = connect(broker, channels=(1, 2))
    client.declare_queue(2, "q")
    client.publish(2, b"m0", routing_key="q")
    assert client.get(1, "q") is not None
    client.publish(1, b"x" * 101, routing_key="q")
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert (close.class_id, close.method_id) == (60, 40)
    client.expect_nothing()
    client.send(1, commands.Channel.CloseOk())
    got = client.get(2, "q")
    assert got is not None
    assert (got.body, got.method.redelivered) == (b"m0", True)
    client.publish(2, b"y" * 100, routing_key="q")
    got = client.get(2, "q")
    assert got is not None
    assert got.body == b"y" * 100
    assert session.connection.is_open
