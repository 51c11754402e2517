"""Recovery of a spread virtual host's home: the other workers' queues come back as stand-ins,
so that the home's bindings to them come back too.

The rule pinned (AMQP 0-9-1 spec, queue.bind and exchange.declare "durable": durable exchanges,
queues and the bindings between them survive a restart; docs/multi-core.md, step 6): the home
keeps every binding of the virtual host, also those to queues whose rows another worker owns.
"""

from __future__ import annotations

from batonmq.engine.afterwrite import AfterWrite
from batonmq.engine.api import EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.recovery import restore
from batonmq.engine.remoteconsumers import RemoteConsumers
from batonmq.engine.remotequeue import Outbound, RemoteQueue
from batonmq.engine.vhost import VirtualHost
from batonmq.model.topology import QueueDeclared
from batonmq.queues.types import queue_type
from batonmq.store.base import (
    Recovery,
    StoredBinding,
    StoredDefinitions,
    StoredExchange,
    StoredQueue,
)

#: The worker that runs every queue of "/" whose name does not start with "mine".
OTHER = 1


class Home:
    """The `Spreading` of "/" in its home, worker 0, which runs the queues named "mine…";
    the others are stand-ins that take messages for worker OTHER (no link is up here)."""

    is_home = True
    synced = True

    def __init__(self, vhost: VirtualHost) -> None:
        self.outbound = Outbound(OTHER, AfterWrite(vhost.paging.journal))

    def owns(self, queue: str) -> bool:
        return queue.startswith("mine")

    def owner_of(self, queue: str) -> int:
        return 0 if self.owns(queue) else OTHER

    def remote_queue(self, declared: QueueDeclared) -> RemoteQueue:
        options = queue_type(declared.arguments).parse_arguments(declared.arguments)
        return RemoteQueue(
            "/", declared, options, self.outbound, RemoteConsumers(set(), self.outbound)
        )


def spread_broker() -> Broker:
    def spread(vhost: VirtualHost) -> Home | None:
        return Home(vhost) if vhost.name == "/" else None

    return Broker(spread_factory=spread)  # type: ignore[arg-type]


def home_rows() -> Recovery:
    """The home's rows: exchange "x", its queue "mine", "x" bound to "mine" and to "theirs"
    (whose row is the other worker's), and in "other" (not spread) a binding to a queue no
    identity holds."""
    return Recovery(
        exchanges=[
            StoredExchange("/", "x", "direct", False, False, {}),
            StoredExchange("other", "y", "direct", False, False, {}),
        ],
        queues=[StoredQueue("/", "mine", False, {})],
        bindings=[
            StoredBinding("/", "x", "queue", "mine", "k", {}),
            StoredBinding("/", "x", "queue", "theirs", "k", {}),
            StoredBinding("other", "y", "queue", "elsewhere", "k", {}),
        ],
        backlogs=[],
        message_id_base=1 << 40,
        vhosts=["/", "other"],
    )


PEERS = {
    "b1w1": StoredDefinitions(
        exchanges=[],
        queues=[
            StoredQueue("/", "theirs", False, {"x-max-length": 5}),
            # A queue of a virtual host that is not spread is its owner's alone.
            StoredQueue("other", "elsewhere", False, {}),
        ],
        bindings=[],
    )
}


def test_the_other_workers_queues_come_back_as_stand_ins_with_their_bindings() -> None:
    broker = spread_broker()

    recovered = restore(broker, home_rows(), PEERS)

    vhost = broker.vhosts["/"]
    assert set(vhost.queues) == {"mine"}
    theirs = vhost.remote["theirs"]
    assert isinstance(theirs, RemoteQueue)
    assert (theirs.durable, theirs.arguments) == (True, {"x-max-length": 5})
    bound = [info.destination for info in EngineApi(broker).bindings("/") if info.source == "x"]
    assert sorted(bound) == ["mine", "theirs"]
    assert recovered.bindings == 2
    # Not spread: the other worker's queue is not known here, nor bound.
    assert "elsewhere" not in broker.vhosts["other"].queues
    assert broker.vhosts["other"].known_queue("elsewhere") is None


def test_without_the_other_workers_rows_a_binding_to_their_queue_is_not_restored() -> None:
    """What a worker that is not the home gets: it syncs from the home instead."""
    broker = spread_broker()

    recovered = restore(broker, home_rows())

    assert broker.vhosts["/"].known_queue("theirs") is None
    assert recovered.bindings == 1


def test_another_workers_rows_of_a_virtual_host_not_in_the_catalogue_make_none() -> None:
    """RabbitMQ: a virtual host exists once created (and until deleted), the same on every
    node; rows another worker left of one that is not in the catalogue do not make it here."""
    broker = spread_broker()
    peers = {"b1w1": StoredDefinitions([], [StoredQueue("gone", "q", False, {})], [])}

    restore(broker, home_rows(), peers)

    assert "gone" not in broker.vhosts
