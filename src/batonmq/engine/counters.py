"""The statistics of connections, channels and queues, and the broker's totals, declared once (see
batonmq.stats) with RabbitMQ's management names where it has one (`recv_oct`, `send_oct`,
`publish`, `deliver`, `get`, `ack`, `redeliver`, `confirm`); a queue's counters are declared
with the queue (batonmq.queues.counters).

The hot path increments a channel's counters only; the broker's totals are the counters of the
channels that closed plus those of the open ones, summed when someone reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from batonmq.queues.counters import QueueCounters
from batonmq.stats import REGISTRY, Scope, ScopeStatistics, counter
from batonmq.store.journal import StoreCounters

if TYPE_CHECKING:
    from batonmq.engine.broker import Broker


@dataclass(slots=True)
class ConnectionCounters:
    recv_oct: int = counter("bytes", "Octets received from the client")
    send_oct: int = counter("bytes", "Octets sent to the client")


@dataclass(slots=True)
class ChannelCounters:
    publish: int = counter("messages", "Messages published (basic.publish)")
    confirm: int = counter("messages", "Publishes confirmed with basic.ack")
    deliver: int = counter("messages", "Messages delivered to consumers (basic.deliver)")
    get: int = counter("messages", "Messages fetched with basic.get")
    ack: int = counter("messages", "Deliveries acknowledged")
    redeliver: int = counter("messages", "Deliveries that carried the redelivered flag")

    def add(self, other: ChannelCounters) -> None:
        for item in dataclasses.fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))


@dataclass(slots=True)
class BrokerCounters:
    connections_opened: int = counter("connections", "Connections accepted")
    connections_closed: int = counter("connections", "Connections ended, however they ended")
    channels_opened: int = counter("channels", "Channels opened")
    channels_closed: int = counter("channels", "Channels closed")


@dataclass(slots=True)
class GlobalCounters:
    """The broker's message totals under the names of RabbitMQ's Prometheus plugin
    (`rabbitmq_global_messages_received_total`, ...)."""

    messages_received: int = counter("messages", "Messages published to the broker")
    messages_confirmed: int = counter("messages", "Publishes confirmed to their publishers")
    messages_delivered: int = counter("messages", "Messages delivered to consumers or fetched")
    messages_acknowledged: int = counter("messages", "Deliveries acknowledged")
    messages_redelivered: int = counter("messages", "Deliveries that carried the redelivered flag")

    @classmethod
    def of(cls, totals: ChannelCounters) -> GlobalCounters:
        return cls(
            totals.publish,
            totals.confirm,
            totals.deliver + totals.get,
            totals.ack,
            totals.redeliver,
        )


def message_totals(
    closed_channels: ChannelCounters, open_channels: Iterable[ChannelCounters]
) -> ChannelCounters:
    """The broker's message totals: what the closed channels counted, and the open ones."""
    totals = ChannelCounters()
    totals.add(closed_channels)
    for counters in open_channels:
        totals.add(counters)
    return totals


def broker_totals(broker: Broker) -> ChannelCounters:
    """`message_totals` of a broker: its closed channels' and those of its sessions."""
    open_channels = (
        channel.counters for session in broker.sessions for channel in session.channels.values()
    )
    return message_totals(broker.closed_channels, open_channels)


def _register() -> None:
    connection: ScopeStatistics[Any] = ScopeStatistics(
        Scope.CONNECTION, ConnectionCounters, lambda session: session.counters
    )
    connection.gauge("channels", "channels", "Open channels", lambda s: len(s.channels))
    REGISTRY.register(connection)
    channel: ScopeStatistics[Any] = ScopeStatistics(
        Scope.CHANNEL, ChannelCounters, lambda channel: channel.counters
    )
    channel.gauge(
        "messages_unacked", "messages", "Deliveries not yet settled", lambda c: len(c.unsettled)
    )
    channel.gauge("consumers", "consumers", "Consumers on the channel", lambda c: len(c.consumers))
    REGISTRY.register(channel)
    broker: ScopeStatistics[Any] = ScopeStatistics(
        Scope.BROKER, BrokerCounters, lambda broker: broker.counters
    )
    # Named as RabbitMQ's plugin names them (rabbitmq_connections, _channels, _queues).
    broker.gauge(
        "connections",
        "connections",
        "Open connections",
        lambda b: len(b.sessions),
        name="batonmq_connections",
    )
    broker.gauge(
        "channels",
        "channels",
        "Open channels",
        lambda b: sum(len(session.channels) for session in b.sessions),
        name="batonmq_channels",
    )
    broker.gauge(
        "queues",
        "queues",
        "Queues declared",
        lambda b: sum(len(host.queues) for host in b.vhosts.values()),
        name="batonmq_queues",
    )
    REGISTRY.register(broker)
    REGISTRY.register(
        ScopeStatistics(
            Scope.GLOBAL, GlobalCounters, lambda broker: GlobalCounters.of(broker_totals(broker))
        )
    )
    REGISTRY.register(ScopeStatistics(Scope.STORE, StoreCounters, lambda b: b.journal.counters))
    # A queue's counters are its own (batonmq.queues.counters); its gauges are read when asked.
    queue: ScopeStatistics[Any] = ScopeStatistics(
        Scope.QUEUE, QueueCounters, lambda queue: queue.counters
    )
    queue.gauge(
        "messages_ready", "messages", "Messages ready for delivery", lambda q: q.message_count
    )
    queue.gauge("messages_unacked", "messages", "Deliveries not yet settled", lambda q: q.unacked)
    queue.gauge("consumers", "consumers", "Consumers of the queue", lambda q: q.consumer_count)
    queue.gauge(
        "memory", "bytes", "Estimated memory of the ready messages it holds", lambda q: q.memory
    )
    REGISTRY.register(queue)


_register()
