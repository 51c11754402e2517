"""Consumer priorities (x-priority), single active consumer (x-single-active-consumer) and JMS
selectors (x-selector) through a `Session`, in memory."""

from __future__ import annotations

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from tests.memclient import MemClient, connect

Basic = commands.Basic
Channel = commands.Channel
Queue = commands.Queue

SAC: FieldTable = {"x-single-active-consumer": True}


def declare(client: MemClient, name: str, arguments: FieldTable | None = None) -> None:
    client.call(1, Queue.Declare(queue=name, arguments=arguments), Queue.DeclareOk)


def consume(
    client: MemClient, channel: int, queue: str, tag: str, arguments: FieldTable | None = None
) -> None:
    client.call(
        channel, Basic.Consume(queue=queue, consumer_tag=tag, arguments=arguments), Basic.ConsumeOk
    )


def publish(client: MemClient, queue: str, *names: str, headers: FieldTable | None = None) -> None:
    for name in names:
        client.publish(
            1, name.encode(), routing_key=queue, properties=Basic.Properties(headers=headers)
        )


def deliveries(client: MemClient) -> list[tuple[str, str, bool]]:
    """(consumer tag, body, redelivered) of everything delivered since the last look."""
    delivered = []
    for content in client.deliveries():
        method = content.method
        assert isinstance(method, Basic.Deliver)
        delivered.append((method.consumer_tag, content.body.decode(), method.redelivered))
    return delivered


def refused(client: MemClient, channel: int, method: commands.Basic.Consume) -> Channel.Close:
    client.send(channel, method)
    close = client.expect(Channel.Close, channel=channel)
    client.send(channel, Channel.CloseOk())
    return close


# Consumer priorities ------------------------------------------------------------------------------


def test_high_priority_consumers_get_messages_until_their_prefetch_is_full():
    """RabbitMQ "Consumer Priorities": "high priority consumers receive messages while they are
    active, with messages only going to lower priority consumers when the high priority
    consumers block" - here by their prefetch (basic.qos)."""
    client, _session = connect(Broker(), channels=(1, 2))
    declare(client, "q")
    consume(client, 1, "q", "low")
    client.qos(2, 2)
    consume(client, 2, "q", "high", {"x-priority": 10})
    publish(client, "q", "m0", "m1", "m2", "m3")
    assert deliveries(client) == [
        ("high", "m0", False),
        ("high", "m1", False),
        ("low", "m2", False),
        ("low", "m3", False),
    ]
    client.send(2, Basic.Ack(delivery_tag=1))
    publish(client, "q", "m4")
    assert deliveries(client) == [("high", "m4", False)]


def test_equal_priorities_share_round_robin():
    """RabbitMQ "Consumer Priorities": "messages are delivered round-robin if multiple active
    consumers exist with the same high priority"."""
    client, _session = connect(Broker())
    declare(client, "q")
    consume(client, 1, "q", "low", {"x-priority": -1})
    consume(client, 1, "q", "a", {"x-priority": 3})
    consume(client, 1, "q", "b", {"x-priority": 3})
    publish(client, "q", "m0", "m1", "m2")
    assert [tag for tag, _, _ in deliveries(client)] == ["a", "b", "a"]


def test_a_non_integer_x_priority_is_406_with_rabbitmqs_text():
    """RabbitMQ "Consumer Priorities": "Set the x-priority argument ... to an integer value";
    anything else is refused as RabbitMQ 3.10 refuses it: 406 PRECONDITION_FAILED, "invalid arg
    'x-priority' for queue ...", naming basic.consume (class 60, method 20)."""
    client, _session = connect(Broker(), channels=(1, 2, 3))
    declare(client, "q")
    close = refused(client, 2, Basic.Consume(queue="q", arguments={"x-priority": "high"}))
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert close.reply_text == (
        "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "
        '"expected integer, got longstr"'
    )
    assert (close.class_id, close.method_id) == (60, 20)
    close = refused(client, 3, Basic.Consume(queue="q", arguments={"x-priority": True}))
    assert close.reply_text.endswith('"expected integer, got bool"')


# Single active consumer ---------------------------------------------------------------------------


def sac_queue(
    consumers: int, prefetch: int = 0
) -> tuple[MemClient, list[tuple[MemClient, Session]]]:
    """A client that declared single-active-consumer queue "q", and `consumers` more clients
    (c0, c1, ...) consuming from it in that order, each with tag "c<n>" on channel 1."""
    broker = Broker()
    publisher, _ = connect(broker)
    declare(publisher, "q", SAC)
    clients = []
    for number in range(consumers):
        client, session = connect(broker)
        if prefetch:
            client.qos(1, prefetch)
        consume(client, 1, "q", f"c{number}")
        clients.append((client, session))
    return publisher, clients


