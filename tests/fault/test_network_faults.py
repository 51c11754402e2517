"""The network fails under real clients, through the tests' TCP fault proxy, with a real broker
on a real SQLite file: a publisher's stream is cut in the middle of a frame, a consumer is
blackholed, a consumer is cut while large deliveries are on their way. Every check counts the
messages the broker took (confirmed) or handed out, and proves none was lost.

Hardening, "The test harness": "tests through it: a connection cut mid-publish loses no
confirmed message and leaves no half message in a queue; a blackholed client is detected by
heartbeat within two heartbeat intervals and its unacked messages are requeued; a consumer cut
mid-delivery gets its messages back on another connection."
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import aiormq
import pika
import pytest
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from tests.brokerproc import BrokerLife, RunningBroker, log_problems, wait_until
from tests.faultproxy import Blackhole, Cut, Drop, FaultProxy

pytestmark = pytest.mark.integration

QUEUE = "network-faults"
PERSISTENT = pika.BasicProperties(delivery_mode=2)
#: Seconds: the heartbeat the broker proposes and the blackholed consumer asks for.
HEARTBEAT = 2
#: Seconds: the time the requeue and the new delivery may take on top of the two intervals
#: (moments on loopback), and the test's own polling.
HEARTBEAT_MARGIN = 0.5


def body(number: int) -> bytes:
    """Message `number`'s body: its number, then bytes derived from it, 20-21 KB long, so that
    a half-stored body cannot pass for a whole one."""
    filler = hashlib.sha256(number.to_bytes(4, "big")).digest()
    size = 20_000 + number % 1000
    return number.to_bytes(4, "big") + (filler * (size // len(filler) + 1))[:size]


def number_of(whole_body: bytes) -> int:
    """The number of a message whose body is whole and unchanged; an AssertionError otherwise."""
    number = int.from_bytes(whole_body[:4], "big")
    assert whole_body == body(number), f"message {number}'s body is not what was sent"
    return number


def frame_around(stream: bytes, offset: int) -> tuple[int, int] | None:
    """The (start, end) of the AMQP frame in a client's `stream` (protocol header first) that
    `offset` falls strictly inside; None if `offset` is at a frame boundary."""
    position = len(b"AMQP\x00\x00\x09\x01")
    while position < offset:
        size = int.from_bytes(stream[position + 3 : position + 7], "big")
        end = position + 7 + size + 1  # type, channel, size; payload; frame-end octet
        if offset < end:
            return position, end
        position = end
    return None


def declare_queue(broker: RunningBroker) -> None:
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(broker.url))) as connection:
        connection.channel().queue_declare(QUEUE, durable=True)


def publish(broker: RunningBroker, numbers: range) -> None:
    """Publish messages `numbers` as persistent, each confirmed, on a direct connection."""
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(broker.url))) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for number in numbers:
            channel.basic_publish("", QUEUE, body(number), PERSISTENT)


async def publish_until_cut(url: str, count: int) -> set[int]:
    """Publish `count` numbered persistent messages pipelined with confirms until the
    connection breaks; the numbers the broker confirmed."""
    confirmed: set[int] = set()
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        window = asyncio.Semaphore(10)
        properties = aiormq.spec.Basic.Properties(delivery_mode=2)

        async def send(number: int) -> None:
            try:
                confirmation = await channel.basic_publish(
                    body(number), routing_key=QUEUE, properties=properties
                )
            finally:
                window.release()
            if isinstance(confirmation, commands.Basic.Ack):
                confirmed.add(number)

        sent = []
        for number in range(count):
            await window.acquire()
            if connection.is_closed:
                break
            sent.append(asyncio.ensure_future(send(number)))
        await asyncio.gather(*sent, return_exceptions=True)
    except (aiormq.exceptions.AMQPError, ConnectionError):
        pass
    finally:
        if not connection.is_closed:
            await connection.close()
    return confirmed


def queued_numbers(broker: RunningBroker) -> list[int]:
    """The numbers of the messages in the queue, read with basic.get on a direct connection
    without acknowledging them (closing the connection puts them back); each body must be
    whole."""
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(broker.url))) as connection:
        channel = connection.channel()
        numbers = []
        while True:
            method, _properties, whole_body = channel.basic_get(QUEUE, auto_ack=False)
            if method is None:
                return numbers
            numbers.append(number_of(whole_body))


def test_a_cut_mid_publish_loses_no_confirmed_message_and_leaves_no_half_message(
    tmp_path: Path,
):
    """Hardening: "a connection cut mid-publish loses no confirmed message and leaves no half
    message in a queue". AMQP 0-9-1 §4.2.6: "A peer that receives an incomplete or
    badly-formatted content MUST raise a connection exception": a content whose frames stop
    coming is no message. The proxy cuts the publisher's stream inside a frame; every
    confirmed message is in the queue, whole, once, before and after a restart, and the broker
    logged no error."""
    life = BrokerLife(tmp_path, {"BATONMQ__PERSIST__STORE": "sqlite"})
    try:
        broker = life.current
        declare_queue(broker)
        with FaultProxy(broker.host, broker.port, record_upstream=True) as proxy:
            # About 150 messages into the stream; each is one frame of 20 KB in the main.
            proxy.set_mode(Cut(after_bytes=3_012_345))
            confirmed = asyncio.run(publish_until_cut(proxy.url(broker), 300))
            cut = proxy.connections[0]
        assert cut.cut_at is not None
        assert frame_around(bytes(cut.upstream), cut.cut_at) is not None, "cut on a boundary"
        assert confirmed, "nothing was confirmed before the cut"

        stored = queued_numbers(broker)
        assert len(stored) == len(set(stored)), "a message is in the queue twice"
        assert confirmed <= set(stored), f"confirmed but lost: {sorted(confirmed - set(stored))}"
        assert log_problems(broker.log()) == []

        restarted = life.restart(kill=False)
        after_restart = queued_numbers(restarted)
        assert sorted(after_restart) == sorted(stored)
    finally:
        life.stop()


@pytest.fixture
def heartbeat_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker that proposes a heartbeat of HEARTBEAT seconds."""
    life = BrokerLife(tmp_path, {"BATONMQ__AMQP__HEARTBEAT": str(HEARTBEAT)})
    try:
        yield life.current
    finally:
        life.stop()


