"""The broker's own topic exchanges, watched by a real pika client: metrics snapshots on
amq.batonmq.metrics (the Sun MQ 3.5 admin guide's "Metrics Message Producer", with the
[metrics.topic] settings of its Table 2-9) and the event feed on amq.batonmq.events (RabbitMQ's
event exchange)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.spec import Basic, BasicProperties

from tests.brokerproc import RunningBroker, run_batonctl, start_broker

pytestmark = pytest.mark.integration

METRICS = "amq.batonmq.metrics"
EVENTS = "amq.batonmq.events"

Delivery = tuple[Basic.Deliver, BasicProperties, bytes]


def broker_with(tmp_path: Path, **topic: str) -> RunningBroker:
    """A broker whose [metrics.topic] settings are `topic`, with snapshots every second."""
    environment = {"BATONMQ__METRICS__TOPIC__INTERVAL": "1"}
    for key, value in topic.items():
        environment[f"BATONMQ__METRICS__TOPIC__{key.upper()}"] = value
    return start_broker(tmp_path, environment=environment)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as broker:
        yield broker


def connect(broker: RunningBroker) -> BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def watch(channel: BlockingChannel, exchange: str, *keys: str) -> str:
    """A server-named exclusive queue bound to `exchange` with each of `keys`."""
    queue = channel.queue_declare("", exclusive=True).method.queue
    for key in keys:
        channel.queue_bind(queue, exchange, routing_key=key)
    return queue


def receive(
    channel: BlockingChannel, queue: str, routing_key: str, timeout: float = 10.0
) -> Delivery:
    """The first message of `queue` with `routing_key` (earlier ones are dropped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.05)
        elif method.routing_key == routing_key:
            return method, properties, body
    raise AssertionError(f"no message with routing key {routing_key!r} in {timeout} s")


def test_metrics_snapshots_name_their_type_and_time_and_carry_the_api_fields(
    watched: RunningBroker,
) -> None:
    """Sun MQ 3.5 admin guide: metrics messages go to the metrics topic destinations at
    imq.metrics.topic.interval; "the header of each message has two properties: one which
    specifies the metrics message type and one which records a timestamp"; they live
    imq.metrics.topic.timetolive seconds (default 300) and are not persistent by default. The
    fields are the management API's (RabbitMQ's names)."""
    with connect(watched) as connection:
        channel = connection.channel()
        channel.queue_declare("orders", durable=True)
        for n in range(3):
            channel.basic_publish("", "orders", b"order %d" % n)
        queue = watch(channel, METRICS, "broker", "queue.#", "connection")
        started = time.time()

        _, properties, body = receive(channel, queue, "queue./.orders")
        assert properties.type == "metrics.queue"
        assert properties.content_type == "application/json"
        assert properties.delivery_mode == 1
        assert properties.expiration == "300000"
        assert properties.timestamp is not None
        assert abs(properties.timestamp - started) < 10
        snapshot = json.loads(body)
        assert (snapshot["name"], snapshot["vhost"]) == ("orders", "/")
        assert (snapshot["messages_ready"], snapshot["messages"]) == (3, 3)

        _, properties, body = receive(channel, queue, "broker")
        assert properties.type == "metrics.broker"
        broker = json.loads(body)
        assert broker["message_stats"]["publish"] >= 3
        assert broker["queues"] >= 2 and broker["connections"] == 1

        _, properties, body = receive(channel, queue, "connection")
        assert properties.type == "metrics.connection"
        (described,) = json.loads(body)
        assert described["user"] == "guest" and described["vhost"] == "/"


