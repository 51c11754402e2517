"""Record RabbitMQ's management API answers for the objects of one scenario, so that a test can
hold BatonMQ's field names to them (the management issue: "the RabbitMQ-compatibility of field
names checked against a recorded RabbitMQ response for the same objects").

    python -m benchmarks.record_management [DIRECTORY]

starts the harness's RabbitMQ with its management plugin, plays `scenario` against it (a durable
queue, a topic exchange bound to it, a user with permissions, a pika consumer, published
messages, a message got back) and writes each answer as DIRECTORY/NAME.json (by default
tests/data/rabbitmq_management). The test plays the same scenario against BatonMQ.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

import pika

from benchmarks.brokers.rabbitmq import RabbitMQ

DEFAULT_DIRECTORY: Final = Path(__file__).parents[1] / "tests" / "data" / "rabbitmq_management"

#: What the scenario reads, by the name of the file it is recorded in.
READS: Final = {
    "overview": "/api/overview",
    "whoami": "/api/whoami",
    "vhosts": "/api/vhosts",
    "users": "/api/users",
    "queues": "/api/queues/%2F",
    "queue": "/api/queues/%2F/orders",
    "exchange": "/api/exchanges/%2F/events",
    "bindings": "/api/bindings/%2F",
    "connections": "/api/connections",
    "channels": "/api/channels",
    "consumers": "/api/consumers",
    "alarms": "/api/health/checks/alarms",
    "permissions": "/api/permissions",
    "permission": "/api/permissions/%2F/reader",
    "user_permissions": "/api/users/reader/permissions",
    "vhost_permissions": "/api/vhosts/%2F/permissions",
}


def request(base: str, method: str, path: str, body: object = None) -> object:
    """One request as guest; the decoded JSON answer (None when empty)."""
    data = None if body is None else json.dumps(body).encode()
    call = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    call.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(call, timeout=30) as response:
        payload = response.read()
    return json.loads(payload) if payload else None


def scenario(http_base: str, amqp_url: str) -> dict[str, object]:
    """Make the objects, with a consumer connected, and read them back: the answers by name."""
    request(http_base, "PUT", "/api/queues/%2F/orders", {"durable": True})
    request(http_base, "PUT", "/api/queues/%2F/held", {"durable": True})
    request(http_base, "PUT", "/api/exchanges/%2F/events", {"type": "topic", "durable": True})
    request(http_base, "POST", "/api/bindings/%2F/e/events/q/orders", {"routing_key": "order.*"})
    request(http_base, "PUT", "/api/users/reader", {"password": "reader-pw", "tags": "monitoring"})
    request(
        http_base,
        "PUT",
        "/api/permissions/%2F/reader",
        {"configure": "^$", "write": "^$", "read": "^orders$"},
    )
    parameters = pika.URLParameters(amqp_url)
    parameters.client_properties = {"product": "management-scenario"}
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=10)
        for number in range(3):
            channel.basic_publish("events", "order.new", f"order {number}".encode())
        channel.basic_publish("", "held", b"held", pika.BasicProperties(content_type="text/plain"))
        channel.basic_consume("orders", lambda *_: None, consumer_tag="scenario-consumer")
        connection.process_data_events(time_limit=1)
        # Both brokers refresh their statistics at an interval (RabbitMQ: 5 s).
        time.sleep(6)
        answers = {name: request(http_base, "GET", path) for name, path in READS.items()}
        answers["get"] = request(
            http_base,
            "POST",
            "/api/queues/%2F/held/get",
            {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )
    return answers


def _management_answers(base: str, deadline: float) -> None:
    while True:
        try:
            request(base, "GET", "/api/overview")
            return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def main(argv: list[str]) -> int:
    directory = Path(argv[0]) if argv else DEFAULT_DIRECTORY
    rabbitmq = RabbitMQ(management=True)
    rabbitmq.start()
    try:
        base = f"http://127.0.0.1:{rabbitmq.management_port}"
        _management_answers(base, time.monotonic() + 60)
        answers = scenario(base, f"amqp://guest:guest@127.0.0.1:{rabbitmq.port}/%2F")
    finally:
        rabbitmq.stop()
    directory.mkdir(parents=True, exist_ok=True)
    for name, answer in answers.items():
        text = json.dumps(answer, indent=2, sort_keys=True) + "\n"
        (directory / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"recorded {len(answers)} answers of {rabbitmq.label} in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
