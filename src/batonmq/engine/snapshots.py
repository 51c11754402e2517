"""What the engine's service API (`batonmq.engine.api`) returns when asked what runs: plain,
frozen snapshots of queues, exchanges, bindings, connections, channels, consumers, users and the
broker as a whole. Nothing of the engine's live objects leaks out through them."""

from __future__ import annotations

from dataclasses import dataclass, field

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.engine.counters import ChannelCounters
from batonmq.queues.counters import QueueCounters
from batonmq.stats import Scope


@dataclass(frozen=True, slots=True)
class QueueInfo:
    vhost: str
    name: str
    type: str
    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: FieldTable
    messages_ready: int
    consumers: int
    #: Delivered to consumers (or basic.get) and not yet acknowledged.
    messages_unacknowledged: int = 0
    #: Its delivery to consumers is paused (imqcmd pause dst).
    paused: bool = False
    #: Estimated bytes of memory its messages take: the ready ones it holds in memory
    #: (`Queue.memory`) and those delivered and not yet acknowledged, counted alike.
    memory: int = 0
    message_totals: QueueCounters = field(default_factory=QueueCounters)
    #: Per second, by counter name, over the last sample interval (empty before the first).
    message_rates: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExchangeInfo:
    vhost: str
    name: str
    type: str
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class BindingInfo:
    vhost: str
    #: The exchange ("" for the default exchange's implicit binding to every queue).
    source: str
    destination: str
    #: "queue" or "exchange".
    destination_type: str
    routing_key: str
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    #: RabbitMQ's user tags (see batonmq.management.access).
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UserCredential:
    """A user as a definitions export carries it: `credential` is the encoded password hash
    (batonmq.security.passwords.Credential.encode), never a password."""

    name: str
    credential: str
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    id: int
    name: str
    peer_host: str
    peer_port: int
    user: str
    vhost: str | None
    client_properties: FieldTable
    channels: int
    recv_oct: int
    send_oct: int


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    name: str
    connection: int
    number: int
    user: str
    vhost: str
    consumers: int
    messages_unacknowledged: int
    prefetch_count: int
    counters: ChannelCounters


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    vhost: str
    queue: str
    tag: str
    channel: str
    ack_required: bool
    exclusive: bool
    prefetch_count: int
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class Overview:
    connections: int
    channels: int
    queues: int
    exchanges: int
    consumers: int
    messages_ready: int
    messages_unacknowledged: int
    alarms: dict[str, str]
    message_totals: ChannelCounters = field(default_factory=ChannelCounters)
    #: Per second, by counter name, over the last sample interval (empty before the first).
    message_rates: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """A message as the API shows it: where it was published, its properties and body."""

    message_id: int
    exchange: str
    routing_key: str
    redelivered: bool
    properties: commands.Basic.Properties
    body: bytes


@dataclass(frozen=True, slots=True)
class GotMessage:
    """A message taken as basic.get takes it, and the queue's ready count after it went
    (basic.get-ok's message-count)."""

    message: MessageInfo
    message_count: int


@dataclass(frozen=True, slots=True)
class BrowsedInfo:
    """A ready message seen without being consumed: `position` 0 is the next one out."""

    position: int
    message: MessageInfo


@dataclass(frozen=True, slots=True)
class MessagesChanged:
    """What a copy, move or removal of chosen messages did: the ids it acted on, and those
    that were not (or no longer) ready in the queue."""

    done: tuple[int, ...]
    missing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StatisticsReading:
    """The statistics of one subject of a scope (batonmq.stats), read now: by key, and the
    labels that say which subject (vhost and queue; connection; channel; none for the broker)."""

    scope: Scope
    labels: dict[str, str]
    values: dict[str, float]
