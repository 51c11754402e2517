"""Settling deliveries through a `Session`: basic.ack / nack / reject with multiple and requeue,
where requeued messages go, and what happens to unsettled deliveries when a channel or the whole
connection ends (BatonMQ style §10: they are requeued, always)."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from tests.memclient import Content, MemClient, bodies, connect

Basic = commands.Basic
Channel = commands.Channel


def filled(count: int, channels: tuple[int, ...] = (1, 2)) -> tuple[MemClient, Broker]:
    """A client with queue "q" holding m0 .. m<count-1>."""
    broker = Broker()
    client, _session = connect(broker, channels=channels)
    client.declare_queue(1, "q")
    for number in range(count):
        client.publish(1, f"m{number}".encode(), routing_key="q")
    return client, broker


def get(client: MemClient, channel: int = 1) -> Content:
    got = client.get(channel, "q")
    assert got is not None, "queue q is empty"
    return got


def drain(client: MemClient, channel: int = 2) -> list[tuple[bytes, bool]]:
    """(body, redelivered) of everything left in q, taken with no-ack on `channel`."""
    taken = []
    while (got := client.get(channel, "q", no_ack=True)) is not None:
        assert isinstance(got.method, Basic.GetOk)
        taken.append((got.body, got.method.redelivered))
    return taken


def expect_channel_close(client: MemClient, channel: int, code: ReplyCode) -> Channel.Close:
    close = client.expect(Channel.Close, channel=channel)
    assert close.reply_code == code, close.reply_text
    client.send(channel, Channel.CloseOk())
    return close


# Ack -------------------------------------------------------------------------------------------


def test_ack_multiple_settles_up_to_and_including_the_tag():
    """basic.ack, multiple: "If set to 1, the delivery tag is treated as 'up to and including',
    so that multiple messages can be acknowledged with a single method"."""
    client, _broker = filled(4)
    tags = [get(client).method.delivery_tag for _ in range(3)]
    assert tags == [1, 2, 3]
    client.send(1, Basic.Ack(delivery_tag=2, multiple=True))
    client.send(1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=1)
    assert drain(client) == [(b"m2", True), (b"m3", False)]


def test_ack_multiple_naming_the_newest_tag_settles_every_delivery():
    """basic.ack, multiple: "up to and including" the newest tag is every outstanding delivery
    (the common acknowledgement of a consumer, which the channel settles without a test per
    tag); a message published after it stays ready."""
    client, _broker = filled(4)
    for _ in range(3):
        get(client)
    client.send(1, Basic.Ack(delivery_tag=3, multiple=True))
    client.send(1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=1)
    assert drain(client) == [(b"m3", False)]


def test_ack_multiple_zero_settles_everything_outstanding():
    """basic.ack, multiple: "If the multiple field is 1, and the delivery tag is zero, this
    indicates acknowledgement of all outstanding messages"."""
    client, _broker = filled(3)
    for _ in range(3):
        get(client)
    client.send(1, Basic.Ack(delivery_tag=0, multiple=True))
    client.send(1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=1)
    assert drain(client) == []


def test_ack_of_an_unknown_tag_closes_the_channel_with_406_and_the_connection_goes_on():
    """basic.ack, multiple, rule "exists": "The server MUST validate that a non-zero
    delivery-tag refers to a delivered message, and raise a channel exception if this is not the
    case" - 406 PRECONDITION_FAILED, naming basic.ack."""
    client, _broker = filled(1)
    get(client)
    client.send(1, Basic.Ack(delivery_tag=99))
    close = expect_channel_close(client, 1, ReplyCode.PRECONDITION_FAILED)
    assert (close.class_id, close.method_id) == (60, 80)
    assert drain(client) == [(b"m0", True)], "closing the channel requeued the delivery"
    client.open_channel(1)
    client.publish(1, b"again", routing_key="q")
    assert drain(client) == [(b"again", False)]


def test_acking_the_same_delivery_twice_is_406():
    """basic.ack, multiple, rule "exists": "Specifically, a client MUST not acknowledge the same
    message more than once"."""
    client, _broker = filled(1)
    tag = get(client).method.delivery_tag
    client.send(1, Basic.Ack(delivery_tag=tag))
    client.send(1, Basic.Ack(delivery_tag=tag))
    expect_channel_close(client, 1, ReplyCode.PRECONDITION_FAILED)


