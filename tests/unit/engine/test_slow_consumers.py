"""Slow consumer disconnect (Qpid manual §2.11) on an in-memory broker, driven by the in-memory
client: subscription queues (bound to amq.topic) over a threshold get their consumers'
connections closed with 506 and a text that says why; the others are left alone."""

from __future__ import annotations

import logging

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.frames import MethodFrame
from batonmq.config import SlowConsumerConfig
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from batonmq.engine.slowconsumers import (
    CHECKING_STATUS,
    Breach,
    SlowConsumerDetector,
    breach,
    subscription_keys,
)
from batonmq.queues.arrivals import QueueAges
from batonmq.queues.readings import QueueReading
from tests.manualtimers import ManualTimers
from tests.memclient import Content, MemClient, connect, describe

Basic = commands.Basic
Connection = commands.Connection
Queue = commands.Queue

BODY = b"x" * 100


def scd(**settings: object) -> SlowConsumerConfig:
    return SlowConsumerConfig(enabled=True, **settings)  # type: ignore[arg-type]


def subscribe(
    broker: Broker,
    queue: str = "sub",
    topic: str = "stocks.us",
    *,
    exchange: str = "amq.topic",
    durable: bool = False,
    exclusive: bool = True,
    auto_delete: bool = False,
    prefetch: int = 1,
) -> tuple[MemClient, Session]:
    """A subscriber: `queue` bound to `exchange` with `topic`, one consumer with `prefetch`
    that acknowledges nothing."""
    client, session = connect(broker)
    client.call(
        1,
        Queue.Declare(queue=queue, durable=durable, exclusive=exclusive, auto_delete=auto_delete),
        Queue.DeclareOk,
    )
    client.call(1, Queue.Bind(queue=queue, exchange=exchange, routing_key=topic), Queue.BindOk)
    client.qos(1, prefetch)
    client.consume(1, queue)
    return client, session


def publish(
    broker: Broker, count: int, topic: str = "stocks.us", exchange: str = "amq.topic"
) -> None:
    publisher, _ = connect(broker)
    for _ in range(count):
        publisher.publish(1, BODY, exchange=exchange, routing_key=topic)


def expect_slow_close(client: MemClient, session: Session) -> str:
    """The client's connection was closed with 506 RESOURCE_ERROR (after the deliveries it had
    not read yet): its text."""
    received = client.receive()
    assert received, "nothing received"
    *before, last = received
    assert all(isinstance(item, Content) for item in before), describe(received)
    assert isinstance(last, MethodFrame)
    close = last.method
    assert isinstance(close, Connection.Close), describe(received)
    assert close.reply_code == ReplyCode.RESOURCE_ERROR
    assert session.ended
    return close.reply_text


# --- the decisions --------------------------------------------------------------------------


def test_each_threshold_is_greater_than_and_zero_is_off() -> None:
    """§2.11.5.4: "a queue depth greater than the threshold"; §2.11.5.5: "a count higher than
    that specified"; §2.11.5.3: the oldest message "ages beyond the specified value"."""
    at_limits = QueueReading(depth=100, count=10, oldest_age_ms=1_000)
    config = scd(depth=100, message_count=10, message_age=1_000)

    assert breach(at_limits, config) is None
    assert breach(QueueReading(depth=101, count=10, oldest_age_ms=1_000), config) == Breach(
        "slow_consumer.depth", 100, 101
    )
    assert breach(QueueReading(depth=100, count=11, oldest_age_ms=1_000), config) == Breach(
        "slow_consumer.message_count", 10, 11
    )
    assert breach(QueueReading(depth=100, count=10, oldest_age_ms=1_001), config) == Breach(
        "slow_consumer.message_age", 1_000, 1_001
    )
    assert breach(QueueReading(depth=10**9, count=10**9, oldest_age_ms=10**9), scd()) is None


