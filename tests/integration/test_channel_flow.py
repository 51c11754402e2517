"""channel.flow from the client pauses and restarts deliveries to that channel."""

from __future__ import annotations

import time

import pika

from tests.brokerproc import RunningBroker


def test_flow_off_holds_deliveries_until_flow_on(batonmq: RunningBroker) -> None:
    """channel.flow(active=false) stops deliveries to the channel; flow(active=true) resumes them.

    AMQP 0-9-1 channel.flow: "This method asks the peer to pause or restart the flow of content
    data sent by a consumer ... The peer that receives a disable flow method MUST stop sending
    content frames", and flow-ok carries the state now in force. RabbitMQ differs: it refuses
    active=false with 540 NOT_IMPLEMENTED, so this test runs against BatonMQ only.
    """
    with pika.BlockingConnection(pika.URLParameters(batonmq.url)) as connection:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        received: list[bytes] = []
        channel.basic_consume(queue, lambda _ch, _m, _p, body: received.append(body), auto_ack=True)
        assert channel.flow(False) is False

        publisher = connection.channel()
        publisher.basic_publish("", queue, b"held")
        connection.process_data_events(time_limit=0.5)
        assert received == []
        assert publisher.queue_declare(queue, passive=True).method.message_count == 1

        assert channel.flow(True) is True
        deadline = time.monotonic() + 5
        while not received and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
        assert received == [b"held"]
