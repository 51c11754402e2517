"""The broker runtime: virtual hosts, the sessions of connected clients, what it tells clients."""

from __future__ import annotations

import itertools
import logging
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pamqp.common import FieldTable

from batonmq import __version__
from batonmq.amqp.connection import ConnectionSettings
from batonmq.engine.access import AccessControl
from batonmq.engine.afterwrite import AfterWrite
from batonmq.engine.autocreate import AutocreatePolicy
from batonmq.engine.connectioncount import ConnectionAdmission, ConnectionCount, LocalAdmission
from batonmq.engine.counters import BrokerCounters, ChannelCounters
from batonmq.engine.events import EventFeed, EventKind
from batonmq.engine.rates import MessageRates, QueueRates
from batonmq.engine.vhost import VirtualHost
from batonmq.logrepeat import CoalescingLog
from batonmq.queues.holdings import Holdings
from batonmq.queues.paging import Paging
from batonmq.queues.protocol import RoutedQueue
from batonmq.queues.streams.storage import StreamStorage, StreamTables
from batonmq.security.authn import GUEST, Authenticator
from batonmq.security.permissions import Permissions, UserPermission
from batonmq.store.base import Store
from batonmq.store.journal import Journal

if TYPE_CHECKING:
    from batonmq.engine.control import ServerControl
    from batonmq.engine.membership import ClusterService
    from batonmq.engine.session import Session
    from batonmq.engine.spreading import Spreading

#: The topic exchanges of the default virtual host on which the broker tells about itself: metrics
#: snapshots (Sun MQ 3.5's metrics topics) and the event feed (RabbitMQ's event exchange).
METRICS_EXCHANGE: Final = "amq.batonmq.metrics"
EVENTS_EXCHANGE: Final = "amq.batonmq.events"
BROKER_TOPICS: Final = (METRICS_EXCHANGE, EVENTS_EXCHANGE)

#: What the server tells clients it can do (connection.start server-properties "capabilities").
#: Only what works: each is exercised by the integration tests.
CAPABILITIES: FieldTable = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}


def server_properties(broker_name: str) -> FieldTable:
    return {
        "product": "BatonMQ",
        "version": __version__,
        "platform": f"Python {platform.python_version()}",
        "cluster_name": broker_name,
        "copyright": "BatonMQ contributors",
        "information": "Licensed under the Apache License 2.0",
        "capabilities": dict(CAPABILITIES),
    }


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    name: str = "batonmq"
    default_vhost: str = "/"
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    max_message_size: int = 70 * 1024 * 1024
    guest_loopback_only: bool = True
    #: Entries (and body bytes) a queue keeps in memory before paging the rest to the store.
    page_window: int = 10_000
    page_window_bytes: int = 64 * 1024 * 1024
    #: config.LimitsConfig: open connections per user and per virtual host, consumers per
    #: channel; 0 = unlimited.
    max_connections_per_user: int = 0
    max_connections_per_vhost: int = 0
    max_consumers_per_channel: int = 0
    #: config.LimitsConfig: messages and body bytes all queues may hold together; 0 = no limit.
    max_messages: int = 0
    max_bytes: int = 0
    #: config.AutocreateConfig: the limits of auto-created queues.
    autocreate: AutocreatePolicy = field(default_factory=AutocreatePolicy)
    #: Where stream queues keep their logs; None: a temporary directory (in-memory brokers).
    streams_dir: Path | None = None
    #: The store's tables that keep them instead (a PostgreSQL store), if any.
    stream_tables: StreamTables | None = None


