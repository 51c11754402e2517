"""The engine's snapshots as RabbitMQ's management API writes them (its HTTP API reference:
the fields of /api/queues, /api/exchanges, /api/bindings, /api/connections, /api/channels,
/api/consumers, /api/overview, /api/nodes, /api/health/checks/alarms)."""

from __future__ import annotations

import datetime
from decimal import Decimal

from batonmq.cluster.peerlink import PeerLinkState
from batonmq.cluster.states import BrokerState
from batonmq.engine.counters import ChannelCounters
from batonmq.engine.membership import MemberInfo
from batonmq.engine.snapshots import (
    BindingInfo,
    ChannelInfo,
    ConnectionInfo,
    ConsumerInfo,
    ExchangeInfo,
    Overview,
    QueueInfo,
    UserInfo,
)
from batonmq.engine.takeover import TakeoverOutcome
from batonmq.management import render
from batonmq.queues.counters import QueueCounters

NODE = render.Node("batonmq@host", "0.1.0", 1000.0, [("amqp", "127.0.0.1", 5672)])
CONNECTION = ConnectionInfo(
    7,
    "127.0.0.1:40000 -> 127.0.0.1:5672",
    "127.0.0.1",
    40000,
    "alice",
    "/",
    {"product": b"pika", "capabilities": {"publisher_confirms": True}},
    1,
    100,
    200,
)


def test_a_queue_has_rabbitmqs_fields_and_counts_unacknowledged_messages_in_messages():
    """RabbitMQ: `messages` is `messages_ready` plus `messages_unacknowledged`."""
    info = QueueInfo("/", "work", "classic", True, False, False, {"x-max-length": 10}, 3, 1, 2)

    assert render.queue(info, NODE) == {
        "name": "work",
        "vhost": "/",
        "type": "classic",
        "durable": True,
        "auto_delete": False,
        "exclusive": False,
        "arguments": {"x-max-length": 10},
        "node": "batonmq@host",
        "state": "running",
        "consumers": 1,
        "messages": 5,
        "messages_ready": 3,
        "messages_unacknowledged": 2,
        "policy": None,
        "exclusive_consumer_tag": None,
        "memory": 0,
        "message_stats": render.message_stats(QueueCounters(), {}),
        "paused": False,
    }


def test_a_queues_message_stats_have_rabbitmqs_names_rates_and_deliver_get_as_their_sum():
    """RabbitMQ's HTTP API reference, message_stats: "deliver_get: Sum of deliver,
    deliver_noack, get, get_noack" (written `deliver_no_ack` and `get_no_ack` in its JSON), each
    count with a `_details` object whose `rate` is per second; and a queue's `memory` in bytes."""
    counters = QueueCounters(publish=10, deliver=4, deliver_no_ack=3, get=2, get_no_ack=1, ack=4)
    rates = {"publish": 2.0, "deliver": 1.25, "get_no_ack": 0.5}
    info = QueueInfo(
        "/", "work", "classic", True, False, False, {}, 0, 1, memory=4096,
        message_totals=counters, message_rates=rates,
    )  # fmt: skip

    rendered = render.queue(info, NODE)

    assert rendered["memory"] == 4096
    stats = rendered["message_stats"]
    assert isinstance(stats, dict)
    assert {name: stats[name] for name in ("publish", "deliver_get", "ack", "redeliver")} == {
        "publish": 10,
        "deliver_get": 10,
        "ack": 4,
        "redeliver": 0,
    }
    assert stats["publish_details"] == {"rate": 2.0}
    assert stats["deliver_get_details"] == {"rate": 1.8}  # 1.25 + 0.5, to one decimal
    assert stats["deliver_no_ack_details"] == {"rate": 0.0}


def test_an_exchange_and_a_binding():
    exchange = ExchangeInfo("/", "orders", "topic", True, False, False, {})
    assert render.exchange(exchange) == {
        "name": "orders",
        "vhost": "/",
        "type": "topic",
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "arguments": {},
        "user_who_performed_action": "",
    }
    binding = BindingInfo("/", "orders", "work", "queue", "eu.#", {})
    assert render.binding(binding) == {
        "source": "orders",
        "vhost": "/",
        "destination": "work",
        "destination_type": "queue",
        "routing_key": "eu.#",
        "arguments": {},
        "properties_key": "eu.%23",
    }


def test_a_bindings_properties_key_is_tilde_for_an_empty_key_and_marks_arguments():
    """RabbitMQ names a binding without routing key or arguments "~" in its URLs."""
    assert render.properties_key("", {}) == "~"
    assert render.properties_key("a~b #", {}) == "a%7Eb+%23"  # quoted as a form value
    assert render.properties_key("k", {"x-match": "all"}).startswith("k~")