def receive(channel: BlockingChannel, count: int) -> list[tuple[int, bool]]:
    """`count` deliveries from QUEUE, not acknowledged: (number, redelivered)."""
    deliveries = []
    for method, _properties, whole_body in channel.consume(QUEUE, inactivity_timeout=30):
        assert method is not None, f"only {len(deliveries)} of {count} deliveries came"
        deliveries.append((number_of(whole_body), method.redelivered))
        if len(deliveries) == count:
            return deliveries
    raise AssertionError("the consumer was cancelled")


def abandon(connection: BlockingConnection, proxy: FaultProxy) -> None:
    """Drop a connection that the proxy has cut off, and let pika notice."""
    proxy.set_mode(Drop())
    with contextlib.suppress(pika.exceptions.AMQPError):
        connection.close()


def test_a_blackholed_consumer_is_detected_by_heartbeat_and_its_messages_requeued(
    heartbeat_broker: RunningBroker,
):
    """Hardening: "a blackholed client is detected by heartbeat within two heartbeat intervals
    and its unacked messages are requeued". AMQP 0-9-1 §4.2.7: "If a peer detects no incoming
    traffic (i.e. received octets) for two heartbeat intervals or longer, it should close the
    connection ... and log an error"; RabbitMQ's Heartbeats guide: "After two missed
    heartbeats, the peer is considered to be unreachable." Hardening, defect 6: every connection
    the broker closes is logged once.
    """
    broker = heartbeat_broker
    declare_queue(broker)
    publish(broker, range(5))
    with FaultProxy(broker.host, broker.port) as proxy:
        consumer = pika.BlockingConnection(
            pika.URLParameters(proxy.url(broker, f"heartbeat={HEARTBEAT}"))
        )
        held = receive(consumer.channel(), 5)
        assert sorted(number for number, _ in held) == list(range(5))

        proxy.set_mode(Blackhole())
        blackholed_at = time.monotonic()
        with contextlib.closing(pika.BlockingConnection(pika.URLParameters(broker.url))) as direct:
            requeued = receive(direct.channel(), 5)
            detected_within = time.monotonic() - blackholed_at
        abandon(consumer, proxy)
        peer = proxy.connections[0].broker_side_address

    assert sorted(number for number, _ in requeued) == list(range(5))
    assert all(redelivered for _, redelivered in requeued)
    assert detected_within <= 2 * HEARTBEAT + HEARTBEAT_MARGIN
    close_lines = [
        line
        for line in broker.log().splitlines()
        if f"peer={peer}" in line and re.search(r"clos|lost", line)
    ]
    assert len(close_lines) == 1, close_lines
    assert "heartbeat" in close_lines[0]


