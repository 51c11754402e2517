"""The engine's snapshots as RabbitMQ's management API writes them: the same JSON field names,
so that scripts, dashboards and monitoring written for RabbitMQ read BatonMQ unchanged.

Pure functions from `batonmq.engine.api` snapshots to JSON-shaped dicts; no HTTP here. Figures
that BatonMQ does not keep (memory per process) are left out rather than made up: RabbitMQ's
own clients treat a missing figure as 0. A queue's `memory` is an estimate (see
`batonmq.engine.snapshots.QueueInfo`).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Final

from pamqp.common import FieldTable, FieldValue

from batonmq.amqp.properties import MAX_NESTING, nesting
from batonmq.cluster.peerlink import PeerLinkState
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
from batonmq.management.listing import Item, Json
from batonmq.queues.counters import QueueCounters
from batonmq.security.permissions import UserPermission

#: The AMQP protocol name RabbitMQ reports for a 0-9-1 connection.
PROTOCOL: Final = "AMQP 0-9-1"
#: BatonMQ's alarms by the resource RabbitMQ names in its alarm reports.
_ALARM_RESOURCES: Final = {"memory": "memory"}


@dataclass(frozen=True, slots=True)
class Node:
    """What the API says about this broker: its node name (RabbitMQ's "rabbit@host" form),
    product, and listeners (protocol, address, port)."""

    name: str
    product_version: str
    started_at: float
    listeners: Sequence[tuple[str, str, int]] = ()


def json_value(value: object) -> Json:
    """A field-table value as JSON: bytes as text when they are UTF-8 (else base64), decimals
    and times as RabbitMQ's JSON encoder gives them (a number, seconds since the epoch)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    return str(value)


def table(arguments: Mapping[str, object]) -> dict[str, Json]:
    return {str(key): json_value(value) for key, value in arguments.items()}


def field_table(value: Mapping[str, Json]) -> FieldTable:
    """A JSON object as an AMQP field table (JSON's types are all field values); ValueError
    when objects and arrays nest in it deeper than an AMQP client may nest tables
    (`MAX_NESTING`)."""
    if nesting(value) > MAX_NESTING:
        raise ValueError(f"objects and arrays nested more than {MAX_NESTING} deep")
    return _table(value)


def _table(value: Mapping[str, Json]) -> FieldTable:
    return {key: _field_value(item) for key, item in value.items()}


def _field_value(value: Json) -> FieldValue:
    if isinstance(value, dict):
        return _table(value)
    if isinstance(value, list):
        return [_field_value(item) for item in value]
    return value


def queue(info: QueueInfo, node: Node, *, with_message_stats: bool = True) -> Item:
    """A queue's item; `with_message_stats` False leaves out the part that costs most to write
    (`queue_message_stats`), for a long list to add to the queues it answers with only."""
    item: Item = {
        "name": info.name,
        "vhost": info.vhost,
        "type": info.type,
        "durable": info.durable,
        "auto_delete": info.auto_delete,
        "exclusive": info.exclusive,
        "arguments": table(info.arguments),
        "node": node.name,
        "state": "running",
        "consumers": info.consumers,
        "messages": info.messages_ready + info.messages_unacknowledged,
        "messages_ready": info.messages_ready,
        "messages_unacknowledged": info.messages_unacknowledged,
        "policy": None,
        "exclusive_consumer_tag": None,
        "memory": info.memory,
        # BatonMQ's own: delivery paused (PUT .../pause); RabbitMQ's clients ignore it.
        "paused": info.paused,
    }
    if with_message_stats:
        item.update(queue_message_stats(info))
    return item


def queue_message_stats(info: QueueInfo) -> Item:
    """A queue's `message_stats`: the part of its item that costs most to write."""
    return {"message_stats": message_stats(info.message_totals, info.message_rates)}


def exchange(info: ExchangeInfo) -> Item:
    return {
        "name": info.name,
        "vhost": info.vhost,
        "type": info.type,
        "durable": info.durable,
        "auto_delete": info.auto_delete,
        "internal": info.internal,
        "arguments": table(info.arguments),
        # RabbitMQ writes "policy" on an exchange only when a policy applies: never here.
        "user_who_performed_action": "",
    }


def binding(info: BindingInfo) -> Item:
    return {
        "source": info.source,
        "vhost": info.vhost,
        "destination": info.destination,
        "destination_type": info.destination_type,
        "routing_key": info.routing_key,
        "arguments": table(info.arguments),
        "properties_key": properties_key(info.routing_key, info.arguments),
    }


def properties_key(routing_key: str, arguments: Mapping[str, object]) -> str:
    """A binding's name in URLs, in RabbitMQ's form: the routing key quoted as a form value
    ("~" for an empty key without arguments), then "~" and a digest of the arguments when
    there are any (BatonMQ's own digest: it names a binding of this broker, as RabbitMQ's
    does of its own)."""
    quoted = urllib.parse.quote_plus(routing_key).replace("~", "%7E")
    if not arguments:
        return quoted or "~"
    canonical = json.dumps(table(arguments), sort_keys=True).encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).decode()
    return f"{quoted}~{digest[:22]}"