def test_same_named_queues_of_two_virtual_hosts_each_have_their_own_snapshot(
    tmp_path: Path,
) -> None:
    """AMQP 0-9-1, virtual hosts: "A virtual host comprises its own name space, a set of
    exchanges, message queues, and all associated objects", so a queue is its virtual host and
    its name. Each queue's snapshot says both, in its routing key (`queue.VHOST.NAME`) and in
    its headers `vhost` and `name`, as RabbitMQ's event exchange names what an event is about:
    two queues "q" give two snapshots an interval, told apart."""
    (tmp_path / "data").mkdir()
    for command in (
        ("vhost", "add", "other"),
        ("permissions", "set", "guest", ".*", ".*", ".*", "--vhost", "other"),
    ):
        done = run_batonctl(tmp_path, *command)
        assert done.returncode == 0, done.stderr
    with broker_with(tmp_path) as broker, connect(broker) as connection:
        other = RunningBroker(broker.host, broker.port, vhost="other")
        with pika.BlockingConnection(pika.URLParameters(other.url)) as in_other:
            in_other.channel().queue_declare("q")
        channel = connection.channel()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"one")
        watcher = watch(channel, METRICS, "queue.#")
        # Each queue's snapshots (its key, its headers, its message count), the watcher's own
        # too, over two intervals and more.
        snapshots: dict[tuple[str, str, str], list[int]] = {}
        deadline = time.monotonic() + 10
        keys = [("queue./.q", "/", "q"), ("queue.other.q", "other", "q")]
        while any(len(snapshots.get(key, [])) < 2 for key in keys):
            assert time.monotonic() < deadline, snapshots
            method, properties, body = channel.basic_get(watcher, auto_ack=True)
            if method is None:
                time.sleep(0.05)
                continue
            assert properties.headers is not None
            vhost, name = properties.headers["vhost"], properties.headers["name"]
            snapshot = json.loads(body)
            assert (snapshot["vhost"], snapshot["name"]) == (vhost, name)
            snapshots.setdefault((method.routing_key, vhost, name), []).append(snapshot["messages"])
    assert set(snapshots) == {
        ("queue./.q", "/", "q"),
        ("queue.other.q", "other", "q"),
        (f"queue./.{watcher}", "/", watcher),
    }
    assert [snapshots[key][:2] for key in keys] == [[1, 1], [0, 0]]


def test_a_queue_whose_key_would_not_fit_has_its_snapshot_under_queue_alone(
    watched: RunningBroker,
) -> None:
    """AMQP 0-9-1: a routing key is a short string, at most 255 octets, and a queue name may be
    as long: `queue./.NAME` would not fit in basic.deliver, so its snapshot goes out as `queue`,
    its headers naming it, and the watcher's queue keeps flowing."""
    name = "q" * 255
    with connect(watched) as connection:
        channel = connection.channel()
        channel.queue_declare(name)
        watcher = watch(channel, METRICS, "queue", "queue.#")
        _, properties, body = receive(channel, watcher, "queue")
        assert properties.headers == {"vhost": "/", "name": name}
        assert json.loads(body)["name"] == name
        receive(channel, watcher, f"queue./.{watcher}")  # later snapshots still arrive


def test_persistent_metrics_with_their_own_time_to_live(tmp_path: Path) -> None:
    """imq.metrics.topic.persist: "whether metrics messages are persistent or not";
    imq.metrics.topic.timetolive: "the lifetime, in seconds, of metrics messages"."""
    with broker_with(tmp_path, persist="true", timetolive="20") as broker, connect(broker) as c:
        channel = c.channel()
        queue = watch(channel, METRICS, "broker")
        _, properties, _ = receive(channel, queue, "broker")
        assert (properties.delivery_mode, properties.expiration) == (2, "20000")


def test_no_metrics_when_their_production_is_disabled(tmp_path: Path) -> None:
    """imq.metrics.topic.enabled = false: "whether metrics message production is enabled"."""
    with broker_with(tmp_path, enabled="false") as broker, connect(broker) as connection:
        channel = connection.channel()
        queue = watch(channel, METRICS, "#")
        with pytest.raises(AssertionError, match="no message"):
            receive(channel, queue, "broker", timeout=2.5)


def test_the_event_feed_on_its_exchange(watched: RunningBroker) -> None:
    """RabbitMQ's event exchange: each event is published with its kind as the routing key
    (queue.created, queue.deleted, connection.created, connection.closed) and what it is about
    in the headers; the body is empty."""
    with connect(watched) as connection:
        channel = connection.channel()
        queue = watch(channel, EVENTS, "queue.*", "connection.*")
        channel.queue_declare("audit")
        _, properties, body = receive(channel, queue, "queue.created")
        assert body == b""
        assert properties.headers is not None
        assert (properties.headers["name"], properties.headers["vhost"]) == ("audit", "/")
        channel.queue_delete("audit")
        _, properties, _ = receive(channel, queue, "queue.deleted")
        assert properties.headers is not None and properties.headers["name"] == "audit"

        with connect(watched):
            _, created, _ = receive(channel, queue, "connection.created")
        _, closed, _ = receive(channel, queue, "connection.closed")
        assert created.headers is not None and closed.headers is not None
        assert created.headers["name"] == closed.headers["name"]


@pytest.mark.parametrize("exchange", [METRICS, EVENTS])
def test_clients_cannot_delete_the_broker_exchanges(watched: RunningBroker, exchange: str) -> None:
    """AMQP 0-9-1, exchange names: "Exchange names starting with "amq." are reserved for
    pre-declared and standardised exchanges"; deleting one is refused (403 ACCESS_REFUSED)."""
    with connect(watched) as connection:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.exchange_delete(exchange)
        assert refused.value.reply_code == 403