def test_the_breach_says_which_threshold_and_by_how_much() -> None:
    assert (
        Breach("slow_consumer.depth", 4096, 5000).describe("q")
        == "queue 'q' holds 5000 bytes, over slow_consumer.depth (4096)"
    )
    assert (
        Breach("slow_consumer.message_count", 50, 51).describe("q")
        == "queue 'q' holds 51 messages, over slow_consumer.message_count (50)"
    )
    assert (
        Breach("slow_consumer.message_age", 600000, 600500).describe("q")
        == "queue 'q' has held its oldest message for 600500 ms, over "
        "slow_consumer.message_age (600000)"
    )


def test_subscriptions_are_queues_bound_to_topic_and_fanout_exchanges() -> None:
    """§2.11.2: "SCD is only applicable to topics or durable subscriptions"."""
    broker = Broker()
    client, _ = connect(broker)
    for queue, exchange, key in (
        ("on-topic", "amq.topic", "stocks.us"),
        ("on-fanout", "amq.fanout", ""),
        ("on-direct", "amq.direct", "stocks.us"),
    ):
        client.declare_queue(1, queue)
        client.call(1, Queue.Bind(queue=queue, exchange=exchange, routing_key=key), Queue.BindOk)

    assert subscription_keys(broker.vhosts["/"]) == {
        "on-topic": {"stocks.us"},
        "on-fanout": {""},
    }


# --- the detector ---------------------------------------------------------------------------


def test_a_slow_consumer_is_disconnected_with_506_saying_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§2.11.2: "On triggering of a specified threshold the offending client will be
    disconnected from the broker with a 506 error code"; §2.11.4: "Error: Consuming to slow."."""
    broker = Broker()
    subscriber, session = subscribe(broker)
    publish(broker, 5)  # one delivered and unacknowledged, four ready: 400 bytes
    subscriber.deliveries(1)
    caplog.set_level(logging.WARNING, logger="batonmq.engine.slowconsumers")

    done = SlowConsumerDetector(broker.vhosts, scd(depth=300), None).check()

    assert expect_slow_close(subscriber, session) == (
        "RESOURCE_ERROR - Consuming to slow: queue 'sub' holds 400 bytes, over "
        "slow_consumer.depth (300)"
    )
    assert [d.queue.name for d in done] == ["sub"]
    [warning] = [r for r in caplog.records if r.name == "batonmq.engine.slowconsumers"]
    assert warning.getMessage() == (
        "slow consumer disconnected: queue 'sub' holds 400 bytes, over slow_consumer.depth (300)"
    )
    assert warning.__dict__["peer"] == "127.0.0.1:5000"
    assert warning.__dict__["threshold"] == "slow_consumer.depth"
    # §2.11.5.1: "messages will no longer be delivered to the private queue": the exclusive
    # (temporary) queue went with its connection.
    assert "sub" not in broker.vhosts["/"].queues


def test_an_auto_delete_subscription_goes_with_its_consumer() -> None:
    """§2.11.5.6 "Delete Temporary Queues Only" (the default): a temporary queue goes."""
    broker = Broker()
    subscriber, session = subscribe(broker, exclusive=False, auto_delete=True)
    publish(broker, 3)

    SlowConsumerDetector(broker.vhosts, scd(message_count=1), None).check()

    assert "holds 2 messages, over slow_consumer.message_count (1)" in expect_slow_close(
        subscriber, session
    )
    assert "sub" not in broker.vhosts["/"].queues


def test_a_durable_subscription_is_kept_without_delete_persistent() -> None:
    """§2.11.5.6: "If you do not specify a <topicDelete/> element ... only temporary queues
    associated with a topic subscription will be deleted on client disconnect"."""
    broker = Broker()
    subscriber, session = subscribe(broker, durable=True, exclusive=False)
    publish(broker, 3)

    SlowConsumerDetector(broker.vhosts, scd(message_count=1), None).check()

    expect_slow_close(subscriber, session)
    queue = broker.vhosts["/"].queues["sub"]
    assert queue.message_count == 3  # the unacknowledged one came back
    assert not queue.consumers