def test_only_the_first_registered_consumer_gets_messages():
    """RabbitMQ "Single Active Consumer": "The very first registered consumer become the single
    active consumer: messages are dispatched to it and the other consumers are ignored", a
    later one with a higher priority too (there is "no guarantee on the selected active
    consumer ... even if consumer priorities are in use")."""
    broker = Broker()
    first, _ = connect(broker)
    declare(first, "q", SAC)
    consume(first, 1, "q", "first")
    later, _ = connect(broker)
    consume(later, 1, "q", "later", {"x-priority": 100})
    publish(first, "q", "m0", "m1", "m2")
    assert [body for _, body, _ in deliveries(first)] == ["m0", "m1", "m2"]
    later.expect_nothing()


def test_the_next_consumer_takes_over_the_unacked_messages_first_when_the_active_one_is_cancelled():
    """MQ 3.5 admin guide: "If an active consumer fails, then the first backup consumer is made
    active, and takes over the work of the failed consumer": the cancelled consumer's unacked
    messages go back in their places, so the new active consumer gets them, flagged redelivered, in
    their original order before newer ones. The old consumer's later acks of them settle nothing and
    are no error (they refer to delivered messages: spec basic.ack delivery-tag)."""
    publisher, [(active, _), (backup, _), (last, _)] = sac_queue(3, prefetch=2)
    publish(publisher, "q", "m0", "m1", "m2", "m3")
    assert [body for _, body, _ in deliveries(active)] == ["m0", "m1"]
    active.call(1, Basic.Cancel(consumer_tag="c0"), Basic.CancelOk)
    assert deliveries(backup) == [("c1", "m0", True), ("c1", "m1", True)]
    active.send(1, Basic.Ack(delivery_tag=1))
    active.send(1, Basic.Nack(delivery_tag=2, requeue=False))
    active.expect_nothing()
    backup.send(1, Basic.Ack(delivery_tag=2, multiple=True))
    assert deliveries(backup) == [("c1", "m2", False), ("c1", "m3", False)]
    last.expect_nothing()


def test_acking_multiple_up_to_a_released_tag_settles_what_is_still_unsettled():
    """basic.ack multiple: "up to and including" the tag; a tag released by the cancelled
    single active consumer is a known tag there, and the deliveries before it still settle."""
    publisher, [(active, _), (backup, _)] = sac_queue(2)
    declare(publisher, "other")
    consume(active, 1, "other", "o")
    publish(publisher, "other", "x")
    publish(publisher, "q", "m0")
    assert [body for _, body, _ in deliveries(active)] == ["x", "m0"]
    active.call(1, Basic.Cancel(consumer_tag="c0"), Basic.CancelOk)
    assert deliveries(backup) == [("c1", "m0", True)]
    active.send(1, Basic.Ack(delivery_tag=2, multiple=True))
    active.expect_nothing()
    declare_ok = publisher.call(1, Queue.Declare(queue="other", passive=True), Queue.DeclareOk)
    assert declare_ok.message_count == 0, "x was acked, not requeued"
    active.send(1, Basic.Ack(delivery_tag=2))
    close = active.expect(Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED, "a released tag settles once"


def test_the_next_consumer_takes_over_when_the_active_ones_channel_closes():
    """MQ 3.5 admin guide ("takes over the work of the failed consumer"); whatever ends a channel
    requeues its unsettled deliveries (BatonMQ style §10), in place, before the takeover."""
    publisher, [(active, _), (backup, _)] = sac_queue(2, prefetch=2)
    publish(publisher, "q", "m0", "m1", "m2")
    assert len(deliveries(active)) == 2
    active.call(
        1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), Channel.CloseOk
    )
    assert deliveries(backup) == [("c1", "m0", True), ("c1", "m1", True)]
    backup.send(1, Basic.Ack(delivery_tag=0, multiple=True))
    assert deliveries(backup) == [("c1", "m2", False)]


def test_the_next_consumer_takes_over_when_the_active_ones_connection_drops():
    """MQ 3.5 admin guide: "If an active consumer fails, then the first backup consumer is made
    active": a dropped connection (the server layer tears the session down) is such a failure."""
    publisher, [(_, active_session), (backup, _)] = sac_queue(2)
    publish(publisher, "q", "m0", "m1")
    active_session.teardown()
    assert deliveries(backup) == [("c1", "m0", True), ("c1", "m1", True)]
    publish(publisher, "q", "m2")
    assert deliveries(backup) == [("c1", "m2", False)]


def test_a_backup_going_leaves_the_active_consumer_serving():
    """Only the active consumer's going hands its work over (MQ 3.5 admin guide); a backup's cancel
    changes nothing for the others."""
    publisher, [(active, _), (backup, _), (last, _)] = sac_queue(3)
    backup.call(1, Basic.Cancel(consumer_tag="c1"), Basic.CancelOk)
    publish(publisher, "q", "m0")
    assert deliveries(active) == [("c0", "m0", False)]
    active.call(1, Basic.Cancel(consumer_tag="c0"), Basic.CancelOk)
    assert deliveries(last) == [("c2", "m0", True)]


