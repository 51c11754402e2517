"""Messages over the management HTTP API against a real broker, checked with real pika clients:
RabbitMQ's POST /api/queues/{vhost}/{name}/get and POST /api/exchanges/{vhost}/{name}/publish
(its management HTTP API reference), and the Qpid broker manual's management console
operations (browse, move, copy, delete messages) and imqcmd pause dst / resume dst."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.brokerproc import RunningBroker, start_broker, wait_until
from tests.httpapi import call

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def connect(broker: RunningBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(broker.host, broker.port, connection_attempts=1)
    )


@pytest.fixture
def broker(tmp_path: Path, workers_environment: dict[str, str]) -> Iterator[RunningBroker]:
    """A broker of one process, and one of two workers: the API answers for the whole broker."""
    with start_broker(tmp_path, http=True, environment=workers_environment) as running:
        yield running


def fill(broker: RunningBroker, queue: str, *bodies: str, **arguments: object) -> None:
    """Publish persistent `bodies` to a durable `queue`, each confirmed: in the queue once
    committed (a publish not yet confirmed is seen by nobody)."""
    with connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True, arguments=arguments or None)
        for body in bodies:
            channel.basic_publish("", queue, body.encode(), PERSISTENT)


def drain(broker: RunningBroker, queue: str) -> list[tuple[bytes, bool]]:
    """What is left in `queue`, as pika's basic.get finds it: (body, redelivered)."""
    left = []
    with connect(broker) as connection:
        channel = connection.channel()
        while True:
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return left
            left.append((body, method.redelivered))


def get(broker: RunningBroker, queue: str, count: int, ackmode: str, **more: object) -> list:
    status, taken = call(
        broker,
        "POST",
        f"/api/queues/%2F/{queue}/get",
        {"count": count, "ackmode": ackmode, "encoding": "auto", **more},
    )
    assert status == 200 and isinstance(taken, list)
    return taken


def test_get_with_ack_requeue_true_leaves_the_messages_marked_redelivered(
    broker: RunningBroker,
) -> None:
    """RabbitMQ management "Get messages": "ack_requeue_true" takes them with basic.get and
    nacks them with requeue, so they stay in place, redelivered; the answer has RabbitMQ's
    fields, message_count being the ready count after each get."""
    fill(broker, "q", "one", "two", "three")
    taken = get(broker, "q", 2, "ack_requeue_true")
    assert [message["payload"] for message in taken] == ["one", "two"]
    first = taken[0]
    assert first == {
        "payload_bytes": 3,
        "redelivered": False,
        "exchange": "",
        "routing_key": "q",
        "message_count": 2,
        "properties": {"delivery_mode": 2},
        "payload": "one",
        "payload_encoding": "string",
    }
    assert taken[1]["message_count"] == 1
    assert drain(broker, "q") == [(b"one", True), (b"two", True), (b"three", False)]


def test_get_with_ack_requeue_false_removes_the_messages_for_good(tmp_path: Path) -> None:
    """ack_requeue_false is basic.get with no-ack: the messages are gone, and the answer comes
    once that is committed (a kill -9 right after it does not bring them back)."""
    with start_broker(tmp_path, http=True) as broker:
        fill(broker, "q", "one", "two", "three")
        taken = get(broker, "q", 2, "ack_requeue_false")
        assert [message["payload"] for message in taken] == ["one", "two"]
        broker.kill()
    with start_broker(tmp_path, http=True) as again:
        assert drain(again, "q") == [(b"three", True)]


def test_get_with_reject_requeue_false_dead_letters(broker: RunningBroker) -> None:
    """reject_requeue_false rejects what it took without requeue: RabbitMQ's dead-lettering
    ("the message is rejected ... with requeue parameter set to false") sends it on."""
    fill(broker, "dead", "")
    fill(
        broker,
        "q",
        "one",
        "two",
        **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )
    get(broker, "q", 1, "reject_requeue_false")
    assert drain(broker, "q") == [(b"two", False)]
    assert [body for body, _ in drain(broker, "dead")] == [b"", b"one"]


def test_get_encodes_binary_payloads_in_base64_and_truncates(broker: RunningBroker) -> None:
    """RabbitMQ: "auto" gives the payload as a string when it is UTF-8, else base64;
    "truncate" cuts the payload, payload_bytes stays the whole size."""
    with connect(broker) as connection:
        channel = connection.channel()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"\xff\xfe binary")
        channel.basic_publish("", "q", b"long text")
    binary, text = get(broker, "q", 5, "ack_requeue_false", truncate=4)
    assert (binary["payload"], binary["payload_encoding"]) == (
        base64.b64encode(b"\xff\xfe b").decode(),
        "base64",
    )
    assert (text["payload"], text["payload_bytes"]) == ("long", 9)
    assert (
        call(
            broker,
            "POST",
            "/api/queues/%2F/q/get",
            {"count": 1, "ackmode": "x", "encoding": "auto"},
        )[0]
        == 400
    )


