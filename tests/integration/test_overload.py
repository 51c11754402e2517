"""The Overload requirements with real clients: a flow-controlled queue and the red memory state
hold pika publishers back with connection.blocked, and release them; the other limit behaviours
refuse with basic.nack or a channel error that names the limit."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ConnectionBlockedTimeout, NackError

from tests.brokerproc import RunningBroker, start_broker, wait_until

BODY = b"x" * 1024


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with start_broker(
        tmp_path,
        environment={"BATONMQ__LIMITS__MAX_MESSAGES": "1000", "BATONMQ__LOG__LEVEL": "info"},
    ) as running:
        yield running


def connect(broker: RunningBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def test_a_flow_controlled_queue_blocks_a_pika_publisher_until_it_drains(
    broker: RunningBroker,
) -> None:
    """Qpid manual §1.5.1: "If a producer sends to a queue which is overfull, the broker will
    respond by instructing the client not to send any more messages ... any future attempts to
    send will block until the broker rescinds the flow control order"; pika hears it as
    connection.blocked and connection.unblocked, and loses nothing it had confirmed.

    pika's BlockingConnection runs those callbacks in `process_data_events`, not while a publish
    waits for its confirm, so the publisher looks at them once it has published everything; the
    test sees it held by the broker's CHN-1005 line."""
    with connect(broker) as admin:
        admin.channel().queue_declare(
            "capped",
            durable=True,
            arguments={"x-qpid-capacity": 20 * 1024, "x-qpid-flow-resume-capacity": 10 * 1024},
        )
    events: list[str] = []
    confirmed: list[int] = []

    def produce() -> None:
        with connect(broker) as connection:
            connection.add_on_connection_blocked_callback(
                lambda _connection, frame: events.append(frame.method.reason)
            )
            connection.add_on_connection_unblocked_callback(
                lambda _connection, _frame: events.append("unblocked")
            )
            channel = connection.channel()
            channel.confirm_delivery()
            for number in range(60):
                channel.basic_publish(
                    "",
                    "capped",
                    BODY,
                    pika.BasicProperties(delivery_mode=2, message_id=str(number)),
                )
                confirmed.append(number)
            connection.process_data_events(time_limit=0)

    producer = threading.Thread(target=produce)
    producer.start()
    wait_until(lambda: "CHN-1005" in broker.log(), "the publisher to be held")
    time.sleep(0.5)
    assert 20 <= len(confirmed) < 60  # held once the queue went over its capacity
    received: list[int] = []
    with connect(broker) as connection:
        channel = connection.channel()
        for method, properties, _body in channel.consume("capped", inactivity_timeout=5):
            if method is None:
                break
            received.append(int(properties.message_id))
            channel.basic_ack(method.delivery_tag)
            if len(received) == 60:
                break
    producer.join(20)

    assert not producer.is_alive()
    assert events[0] == "queue 'capped' is overfull"
    assert "unblocked" in events
    assert received == list(range(60)) and confirmed == list(range(60))
    log = broker.log()
    assert "QUE-1003 : Overfull" in log and "QUE-1004 : Underfull" in log
    assert "CHN-1005 : Flow Control Enforced (Queue capped)" in log
    assert "CHN-1006 : Flow Control Removed" in log


def test_reject_newest_nacks_and_a_system_limit_closes_the_channel_naming_it(
    broker: RunningBroker,
) -> None:
    """MQ 3.5 admin guide: REJECT_NEWEST "rejects the newest messages" (a pika NackError under
    confirms); Table 2-4's system-wide limit (here limits.max_messages = 1000): "Additional messages
    will be rejected", with an error that names the limit."""
    with connect(broker) as connection:
        channel: BlockingChannel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(
            "small", arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        )
        channel.basic_publish("", "small", b"first")
        with pytest.raises(NackError):
            channel.basic_publish("", "small", b"second")

        channel.queue_declare("big")
        for _ in range(999):
            channel.basic_publish("", "big", b"m")
        with pytest.raises(ChannelClosedByBroker) as closed:
            channel.basic_publish("", "big", b"one too many")
    assert closed.value.reply_code == 406
    assert closed.value.reply_text == (
        "PRECONDITION_FAILED - message refused: the broker holds 1000 messages, its limit is "
        "1000 (limits.max_messages)"
    )


