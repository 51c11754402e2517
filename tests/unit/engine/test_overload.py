"""The Overload requirements in the engine, driven by the in-memory client: producer flow control
(broker alarms and overfull queues), the memory states, the destination limit behaviours and the
system-wide limits.

The in-memory client calls `Session.receive_data` for each write and has no server layer: a
held input stays buffered until the test calls `session.resume_input()`, which is what the
server layer does once the session says it may read again.
"""

from __future__ import annotations

import logging

import pytest
from pamqp import commands
from pamqp.common import FieldTable

from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.engine.memory import MemoryGuard, MemoryState, Thresholds, state_for, window_for
from tests.memclient import MemClient, connect

Basic = commands.Basic
Confirm = commands.Confirm
Connection = commands.Connection
Queue = commands.Queue

BLOCKING = {"connection.blocked": True}


def declare(client: MemClient, name: str, arguments: FieldTable | None = None) -> None:
    client.call(1, Queue.Declare(queue=name, arguments=arguments), Queue.DeclareOk)


def publishes(client: MemClient, count: int, *, body: bytes = b"m", queue: str = "q") -> bytes:
    """`count` publishes to `queue` as one write."""
    method = Basic.Publish(exchange="", routing_key=queue)
    return b"".join(client.content_bytes(1, method, body) for _ in range(count))


def message_count(client: MemClient, queue: str = "q") -> int:
    declare_ok = client.call(1, Queue.Declare(queue=queue, passive=True), Queue.DeclareOk)
    return declare_ok.message_count


# Broker alarms ------------------------------------------------------------------------------


def test_an_alarm_blocks_publishing_connections_and_lets_consumers_consume() -> None:
    """MQ 3.5 admin guide: red "blocks all publishers"; RabbitMQ's connection.blocked: the server
    stops reading from publishing connections, and tells the clients that support it why."""
    broker = Broker()
    publisher, publishing = connect(broker, capabilities=BLOCKING)
    consumer, _ = connect(broker, capabilities=BLOCKING)
    declare(publisher, "q")
    publisher.publish(1, b"before", routing_key="q")

    broker.raise_alarm("memory", "memory alarm: 99 of 100 bytes in use")

    assert publisher.expect(Connection.Blocked, channel=0).reason == (
        "memory alarm: 99 of 100 bytes in use"
    )
    consumer.expect(Connection.Blocked, channel=0)
    publisher.send_bytes(publishes(publisher, 3, body=b"during"))
    assert publishing.input_held
    # The one publish already under way is taken; the rest waits unread.
    assert message_count(consumer) == 2
    # A connection that has not published goes on: it consumes what is there.
    consumer.consume(1, "q", "c", no_ack=True)
    assert [content.body for content in consumer.deliveries()] == [b"before", b"during"]

    broker.clear_alarm("memory")

    publisher.expect(Connection.Unblocked, channel=0)
    consumer.expect(Connection.Unblocked, channel=0)
    publishing.resume_input()
    assert [content.body for content in consumer.deliveries()] == [b"during", b"during"]


def test_a_client_without_the_capability_is_held_without_being_told() -> None:
    """RabbitMQ sends connection.blocked only to clients that announce the capability; the
    others are held all the same."""
    broker = Broker()
    client, session = connect(broker)
    declare(client, "q")
    client.publish(1, b"first", routing_key="q")
    broker.raise_alarm("disk", "free disk space is low")

    client.send_bytes(publishes(client, 2))

    client.expect_nothing()
    assert session.input_held
    broker.clear_alarm("disk")
    client.expect_nothing()
    session.resume_input()
    assert message_count(client) == 3


def test_each_alarm_clears_on_its_own_and_a_new_connection_is_told_at_open() -> None:
    broker = Broker()
    broker.raise_alarm("memory", "memory is short")
    broker.raise_alarm("disk", "disk is short")

    client, session = connect(broker, capabilities=BLOCKING, channels=())

    assert client.expect(Connection.Blocked, channel=0).reason == "memory is short"
    broker.clear_alarm("memory")
    client.expect_nothing()
    assert session.flow.holds == {"disk": "disk is short"}
    broker.clear_alarm("disk")
    client.expect(Connection.Unblocked, channel=0)