def test_publish_over_http_is_consumed_with_pika(broker: RunningBroker) -> None:
    """POST /api/exchanges/{vhost}/{name}/publish answers {"routed": true} when a queue took
    the message, false when none did; properties and payload arrive as sent."""
    fill(broker, "q")
    status, answer = call(
        broker,
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        {
            "routing_key": "q",
            "properties": {"delivery_mode": 2, "headers": {"k": "v"}, "type": "t"},
            "payload": base64.b64encode(b"\x00hello").decode(),
            "payload_encoding": "base64",
        },
    )
    assert (status, answer) == (200, {"routed": True})
    status, answer = call(
        broker,
        "POST",
        "/api/exchanges/%2F/amq.direct/publish",
        {"routing_key": "nowhere", "properties": {}, "payload": "x", "payload_encoding": "string"},
    )
    assert (status, answer) == (200, {"routed": False})
    with connect(broker) as connection:
        method, properties, body = connection.channel().basic_get("q", auto_ack=True)
    assert method is not None and body == b"\x00hello"
    assert (properties.delivery_mode, properties.headers, properties.type) == (2, {"k": "v"}, "t")
    bad = {
        "routing_key": "q",
        "properties": {"priority": "high"},
        "payload": "x",
        "payload_encoding": "string",
    }
    assert call(broker, "POST", "/api/exchanges/%2F/amq.default/publish", bad)[0] == 400
    # AMQP 0-9-1 §4.2.5.3: a routing key is a short string, at most 255 octets; one longer
    # could never be delivered.
    long_key = {**bad, "routing_key": "k" * 256, "properties": {}}
    status, refused = call(broker, "POST", "/api/exchanges/%2F/amq.fanout/publish", long_key)
    assert status == 400 and "at most 255 octets" in str(refused)


def test_browse_shows_messages_without_consuming_them(broker: RunningBroker) -> None:
    """Qpid broker manual, management console: a queue's messages can be browsed; nothing is
    consumed."""
    fill(broker, "q", "a", "b", "c")
    status, seen = call(broker, "GET", "/api/queues/%2F/q/messages?start=1&count=5")
    assert status == 200 and isinstance(seen, list)
    assert [(message["position"], message["payload"]) for message in seen] == [(1, "b"), (2, "c")]
    assert len({message["message_id"] for message in seen}) == 2
    assert drain(broker, "q") == [(b"a", False), (b"b", False), (b"c", False)]


def message_ids(broker: RunningBroker, queue: str) -> dict[str, int]:
    _, seen = call(broker, "GET", f"/api/queues/%2F/{queue}/messages")
    assert isinstance(seen, list)
    return {message["payload"]: message["message_id"] for message in seen}


def test_move_copy_and_delete_chosen_messages(tmp_path: Path) -> None:
    """Qpid broker manual: messages can be moved or copied to another queue and deleted; a
    message id not in the queue is reported, the others are acted on. Move commits the copy,
    then the removal: after a kill -9 each message is where the answer said."""
    with start_broker(tmp_path, http=True) as broker:
        fill(broker, "source", "a", "b", "c", "d")
        fill(broker, "target")
        ids = message_ids(broker, "source")
        status, moved = call(
            broker,
            "POST",
            "/api/queues/%2F/source/messages/move",
            {"to": "target", "message_ids": [ids["b"], 999_999_999]},
        )
        assert (status, moved) == (200, {"moved": [ids["b"]], "missing": [999_999_999]})
        _, copied = call(
            broker,
            "POST",
            "/api/queues/%2F/source/messages/copy",
            {"to": "target", "message_ids": [ids["c"]]},
        )
        assert copied == {"copied": [ids["c"]], "missing": []}
        _, deleted = call(
            broker, "DELETE", "/api/queues/%2F/source/messages", {"message_ids": [ids["d"]]}
        )
        assert deleted == {"deleted": [ids["d"]], "missing": []}
        assert (
            call(
                broker,
                "POST",
                "/api/queues/%2F/source/messages/move",
                {"to": "none", "message_ids": []},
            )[0]
            == 404
        )
        broker.kill()
    with start_broker(tmp_path, http=True) as again:
        assert [body for body, _ in drain(again, "source")] == [b"a", b"c"]
        assert [body for body, _ in drain(again, "target")] == [b"b", b"c"]


def test_a_paused_queue_takes_messages_but_delivers_none_until_resumed(
    broker: RunningBroker,
) -> None:
    """MQ admin guide, imqcmd pause dst: "pauses the delivery of messages to consumers";
    resume dst: delivery goes on. The queue still takes what is published meanwhile."""
    fill(broker, "q", "before")
    assert call(broker, "PUT", "/api/queues/%2F/q/pause")[0] == 204
    with connect(broker) as connection:
        channel = connection.channel()
        received: list[bytes] = []
        channel.basic_consume("q", lambda _ch, _m, _p, body: received.append(body), auto_ack=True)
        channel.basic_publish("", "q", b"during")
        connection.process_data_events(1.0)
        assert received == []
        _, queue = call(broker, "GET", "/api/queues/%2F/q")
        assert isinstance(queue, dict) and (queue["messages_ready"], queue["paused"]) == (2, True)
        assert call(broker, "PUT", "/api/queues/%2F/q/resume")[0] == 204
        wait_until(lambda: connection.process_data_events(0.1) or len(received) == 2, "deliveries")
    assert received == [b"before", b"during"]