def test_the_next_consumer_takes_over_at_once_what_was_waiting():
    """MQ 3.5 admin guide: the backup "is made active, and takes over the work": the messages
    waiting in the queue (here, those the active consumer's selector left) go to it at once, not at
    the next publish."""
    broker = Broker()
    active, _ = connect(broker)
    declare(active, "q", SAC)
    consume(active, 1, "q", "c0", {"x-selector": "n > 1"})
    backup, _ = connect(broker)
    consume(backup, 1, "q", "c1")
    publish(active, "q", "m0", "m1", headers={"n": 1})
    active.expect_nothing()
    active.call(1, Basic.Cancel(consumer_tag="c0"), Basic.CancelOk)
    assert deliveries(backup) == [("c1", "m0", False), ("c1", "m1", False)]


def test_an_exclusive_consumer_is_refused_on_a_single_active_consumer_queue():
    """RabbitMQ "Single Active Consumer": "Trying to register a consumer with the exclusive
    consume flag set to true will result in an error if single active consumer is enabled on
    the queue" - RabbitMQ 3.10: 403 ACCESS_REFUSED "... in exclusive use"."""
    client, _session = connect(Broker())
    declare(client, "q", SAC)
    close = refused(client, 1, Basic.Consume(queue="q", exclusive=True))
    assert close.reply_code == ReplyCode.ACCESS_REFUSED
    assert close.reply_text == "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use"


# Selectors ----------------------------------------------------------------------------------------


def test_a_consumer_with_a_selector_gets_only_what_it_selects_and_the_rest_keeps_its_place():
    """JMS 1.1 (javax.jms.Message, "Message Selectors"): a selector lets a consumer "specify, by
    header field references and property references, the messages it is interested in"; the
    messages it does not select stay in the queue, in order, for other consumers."""
    client, _session = connect(Broker())
    declare(client, "q")
    consume(client, 1, "q", "red", {"x-selector": "colour = 'red' AND JMSPriority > 4"})
    publish(client, "q", "blue", headers={"colour": "blue"})
    client.publish(
        1,
        b"red-high",
        routing_key="q",
        properties=Basic.Properties(headers={"colour": "red"}, priority=7),
    )
    publish(client, "q", "red-default", headers={"colour": "red"})
    assert deliveries(client) == [("red", "red-high", False)]
    consume(client, 1, "q", "any")
    assert [(tag, body) for tag, body, _ in deliveries(client)] == [
        ("any", "blue"),
        ("any", "red-default"),
    ]


def test_an_empty_selector_selects_everything():
    """JMS 1.1: "If the value of a message selector is an empty string, the value is treated as
    a null and indicates that there is no message selector"."""
    client, _session = connect(Broker())
    declare(client, "q")
    consume(client, 1, "q", "all", {"x-selector": "  "})
    publish(client, "q", "m0")
    assert deliveries(client) == [("all", "m0", False)]


def test_a_selector_that_does_not_parse_is_406_naming_the_position():
    """JMS 1.1 (Session.createConsumer): InvalidSelectorException "if the message selector is
    invalid"; BatonMQ answers 406 PRECONDITION_FAILED naming where the selector went wrong."""
    client, _session = connect(Broker(), channels=(1, 2))
    declare(client, "q")
    close = refused(client, 1, Basic.Consume(queue="q", arguments={"x-selector": "a = = 1"}))
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert close.reply_text.startswith(
        "PRECONDITION_FAILED - invalid arg 'x-selector' for queue 'q' in vhost '/': "
        "selector syntax error at position 4: "
    ), close.reply_text
    assert (close.class_id, close.method_id) == (60, 20)
    close = refused(client, 2, Basic.Consume(queue="q", arguments={"x-selector": 7}))
    assert close.reply_text.endswith('"expected string, got integer"')


def test_selectors_and_priorities_together():
    """A high-priority consumer takes what it selects; what it does not select goes to the
    lower-priority consumer (RabbitMQ "Consumer Priorities" ranks the consumers able to take a
    message; JMS 1.1 selectors decide which are)."""
    client, _session = connect(Broker())
    declare(client, "q")
    consume(client, 1, "q", "low")
    consume(client, 1, "q", "urgent", {"x-priority": 5, "x-selector": "urgent = TRUE"})
    publish(client, "q", "u", headers={"urgent": True})
    publish(client, "q", "n", headers={"urgent": False})
    assert [(tag, body) for tag, body, _ in deliveries(client)] == [("urgent", "u"), ("low", "n")]
