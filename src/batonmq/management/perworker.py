"""What each worker of a broker answers its siblings for the HTTP API
(`batonmq.management.workers`), through its engine's public API: reads of what it holds (the
objects of the virtual hosts it owns, since every worker holds every virtual host's default
exchanges; its connections, channels and consumers; its overview, statistics, process figures
and newest log records), and the few changes made in a given worker (close a connection it
holds, declare a definitions import's objects in its virtual hosts, set its log level).

Each is a function of the worker's `EngineApi` and of what it owns (`Ownership`), then its own
arguments; a sibling is asked for one by name (`ASKABLE`), so nothing else can be asked.

A virtual host spread over the workers is held by all of them, each running the queues it
owns and holding the whole topology: its queues are listed by the worker that runs each (every
worker's queues are its own), its exchanges and bindings by its home alone, so that each
appears once in a read of the whole broker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from batonmq.engine.api import EngineApi
from batonmq.engine.membership import MemberInfo
from batonmq.engine.snapshots import (
    BindingInfo,
    ChannelInfo,
    ConnectionInfo,
    ConsumerInfo,
    ExchangeInfo,
    Overview,
    QueueInfo,
    StatisticsReading,
)
from batonmq.management.definitions import Definitions
from batonmq.management.processes import ProcessFigure, process_figures
from batonmq.management.recentlog import RECENT


@dataclass(frozen=True, slots=True)
class Ownership:
    """What a worker owns, of each virtual host."""

    #: Whether it owns a virtual host: it runs it whole, or it is a spread one's home (the
    #: worker that keeps its exchanges and bindings).
    vhost: Callable[[str], bool]
    #: Whether the queues it runs of a virtual host are its to list: it owns the virtual host,
    #: or the virtual host is spread (each queue is listed by the worker that runs it).
    holds_queues: Callable[[str], bool]


def owned_queues(api: EngineApi, owns: Ownership, vhost: str | None = None) -> list[QueueInfo]:
    return [info for info in api.queues(vhost) if owns.holds_queues(info.vhost)]


def owned_exchanges(
    api: EngineApi, owns: Ownership, vhost: str | None = None
) -> list[ExchangeInfo]:
    return [info for info in api.exchanges(vhost) if owns.vhost(info.vhost)]


def owned_bindings(api: EngineApi, owns: Ownership, vhost: str | None = None) -> list[BindingInfo]:
    return [info for info in api.bindings(vhost) if owns.vhost(info.vhost)]


def held_connections(api: EngineApi, _owns: Ownership) -> list[ConnectionInfo]:
    """Every connection this worker serves (and those in their handshake here)."""
    return api.connections()


def held_channels(
    api: EngineApi, _owns: Ownership
) -> tuple[list[ConnectionInfo], list[ChannelInfo], list[ConsumerInfo]]:
    """This worker's connections, channels and consumers, read together: a channel names its
    connection by a number that is this worker's own."""
    return api.connections(), api.channels(), api.consumers()


def owned_overview(api: EngineApi, owns: Ownership) -> Overview:
    exchanges = sum(1 for info in api.exchanges() if owns.vhost(info.vhost))
    return dataclasses.replace(api.overview(), exchanges=exchanges)


def worker_statistics(api: EngineApi, _owns: Ownership) -> list[StatisticsReading]:
    return api.statistics()


def own_process_figures(_api: EngineApi, _owns: Ownership) -> list[ProcessFigure]:
    """This worker process's `process_*` figures (memory, CPU seconds, open files)."""
    return process_figures()


def newest_log_lines(_api: EngineApi, _owns: Ownership, count: int) -> list[str]:
    """This worker's newest `count` log records, as the json log format writes them."""
    return RECENT.newest(count)


def set_worker_log_level(api: EngineApi, _owns: Ownership, level: str) -> None:
    api.set_log_level(level)


def close_held_connection(
    api: EngineApi, _owns: Ownership, connection_id: int, reason: str
) -> None:
    """Close a connection this worker holds (`EngineApi.close_connection`)."""
    api.close_connection(connection_id, reason)


async def declare_topology(api: EngineApi, owns: Ownership, user: str, wanted: Definitions) -> None:
    """Declare what is missing of the exchanges, queues and bindings of `wanted` in the virtual
    hosts this worker owns, as `user` (a definitions import: RabbitMQ's leaves what exists as
    it is)."""
    for exchange in wanted.exchanges:
        if not owns.vhost(exchange.vhost):
            continue
        if exchange.name not in {info.name for info in api.exchanges(exchange.vhost)}:
            await api.declare_exchange(
                user,
                exchange.vhost,
                exchange.name,
                exchange.type,
                durable=exchange.durable,
                auto_delete=exchange.auto_delete,
                internal=exchange.internal,
                arguments=exchange.arguments,
            )
    for queue in wanted.queues:
        # A spread virtual host's home declares all of them, as a client's declare would.
        if owns.vhost(queue.vhost) and queue.name not in api.known_queues(queue.vhost):
            await api.declare_queue(
                user,
                queue.vhost,
                queue.name,
                durable=queue.durable,
                auto_delete=queue.auto_delete,
                arguments=queue.arguments,
            )
    for binding in wanted.bindings:
        if owns.vhost(binding.vhost):
            await api.bind(user, binding)


async def adopt_taken_over(api: EngineApi, owns: Ownership) -> int:
    """Serve the share of a failed member that this worker's sibling claimed and left to it:
    the state of the virtual hosts it owns (`EngineApi.adopt_taken_over`)."""
    return await api.adopt_taken_over(owns.vhost)


async def cluster_members(api: EngineApi, _owns: Ownership) -> list[MemberInfo] | None:
    """The members of the broker's HA cluster, as worker 0, its voice there, lists them (None:
    the broker is not a member)."""
    return await api.cluster_members() if api.in_cluster() else None


def quiesce_worker(api: EngineApi, _owns: Ownership) -> None:
    api.quiesce()


def unquiesce_worker(api: EngineApi, _owns: Ownership) -> None:
    api.unquiesce()


#: What a sibling may be asked to run, by name.
ASKABLE: Final[dict[str, Callable[..., object]]] = {
    read.__name__: read
    for read in (
        adopt_taken_over,
        cluster_members,
        quiesce_worker,
        unquiesce_worker,
        close_held_connection,
        declare_topology,
        newest_log_lines,
        set_worker_log_level,
        owned_queues,
        owned_exchanges,
        owned_bindings,
        held_connections,
        held_channels,
        owned_overview,
        worker_statistics,
        own_process_figures,
    )
}
