"""The Overload requirements, "Keep working under overload", with a real broker and pika: slow
consumer disconnect (Qpid manual §2.11) and threshold alerts (Qpid manual "Set threshold values for
queue monitor alerting to log"), configured as a user would, through [slow_consumer] and [alerts]
keys (here as BATONMQ__SECTION__KEY environment variables)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.spec import Basic, BasicProperties

from tests.brokerproc import RunningBroker, start_broker

pytestmark = pytest.mark.integration

TOPIC = "stocks.us"
PUBLISHED = 20


@pytest.fixture
def overload_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker that checks subscriptions to stocks.us every 0.3 s against 5 messages, deletes
    a slow durable subscription, and alerts on queues of more than 5 messages."""
    environment = {
        "BATONMQ__SLOW_CONSUMER__ENABLED": "true",
        "BATONMQ__SLOW_CONSUMER__DELAY": "0.3",
        "BATONMQ__SLOW_CONSUMER__MESSAGE_COUNT": "5",
        "BATONMQ__SLOW_CONSUMER__TOPICS": TOPIC,
        "BATONMQ__SLOW_CONSUMER__DELETE_PERSISTENT": "true",
        "BATONMQ__ALERTS__MAX_MESSAGE_COUNT": "5",
        "BATONMQ__ALERTS__INTERVAL": "0.3",
    }
    with start_broker(tmp_path, environment=environment) as broker:
        yield broker


def connect(broker: RunningBroker) -> BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            broker.host, broker.port, "/", pika.PlainCredentials("guest", "guest")
        )
    )


def subscribe(connection: BlockingConnection, queue: str, *, durable: bool) -> BlockingChannel:
    channel = connection.channel()
    channel.queue_declare(queue, durable=durable, exclusive=not durable)
    channel.queue_bind(queue, "amq.topic", routing_key=TOPIC)
    return channel


def wait_for_log(broker: RunningBroker, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = broker.log()
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the broker's log:\n{broker.log()}")


def closed_by_broker(
    watched: BlockingConnection, other: BlockingConnection, timeout: float = 10.0
) -> pika.exceptions.ConnectionClosedByBroker:
    """Run both connections' I/O until the broker closes `watched`: how it closed it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        other.process_data_events(time_limit=0.05)
        try:
            watched.process_data_events(time_limit=0.05)
        except pika.exceptions.ConnectionClosedByBroker as error:
            return error
    raise AssertionError(f"the broker did not close the connection within {timeout} s")


def test_slow_consumer_is_disconnected_and_fast_one_left_alone(
    overload_broker: RunningBroker,
) -> None:
    """Qpid manual §2.11.2: "On triggering of a specified threshold the offending client will be
    disconnected from the broker with a 506 error code"; §2.11.5.5: "a count higher than that
    specified will trigger disconnection"; §2.11.5.6: with <topicDelete><delete-persistent/>
    "the persistent queue which is associated with durable subscriptions to a topic will also be
    deleted". A consumer that keeps up is not slow."""
    slow = connect(overload_broker)
    slow_channel = subscribe(slow, "durable-sub", durable=True)
    slow_channel.basic_qos(prefetch_count=1)
    slow_got: list[bytes] = []

    def hold(_ch: BlockingChannel, _m: Basic.Deliver, _p: BasicProperties, body: bytes) -> None:
        slow_got.append(body)  # never acknowledged: the subscription backs up

    slow_channel.basic_consume("durable-sub", hold)
    fast = connect(overload_broker)
    fast_channel = subscribe(fast, "fast-sub", durable=False)
    fast_got: list[bytes] = []

    def take(_ch: BlockingChannel, _m: Basic.Deliver, _p: BasicProperties, body: bytes) -> None:
        fast_got.append(body)

    fast_channel.basic_consume("fast-sub", take, auto_ack=True)
    with connect(overload_broker) as publisher:
        publishing = publisher.channel()
        for number in range(PUBLISHED):
            publishing.basic_publish("amq.topic", TOPIC, str(number).encode())

    closed = closed_by_broker(slow, fast)

    assert closed.reply_code == 506
    assert closed.reply_text.startswith(
        "RESOURCE_ERROR - Consuming to slow: queue 'durable-sub' holds "
    )
    assert "messages, over slow_consumer.message_count (5)" in closed.reply_text
    assert slow_got == [b"0"]
    # The fast subscriber got everything and is still connected, a few checks later.
    time.sleep(1.0)
    fast.process_data_events(time_limit=0.1)
    assert fast.is_open
    assert fast_got == [str(number).encode() for number in range(PUBLISHED)]
    fast.close()

    checker = connect(overload_broker)
    checking = checker.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        checking.queue_declare("durable-sub", passive=True)
    assert missing.value.reply_code == 404
    checker.close()

    log = wait_for_log(overload_broker, "slow consumer disconnected: queue 'durable-sub' holds ")
    assert "SCD-1003 : Checking Status of Queue" in log
    assert "threshold=slow_consumer.message_count" in log


def test_threshold_alerts_are_logged_once_per_crossing(overload_broker: RunningBroker) -> None:
    """Qpid manual: "Set threshold values for queue monitor alerting to log" (here
    alerts.max_message_count, Qpid's maximumMessageCount): a warning line when a queue holds more,
    not repeated at every check while it stays over."""
    with connect(overload_broker) as connection:
        channel = connection.channel()
        channel.queue_declare("backlog")
        for number in range(10):
            channel.basic_publish("", "backlog", str(number).encode())

        alert = (
            "MESSAGE_COUNT_ALERT On Queue backlog - 10: Maximum count on queue threshold "
            "(5, alerts.max_message_count) breached."
        )
        wait_for_log(overload_broker, alert)
        time.sleep(1.5)  # five more checks, within the 30 s repeat gap
        assert overload_broker.log().count(alert) == 1
        channel.queue_delete("backlog")