# Memory states ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("used", "state"),
    [
        (0, MemoryState.GREEN),
        (79, MemoryState.GREEN),
        (80, MemoryState.YELLOW),
        (89, MemoryState.YELLOW),
        (90, MemoryState.ORANGE),
        (97, MemoryState.ORANGE),
        (98, MemoryState.RED),
        (150, MemoryState.RED),
    ],
)
def test_the_state_follows_the_seed_thresholds(used: int, state: MemoryState) -> None:
    """MQ 3.5 admin guide Table 2-4: green, yellow, orange and red at "0, 80, 90, and 98,
    respectively" percent of memory."""
    assert state_for(used, 100, Thresholds()) is state


def test_each_state_has_the_seed_batch_and_a_narrower_page_window() -> None:
    """Table 2-4: batches of "5000, 500, 50, and 0, respectively" (red's 0 is the alarm); the
    issue: "Queues page messages out ... before red is reached"."""
    thresholds = Thresholds()
    assert [thresholds.batch(state) for state in MemoryState] == [5000, 500, 50, 50]
    assert [window_for(state, 10_000) for state in MemoryState] == [10_000, 1000, 100, 100]
    assert window_for(MemoryState.RED, 100) == 16


class Readings:
    """Memory readings the test sets, in place of /proc/self/statm."""

    def __init__(self) -> None:
        self.used = 0

    def __call__(self) -> int:
        return self.used


def test_the_guard_throttles_then_blocks_then_releases(caplog: pytest.LogCaptureFixture) -> None:
    broker = Broker(BrokerSettings(page_window=1000))
    readings = Readings()
    guard = MemoryGuard(broker, 1000, Thresholds(), readings)
    client, session = connect(broker, capabilities=BLOCKING)
    declare(client, "q")
    paging = broker.vhosts["/"].paging

    readings.used = 850
    with caplog.at_level(logging.INFO, logger="batonmq.engine.memory"):
        assert guard.check() is MemoryState.YELLOW
    assert "memory state yellow: 850 of 1000 bytes (85%)" in caplog.messages
    assert broker.publish_batch == 500
    assert paging.window == 100

    readings.used = 990
    assert guard.check() is MemoryState.RED
    assert client.expect(Connection.Blocked, channel=0).reason == (
        "memory alarm: 990 of 1000 bytes in use (memory.budget)"
    )

    readings.used = 100
    assert guard.check() is MemoryState.GREEN
    client.expect(Connection.Unblocked, channel=0)
    assert broker.publish_batch == 5000
    assert paging.window == 1000
    assert not session.flow.holds


def test_a_connection_runs_at_most_its_batch_of_publishes_per_turn() -> None:
    """Table 2-4, imq.<state>.count: "the maximum number of incoming messages allowed in a
    batch ... throttles back message producers"."""
    broker = Broker()
    broker.publish_batch = 50
    client, session = connect(broker)
    declare(client, "q")

    client.send_bytes(publishes(client, 120))

    assert session.input_held and session.may_read
    assert broker.vhosts["/"].queues["q"].message_count == 50
    session.resume_input()
    assert broker.vhosts["/"].queues["q"].message_count == 100
    session.resume_input()
    assert message_count(client) == 120


# Destination limits -------------------------------------------------------------------------


