"""GET /metrics on the management listener against a real broker with a real pika client:
RabbitMQ's Prometheus plugin serves its metrics without authentication; every statistic of the
registry is there, summed, and per queue, connection and channel on /metrics/per-object, read
back with prometheus-client's parser."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pika
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.brokerproc import start_broker

pytestmark = pytest.mark.integration


def scrape(port: int, path: str) -> dict[str, Metric]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_a_scrape_without_credentials_shows_queues_connections_and_totals(
    tmp_path: Path, workers_environment: dict[str, str]
) -> None:
    """RabbitMQ's Prometheus plugin: the default endpoint aggregates (one sample per metric,
    summed over the objects); /metrics/per-object has a sample per queue, connection and
    channel."""
    with start_broker(tmp_path, http=True, environment=workers_environment) as broker:
        parameters = pika.ConnectionParameters(broker.host, broker.port, connection_attempts=1)
        with pika.BlockingConnection(parameters) as connection:
            channel = connection.channel()
            for name, count in (("orders", 3), ("invoices", 2)):
                channel.queue_declare(name)
                for number in range(count):
                    channel.basic_publish("", name, f"{name} {number}".encode())
            channel.queue_declare("orders")  # a round trip: the publishes are in
            totals = scrape(broker.http_port, "/metrics")
            families = scrape(broker.http_port, "/metrics/per-object")
    [ready] = totals["batonmq_queue_messages_ready"].samples
    assert (ready.labels, ready.value) == ({}, 5)
    [published] = totals["batonmq_channel_publish"].samples
    assert (published.labels, published.value) == ({}, 5)

    ready_by_queue = {
        sample.labels["queue"]: sample.value
        for sample in families["batonmq_queue_messages_ready"].samples
        if sample.labels["vhost"] == "/"
    }
    assert (ready_by_queue["orders"], ready_by_queue["invoices"]) == (3, 2)
    [published] = families["batonmq_channel_publish"].samples
    assert published.value == 5 and published.labels["vhost"] == "/"
    [connections] = families["batonmq_connections"].samples
    assert connections.value == 1
    [received] = families["batonmq_connection_recv_oct"].samples
    assert received.value > 0 and "connection" in received.labels


def test_global_totals_keep_what_closed_channels_counted(
    tmp_path: Path, workers_environment: dict[str, str]
) -> None:
    """RabbitMQ's Prometheus plugin names the broker's totals `rabbitmq_global_messages_*` and
    its open objects `rabbitmq_connections` / `_channels` / `_queues`; BatonMQ serves them as
    `batonmq_...`. A total counts every channel's messages, including those of channels that
    have closed since (a sum over open channels would drop them)."""
    with start_broker(tmp_path, http=True, environment=workers_environment) as broker:
        parameters = pika.ConnectionParameters(broker.host, broker.port, connection_attempts=1)
        with pika.BlockingConnection(parameters) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("orders")
            for number in range(4):
                channel.basic_publish("", "orders", f"order {number}".encode())
            channel.close()
            connection.channel().queue_declare("invoices")
            totals = scrape(broker.http_port, "/metrics")
    values = {
        name: totals[name].samples[0].value
        for name in ("batonmq_connections", "batonmq_channels", "batonmq_queues")
    }
    assert values == {"batonmq_connections": 1, "batonmq_channels": 1, "batonmq_queues": 2}
    [received] = totals["batonmq_global_messages_received"].samples
    assert received.name == "batonmq_global_messages_received_total"
    assert received.value == 4
    [confirmed] = totals["batonmq_global_messages_confirmed"].samples
    assert confirmed.value == 4


def test_the_store_latency_is_served(tmp_path: Path, workers_environment: dict[str, str]) -> None:
    """The management issue's metrics: "process memory and store latency". The store's batches
    are counted with the time their writes took, so that a rate of one over the other is the
    mean commit time, as Prometheus users divide rates."""
    with start_broker(tmp_path, http=True, environment=workers_environment) as broker:
        parameters = pika.ConnectionParameters(broker.host, broker.port, connection_attempts=1)
        with pika.BlockingConnection(parameters) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("kept", durable=True)
            for number in range(3):
                channel.basic_publish(
                    "", "kept", b"%d" % number, pika.BasicProperties(delivery_mode=2)
                )
            totals = scrape(broker.http_port, "/metrics")
    [commits] = totals["batonmq_store_commits"].samples
    [seconds] = totals["batonmq_store_commit_seconds"].samples
    [failures] = totals["batonmq_store_failures"].samples
    assert commits.value >= 2  # the declaration, then the confirmed messages
    assert seconds.value > 0
    assert failures.value == 0
