"""GET /metrics on the management listener against a real broker with a real pika client:
RabbitMQ's Prometheus plugin serves its metrics without authentication; every statistic of the
registry is there, per queue, connection and channel, read back with prometheus-client's
parser."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.brokerproc import start_broker

pytestmark = pytest.mark.integration


def test_a_scrape_without_credentials_shows_queues_connections_and_totals(tmp_path: Path) -> None:
    with start_broker(tmp_path, http=True) as broker:
        parameters = pika.ConnectionParameters(broker.host, broker.port, connection_attempts=1)
        with pika.BlockingConnection(parameters) as connection:
            channel = connection.channel()
            channel.queue_declare("orders")
            for number in range(3):
                channel.basic_publish("", "orders", f"order {number}".encode())
            channel.queue_declare("orders")  # a round trip: the publishes are in
            with urllib.request.urlopen(
                f"http://127.0.0.1:{broker.http_port}/metrics", timeout=30
            ) as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = response.read().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    [ready] = [
        sample
        for sample in families["batonmq_queue_messages_ready"].samples
        if sample.labels == {"vhost": "/", "queue": "orders"}
    ]
    assert ready.value == 3
    [published] = families["batonmq_channel_publish"].samples
    assert published.value == 3 and published.labels["vhost"] == "/"
    [connections] = families["batonmq_broker_connections"].samples
    assert connections.value == 1
    [received] = families["batonmq_connection_recv_oct"].samples
    assert received.value > 0 and "connection" in received.labels