def test_an_overfull_flow_controlled_queue_holds_its_publisher_until_underfull(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Qpid manual §1.5.1.2.1: "A Queue is defined as overfull when the size (in bytes) of the
    messages on the queue exceeds the "capacity" of the Queue. A Queue becomes "underfull" when
    its size becomes less than the "flowResumeCapacity"", with QUE-1003, QUE-1004 and a line per
    channel blocked and unblocked."""
    broker = Broker()
    publisher, publishing = connect(broker, capabilities=BLOCKING)
    consumer, _ = connect(broker)
    declare(
        publisher,
        "q",
        {"x-qpid-capacity": 300, "x-qpid-flow-resume-capacity": 200},
    )
    caplog.set_level(logging.INFO)

    publisher.send_bytes(publishes(publisher, 4, body=b"x" * 100))

    # The fourth message took the queue over its capacity: taken, and then the publisher held.
    assert message_count(consumer) == 4
    assert publisher.expect(Connection.Blocked, channel=0).reason == "queue 'q' is overfull"
    assert "QUE-1003 : Overfull : Size : 400 bytes, Capacity : 300" in caplog.messages
    assert "CHN-1005 : Flow Control Enforced (Queue q)" in caplog.messages
    publisher.send_bytes(publishes(publisher, 2, body=b"x" * 100))
    assert publishing.input_held
    assert message_count(consumer) == 5  # the publish under way was taken

    for _ in range(3):
        assert consumer.get(1, "q", no_ack=True) is not None
    publisher.expect_nothing()  # 200 bytes is not less than the resume capacity
    assert consumer.get(1, "q", no_ack=True) is not None

    publisher.expect(Connection.Unblocked, channel=0)
    assert "QUE-1004 : Underfull : Size : 100 bytes, Resume Capacity : 200" in caplog.messages
    assert "CHN-1006 : Flow Control Removed" in caplog.messages
    publishing.resume_input()
    assert message_count(consumer) == 2


def test_flow_control_by_message_count_and_the_queue_deleted_releases() -> None:
    """FLOW_CONTROL with MQ 3.5 admin guide's maxNumMsgs (x-max-length): over it, the publisher is
    held; a held publisher is released when the queue goes."""
    broker = Broker()
    publisher, publishing = connect(broker, capabilities=BLOCKING)
    admin, _ = connect(broker)
    declare(publisher, "q", {"x-max-length": 2, "x-overflow": "flow-control"})

    publisher.send_bytes(publishes(publisher, 3))

    publisher.expect(Connection.Blocked, channel=0)
    assert message_count(admin) == 3
    admin.call(1, Queue.Delete(queue="q"), Queue.DeleteOk)
    publisher.expect(Connection.Unblocked, channel=0)
    assert not publishing.flow.holds


def test_remove_low_priority_drops_the_oldest_of_the_lowest_priority() -> None:
    """MQ 3.5 admin guide: "REMOVE_LOW_PRIORITY — throws out lowest priority messages according to
    age of the messages"."""
    broker = Broker()
    client, _ = connect(broker)
    declare(
        client,
        "q",
        {"x-max-length": 3, "x-overflow": "remove-low-priority", "x-max-priority": 9},
    )
    for body, priority in ((b"p5", 5), (b"p1-old", 1), (b"p9", 9), (b"p1-new", 1), (b"p3", 3)):
        client.publish(1, body, routing_key="q", properties=Basic.Properties(priority=priority))

    client.consume(1, "q", "c", no_ack=True)

    assert [content.body for content in client.deliveries()] == [b"p9", b"p5", b"p3"]


def test_reject_newest_and_max_message_size_nack_under_confirms() -> None:
    """MQ 3.5 admin guide: "REJECT_NEWEST — rejects the newest messages" (x-overflow reject-publish)
    and maxBytesPerMsg (x-max-message-size): a refused publish is basic.nack to a confirming
    publisher; the queue keeps what it had."""
    broker = Broker()
    client, _ = connect(broker)
    declare(client, "full", {"x-max-length": 1, "x-overflow": "reject-publish"})
    declare(client, "small", {"x-max-message-size": 10})
    client.call(1, Confirm.Select(), Confirm.SelectOk)

    client.publish(1, b"one", routing_key="full")
    client.publish(1, b"two", routing_key="full")
    client.publish(1, b"x" * 10, routing_key="small")
    client.publish(1, b"x" * 11, routing_key="small")

    answers = client.receive()
    assert [(type(item.method).__name__, item.method.delivery_tag) for item in answers] == [
        ("Ack", 1),
        ("Nack", 2),
        ("Ack", 3),
        ("Nack", 4),
    ]
    assert message_count(client, "full") == 1
    assert message_count(client, "small") == 1


def test_max_producers_refuses_one_channel_too_many_until_one_closes() -> None:
    """MQ 3.5 admin guide maxNumProducers: "When this limit is reached, no new producers can be
    created"; a channel that published to the queue is one of its producers until it closes."""
    broker = Broker()
    client, _ = connect(broker, channels=(1, 2, 3))
    declare(client, "q", {"x-max-producers": 1})
    client.publish(1, b"a", routing_key="q")
    client.publish(1, b"b", routing_key="q")

    client.publish(2, b"c", routing_key="q")

    close = client.expect(commands.Channel.Close, channel=2)
    assert close.reply_code == 406
    assert close.reply_text == (
        "PRECONDITION_FAILED - queue 'q' in vhost '/' has reached its limit of 1 producers "
        "(x-max-producers)"
    )
    client.send(2, commands.Channel.CloseOk())
    client.call(1, commands.Channel.Close(200, "bye", 0, 0), commands.Channel.CloseOk)
    client.publish(3, b"d", routing_key="q")
    client.call(3, Queue.Declare(queue="q", passive=True), Queue.DeclareOk)


# System-wide limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "text"),
    [
        (
            {"max_messages": 2},
            "PRECONDITION_FAILED - message refused: the broker holds 2 messages, its limit is 2 "
            "(limits.max_messages)",
        ),
        (
            {"max_bytes": 20},
            "PRECONDITION_FAILED - message refused: the broker holds 20 bytes of messages, its "
            "limit is 20 (limits.max_bytes)",
        ),
    ],
)
def test_a_system_wide_limit_refuses_with_an_error_naming_it(
    limit: dict[str, int], text: str
) -> None:
    """MQ 3.5 admin guide Table 2-4: imq.system.max_count and max_size, "Additional messages will be
    rejected"; the issue: "excess is refused with an AMQP error that names the limit". Room
    comes back as messages are consumed."""
    broker = Broker(BrokerSettings(**limit))
    client, _ = connect(broker, channels=(1, 2))
    declare(client, "a")
    declare(client, "b")
    client.publish(1, b"x" * 10, routing_key="a")
    client.publish(1, b"x" * 10, routing_key="b")

    client.publish(1, b"x" * 10, routing_key="a")

    close = client.expect(commands.Channel.Close, channel=1)
    assert (close.reply_code, close.reply_text) == (406, text)
    client.send(1, commands.Channel.CloseOk())
    assert client.get(2, "a", no_ack=True) is not None
    client.publish(2, b"x" * 10, routing_key="a")
    assert message_count_on(client, 2, "a") == 1


