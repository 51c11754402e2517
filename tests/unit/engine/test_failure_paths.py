"""What the engine does when something goes wrong in the middle of its work: a connection being
torn down, a transaction that cannot be applied whole, a channel error after routed publishes, a
defect in the broker itself. In every case nothing the broker took is lost or sent twice."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp import outgoing
from batonmq.amqp.constants import ReplyCode
from batonmq.engine import channel as channel_module
from batonmq.engine.broker import Broker
from batonmq.engine.dispatch import HANDLERS
from tests.memclient import bodies, connect, describe

Basic = commands.Basic
Connection = commands.Connection


def test_teardown_sends_nothing_after_connection_close():
    """Spec (connection.close): after sending close "the sender ... MUST NOT send further
    frames"; a message requeued by the teardown of one channel must not be delivered to another
    channel of the same dying connection (it goes back to the queue, delivered once)."""
    broker = Broker()
    client, session = connect(broker, channels=(1, 2))
    client.declare_queue(1, "q")
    client.publish(1, b"m0", routing_key="q")
    assert client.get(1, "q") is not None
    client.consume(2, "q")
    client.send(1, Basic.Qos(prefetch_size=1))  # 540: a connection error
    assert describe(client.receive()) == ["0:Connection.Close"]
    queue = broker.vhosts["/"].queues["q"]
    entry = queue.get()
    assert entry is not None
    assert (entry.message.body, entry.redelivered, entry.delivery_count) == (b"m0", True, 1)
    assert session.ended


def test_a_commit_that_cannot_be_applied_whole_applies_nothing():
    """Spec (tx class): publishes and acknowledgements are held until commit, which applies them
    together. A held publish whose properties cannot be decoded (found only when a headers
    exchange routes it) fails the commit before any other held work takes effect."""
    broker = Broker()
    client, _session = connect(broker, channels=(1, 2))
    client.declare_queue(1, "q")
    client.send(1, commands.Queue.Bind(queue="q", exchange="amq.headers", arguments={}))
    client.expect(commands.Queue.BindOk, channel=1)
    client.publish(1, b"seed", routing_key="q")
    client.call(1, commands.Tx.Select(), commands.Tx.SelectOk)
    seed = client.get(1, "q")
    assert seed is not None
    client.send(1, Basic.Ack(delivery_tag=seed.method.delivery_tag))
    client.publish(1, b"m1", exchange="amq.headers")
    malformed = bytearray(client.content_bytes(1, Basic.Publish(exchange="amq.headers"), b"m2"))
    header_start = malformed.index(b"\x02\x00\x01")  # the content header frame
    # property flags: headers present; then a table holding an unknown field type 'Z'
    payload = b"\x00\x3c\x00\x00" + (2).to_bytes(8, "big") + b"\x20\x00" + b"\x00\x00\x00\x03\x01kZ"
    malformed[header_start:] = (
        b"\x02\x00\x01" + len(payload).to_bytes(4, "big") + payload + b"\xce" + b"\x03\x00\x01"
        b"\x00\x00\x00\x02m2\xce"
    )
    client.send_bytes(bytes(malformed))
    client.send(1, commands.Tx.Commit())
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code >= 500
    queue = broker.vhosts["/"].queues["q"]
    remaining = []
    while (entry := queue.get()) is not None:
        remaining.append((entry.message.body, entry.redelivered))
    assert remaining == [(b"seed", True)]


def test_routed_publishes_are_confirmed_before_a_channel_error_closes_the_channel():
    """A publisher in confirm mode learns the fate of every publish the broker took: the one
    routed before a later publish failed (404, no such exchange) is acked before the channel
    closes, so the client does not republish it and create a duplicate."""
    client, _session = connect(Broker())
    client.declare_queue(1, "q")
    client.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    client.send_bytes(
        client.content_bytes(1, Basic.Publish(routing_key="q"), b"kept")
        + client.content_bytes(1, Basic.Publish(exchange="missing"), b"refused")
    )
    assert describe(client.receive()) == ["1:Basic.Ack", "1:Channel.Close"]


def test_a_defect_in_a_handler_is_541_and_requeues_what_the_connection_held(monkeypatch):
    """A broker defect (here: a handler raising KeyError) is not the client's fault: the
    connection is closed with 541 INTERNAL_ERROR, and its unacknowledged deliveries go back to
    their queue (BatonMQ style §10: whatever raised)."""
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "q")
    client.publish(1, b"held", routing_key="q")
    assert client.get(1, "q") is not None

    def broken(_channel, _method):
        raise KeyError("a defect")

    monkeypatch.setitem(HANDLERS, Basic.Recover, broken)
    client.send(1, Basic.Recover(requeue=True))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.INTERNAL_ERROR
    assert session.ended
    entry = broker.vhosts["/"].queues["q"].get()
    assert entry is not None
    assert (entry.message.body, entry.redelivered) == (b"held", True)


def test_a_failed_hand_over_leaves_the_message_in_its_queue(monkeypatch):
    """If encoding a delivery fails, the message stays in the queue, where the next consumer
    finds it: a message is never lost between queue and consumer."""
    broker = Broker()
    client, _session = connect(broker, channels=(1, 2))
    client.declare_queue(1, "q")
    calls = {"count": 0}
    real_deliver = outgoing.basic_deliver

    def fail_once(*args, **kwargs):
        calls["count"] += 1
        if calls["count"] == 1:
            raise RuntimeError("a defect")
        return real_deliver(*args, **kwargs)

    monkeypatch.setattr(channel_module.outgoing, "basic_deliver", fail_once)
    client.consume(2, "q")
    client.publish(1, b"survivor", routing_key="q")
    assert describe(client.receive()) == ["0:Connection.Close"]
    other, _ = connect(broker)
    got = other.get(1, "q")
    assert got is not None
    assert bodies([got]) == [b"survivor"]


def test_a_defect_settling_one_ack_leaves_the_rest_to_be_requeued(monkeypatch):
    """A broker defect while a queue settles one acknowledged delivery (BatonMQ style §10:
    whatever raised) closes the connection with 541; the deliveries the ack named after it
    are still the channel's, and go back to their queue with the rest it held: a message is
    never lost between queue and consumer."""
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "q")
    for body in (b"m0", b"m1", b"m2"):
        client.publish(1, body, routing_key="q")
    for _ in range(3):
        assert client.get(1, "q") is not None
    queue = broker.vhosts["/"].queues["q"]
    calls = {"count": 0}
    real_settled = type(queue).settled

    def fail_second(self, entry):
        calls["count"] += 1
        if calls["count"] == 2:
            raise RuntimeError("a defect")
        real_settled(self, entry)

    monkeypatch.setattr(type(queue), "settled", fail_second)
    client.send(1, Basic.Ack(delivery_tag=3, multiple=True))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.INTERNAL_ERROR
    assert session.ended
    entry = queue.get()
    assert entry is not None
    assert (entry.message.body, entry.redelivered) == (b"m2", True)