def test_a_consumer_cut_mid_delivery_gets_its_messages_back_on_another_connection(
    heartbeat_broker: RunningBroker,
):
    """Hardening: "a consumer cut mid-delivery gets its messages back on another connection".
    RabbitMQ's Consumer Acknowledgements guide: a consumer whose connection closes before it
    acknowledged a delivery has it requeued, and the redelivery carries the redelivered flag
    (AMQP 0-9-1, basic.deliver's redelivered: "This indicates that the message has been
    previously delivered to this or another client."). Deliveries of 512 KB
    span several frames each (frame_max 128 KB). The consumer acknowledges three messages;
    the third acknowledgement makes room for one more delivery, which the proxy cuts half-way.
    The acknowledged messages stay gone; every other one comes back on another connection,
    whole, once, and those the broker had delivered come back marked redelivered."""
    broker = heartbeat_broker
    size = 512 * 1024
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(broker.url))) as setup:
        channel = setup.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        for number in range(10):
            channel.basic_publish("", QUEUE, large_body(number, size), PERSISTENT)

    with FaultProxy(broker.host, broker.port) as proxy:
        consumer = pika.BlockingConnection(pika.URLParameters(proxy.url(broker)))
        channel = consumer.channel()
        channel.basic_qos(prefetch_count=4)
        deliveries = channel.consume(QUEUE, inactivity_timeout=30)
        seen = []
        for _ in range(3):
            method, _properties, whole_body = next(deliveries)
            assert method is not None, "the deliveries stopped"
            seen.append(int.from_bytes(whole_body[:4], "big"))
            if len(seen) < 3:
                channel.basic_ack(method.delivery_tag)
        # The broker handles a channel's frames in order, so once qos-ok is back it has taken
        # both acknowledgements, and the deliveries they made room for (messages 4 and 5)
        # came before qos-ok: nothing more comes until the next acknowledgement.
        channel.basic_qos(prefetch_count=4)
        proxy.set_mode(Cut(after_bytes=size // 2, to_client=True))
        channel.basic_ack(method.delivery_tag)  # message 2's: room for message 6, cut half-way
        wait_until(lambda: proxy.connections[0].cut_at is not None, "the cut")
        abandon(consumer, proxy)
    assert seen == [0, 1, 2]

    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(broker.url))) as direct:
        channel = direct.channel()
        back = []
        for method, _properties, whole_body in channel.consume(QUEUE, inactivity_timeout=30):
            assert method is not None, f"only {len(back)} of 7 messages came back"
            number = int.from_bytes(whole_body[:4], "big")
            assert whole_body == large_body(number, size)
            back.append((number, method.redelivered))
            channel.basic_ack(method.delivery_tag)
            if len(back) == 7:
                break
        rest = channel.queue_declare(QUEUE, durable=True, passive=True).method.message_count
    assert sorted(number for number, _ in back) == list(range(3, 10))
    assert rest == 0
    # 3 to 5 were delivered whole, 6 in part: each was delivered, so each is redelivered.
    assert sorted(number for number, redelivered in back if redelivered) == [3, 4, 5, 6]


def large_body(number: int, size: int) -> bytes:
    """Message `number`'s body of `size` bytes: its number, over and over."""
    return number.to_bytes(4, "big") * (size // 4)
