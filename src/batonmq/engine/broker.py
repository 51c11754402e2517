"""The broker runtime: virtual hosts, the sessions of connected clients, what it tells clients."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pamqp.common import FieldTable

from batonmq import __version__
from batonmq.amqp.connection import ConnectionSettings
from batonmq.engine.access import AccessControl
from batonmq.engine.vhost import VirtualHost
from batonmq.queues.classic import Paging
from batonmq.security.authn import Authenticator
from batonmq.store.base import Store
from batonmq.store.journal import Journal

if TYPE_CHECKING:
    from batonmq.engine.session import Session

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


@dataclass(eq=False)
class Broker:
    settings: BrokerSettings = field(default_factory=BrokerSettings)
    #: Where durable state goes; None keeps everything in memory (the engine's unit tests).
    store: Store | None = None
    journal: Journal = field(init=False)
    vhosts: dict[str, VirtualHost] = field(init=False)
    sessions: set[Session] = field(init=False, default_factory=set)
    authenticator: Authenticator = field(init=False)
    #: Who may do what (seeds/004 §2.2); the default has no ACL: whoever logs in may do anything.
    access: AccessControl = field(default_factory=AccessControl)
    connection_settings: ConnectionSettings = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        self.journal = Journal(self.store)
        self.vhosts = {}
        self.add_vhost(settings.default_vhost)
        self.authenticator = Authenticator(guest_loopback_only=settings.guest_loopback_only)
        self.connection_settings = ConnectionSettings(
            server_properties=server_properties(settings.name),
            frame_max=settings.frame_max,
            channel_max=settings.channel_max,
            heartbeat=settings.heartbeat,
            max_message_size=settings.max_message_size,
        )

    def expire_messages(self) -> int:
        """The periodic expiry sweep over every queue; how many messages expired."""
        return sum(vhost.expire_messages() for vhost in self.vhosts.values())

    def add_vhost(self, name: str) -> VirtualHost:
        settings = self.settings
        vhost = VirtualHost(
            name,
            Paging(self.journal, name, settings.page_window, settings.page_window_bytes),
        )
        self.vhosts[name] = vhost
        return vhost
