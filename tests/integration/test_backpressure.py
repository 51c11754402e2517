"""A consumer whose socket does not keep up is not buried: the broker stops handing it messages
while its unsent output is over the high-water mark, and resumes when the socket drains."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pika
from pamqp import commands, frame, header
from pamqp.body import ContentBody

from tests.brokerproc import RunningBroker
from tests.rawclient import open_connection

BODY = b"b" * 65536
COUNT = 1000


def test_a_consumer_that_stops_reading_holds_back_deliveries(broker: RunningBroker) -> None:
    """With a no-ack consumer that reads nothing, most of a 64 MB backlog stays in the queue.

    Without the output budget and the paused-writing callbacks, the whole backlog would move
    into the consumer's send buffer at once (no-ack consumers have no prefetch limit: RabbitMQ
    "no limit on the number of unacknowledged deliveries" for automatic acknowledgement). Once the
    consumer reads again, every message arrives.
    """
    queue = f"backpressure-{time.monotonic_ns()}"
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=False)
        with open_connection(broker) as slow:
            slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            slow.send_frame(commands.Basic.Consume(queue=queue, no_ack=True), 1)
            slow.expect(commands.Basic.ConsumeOk, 1)
            for _ in range(COUNT):
                channel.basic_publish("", queue, BODY)
            ready = channel.queue_declare(queue, passive=True).method.message_count
            assert ready >= COUNT // 2, f"only {ready} of {COUNT} held back"

            delivered = 0
            deadline = time.monotonic() + 60
            while delivered < COUNT:
                assert time.monotonic() < deadline, f"{delivered} of {COUNT} delivered"
                _channel, value = slow.read_frame()
                if isinstance(value, commands.Basic.Deliver):
                    delivered += 1
        channel.queue_delete(queue)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_does_not_read_its_replies_stops_being_read(
    batonmq: RunningBroker,
) -> None:
    """Reading from a client pauses while its unsent output is over the high-water mark, so a
    client cannot make the broker buffer without bound: 200 basic.get of a 1 MiB message (each
    rejected back to the queue), sent without reading a byte, would need 200 MiB of output. The
    broker's memory grows by a small multiple of the mark instead; once the client reads, every
    reply arrives."""
    assert batonmq.process is not None
    pid = batonmq.process.pid
    body = b"m" * (1 << 20)
    with open_connection(batonmq) as client:
        queue = client.declare_queue(1)
        client.publish(1, body, routing_key=queue)
        client.send_frame(commands.Basic.Get(queue=queue), 1)
        client.expect(commands.Basic.GetOk, 1)
        before = rss_bytes(pid)
        requests = b"".join(
            frame.marshal(commands.Basic.Reject(delivery_tag=tag, requeue=True), 1)
            + frame.marshal(commands.Basic.Get(queue=queue), 1)
            for tag in range(1, 201)
        )
        client.send(requests)
        time.sleep(2)
        grown = rss_bytes(pid) - before
        assert grown < 64 * 1024 * 1024, f"broker grew by {grown >> 20} MiB"

        got = 0
        deadline = time.monotonic() + 60
        while got < 200:
            assert time.monotonic() < deadline, f"{got} of 200 replies"
            _channel, value = client.read_frame()
            if isinstance(value, commands.Basic.GetOk):
                got += 1


def test_a_client_that_publishes_and_consumes_on_one_connection_is_not_deadlocked(
    broker: RunningBroker,
) -> None:
    """A client that writes with blocking sends and reads only afterwards (py-amqp publishes
    with sendall) must get through: deliveries to it stop while its socket is backed up, but
    its publishes are still read, so its sends complete and then every message arrives."""
    count, body = 600, b"p" * 65536
    with open_connection(broker) as client:
        queue = client.declare_queue(1)
        client.send_frame(commands.Basic.Consume(queue=queue, no_ack=True), 1)
        client.expect(commands.Basic.ConsumeOk, 1)
        one = (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
            + frame.marshal(header.ContentHeader(0, len(body)), 1)
            + frame.marshal(ContentBody(body), 1)
        )
        client.sock.settimeout(20)
        for _ in range(count):
            client.sock.sendall(one)  # raises TimeoutError if the broker stopped reading
        delivered = 0
        deadline = time.monotonic() + 60
        while delivered < count:
            assert time.monotonic() < deadline, f"{delivered} of {count} delivered"
            _channel, value = client.read_frame()
            if isinstance(value, commands.Basic.Deliver):
                delivered += 1