def connection(info: ConnectionInfo, node: Node) -> Item:
    return {
        "name": info.name,
        "node": node.name,
        "type": "network",
        "state": "running",
        "protocol": PROTOCOL,
        "user": info.user,
        "vhost": info.vhost,
        "peer_host": info.peer_host,
        "peer_port": info.peer_port,
        "channels": info.channels,
        "client_properties": table(info.client_properties),
        "recv_oct": info.recv_oct,
        "send_oct": info.send_oct,
    }


def channel(info: ChannelInfo, owner: ConnectionInfo | None, node: Node) -> Item:
    return {
        "name": info.name,
        "number": info.number,
        "node": node.name,
        "state": "running",
        "user": info.user,
        "vhost": info.vhost,
        "consumer_count": info.consumers,
        "messages_unacknowledged": info.messages_unacknowledged,
        "prefetch_count": info.prefetch_count,
        "connection_details": _connection_details(owner),
        "message_stats": message_stats(info.counters),
    }


def _connection_details(owner: ConnectionInfo | None) -> Item:
    if owner is None:
        return {}
    return {"name": owner.name, "peer_host": owner.peer_host, "peer_port": owner.peer_port}


def consumer(info: ConsumerInfo, owner: ChannelInfo | None, connection_name: str) -> Item:
    return {
        "consumer_tag": info.tag,
        "queue": {"name": info.queue, "vhost": info.vhost},
        "channel_details": {
            "name": info.channel,
            "number": owner.number if owner is not None else 0,
            "connection_name": connection_name,
            "user": owner.user if owner is not None else "",
        },
        "ack_required": info.ack_required,
        "exclusive": info.exclusive,
        "prefetch_count": info.prefetch_count,
        "arguments": table(info.arguments),
        "active": True,
        "activity_status": "up",
    }


#: The counts RabbitMQ's `deliver_get` adds up: deliveries and gets, acknowledged or no-ack.
_DELIVER_GET: Final = ("deliver", "deliver_no_ack", "get", "get_no_ack")


#: The counts of each kind of counters, by their class.
_COUNT_NAMES: Final = {
    kind: tuple(item.name for item in fields(kind)) for kind in (ChannelCounters, QueueCounters)
}


def message_stats(
    counters: ChannelCounters | QueueCounters, rates: Mapping[str, float] | None = None
) -> Item:
    """RabbitMQ's message_stats counts (its `deliver_get` is deliveries and gets together), and
    with `rates` each count's `NAME_details` {"rate": per second}."""
    counts: dict[str, int] = {
        name: getattr(counters, name) for name in _COUNT_NAMES[type(counters)]
    }
    stats: Item = {**counts, "deliver_get": sum(counts.get(name, 0) for name in _DELIVER_GET)}
    if rates is not None:
        rates = {**rates, "deliver_get": sum(rates.get(name, 0.0) for name in _DELIVER_GET)}
        for name in list(stats):
            stats[name + "_details"] = {"rate": round(rates.get(name, 0.0), 1)}
    return stats


def overview(info: Overview, node: Node, user: UserInfo) -> Item:
    unacknowledged = info.messages_unacknowledged
    return {
        "product_name": "BatonMQ",
        "product_version": node.product_version,
        "management_version": node.product_version,
        "rates_mode": "basic",
        "cluster_name": node.name,
        "node": node.name,
        "object_totals": {
            "connections": info.connections,
            "channels": info.channels,
            "exchanges": info.exchanges,
            "queues": info.queues,
            "consumers": info.consumers,
        },
        "queue_totals": {
            "messages": info.messages_ready + unacknowledged,
            "messages_ready": info.messages_ready,
            "messages_unacknowledged": unacknowledged,
        },
        "message_stats": message_stats(info.message_totals, info.message_rates),
        "listeners": [
            {"node": node.name, "protocol": protocol, "ip_address": host, "port": port}
            for protocol, host, port in node.listeners
        ],
        "user": user.name,
        "user_tags": list(user.tags),
    }


def alarm_resource(name: str) -> str:
    """RabbitMQ has two resources: memory, and disk (BatonMQ's store quota and free disk)."""
    return _ALARM_RESOURCES.get(name, "disk")