def test_a_connection_with_its_client_properties_as_json():
    """Client properties hold AMQP long strings, which arrive as bytes: JSON has text."""
    assert render.connection(CONNECTION, NODE) == {
        "name": "127.0.0.1:40000 -> 127.0.0.1:5672",
        "node": "batonmq@host",
        "type": "network",
        "state": "running",
        "protocol": "AMQP 0-9-1",
        "user": "alice",
        "vhost": "/",
        "peer_host": "127.0.0.1",
        "peer_port": 40000,
        "channels": 1,
        "client_properties": {"product": "pika", "capabilities": {"publisher_confirms": True}},
        "recv_oct": 100,
        "send_oct": 200,
    }


def test_field_values_that_json_lacks():
    assert render.json_value(b"\xff\x00") == "/wA="  # not UTF-8: base64
    assert render.json_value(Decimal("1.5")) == 1.5
    moment = datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)
    assert render.json_value(moment) == int(moment.timestamp())
    assert render.json_value([b"a", (1, None)]) == ["a", [1, None]]


def test_a_channel_names_its_connection_and_counts_deliver_get():
    counters = ChannelCounters(publish=4, deliver=2, get=1, ack=3)
    info = ChannelInfo(f"{CONNECTION.name} (1)", 7, 1, "alice", "/", 1, 2, 10, counters)

    item = render.channel(info, CONNECTION, NODE)

    assert item["connection_details"] == {
        "name": CONNECTION.name,
        "peer_host": "127.0.0.1",
        "peer_port": 40000,
    }
    assert (item["number"], item["consumer_count"], item["prefetch_count"]) == (1, 1, 10)
    assert item["messages_unacknowledged"] == 2
    assert item["message_stats"] == {
        "publish": 4,
        "confirm": 0,
        "deliver": 2,
        "get": 1,
        "ack": 3,
        "redeliver": 0,
        "deliver_get": 3,
    }


def test_a_consumer_names_its_queue_and_channel():
    channel = ChannelInfo(f"{CONNECTION.name} (1)", 7, 1, "alice", "/", 1, 0, 0, ChannelCounters())
    info = ConsumerInfo("/", "work", "ctag-1", channel.name, True, False, 5, {})

    item = render.consumer(info, channel, CONNECTION.name)

    assert item["queue"] == {"name": "work", "vhost": "/"}
    assert item["channel_details"] == {
        "name": channel.name,
        "number": 1,
        "connection_name": CONNECTION.name,
        "user": "alice",
    }
    assert (item["consumer_tag"], item["ack_required"], item["prefetch_count"]) == (
        "ctag-1",
        True,
        5,
    )


def test_the_overview_totals_objects_and_messages():
    overview = Overview(1, 2, 2, 9, 1, 5, 3, {}, ChannelCounters(publish=8))

    item = render.overview(overview, NODE, UserInfo("alice", ("monitoring",)))

    assert item["object_totals"] == {
        "connections": 1,
        "channels": 2,
        "exchanges": 9,
        "queues": 2,
        "consumers": 1,
    }
    assert item["queue_totals"] == {
        "messages": 8,
        "messages_ready": 5,
        "messages_unacknowledged": 3,
    }
    assert item["listeners"] == [
        {"node": "batonmq@host", "protocol": "amqp", "ip_address": "127.0.0.1", "port": 5672}
    ]
    assert (item["node"], item["user"], item["user_tags"]) == (
        "batonmq@host",
        "alice",
        ["monitoring"],
    )


def test_alarms_are_rabbitmqs_memory_and_disk_resources():
    """RabbitMQ's alarms health check: 200 {"status": "ok"} without alarms, else 503 with
    "resource alarm(s) in effect in the cluster"."""
    assert render.alarms_check({}, NODE) == (200, {"status": "ok"})
    status, body = render.alarms_check({"memory": "red", "free disk": "low"}, NODE)
    assert status == 503
    assert body["reason"] == "resource alarm(s) in effect in the cluster"
    assert body["alarms"] == [
        {"node": "batonmq@host", "resource": "disk", "reason": "low"},
        {"node": "batonmq@host", "resource": "memory", "reason": "red"},
    ]
    node = render.node(NODE, {"store quota": "full"}, 1002.5)
    assert (node["mem_alarm"], node["disk_free_alarm"], node["uptime"]) == (False, True, 2500)