def message_count_on(client: MemClient, channel: int, queue: str) -> int:
    declare_ok = client.call(channel, Queue.Declare(queue=queue, passive=True), Queue.DeclareOk)
    return declare_ok.message_count


def test_the_holdings_come_back_to_zero_however_messages_leave() -> None:
    """What the system-wide limits count: an entry is held from the moment a queue takes it
    until it leaves for good, whichever way it leaves (drop-head into a dead-letter queue, ack,
    reject, no-ack get, requeue by a closed channel then ack, purge, a deleted queue)."""
    broker = Broker()
    holdings = broker.holdings
    client, _ = connect(broker, channels=(1, 2))
    declare(client, "dead")
    declare(
        client,
        "q",
        {"x-max-length": 4, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )
    declare(client, "purged")
    declare(client, "deleted")
    client.send_bytes(publishes(client, 6, body=b"12345"))  # 2 dropped, dead-lettered
    client.send_bytes(publishes(client, 3, body=b"12345", queue="purged"))
    client.send_bytes(publishes(client, 2, body=b"12345", queue="deleted"))
    assert (holdings.messages, holdings.bytes) == (11, 55)

    client.qos(2, 3)
    client.consume(2, "q", "c")
    tags = [content.method.delivery_tag for content in client.deliveries(2)]
    client.send(2, Basic.Ack(delivery_tag=tags[0]))
    client.send(2, Basic.Reject(delivery_tag=tags[1], requeue=False))  # into "dead"
    assert (holdings.messages, holdings.bytes) == (10, 50)
    assert len(client.deliveries(2)) == 1  # the fourth, in the room made
    # The third goes back to the queue.
    client.call(2, commands.Channel.Close(200, "bye", 0, 0), commands.Channel.CloseOk)
    client.open_channel(2)
    assert client.get(2, "q", no_ack=True) is not None
    client.call(1, Queue.Purge(queue="purged"), Queue.PurgeOk)
    client.call(1, Queue.Delete(queue="deleted"), Queue.DeleteOk)
    assert (holdings.messages, holdings.bytes) == (4, 20)  # one in q, three in dead

    client.call(1, Queue.Purge(queue="q"), Queue.PurgeOk)
    client.call(1, Queue.Purge(queue="dead"), Queue.PurgeOk)
    assert (holdings.messages, holdings.bytes) == (0, 0)


def test_active_and_backup_consumers_and_one_too_many_refused() -> None:
    """MQ 3.5 admin guide, "Queue Delivery to Multiple Consumers": messages go to the active
    consumers; "If an active consumer fails, then the first backup consumer is made active, and
    takes over the work of the failed consumer", and "New consumers will be rejected if the number
    of consumers exceeds the sum of these two attributes"."""
    broker = Broker()
    client, _ = connect(broker, channels=(1, 2, 3, 4))
    declare(client, "q", {"x-max-active-consumers": 2, "x-max-backup-consumers": 1})
    for channel in (1, 2, 3):
        client.qos(channel, 2)
        client.call(channel, Basic.Consume(queue="q", consumer_tag=f"c{channel}"), Basic.ConsumeOk)
    client.send(4, Basic.Consume(queue="q", consumer_tag="c4"))
    close = client.expect(commands.Channel.Close, channel=4)
    assert (close.reply_code, close.reply_text) == (
        406,
        "PRECONDITION_FAILED - queue 'q' in vhost '/' has reached its limit of 3 consumers "
        "(x-max-active-consumers plus x-max-backup-consumers)",
    )
    client.send(4, commands.Channel.CloseOk())

    client.send_bytes(publishes(client, 4))
    first = client.deliveries()
    assert sorted(content.channel for content in first) == [1, 1, 2, 2]  # c3 is a backup

    client.send(1, Basic.Cancel(consumer_tag="c1"))

    # c1's two unacknowledged messages go to c3, which is active now.
    received = client.receive()
    taken_over = [item for item in received if isinstance(item.method, Basic.Deliver)]
    assert [type(item.method) for item in received].count(Basic.CancelOk) == 1
    assert [content.channel for content in taken_over] == [3, 3]
    assert all(content.method.redelivered for content in taken_over)


@pytest.mark.parametrize("overflow", ["drop-head", "remove-low-priority"])
def test_a_size_limit_does_not_make_a_dropping_queue_refuse(overflow: str) -> None:
    """x-max-message-size checks each message; a full queue whose behaviour is to drop (MQ 3.5 admin
    guide REMOVE_OLDEST, REMOVE_LOW_PRIORITY) still takes the new one."""
    broker = Broker()
    client, _ = connect(broker)
    declare(client, "q", {"x-max-length": 1, "x-overflow": overflow, "x-max-message-size": 100})
    client.call(1, Confirm.Select(), Confirm.SelectOk)

    client.send_bytes(publishes(client, 2, body=b"new"))

    (answer,) = client.receive()  # both acknowledged, in one ack
    assert isinstance(answer.method, Basic.Ack)
    assert (answer.method.delivery_tag, answer.method.multiple) == (2, True)
    assert message_count(client) == 1