def test_red_memory_blocks_publishers_from_the_start(tmp_path: Path) -> None:
    """MQ 3.5 admin guide: in the red state the broker "is out of memory", and its batch is 0: every
    publisher is blocked with connection.blocked. A budget of one byte keeps the broker in red
    from the start; the connection.blocked arrives right after connection.open-ok, before a
    BlockingConnection can add a callback, so pika's own blocked-connection timer shows it was
    received: the client gives up on a connection blocked for longer than a second."""
    running = start_broker(tmp_path, environment={"BATONMQ__MEMORY__BUDGET": "1"})
    try:
        parameters = pika.URLParameters(running.url + "?blocked_connection_timeout=1")
        with pytest.raises(ConnectionBlockedTimeout):  # noqa: PT012 - the wait is the test
            connection = pika.BlockingConnection(parameters)
            connection.channel().queue_declare("q")
            connection.process_data_events(time_limit=5)
        log = running.log()
        assert "memory state red" in log
        assert "connection blocked: memory alarm: " in log
    finally:
        running.stop()


def test_remove_low_priority_and_max_message_size_with_pika(broker: RunningBroker) -> None:
    """MQ 3.5 admin guide: "REMOVE_LOW_PRIORITY — throws out lowest priority messages according to
    age of the messages"; maxBytesPerMsg (x-max-message-size): a larger message is refused, a pika
    NackError under confirms."""
    with connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(
            "ranked",
            arguments={
                "x-max-length": 2,
                "x-overflow": "remove-low-priority",
                "x-max-priority": 9,
                "x-max-message-size": 8,
            },
        )
        for body, priority in ((b"high", 9), (b"low-old", 1), (b"low-new", 1), (b"mid", 5)):
            channel.basic_publish("", "ranked", body, pika.BasicProperties(priority=priority))
        with pytest.raises(NackError):
            channel.basic_publish("", "ranked", b"too large", pika.BasicProperties(priority=9))

        bodies = []
        while (got := channel.basic_get("ranked", auto_ack=True))[0] is not None:
            bodies.append(got[2])
    assert bodies == [b"high", b"mid"]


def test_max_producers_and_backup_consumers_with_pika(broker: RunningBroker) -> None:
    """MQ 3.5 admin guide maxNumProducers: "When this limit is reached, no new producers can be
    created"; maxNumActiveConsumers and maxNumBackupConsumers: "If an active consumer fails,
    then the first backup consumer is made active", and "New consumers will be rejected if the
    number of consumers exceeds the sum of these two attributes"."""
    with connect(broker) as connection:
        first, second = connection.channel(), connection.channel()
        first.queue_declare(
            "guarded",
            arguments={
                "x-max-producers": 1,
                "x-max-active-consumers": 1,
                "x-max-backup-consumers": 1,
            },
        )
        first.basic_publish("", "guarded", b"from the producer")
        second.basic_publish("", "guarded", b"from one too many")
        with pytest.raises(ChannelClosedByBroker) as closed:
            second.queue_declare("guarded", passive=True)
        assert closed.value.reply_code == 406
        assert "limit of 1 producers (x-max-producers)" in closed.value.reply_text

        got: dict[str, list[bytes]] = {"active": [], "backup": []}
        active, backup, third = connection.channel(), connection.channel(), connection.channel()
        active.basic_qos(prefetch_count=1)
        backup.basic_qos(prefetch_count=1)
        active.basic_consume(
            "guarded", lambda _c, _m, _p, body: got["active"].append(body), consumer_tag="active"
        )
        backup.basic_consume(
            "guarded", lambda _c, _m, _p, body: got["backup"].append(body), consumer_tag="backup"
        )
        with pytest.raises(ChannelClosedByBroker) as refused:
            third.basic_consume("guarded", lambda *_: None)
        assert "has reached its limit of 2 consumers" in refused.value.reply_text
        connection.process_data_events(time_limit=0.5)
        assert got == {"active": [b"from the producer"], "backup": []}

        active.close()  # the active consumer goes without acknowledging: the backup takes over
        connection.process_data_events(time_limit=0.5)
    assert got["backup"] == [b"from the producer"]
