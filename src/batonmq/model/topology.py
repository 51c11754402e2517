"""Changes to a virtual host's topology as values, and the connection that owns an exclusive
queue as a value.

A virtual host spread over worker processes keeps its exchanges, bindings and the names of its
queues on every worker. One worker decides every change, in order, and sends each to the others
as one of these operations; a worker applies an operation the same way whether it decided it or
was told of it. An operation carries no object, only names and declared properties, so it can
cross a link between processes and be compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from pamqp.common import FieldTable

from batonmq.model.destination import Destination


@dataclass(frozen=True, slots=True)
class ConnectionRef:
    """A client connection anywhere in a broker: the worker it is served by, that worker
    process's start id, and the connection's number there. An exclusive queue is owned by one;
    two refs are the same connection exactly when they are equal."""

    worker: int
    start: int
    connection: int


@dataclass(frozen=True, slots=True)
class ExchangeDeclared:
    name: str
    type_name: str
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class ExchangeDeleted:
    name: str


@dataclass(frozen=True, slots=True)
class QueueDeclared:
    name: str
    durable: bool
    auto_delete: bool
    #: The connection that declared the queue exclusive; None for a shared queue.
    exclusive_owner: ConnectionRef | None
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class QueueDeleted:
    name: str


@dataclass(frozen=True, slots=True)
class Bound:
    source: str
    destination: Destination
    routing_key: str
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class Unbound:
    source: str
    destination: Destination
    routing_key: str
    arguments: FieldTable


TopologyOp = ExchangeDeclared | ExchangeDeleted | QueueDeclared | QueueDeleted | Bound | Unbound
