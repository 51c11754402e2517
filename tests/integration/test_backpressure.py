"""A consumer whose socket does not keep up is not buried: the broker stops handing it messages
while its unsent output is over the high-water mark, and resumes when the socket drains."""

from __future__ import annotations

import socket
import time

import pika
from pamqp import commands

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
