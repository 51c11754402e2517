"""Names are any UTF-8 a client declares (up to a short string's 255 octets), not just the
characters client libraries' own validation likes."""

from __future__ import annotations

import uuid

import pika
import pytest

from tests.brokerproc import RunningBroker


@pytest.mark.parametrize("stem", ["orders!", "tâches", "ключ.*", "x" * 200])
def test_messages_flow_through_exchanges_and_queues_with_any_utf8_name(
    broker: RunningBroker, stem: str
) -> None:
    """RabbitMQ accepts arbitrary UTF-8 in exchange, queue and routing-key names (AMQP 0-9-1
    domains exchange-name and queue-name are short strings). A consumer on another connection
    receives the message, and queue.declare-ok names the queue as declared."""
    name = f"{stem}-{uuid.uuid4().hex[:8]}"
    parameters = pika.URLParameters(broker.url)
    with (
        pika.BlockingConnection(parameters) as publisher,
        pika.BlockingConnection(parameters) as consumer,
    ):
        declaring = publisher.channel()
        declaring.exchange_declare(name, "direct", auto_delete=True)
        assert declaring.queue_declare(name, exclusive=False).method.queue == name
        try:
            declaring.queue_bind(name, name, routing_key=name)
            received: list[tuple[str, str, bytes]] = []
            consuming = consumer.channel()
            consuming.basic_consume(
                name,
                lambda _ch, method, _props, body: received.append(
                    (method.exchange, method.routing_key, body)
                ),
                auto_ack=True,
            )
            declaring.basic_publish(name, name, b"hello")
            consumer.process_data_events(time_limit=2)
            assert received == [(name, name, b"hello")]
        finally:
            declaring.queue_delete(name)