def node(node_info: Node, alarms: Mapping[str, str], now: float) -> Item:
    resources = {alarm_resource(name) for name in alarms}
    return {
        "name": node_info.name,
        "type": "disc",
        "running": True,
        "uptime": max(0, round((now - node_info.started_at) * 1000)),
        "mem_alarm": "memory" in resources,
        "disk_free_alarm": "disk" in resources,
        "partitions": [],
        "product_version": node_info.product_version,
    }


def cluster_link(state: PeerLinkState, now: float) -> Item:
    """A worker's link with a sibling in the shape of RabbitMQ's `cluster_links` (a node's link
    with another: its `name` and `stats` of octets sent and received): `name` is the sibling's
    index, as /api/nodes names workers; the records each way, its uptime (ms, as a node's) and
    whether it takes more (False: paused, over its high-water mark) are BatonMQ's."""
    return {
        "name": state.peer,
        "uptime": max(0, round((now - state.up_since) * 1000)),
        "writable": state.writable,
        "stats": {
            "send_bytes": state.bytes_sent,
            "recv_bytes": state.bytes_received,
            "send_records": state.records_sent,
            "recv_records": state.records_received,
        },
    }


def cluster_member(info: MemberInfo) -> Item:
    """A row of `list bkr` (MQ 4.1 HA guide, Example 1), with what `query bkr` adds."""
    heartbeat = info.last_heartbeat
    return {
        "broker_id": info.broker_id,
        "address": info.address,
        "state": str(info.state),
        "messages": info.messages,
        "taken_over_by": info.taken_over_by,
        "last_heartbeat": None if heartbeat is None else heartbeat.isoformat(),
        "silent_for": round(info.silent_for, 3),
        "lease_live": info.lease_live,
        "no_failover": info.no_failover,
        "version": info.version,
        "epoch": info.epoch,
        "heartbeat_address": info.heartbeat_address,
        "local": info.local,
    }


def member_node(info: MemberInfo, node_info: Node, alarms: Mapping[str, str], now: float) -> Item:
    """A member of this broker's HA cluster as a RabbitMQ node object: this broker's own with
    its figures, another's named "<broker id>@<host>" and running while its store lease runs."""
    if info.local:
        own = node(node_info, alarms, now)
        return {**own, **cluster_member(info)}
    host = (info.address or "").rpartition(":")[0].strip("[]") or "unknown"
    return {
        "name": f"{info.broker_id}@{host}",
        "type": "disc",
        "running": info.lease_live,
        "partitions": [],
        "product_version": info.version,
        **cluster_member(info),
    }


def takeover(outcome: TakeoverOutcome) -> Item:
    """What `takeover bkr` came to: whether this broker won the claim, and what it moved."""
    taken = outcome.taken
    return {
        "broker_id": outcome.failed,
        "taken_over": taken is not None,
        "messages": 0 if taken is None else taken.messages,
        "queues": 0 if taken is None else len({(b.vhost, b.queue) for b in taken.backlogs}),
        "seconds": round(outcome.seconds, 3),
        "reason": None
        if taken is not None
        else outcome.error
        or "the broker's store lease still runs, it was shut down with no failover, or "
        "another broker claimed it first",
    }


def alarms_check(alarms: Mapping[str, str], node_info: Node) -> tuple[int, Item]:
    """GET /api/health/checks/alarms: 200 without alarms, else 503 naming them."""
    if not alarms:
        return 200, {"status": "ok"}
    return 503, {
        "status": "failed",
        "reason": "resource alarm(s) in effect in the cluster",
        "alarms": [
            {"node": node_info.name, "resource": alarm_resource(name), "reason": reason}
            for name, reason in sorted(alarms.items())
        ],
    }


def user(info: UserInfo) -> Item:
    return {"name": info.name, "tags": list(info.tags), "limits": {}}


def permission(record: UserPermission) -> Item:
    """RabbitMQ's permission object."""
    return {
        "user": record.user,
        "vhost": record.vhost,
        "configure": record.configure,
        "write": record.write,
        "read": record.read,
    }


def vhost(name: str, queues: Sequence[QueueInfo]) -> Item:
    ready = sum(item.messages_ready for item in queues if item.vhost == name)
    unacknowledged = sum(item.messages_unacknowledged for item in queues if item.vhost == name)
    return {
        "name": name,
        "description": "",
        "tags": [],
        "default_queue_type": "classic",
        "tracing": False,
        "messages": ready + unacknowledged,
        "messages_ready": ready,
        "messages_unacknowledged": unacknowledged,
    }