def test_users_and_virtual_hosts():
    assert render.user(UserInfo("guest", ("administrator",))) == {
        "name": "guest",
        "tags": ["administrator"],
        "limits": {},
    }
    queues = [
        QueueInfo("/", "a", "classic", True, False, False, {}, 5, 0, 2),
        QueueInfo("other", "b", "classic", True, False, False, {}, 7, 0, 0),
    ]
    vhost = render.vhost("/", queues)
    assert (vhost["name"], vhost["messages"], vhost["messages_ready"]) == ("/", 7, 5)
    assert vhost["messages_unacknowledged"] == 2


def test_the_overview_has_rabbitmqs_rate_details_for_each_count():
    """RabbitMQ's overview: message_stats.publish_details.rate and so on for each count, per
    second; deliver_get's rate is deliveries' and gets' together."""
    rates = {"publish": 12.34, "deliver": 3.0, "get": 1.0}
    overview = Overview(0, 0, 0, 0, 0, 0, 0, {}, ChannelCounters(publish=8), rates)

    stats = render.overview(overview, NODE, UserInfo("alice", ()))["message_stats"]

    assert (stats["publish"], stats["publish_details"]) == (8, {"rate": 12.3})
    assert stats["deliver_get_details"] == {"rate": 4.0}
    assert stats["ack_details"] == {"rate": 0.0}


def _member(broker_id: str, *, local: bool, state: BrokerState, **changes: object) -> MemberInfo:
    fields: dict[str, object] = {
        "broker_id": broker_id,
        "address": f"host{broker_id}:5672",
        "state": state,
        "messages": 12,
        "taken_over_by": None,
        "last_heartbeat": datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC),
        "silent_for": 1.23456,
        "lease_live": True,
        "no_failover": False,
        "version": "0.1.0",
        "epoch": 3,
        "heartbeat_address": f"host{broker_id}:7676",
        "local": local,
    }
    fields.update(changes)
    return MemberInfo(**fields)  # type: ignore[arg-type]


def test_a_cluster_member_has_the_columns_of_list_bkr():
    """MQ 4.1 HA guide, Example 1: broker id, address, state, messages in the store, id of the
    broker performing a takeover, and the time since the last heartbeat."""
    item = render.cluster_member(
        _member("B", local=False, state=BrokerState.TAKEOVER_COMPLETE, taken_over_by="A")
    )
    assert item["broker_id"] == "B"
    assert item["address"] == "hostB:5672"
    assert item["state"] == "TAKEOVER_COMPLETE"
    assert item["messages"] == 12
    assert item["taken_over_by"] == "A"
    assert item["last_heartbeat"] == "2026-11-25T12:00:00+00:00"
    assert item["silent_for"] == 1.235
    assert item["no_failover"] is False


def test_every_member_is_a_rabbitmq_node_object_running_while_its_lease_runs():
    """/api/nodes (RabbitMQ's node objects: name, running) lists the whole HA cluster: this
    broker with its own figures, another member as "<broker id>@<host>"."""
    own = render.member_node(_member("A", local=True, state=BrokerState.QUIESCING), NODE, {}, 2000)
    assert (own["name"], own["running"], own["uptime"]) == ("batonmq@host", True, 1_000_000)
    assert (own["broker_id"], own["state"]) == ("A", "QUIESCING")
    other = render.member_node(
        _member("B", local=False, state=BrokerState.BROKER_DOWN, lease_live=False), NODE, {}, 2000
    )
    assert (other["name"], other["running"], other["state"]) == ("B@hostB", False, "BROKER_DOWN")


def test_a_link_between_workers_is_a_rabbitmq_cluster_link():
    """RabbitMQ's node object lists its links with the other nodes (`cluster_links`: the
    peer's `name` and `stats` with `send_bytes` and `recv_bytes`); a worker's links with its
    siblings take that shape, the peer named by its index."""
    state = PeerLinkState(1, 1990.5, 3, 300, 2, 40, writable=False)
    assert render.cluster_link(state, 2000) == {
        "name": 1,
        "uptime": 9500,
        "writable": False,
        "stats": {"send_bytes": 300, "recv_bytes": 40, "send_records": 3, "recv_records": 2},
    }


def test_a_takeover_outcome_says_whether_this_broker_won_and_why_not():
    lost = render.takeover(TakeoverOutcome("B", None, 0.01234))
    assert (lost["taken_over"], lost["messages"], lost["seconds"]) == (False, 0, 0.012)
    assert "lease" in str(lost["reason"])
    failed = render.takeover(TakeoverOutcome("B", None, 0.5, "the store is out of reach"))
    assert failed["reason"] == "the store is out of reach"