def test_ack_multiple_naming_a_tag_never_delivered_is_406():
    """basic.ack, multiple, rule "exists" - the rule is attached to the multiple field itself:
    "The server MUST validate that a non-zero delivery-tag refers to a delivered message, and
    raise a channel exception if this is not the case". RabbitMQ: 406 "unknown delivery tag"."""
    client, _broker = filled(2)
    get(client)
    get(client)
    client.send(1, Basic.Ack(delivery_tag=7, multiple=True))
    expect_channel_close(client, 1, ReplyCode.PRECONDITION_FAILED)
    assert drain(client) == [(b"m0", True), (b"m1", True)]


def test_a_delivery_tag_is_valid_only_on_its_own_channel():
    """Domain delivery-tag, rule "channel-local": "a client MUST NOT receive a message on one
    channel and then acknowledge it on another"."""
    client, _broker = filled(1)
    tag = get(client, 1).method.delivery_tag
    client.send(2, Basic.Ack(delivery_tag=tag))
    expect_channel_close(client, 2, ReplyCode.PRECONDITION_FAILED)


# Nack and reject ---------------------------------------------------------------------------------


def test_requeued_messages_keep_their_original_position_and_are_redelivered():
    """RabbitMQ (basic.reject / nack requeue): "the message will be placed back in its original
    position in the queue, if possible"; basic.deliver / get-ok redelivered: set for a message
    that was delivered before."""
    client, _broker = filled(5)
    tags = [get(client).method.delivery_tag for _ in range(3)]  # m0, m1, m2
    client.send(1, Basic.Nack(delivery_tag=tags[1], multiple=True, requeue=True))  # m0, m1
    client.send(1, Basic.Reject(delivery_tag=tags[2], requeue=True))  # m2
    assert drain(client) == [
        (b"m0", True),
        (b"m1", True),
        (b"m2", True),
        (b"m3", False),
        (b"m4", False),
    ]


def test_nack_and_reject_without_requeue_drop_the_message():
    """basic.nack / basic.reject, requeue: "If requeue is false or the requeue attempt fails the
    messages are discarded or dead-lettered"."""
    client, _broker = filled(3)
    first, second = get(client), get(client)
    client.send(1, Basic.Nack(delivery_tag=first.method.delivery_tag, requeue=False))
    client.send(1, Basic.Reject(delivery_tag=second.method.delivery_tag, requeue=False))
    client.send(1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=1)
    assert drain(client) == [(b"m2", False)]


def test_nack_multiple_requeues_to_a_consumer_in_order():
    """Requeued deliveries go back to the queue in their original order, and from there to the
    consumer, flagged redelivered."""
    client, _broker = filled(0)
    client.consume(1, "q")
    for number in range(3):
        client.publish(1, f"m{number}".encode(), routing_key="q")
    first = client.deliveries(1)
    assert [d.method.delivery_tag for d in first] == [1, 2, 3]
    client.send(1, Basic.Nack(delivery_tag=2, multiple=True, requeue=True))
    again = client.deliveries(1)
    assert bodies(again) == [b"m0", b"m1"]
    assert [d.method.redelivered for d in again] == [True, True]
    assert [d.method.delivery_tag for d in again] == [4, 5]


def test_nack_of_an_unknown_tag_is_406():
    """basic.nack (RabbitMQ extension) validates its delivery tag as basic.ack does: 406 naming
    basic.nack (class 60, method 120)."""
    client, _broker = filled(0)
    client.send(1, Basic.Nack(delivery_tag=1, multiple=False, requeue=True))
    close = expect_channel_close(client, 1, ReplyCode.PRECONDITION_FAILED)
    assert (close.class_id, close.method_id) == (60, 120)


def test_recover_requeues_everything_unsettled():
    """basic.recover, rule 01: "The server MUST set the redelivered flag on all messages that
    are resent"."""
    client, _broker = filled(2)
    get(client)
    get(client)
    client.call(1, Basic.Recover(requeue=True), Basic.RecoverOk)
    assert drain(client) == [(b"m0", True), (b"m1", True)]