def test_delete_persistent_deletes_the_durable_subscription() -> None:
    """§2.11.5.6: "If you add the <topicDelete/> element with the sub-element
    <delete-persistent/> ... the persistent queue which is associated with durable subscriptions
    to a topic will also be deleted"."""
    broker = Broker()
    subscriber, session = subscribe(broker, durable=True, exclusive=False)
    publish(broker, 3)

    SlowConsumerDetector(broker.vhosts, scd(message_count=1, delete_persistent=True), None).check()

    expect_slow_close(subscriber, session)
    assert "sub" not in broker.vhosts["/"].queues
    publish(broker, 1)  # nothing backs up any more: the message goes nowhere


def test_the_oldest_message_age_triggers() -> None:
    """§2.11.5.3: "triggered ... when the oldest message in the associated private queue for the
    consumer ages beyond the specified value, in milliseconds"."""
    broker = Broker()
    timers = ManualTimers()
    ages = QueueAges(timers)
    subscriber, session = subscribe(broker)
    queues = broker.vhosts["/"].queues
    ages.checkpoint(queues.values())
    publish(broker, 2)
    subscriber.deliveries(1)
    timers.advance(1_000)
    ages.checkpoint(queues.values())
    detector = SlowConsumerDetector(broker.vhosts, scd(message_age=1_500), ages)

    timers.advance(500)
    assert detector.check() == []  # at least 500 ms old: not yet
    subscriber.expect_nothing()

    timers.advance(1_001)
    detector.check()
    assert "has held its oldest message for 1501 ms, over slow_consumer.message_age (1500)" in (
        expect_slow_close(subscriber, session)
    )


def test_a_fast_consumer_is_left_alone() -> None:
    broker = Broker()
    subscriber, session = subscribe(broker, prefetch=0)
    publish(broker, 5)
    assert len(subscriber.deliveries(1)) == 5

    assert SlowConsumerDetector(broker.vhosts, scd(depth=1, message_count=1), None).check() == []

    subscriber.expect_nothing()
    assert not session.ended


def test_only_the_configured_topics_are_checked_by_straight_string_matching() -> None:
    """§1.5.2.3: "the topic configuration is limited to straight string matching ... a
    subscription for 'stocks.uk' will not match the expected 'stocks.*'"."""
    broker = Broker()
    us, us_session = subscribe(broker, "us", "stocks.us")
    uk, uk_session = subscribe(broker, "uk", "stocks.uk")
    publish(broker, 3, "stocks.us")
    publish(broker, 3, "stocks.uk")

    SlowConsumerDetector(
        broker.vhosts, scd(message_count=1, topics="stocks.* stocks.us"), None
    ).check()

    expect_slow_close(us, us_session)
    uk.deliveries(1)
    uk.expect_nothing()
    assert not uk_session.ended


def test_queues_without_consumers_and_queues_not_subscribed_are_not_checked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§2.11.2: only topic subscriptions; a queue with no consumer has nobody to disconnect.
    §2.11.3.2: "SCD-1003 : Checking Status of Queue" for each queue checked."""
    broker = Broker()
    idle, _ = connect(broker)
    idle.declare_queue(1, "idle")
    idle.call(1, Queue.Bind(queue="idle", exchange="amq.topic", routing_key="t"), Queue.BindOk)
    direct, direct_session = subscribe(broker, "direct", "t", exchange="amq.direct")
    subscribe(broker, "watched", "t")
    publish(broker, 3, "t")
    publish(broker, 3, "t", exchange="amq.direct")
    caplog.set_level(logging.DEBUG, logger="batonmq.engine.slowconsumers")

    SlowConsumerDetector(broker.vhosts, scd(message_count=1000), None).check()

    checked = [r.__dict__["queue"] for r in caplog.records if r.getMessage() == CHECKING_STATUS]
    assert checked == ["watched"]
    direct.deliveries(1)
    direct.expect_nothing()
    assert not direct_session.ended
