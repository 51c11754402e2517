"""A virtual host's topology as the ops that make it (`batonmq.model.topology`), and a copy
made equal to such ops: what a spread virtual host's home sends a worker whose link comes up,
and what a home that starts takes from the others (`batonmq.engine.spread`).

Only `VirtualHost.apply` changes the copy, so nothing is written, and an exchange that
auto-deletes with its last binding goes as it would on the home.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from batonmq.cluster.recordfields import table
from batonmq.engine.exchange import Exchange
from batonmq.engine.vhost import RESERVED_PREFIX, VirtualHost
from batonmq.model.topology import (
    Bound,
    ExchangeDeclared,
    ExchangeDeleted,
    QueueDeclared,
    QueueDeleted,
    TopologyOp,
    Unbound,
)
from batonmq.queues.protocol import RoutedQueue


def _is_standard(name: str) -> bool:
    """Made by every worker itself (the default and amq.* exchanges): never in a snapshot."""
    return name == "" or name.startswith(RESERVED_PREFIX)


def _exchange_op(exchange: Exchange) -> ExchangeDeclared:
    return ExchangeDeclared(
        exchange.name,
        exchange.type_name,
        exchange.durable,
        exchange.auto_delete,
        exchange.internal,
        dict(exchange.arguments),
    )


def _queue_op(queue: RoutedQueue) -> QueueDeclared:
    return QueueDeclared(
        queue.name, queue.durable, queue.auto_delete, queue.exclusive_owner, queue.arguments
    )


def bindings_of(vhost: VirtualHost) -> Iterator[Bound]:
    """Every binding of `vhost`, as the op that makes it."""
    for exchange in list(vhost.exchanges.values()):
        for destination, routing_key, arguments in exchange.router.bindings():
            yield Bound(exchange.name, destination, routing_key, dict(arguments))


def _binding_key(op: Bound) -> tuple[str, str, str, str, bytes]:
    destination = op.destination
    return (
        op.source,
        destination.kind.value,
        destination.name,
        op.routing_key,
        table(op.arguments),
    )


def topology_ops(vhost: VirtualHost) -> tuple[TopologyOp, ...]:
    """`vhost`'s topology as the ops that make it from nothing."""
    exchanges = [_exchange_op(e) for e in vhost.exchanges.values() if not _is_standard(e.name)]
    queues = [_queue_op(q) for q in [*vhost.queues.values(), *vhost.remote.values()]]
    return (*exchanges, *queues, *bindings_of(vhost))


def replace_topology(
    vhost: VirtualHost, ops: tuple[TopologyOp, ...], runs: Callable[[str], bool]
) -> None:
    """Make `vhost`'s exchanges, bindings and queues run elsewhere those that `ops` make
    (`topology_ops`), writing nothing; the queues this worker runs (`runs`) stay, and one of
    them `ops` names but this worker does not have is not made."""
    exchanges = {op.name: op for op in ops if isinstance(op, ExchangeDeclared)}
    queues = {op.name: op for op in ops if isinstance(op, QueueDeclared)}
    bindings = {_binding_key(op): op for op in ops if isinstance(op, Bound)}
    for bound in list(bindings_of(vhost)):
        if _binding_key(bound) not in bindings:
            vhost.apply(
                Unbound(bound.source, bound.destination, bound.routing_key, bound.arguments)
            )
    for exchange in list(vhost.exchanges.values()):
        if not _is_standard(exchange.name) and exchanges.get(exchange.name) != _exchange_op(
            exchange
        ):
            vhost.apply(ExchangeDeleted(exchange.name))
    for remote in list(vhost.remote.values()):
        if queues.get(remote.name) != _queue_op(remote):
            vhost.apply(QueueDeleted(remote.name))
    for name, declared in exchanges.items():
        if name not in vhost.exchanges:
            vhost.apply(declared)
    for name, queue in queues.items():
        if vhost.known_queue(name) is None and not runs(name):
            vhost.apply(queue)
    present = {_binding_key(bound) for bound in bindings_of(vhost)}
    for key, bound in bindings.items():
        if key not in present:
            vhost.apply(bound)