# Ending a channel or a connection ----------------------------------------------------------------


def test_closing_a_channel_requeues_its_unacked_messages():
    """BatonMQ style §10 / RabbitMQ: unacknowledged deliveries of a closed channel go back to their
    queue, in their original position, flagged redelivered."""
    client, _broker = filled(0)
    client.consume(1, "q")
    for number in range(3):
        client.publish(2, f"m{number}".encode(), routing_key="q")
    assert len(client.deliveries(1)) == 3
    client.send(1, Basic.Ack(delivery_tag=2))
    client.send(1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=1)
    assert drain(client) == [(b"m0", True), (b"m2", True)]


def test_a_channel_closed_by_the_server_requeues_its_unacked_messages():
    """BatonMQ style §10: a channel closed by a channel error requeues its unsettled deliveries like
    any other ending."""
    client, _broker = filled(2)
    get(client)
    get(client)
    client.send(1, Basic.Get(queue="missing"))
    expect_channel_close(client, 1, ReplyCode.NOT_FOUND)
    assert drain(client) == [(b"m0", True), (b"m1", True)]


def test_requeued_messages_go_to_another_consumer():
    """RabbitMQ: a requeued message is delivered to another consumer of the queue, flagged
    redelivered."""
    broker = Broker()
    first, _ = connect(broker)
    second, _ = connect(broker)
    first.declare_queue(1, "q")
    first.consume(1, "q", "first")
    first.publish(1, b"m0", routing_key="q")
    assert bodies(first.deliveries(1)) == [b"m0"]
    second.consume(1, "q", "second")
    first.send(1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    first.expect(Channel.CloseOk, channel=1)
    [redelivered] = second.deliveries(1)
    assert (redelivered.body, redelivered.method.redelivered) == (b"m0", True)


def test_teardown_requeues_everything_and_deletes_exclusive_queues():
    """Spec (queue.declare, exclusive): exclusive queues "are deleted when the connection
    closes"; and every unsettled delivery of the connection goes back to its queue."""
    broker = Broker()
    leaving, session = connect(broker)
    staying, _ = connect(broker)
    staying.declare_queue(1, "shared")
    leaving.declare_queue(1, "private", exclusive=True)
    leaving.qos(1, 10)
    leaving.consume(1, "shared")
    for number in range(3):
        staying.publish(1, f"m{number}".encode(), routing_key="shared")
    assert len(leaving.deliveries(1)) == 3
    vhost = broker.vhosts["/"]
    assert "private" in vhost.queues
    session.teardown()
    assert "private" not in vhost.queues
    assert session not in broker.sessions
    assert vhost.queues["shared"].message_count == 3
    assert vhost.queues["shared"].consumer_count == 0
    redelivered = [staying.get(1, "shared", no_ack=True) for _ in range(3)]
    assert [(g.body, g.method.redelivered) for g in redelivered if g is not None] == [
        (b"m0", True),
        (b"m1", True),
        (b"m2", True),
    ]


def test_client_connection_close_requeues_unacked_messages():
    """BatonMQ style §10: a connection closed by the client requeues every unsettled delivery."""
    broker = Broker()
    leaving, _ = connect(broker)
    staying, _ = connect(broker)
    staying.declare_queue(1, "q")
    staying.publish(1, b"m0", routing_key="q")
    assert leaving.get(1, "q") is not None
    leaving.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    leaving.expect(commands.Connection.CloseOk)
    got = staying.get(1, "q")
    assert got is not None
    assert got.method.redelivered is True


def test_a_connection_error_requeues_unacked_messages():
    """A frame error (spec 4.2.3, 501) ends the connection; its deliveries are requeued."""
    broker = Broker()
    leaving, _ = connect(broker)
    staying, _ = connect(broker)
    staying.declare_queue(1, "q")
    staying.publish(1, b"m0", routing_key="q")
    assert leaving.get(1, "q") is not None
    leaving.send_bytes(b"\x01\x00\x01\x00\x00\x00\x00\x00")
    close = leaving.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.FRAME_ERROR
    got = staying.get(1, "q")
    assert got is not None
    assert got.method.redelivered is True
