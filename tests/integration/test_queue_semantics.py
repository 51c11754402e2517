"""TTL, dead-lettering, length limits, the delivery limit, priorities and queue expiry with real
clients over real sockets: aio-pika for dead-lettering with x-death, kombu for priority queues,
pika for x-expires and the length limits.

Written to pass against RabbitMQ 3.10.8 too (`--amqp-url`), except where a docstring says
BatonMQ differs; docstrings quote RabbitMQ's guide. Names are unique per test.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import aio_pika
import pika
import pika.exceptions
import pytest
from kombu.connection import Connection
from kombu.entity import Exchange, Queue

from tests.brokerproc import RunningBroker, start_broker


def unique(kind: str) -> str:
    return f"test.semantics.{kind}.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def pika_channel(
    broker: RunningBroker,
) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    parameters = pika.URLParameters(broker.url)
    connection = pika.BlockingConnection(parameters)
    try:
        yield connection.channel()
    finally:
        if connection.is_open:
            connection.close()


# Dead-lettering with aio-pika ---------------------------------------------------------------


async def test_a_rejected_message_reaches_the_dead_letter_queue_with_x_death(
    broker: RunningBroker,
) -> None:
    """DLX: a message "negatively acknowledged by a consumer using basic.reject ... with requeue
    parameter set to false" is republished to the queue's dead-letter exchange; x-death holds
    queue, reason, time, exchange, routing-keys and count, and x-first-death-* are added."""
    work, dead, dlx = unique("work"), unique("dead"), unique("dlx")
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(dlx, aio_pika.ExchangeType.FANOUT)
        dead_queue = await channel.declare_queue(dead)
        await dead_queue.bind(exchange)
        work_queue = await channel.declare_queue(work, arguments={"x-dead-letter-exchange": dlx})
        sent = aio_pika.Message(
            b"payload",
            headers={"app": "orders", "attempt": 3},
            content_type="application/json",
            correlation_id="c-1",
        )
        await channel.default_exchange.publish(sent, routing_key=work)
        received = await work_queue.get(timeout=5)
        await received.reject(requeue=False)
        before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)

        dead_letter = await _get_eventually(dead_queue)
        await dead_letter.ack()
        assert dead_letter.body == b"payload"
        assert (dead_letter.exchange, dead_letter.routing_key) == (dlx, work)
        assert (dead_letter.content_type, dead_letter.correlation_id) == ("application/json", "c-1")
        headers = dead_letter.headers
        assert (headers["app"], headers["attempt"]) == ("orders", 3)
        [death] = headers["x-death"]
        assert isinstance(death, dict)
        assert {key: death[key] for key in ("count", "reason", "queue", "exchange")} == {
            "count": 1,
            "reason": "rejected",
            "queue": work,
            "exchange": "",
        }
        assert death["routing-keys"] == [work]
        died = death["time"]
        assert isinstance(died, datetime.datetime)
        assert abs(died.replace(tzinfo=datetime.UTC) - before) <= datetime.timedelta(seconds=5)
        assert (
            headers["x-first-death-reason"],
            headers["x-first-death-queue"],
            headers["x-first-death-exchange"],
        ) == ("rejected", work, "")
        await work_queue.delete()
        await dead_queue.delete()
        await exchange.delete()


async def test_a_retry_queue_with_ttl_dead_letters_back_with_growing_counts(
    broker: RunningBroker,
) -> None:
    """The delayed-retry pattern: a queue with x-message-ttl and no consumer dead-letters its
    expired messages (reason expired, "original-expiration" only for a per-message TTL) to the
    work queue; a repeated death "will be incremented and ... moved to the beginning"."""
    work, retry = unique("work"), unique("retry")
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        work_queue = await channel.declare_queue(
            work,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": retry},
        )
        retry_queue = await channel.declare_queue(
            retry,
            arguments={
                "x-message-ttl": 100,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": work,
            },
        )
        await channel.default_exchange.publish(
            aio_pika.Message(b"job", expiration=60), routing_key=work
        )
        for attempt in (1, 2):
            received = await _get_eventually(work_queue)
            deaths = (received.headers or {}).get("x-death")
            if attempt == 2:
                assert isinstance(deaths, list)
                counts = {(d["queue"], d["reason"]): d["count"] for d in deaths}  # type: ignore[index]
                assert counts == {(work, "rejected"): 1, (retry, "expired"): 1}
                assert deaths[0]["queue"] == retry  # type: ignore[index]
                assert received.expiration is None
                assert deaths[1]["original-expiration"] == "60000"  # type: ignore[index]
            await received.reject(requeue=False)
        await work_queue.delete(if_unused=False, if_empty=False)
        await retry_queue.delete(if_unused=False, if_empty=False)


async def _get_eventually(
    queue: aio_pika.abc.AbstractQueue, timeout: float = 5.0
) -> aio_pika.abc.AbstractIncomingMessage:
    deadline = time.monotonic() + timeout
    while True:
        message = await queue.get(fail=False)
        if message is not None:
            return message
        assert time.monotonic() < deadline, "no message arrived"
        await asyncio.sleep(0.02)


# Priorities with kombu ----------------------------------------------------------------------


def test_kombu_priority_queue_delivers_higher_priorities_first(broker: RunningBroker) -> None:
    """x-max-priority (kombu's Queue(max_priority=...)): "messages with a higher priority" are
    delivered first, FIFO within a priority, a priority above the maximum counts as the
    maximum."""
    name = unique("priority")
    url = f"pyamqp://{broker.username}:{broker.password}@{broker.host}:{broker.port}/"
    url += quote(broker.vhost, safe="")
    with Connection(url, transport_options={"confirm_publish": True}) as connection:
        queue = Queue(name, Exchange(""), routing_key=name, max_priority=5)
        bound = queue(connection.default_channel)
        bound.declare()
        producer = connection.Producer()
        sent = [("low-a", 0), ("top", 9), ("mid", 3), ("low-b", 0), ("high", 5)]
        for body, priority in sent:
            producer.publish(body, routing_key=name, priority=priority, serializer="raw")
        received = []
        while (message := bound.get(no_ack=True)) is not None:
            received.append(message.body)
        assert received == ["top", "high", "mid", "low-a", "low-b"]
        bound.delete()


# Length limits and queue expiry with pika ---------------------------------------------------


def test_reject_publish_nacks_a_confirmed_publish(
    pika_channel: pika.adapters.blocking_connection.BlockingChannel,
) -> None:
    """x-overflow reject-publish: "If publisher confirms are enabled, the publisher will be
    informed of the reject via a basic.nack"."""
    name = unique("full")
    channel = pika_channel
    channel.queue_declare(name, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    channel.confirm_delivery()
    channel.basic_publish("", name, b"1")
    channel.basic_publish("", name, b"2")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", name, b"3")
    assert channel.queue_declare(name, passive=True).method.message_count == 2
    channel.queue_delete(name)


def test_drop_head_keeps_the_newest(
    pika_channel: pika.adapters.blocking_connection.BlockingChannel,
) -> None:
    """x-max-length with the default overflow: "the oldest messages in the queue will be
    dropped or dead-lettered to make room for new messages"."""
    name = unique("newest")
    channel = pika_channel
    channel.queue_declare(name, arguments={"x-max-length": 2})
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", name, body)
    got = []
    while True:
        method, _properties, body = channel.basic_get(name, auto_ack=True)
        if method is None:
            break
        got.append(body)
    assert got == [b"2", b"3"]
    channel.queue_delete(name)


def test_an_unused_queue_expires(
    pika_channel: pika.adapters.blocking_connection.BlockingChannel,
) -> None:
    """x-expires: "how long a queue can be unused for before it is automatically deleted"; a
    passive declare of the deleted queue is then 404."""
    name = unique("expires")
    channel = pika_channel
    channel.queue_declare(name, arguments={"x-expires": 300})
    channel.basic_publish("", name, b"kept?")
    channel.connection.sleep(1.0)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(name, passive=True)
    assert closed.value.reply_code == 404


def test_a_used_queue_does_not_expire(
    pika_channel: pika.adapters.blocking_connection.BlockingChannel,
) -> None:
    """x-expires: a queue with a consumer is not unused."""
    name = unique("used")
    channel = pika_channel
    channel.queue_declare(name, arguments={"x-expires": 300})
    tag = channel.basic_consume(name, lambda *_: None)
    channel.connection.sleep(0.8)
    assert channel.queue_declare(name, passive=True).method.consumer_count == 1
    channel.basic_cancel(tag)
    channel.queue_delete(name)


def test_the_delivery_limit_dead_letters_a_poison_message(
    batonmq: RunningBroker,
) -> None:
    """x-delivery-limit: once a message "has been delivered unsuccessfully more than this many
    times it will be dropped or dead-lettered" (reason delivery_limit), and redeliveries carry
    x-delivery-count. RabbitMQ 3.10 does this for quorum queues only; BatonMQ's classic queues
    do it too."""
    work, dead = unique("poison"), unique("dead")
    connection = pika.BlockingConnection(pika.URLParameters(batonmq.url))
    channel = connection.channel()
    channel.queue_declare(dead)
    channel.queue_declare(
        work,
        arguments={
            "x-delivery-limit": 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead,
        },
    )
    channel.basic_publish("", work, b"poison")
    counts = []
    for _ in range(2):
        method, properties, _body = channel.basic_get(work)
        assert method is not None
        counts.append((properties.headers or {}).get("x-delivery-count"))
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert counts == [None, 1]
    assert channel.basic_get(work)[0] is None
    method, properties, body = channel.basic_get(dead, auto_ack=True)
    assert body == b"poison"
    assert properties.headers["x-death"][0]["reason"] == "delivery_limit"
    connection.close()


def test_the_periodic_sweep_removes_expired_messages_behind_the_head(tmp_path: Path) -> None:
    """The Queue semantics requirements: "expired messages are removed at the head and by a periodic
    sweep (the imq.message.expiration.interval of MQ 3.5 admin guide, default 60 s, configurable)":
    with `message.expiration_interval` at 0.2 s, a short-lived message behind a long-lived head is
    dead-lettered by the sweep, and the log says how many expired."""
    broker = start_broker(tmp_path, environment={"BATONMQ__MESSAGE__EXPIRATION_INTERVAL": "0.2"})
    try:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("expired")
        channel.queue_declare(
            "swept",
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "expired"},
        )
        channel.basic_publish("", "swept", b"head", pika.BasicProperties(expiration="600000"))
        channel.basic_publish("", "swept", b"short", pika.BasicProperties(expiration="50"))
        connection.sleep(0.8)
        assert channel.queue_declare("swept", passive=True).method.message_count == 1
        _method, _properties, body = channel.basic_get("expired", auto_ack=True)
        assert body == b"short"
        connection.close()
        assert "expired 1 messages" in broker.log()
    finally:
        broker.stop()