@dataclass(eq=False)
class Broker:
    settings: BrokerSettings = field(default_factory=BrokerSettings)
    #: Where durable state goes; None keeps everything in memory (the engine's unit tests).
    store: Store | None = None
    journal: Journal = field(init=False)
    #: What waits for the journal batch being gathered (queues holding back, confirms).
    after_write: AfterWrite = field(init=False)
    streams: StreamStorage = field(init=False)
    vhosts: dict[str, VirtualHost] = field(init=False)
    sessions: set[Session] = field(init=False, default_factory=set)
    authenticator: Authenticator = field(init=False)
    #: Virtual hosts being deleted: they take no new connection.
    vhosts_deleting: set[str] = field(init=False, default_factory=set)
    #: Each user's RabbitMQ tags (what it may do over the management HTTP API), as stored.
    user_tags: dict[str, tuple[str, ...]] = field(init=False, default_factory=dict)
    #: Who may do what (Qpid manual §2.2); the default has no ACL: whoever logs in may do anything.
    access: AccessControl = field(default_factory=AccessControl)
    #: This process among the workers that serve the broker: its index and its start id (the
    #: server sets them); with the connection's id, what names a connection across workers
    #: (`Session.ref`).
    worker_ref: tuple[int, int] = (0, 0)
    #: Asked for each virtual host as it is added: its links to the other workers if it is
    #: spread over them, else None. None: no virtual host is spread (the server sets it
    #: before recovery).
    spread_factory: Callable[[VirtualHost], Spreading | None] | None = None
    #: RabbitMQ's permissions of each user in each virtual host, asked beside the ACL; as a new
    #: store has them until the store's are restored: the default user may do everything in
    #: the default virtual host.
    permissions: Permissions = field(init=False)
    connection_settings: ConnectionSettings = field(init=False)
    #: The open connections counted against the connection limits: this process's (in a broker
    #: of several workers, the first worker's count is every worker's).
    connections: ConnectionCount = field(init=False)
    #: What lets a connection in against the limits: this process's count, or the first
    #: worker's for the broker's (`batonmq.server.brokerwide`).
    admission: ConnectionAdmission = field(init=False)
    #: Threshold alerts (engine/alerts.py, maximumMessageSize): a message body larger than this
    #: is reported to `large_message` (vhost, queue, body size) as it is enqueued; 0: off.
    large_message_size: int = field(init=False, default=0)
    large_message: Callable[[str, RoutedQueue, int], None] | None = field(init=False, default=None)
    #: Raised resource alarms (memory red, disk quota, free disk) by name, with the reason
    #: publishers are told in connection.blocked; every publishing client is held while any is.
    alarms: dict[str, str] = field(init=False, default_factory=dict)
    #: What all queues hold together (the system-wide limits' measure).
    holdings: Holdings = field(init=False, default_factory=Holdings)
    #: Publishes a connection may run before its input waits a loop turn (MQ 3.5 admin guide
    #: imq.<state>.count; set by the memory guard).
    publish_batch: int = field(init=False, default=5000)
    #: Per-connection lines a client can repeat (closes, channel errors), from every session:
    #: coalesced (hardening), in engine/session.py's logger.
    session_log: CoalescingLog = field(
        init=False,
        default_factory=lambda: CoalescingLog(logging.getLogger("batonmq.engine.session")),
    )
    counters: BrokerCounters = field(init=False, default_factory=BrokerCounters)
    #: What happens to connections, channels, consumers, queues, exchanges and alarms.
    events: EventFeed = field(init=False, default_factory=EventFeed)
    #: This broker as an HA cluster member (cluster.ha), set by the member runtime.
    cluster: ClusterService | None = field(init=False, default=None)
    #: The server running the broker (quiesce, shutdown), set by it.
    control: ServerControl | None = field(init=False, default=None)
    #: What the channels that closed had counted (the broker's totals add the open ones).
    closed_channels: ChannelCounters = field(init=False, default_factory=ChannelCounters)
    #: The rates of the broker's message totals, sampled by the server at an interval.
    rates: MessageRates = field(init=False, default_factory=MessageRates)
    #: Each queue's rates, sampled with the broker's.
    queue_rates: QueueRates = field(init=False, default_factory=QueueRates)
    #: Connection ids, stable for the broker's life and never reused.
    _connection_ids: itertools.count[int] = field(
        init=False, default_factory=lambda: itertools.count(1)
    )

    def next_connection_id(self) -> int:
        return next(self._connection_ids)

    def __post_init__(self) -> None:
        settings = self.settings
        #: Whether a system-wide limit is set: the one test the publish path pays when none is.
        self.limited = bool(settings.max_messages or settings.max_bytes)
        self.journal = Journal(self.store)
        self.after_write = AfterWrite(self.journal)
        self.streams = StreamStorage(settings.streams_dir, settings.stream_tables)
        self.vhosts = {}
        default = self.add_vhost(settings.default_vhost)
        for name in BROKER_TOPICS:
            default.add_builtin_exchange(name, "topic")
        self.connections = ConnectionCount(
            settings.max_connections_per_user, settings.max_connections_per_vhost
        )
        self.admission = LocalAdmission(self.connections)
        self.authenticator = Authenticator(guest_loopback_only=settings.guest_loopback_only)
        self.permissions = Permissions([UserPermission.full(GUEST, settings.default_vhost)])
        self.connection_settings = ConnectionSettings(
            server_properties=server_properties(settings.name),
            frame_max=settings.frame_max,
            channel_max=settings.channel_max,
            heartbeat=settings.heartbeat,
            max_message_size=settings.max_message_size,
        )

    def publish_refusal(self) -> str | None:
        """Why a message may not come in now (a system-wide limit is reached), or None."""
        settings, holdings = self.settings, self.holdings
        if settings.max_messages and holdings.messages >= settings.max_messages:
            return (
                f"the broker holds {holdings.messages} messages, its limit is "
                f"{settings.max_messages} (limits.max_messages)"
            )
        if settings.max_bytes and holdings.bytes >= settings.max_bytes:
            return (
                f"the broker holds {holdings.bytes} bytes of messages, its limit is "
                f"{settings.max_bytes} (limits.max_bytes)"
            )
        return None

    def raise_alarm(self, name: str, reason: str) -> None:
        """Hold every publishing client back until `clear_alarm(name)`."""
        if name in self.alarms:
            return
        self.alarms[name] = reason
        self.events.publish(EventKind.ALARM_RAISED, name, reason=reason)
        for session in list(self.sessions):
            if session.vhost_or_none is not None:
                session.flow.hold(name, reason)

    def clear_alarm(self, name: str) -> None:
        if self.alarms.pop(name, None) is None:
            return
        self.events.publish(EventKind.ALARM_CLEARED, name)
        for session in list(self.sessions):
            session.flow.release(name)

    def expire_messages(self) -> int:
        """The periodic expiry sweep over every queue; how many messages expired."""
        return sum(vhost.expire_messages() for vhost in self.vhosts.values())

    def add_vhost(self, name: str) -> VirtualHost:
        """The virtual host `name`, created unless it exists (in an HA cluster another member's
        change may have brought it in meanwhile: `batonmq.engine.catalogue`)."""
        existing = self.vhosts.get(name)
        if existing is not None:
            return existing
        settings = self.settings
        vhost = VirtualHost(
            name,
            Paging(
                self.journal,
                name,
                settings.page_window,
                settings.page_window_bytes,
                self.holdings,
                self.streams,
            ),
            settings.autocreate,
            self.events,
        )
        if self.spread_factory is not None:
            vhost.spread = self.spread_factory(vhost)
        self.vhosts[name] = vhost
        return vhost
