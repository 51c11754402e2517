"""The management API over a virtual host spread over the workers (docs/multi-core.md, step 6):
a request about one of its queues is carried out by the queue's owner, which runs it (RabbitMQ's
management answers `/api/queues/{vhost}/{name}` with the queue's own figures, wherever it runs);
in a read of the whole broker each queue is listed once, by the worker that runs it, and each
exchange and binding once, by the virtual host's home."""

from __future__ import annotations

from batonmq.engine.api import EngineApi
from batonmq.engine.broker import Broker
from batonmq.management.perworker import owned_bindings, owned_exchanges, owned_queues
from batonmq.management.workers import Workers
from batonmq.server.placement import WorkerSeat, owner_of, queue_owner

#: "/" is worker HOME's among two; queue "a" is the other worker's, "d" the home's.
HOME = owner_of("/", 2)
OTHER = 1 - HOME
#: A seat's answer to whether "/" is spread (`broker.spread_vhosts = ["/"]`).
SPREAD = WorkerSeat(HOME, 2, {}, [], -1, [], "run", spread=frozenset({"/"}))


def test_a_spread_virtual_hosts_queue_requests_go_to_the_queues_owner() -> None:
    assert (queue_owner("/", "a", 2), queue_owner("/", "d", 2)) == (OTHER, HOME)
    spread = Workers(EngineApi(Broker()), HOME, 2, spreads=SPREAD.spreads)
    assert [spread.carrier("/", queue) for queue in ("a", "d")] == [OTHER, HOME]
    # Anything else about it (its exchanges, bindings, the virtual host) goes to its home.
    assert spread.carrier("/", None) == HOME
    whole = Workers(EngineApi(Broker()), OTHER, 2)
    assert [whole.carrier("/", queue) for queue in ("a", "d", None)] == [HOME, HOME, HOME]


async def test_each_queue_exchange_and_binding_is_listed_once() -> None:
    """What the other worker (not the home) of a spread "/" answers a read of the whole
    broker: the queues it runs, but not the exchanges and bindings, which its home lists."""
    broker = Broker()
    api = EngineApi(broker)
    await api.declare_queue("guest", "/", "a", durable=False)
    other = Workers(api, OTHER, 2, spreads=SPREAD.spreads)
    home = Workers(api, HOME, 2, spreads=SPREAD.spreads)

    assert [info.name for info in owned_queues(api, other.ownership, "/")] == ["a"]
    assert owned_exchanges(api, other.ownership, "/") == []
    assert owned_bindings(api, other.ownership, "/") == []
    assert owned_exchanges(api, home.ownership, "/") != []
    assert [info.destination for info in owned_bindings(api, home.ownership, "/")] == ["a"]
    # Not spread: the worker that does not own "/" lists nothing of it.
    whole = Workers(api, OTHER, 2)
    assert owned_queues(api, whole.ownership, "/") == []
