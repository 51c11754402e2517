"""The replicated topology of a virtual host spread over two workers (`batonmq.engine.spread`):
two real brokers, each on its own SQLite file, whose peer links are joined by a real Unix
socket pair. Virtual host "/" has its home on worker 0; queues "q" and "q1" are run by worker
1, "q4" by worker 0. Clients are in-memory AMQP clients of each broker's engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest
from pamqp import base, commands

from batonmq.amqp.errors import ProtocolError
from batonmq.amqp.frames import encode_header_payload
from batonmq.cluster.peerlink import PeerLink, PeerLinks
from batonmq.cluster.publishrecords import PUBLISH
from batonmq.cluster.topologyrecords import TOPOLOGY_ANSWER, RequestFlags, TopologyRequest
from batonmq.engine.broker import Broker
from batonmq.engine.events import EventKind
from batonmq.engine.recovery import restore
from batonmq.engine.remotequeue import RemoteQueue
from batonmq.engine.spread import Spread, SpreadWorker
from batonmq.engine.vhost import VirtualHost
from batonmq.model.destination import Destination
from batonmq.model.message import Message
from batonmq.model.topology import QueueDeclared
from batonmq.server.placement import inbox_pairs, owner_of, queue_owner
from batonmq.store.sqlite import SQLiteStore
from tests.memclient import MemClient, connect
from tests.peerpair import join as link_pair

_Method = TypeVar("_Method", bound=base.Frame)


@dataclass
class Worker:
    broker: Broker
    links: PeerLinks
    spreading: SpreadWorker

    @property
    def vhost(self) -> VirtualHost:
        return self.broker.vhosts["/"]

    @property
    def spread(self) -> Spread:
        spread = self.vhost.spread
        assert isinstance(spread, Spread)
        return spread

    def client(self) -> MemClient:
        client, _session = connect(self.broker)
        return client


async def until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not done():
            await asyncio.sleep(0.005)


async def answer(client: MemClient, method_class: type[_Method]) -> _Method:
    """The next method `client` gets, once it comes (the answer may wait for the other
    worker), which must be a `method_class`."""
    async with asyncio.timeout(5):
        while True:
            received = client.receive()
            if received:
                [item] = received
                assert isinstance(item.method, method_class), item
                return item.method
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def running(directory: Path, index: int) -> AsyncIterator[Worker]:
    directory.mkdir(exist_ok=True)
    store = SQLiteStore(directory / "batonmq.sqlite3", broker_id=f"w{index}", sync=False)
    await store.open()
    broker = Broker(store=store)
    inboxes = inbox_pairs(2)  # nobody reads them: the links are made by `join`
    links = PeerLinks(index, 2, [sending for _, sending in inboxes], started_again=False)
    spreading = SpreadWorker(broker, links, frozenset({"/"}))
    spreading.ask_wait = 0.5
    spreading.alone_wait = 2.0
    spreading.install()
    restore(broker, await store.recover())
    broker.journal.start()
    try:
        yield Worker(broker, links, spreading)
    finally:
        links.close()
        await broker.journal.stop()
        await store.close()
        for ends in inboxes:
            for end in ends:
                end.close()


async def join(first: Worker, second: Worker) -> None:
    """Link the two workers, as if each had made the link the other adopts, and wait until both
    have the home's topology."""
    link_pair(first.links, second.links)
    await until(lambda: first.spread.synced and second.spread.synced)


async def cut(pair: list[Worker]) -> None:
    link = pair[0].links.link(1)
    assert link is not None
    link.close()
    await until(lambda: pair[1].links.link(0) is None and pair[0].links.link(1) is None)


@pytest.fixture
async def pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[list[Worker]]:
    assert owner_of("/", 2) == 0
    assert [queue_owner("/", name, 2) for name in ("q", "q1", "q4")] == [1, 1, 0]
    async with running(tmp_path / "w0", 0) as first, running(tmp_path / "w1", 1) as second:
        await join(first, second)
        yield [first, second]
    # A broker whose log shows a traceback (or any error) fails the test.
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def nowhere(pair: list[Worker], name: str) -> bool:
    return all(worker.vhost.known_queue(name) is None for worker in pair)


def message(routing_key: str, body: bytes = b"m") -> Message:
    return Message(
        "x", routing_key, encode_header_payload(commands.Basic.Properties(), len(body)), body
    )


async def test_a_change_asked_on_a_worker_is_everywhere_before_its_answer(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.bind: "bind-ok" confirms the binding was made; RabbitMQ clustering:
    exchanges, queues and bindings are replicated to every node. Worker 1 asks the home
    (worker 0): each change is in worker 1's copy when the answer comes, the queue runs on its
    owner and is a stand-in elsewhere, and a publish on worker 0 through the binding reaches
    the queue on worker 1."""
    home, other = pair
    seen: list[tuple[bool, bool, bool]] = []
    handler = other.links.handlers[TOPOLOGY_ANSWER]

    def look(link: PeerLink, payload: bytes) -> None:
        vhost = other.vhost
        exchange = vhost.exchanges.get("x")
        bound = exchange is not None and len(exchange.router) > 0
        seen.append(("x" in vhost.exchanges, "q" in vhost.queues, bound))
        handler(link, payload)

    other.links.handlers[TOPOLOGY_ANSWER] = look
    client = other.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await answer(client, commands.Exchange.DeclareOk)
    client.send(1, commands.Queue.Declare(queue="q", durable=True))
    declared = await answer(client, commands.Queue.DeclareOk)
    assert declared.queue == "q"
    client.send(1, commands.Queue.Bind(queue="q", exchange="x", routing_key="k"))
    await answer(client, commands.Queue.BindOk)
    assert seen == [(True, False, False), (True, True, False), (True, True, True)]
    assert isinstance(home.vhost.remote["q"], RemoteQueue)
    assert "q" not in home.vhost.queues
    routed = home.vhost.route(home.vhost.exchanges["x"], message("k"))
    assert [queue.name for queue in routed] == ["q"]
    publisher = home.client()
    publisher.publish(1, b"crossed", exchange="x", routing_key="k")
    await until(lambda: other.vhost.queues["q"].message_count == 1)


async def test_a_redeclare_with_other_arguments_is_refused_on_either_worker(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare: redeclaring an existing queue must use equivalent arguments,
    else 406 PRECONDITION_FAILED; so on the worker that runs it and on the one that does not."""
    home, other = pair
    client = home.client()
    client.send(1, commands.Queue.Declare(queue="q", arguments={"x-max-length": 5}))
    await answer(client, commands.Queue.DeclareOk)
    for worker in pair:
        asking = worker.client()
        asking.send(1, commands.Queue.Declare(queue="q", arguments={"x-max-length": 6}))
        refused = await answer(asking, commands.Channel.Close)
        assert refused.reply_code == 406
    again = other.client()
    again.send(1, commands.Queue.Declare(queue="q", arguments={"x-max-length": 5}))
    await answer(again, commands.Queue.DeclareOk)


async def test_an_exclusive_queue_is_locked_to_its_connection_on_every_worker(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare exclusive: a queue exclusive to another connection is refused
    with channel exception 405 RESOURCE_LOCKED, whichever worker that connection is on."""
    home, other = pair
    owner = home.client()
    owner.send(1, commands.Queue.Declare(queue="q1", exclusive=True))
    await answer(owner, commands.Queue.DeclareOk)
    assert other.vhost.queues["q1"].exclusive_owner is not None
    for worker in pair:
        asking = worker.client()
        asking.send(1, commands.Queue.Declare(queue="q1", exclusive=True))
        refused = await answer(asking, commands.Channel.Close)
        assert refused.reply_code == 405


async def test_a_queue_deleted_on_one_worker_is_routed_to_nowhere(pair: list[Worker]) -> None:
    """AMQP 0-9-1 queue.delete: "delete-ok" confirms the deletion; RabbitMQ clustering: the
    topology is the same on every node. After a delete asked on worker 0 of a queue run by
    worker 1, neither routes to it."""
    home, other = pair
    client = home.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await answer(client, commands.Exchange.DeclareOk)
    for name in ("q", "q4"):
        client.send(1, commands.Queue.Declare(queue=name))
        await answer(client, commands.Queue.DeclareOk)
        client.send(1, commands.Queue.Bind(queue=name, exchange="x", routing_key="k"))
        await answer(client, commands.Queue.BindOk)
    deleting = other.client()
    deleting.send(1, commands.Queue.Delete(queue="q4"))
    await answer(deleting, commands.Queue.DeleteOk)
    client.send(1, commands.Queue.Delete(queue="q"))
    await answer(client, commands.Queue.DeleteOk)
    for worker in pair:
        vhost = worker.vhost
        assert vhost.known_queue("q") is None and vhost.known_queue("q4") is None
        assert vhost.route(vhost.exchanges["x"], message("k")) == []


async def test_a_request_while_the_home_is_unreachable_is_refused_after_the_wait(
    pair: list[Worker],
) -> None:
    """A change waits for the home worker (it alone orders the virtual host's changes), for a
    while only: then the connection is closed with 541 INTERNAL_ERROR, which AMQP 0-9-1 gives
    to a server that cannot complete the method because of an internal problem."""
    home, other = pair
    other.spreading.home_wait = 0.2
    client = other.client()
    await cut(pair)
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await asyncio.sleep(0.1)
    client.expect_nothing()  # it waits ...
    refused = await answer(client, commands.Connection.Close)  # ... then gives up
    assert refused.reply_code == 541
    assert "home worker 0" in refused.reply_text
    assert "x" not in home.vhost.exchanges and "x" not in other.vhost.exchanges


async def test_a_worker_whose_link_comes_back_gets_what_it_missed(pair: list[Worker]) -> None:
    """RabbitMQ clustering: every node has the whole topology. A change made while a worker's
    link was down reaches it in the home's snapshot when the link is made again."""
    home, other = pair
    client = home.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await answer(client, commands.Exchange.DeclareOk)
    assert "x" in other.vhost.exchanges  # declare-ok came once every worker had it
    await cut(pair)
    assert not other.spread.synced
    client.send(1, commands.Exchange.Declare(exchange="late", exchange_type="fanout"))
    await answer(client, commands.Exchange.DeclareOk)
    client.send(1, commands.Exchange.Delete(exchange="x"))
    await answer(client, commands.Exchange.DeleteOk)
    client.send(1, commands.Queue.Declare(queue="q4"))
    await answer(client, commands.Queue.DeclareOk)
    client.send(1, commands.Queue.Bind(queue="q4", exchange="late"))
    await answer(client, commands.Queue.BindOk)
    assert "late" not in other.vhost.exchanges
    await join(home, other)
    vhost = other.vhost
    assert "x" not in vhost.exchanges
    assert vhost.exchanges["late"].type_name == "fanout"
    assert isinstance(vhost.remote["q4"], RemoteQueue)
    assert [d for d, _k, _a in vhost.exchanges["late"].router.bindings()] == [
        Destination.queue("q4")
    ]


async def test_a_transient_exchange_and_binding_outlive_the_homes_restart(
    tmp_path: Path, pair: list[Worker]
) -> None:
    """BatonMQ multi-core: a worker that restarts is not a node that went down; RabbitMQ
    clustering: transient exchanges and bindings live as long as a node of the cluster does.
    The home that starts again asks the other worker for its copy and goes on from it; an
    exclusive queue of a connection of its earlier process goes (spec queue.declare
    exclusive: deleted when its connection closes)."""
    home, other = pair
    client = other.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await answer(client, commands.Exchange.DeclareOk)
    client.send(1, commands.Queue.Declare(queue="q"))
    await answer(client, commands.Queue.DeclareOk)
    client.send(1, commands.Queue.Bind(queue="q", exchange="x", routing_key="k"))
    await answer(client, commands.Queue.BindOk)
    ended = home.client()
    ended.send(1, commands.Queue.Declare(queue="q1", exclusive=True))
    await answer(ended, commands.Queue.DeclareOk)
    assert "q1" in other.vhost.queues
    home.links.close()
    await until(lambda: other.links.link(0) is None)
    # Its store is a new one: what the test looks for was never stored.
    async with running(tmp_path / "w0-again", 0) as started:
        assert "x" not in started.vhost.exchanges  # transient: not in its store
        await join(started, other)
        vhost = started.vhost
        assert vhost.exchanges["x"].type_name == "direct"
        assert [q.name for q in vhost.route(vhost.exchanges["x"], message("k"))] == ["q"]
        assert other.spread.applied[0] == started.links.start_id
        # Spec queue.declare exclusive: the queue goes with its connection, which ended
        # with the home's earlier process.
        await until(partial(nowhere, [started, other], "q1"))
        client.send(1, commands.Queue.Unbind(queue="q", exchange="x", routing_key="k"))
        await answer(client, commands.Queue.UnbindOk)
        assert other.vhost.route(other.vhost.exchanges["x"], message("k")) == []


async def test_a_request_in_flight_when_the_home_link_drops_is_refused_at_once(
    pair: list[Worker],
) -> None:
    """A change whose answer cannot come any more is not left waiting: 541 INTERNAL_ERROR at
    once (AMQP 0-9-1: the server could not complete the method), well before the wait for an
    unreachable home is over."""
    _home, other = pair
    client = other.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    link = other.links.link(0)
    assert link is not None
    link.close()
    async with asyncio.timeout(1):
        refused = await answer(client, commands.Connection.Close)
    assert refused.reply_code == 541


async def test_a_passive_declare_on_another_worker_counts_where_the_queue_runs(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare-ok: message-count and consumer-count are the queue's; a worker
    that does not run the queue asks its owner for them."""
    home, other = pair
    owner = other.client()
    owner.send(1, commands.Queue.Declare(queue="q"))
    await answer(owner, commands.Queue.DeclareOk)
    owner.send(1, commands.Basic.Consume(queue="q"))
    await answer(owner, commands.Basic.ConsumeOk)
    owner.send(2, commands.Channel.Open())
    await answer(owner, commands.Channel.OpenOk)
    owner.send(2, commands.Queue.Declare(queue="q1"))
    await answer(owner, commands.Queue.DeclareOk)
    for body in (b"a", b"b"):
        owner.publish(2, body, routing_key="q1")
    client = home.client()
    for name, counts in (("q", (0, 1)), ("q1", (2, 0))):
        client.send(1, commands.Queue.Declare(queue=name, passive=True))
        declared = await answer(client, commands.Queue.DeclareOk)
        assert (declared.message_count, declared.consumer_count) == counts


async def test_a_purge_of_a_queue_another_worker_runs_is_made_by_its_owner(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.purge: removes the queue's ready messages and says how many; a worker
    that does not run the queue has its owner purge it."""
    home, other = pair
    owner = other.client()
    owner.send(1, commands.Queue.Declare(queue="q"))
    await answer(owner, commands.Queue.DeclareOk)
    for body in (b"a", b"b", b"c"):
        owner.publish(1, body, routing_key="q")
    remote = home.vhost.remote["q"]
    purged: list[int] = []
    home.vhost.carry_out(home.spread.purge(remote), purged.append, pytest.fail)
    await until(lambda: purged == [3])
    assert other.vhost.queues["q"].message_count == 0


async def test_an_exclusive_queue_goes_everywhere_when_its_connection_closes(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare exclusive: an exclusive queue "is deleted when [its]
    connection closes"; the worker that runs it removes it and tells the home, which tells
    every worker (queues run by the home and by the other worker alike)."""
    home, other = pair
    for worker, name in ((home, "q4"), (other, "q1")):
        client = worker.client()
        client.send(1, commands.Queue.Declare(queue=name, exclusive=True))
        await answer(client, commands.Queue.DeclareOk)
        assert all(each.vhost.known_queue(name) is not None for each in pair)
        client.send(0, commands.Connection.Close(reply_code=200, class_id=0, method_id=0))
        await answer(client, commands.Connection.CloseOk)
        await until(partial(nowhere, pair, name))


async def test_a_commit_reaches_each_owner_as_one_group(pair: list[Worker]) -> None:
    """RabbitMQ "Broker Semantics": transactions are atomic per queue. The publishes of one
    tx.commit on worker 0 to a queue worker 1 runs are held by worker 1 until the commit's
    last one came, then enqueued together; commit-ok comes once worker 1 has them all."""
    home, other = pair
    owner = other.client()
    owner.send(1, commands.Queue.Declare(queue="q"))
    await answer(owner, commands.Queue.DeclareOk)
    owned = other.vhost.queues["q"]
    seen: list[int] = []
    handler = other.links.handlers[PUBLISH]

    def look(link: PeerLink, payload: bytes) -> None:
        handler(link, payload)
        seen.append(owned.message_count)

    other.links.handlers[PUBLISH] = look
    client = home.client()
    client.send(1, commands.Tx.Select())
    await answer(client, commands.Tx.SelectOk)
    for body in (b"a", b"b", b"c"):
        client.publish(1, body, routing_key="q")
    await asyncio.sleep(0.05)
    assert seen == [] and owned.message_count == 0  # nothing crosses before the commit
    client.send(1, commands.Tx.Commit())
    await answer(client, commands.Tx.CommitOk)
    assert seen == [0]  # one record for the three, held until the group's end ...
    assert [m.message.body for m in owned.browse()] == [b"a", b"b", b"c"]  # ... then all


async def test_an_exclusive_queue_another_worker_runs_goes_when_its_connection_closes(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare exclusive: an exclusive queue "is deleted when [its]
    connection closes", also when the worker that runs it is not the connection's: that worker
    is asked to delete it and every worker forgets it."""
    home, other = pair
    client = home.client()
    client.send(1, commands.Queue.Declare(queue="q", exclusive=True))
    await answer(client, commands.Queue.DeclareOk)
    assert "q" in other.vhost.queues and "q" in home.vhost.remote
    client.send(0, commands.Connection.Close(reply_code=200, class_id=0, method_id=0))
    await answer(client, commands.Connection.CloseOk)
    await until(partial(nowhere, pair, "q"))


async def received_in_order(client: MemClient, count: int) -> list[base.Frame]:
    """The next `count` methods `client` gets, in the order they came."""
    methods: list[base.Frame] = []
    async with asyncio.timeout(5):
        while len(methods) < count:
            methods.extend(item.method for item in client.receive())
            await asyncio.sleep(0.005)
    return methods


@pytest.mark.parametrize("deleting", [0, 1])
@pytest.mark.parametrize("name", ["q4", "q"])
async def test_deleting_a_consumed_queue_sends_delete_ok_before_the_channels_cancel(
    pair: list[Worker], deleting: int, name: str
) -> None:
    """RabbitMQ consumer cancel notification ("Consumer Cancel Notification"): a consumer of a
    deleted queue is sent basic.cancel; the deleting channel's own after queue.delete-ok (a
    client that saw the cancel first would drop the reply it waits for), as on one worker.
    Asked on the home (worker 0) and on worker 1, of "q4" (which worker 0 runs) and "q" (which
    worker 1 runs): where another worker runs the queue, its cancel across comes before the
    reply, and waits for it."""
    worker = pair[deleting]
    client, _session = connect(worker.broker, capabilities={"consumer_cancel_notify": True})
    client.send(1, commands.Queue.Declare(queue=name))
    await answer(client, commands.Queue.DeclareOk)
    client.send(1, commands.Basic.Consume(queue=name, consumer_tag="c"))
    await answer(client, commands.Basic.ConsumeOk)
    client.send(1, commands.Queue.Delete(queue=name))
    methods = await received_in_order(client, 2)
    assert [type(method) for method in methods] == [commands.Queue.DeleteOk, commands.Basic.Cancel]
    await until(partial(nowhere, pair, name))


async def test_exchange_delete_if_unused_is_judged_by_the_home(pair: list[Worker]) -> None:
    """AMQP 0-9-1 exchange.delete if-unused: "If set, the server will only delete the exchange
    if it has no queue bindings", else 406 PRECONDITION_FAILED. Worker 1's copy missed a
    binding made while its link was down; the home, which decides, still refuses."""
    home, other = pair
    client = home.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await answer(client, commands.Exchange.DeclareOk)
    deleting = other.client()
    await cut(pair)
    client.send(1, commands.Queue.Declare(queue="q4"))
    await answer(client, commands.Queue.DeclareOk)
    client.send(1, commands.Queue.Bind(queue="q4", exchange="x", routing_key="k"))
    await answer(client, commands.Queue.BindOk)
    deleting.send(1, commands.Exchange.Delete(exchange="x", if_unused=True))
    await asyncio.sleep(0.05)
    deleting.expect_nothing()  # unused in its copy: it waits for the home
    await join(home, other)
    refused = await answer(deleting, commands.Channel.Close)
    assert refused.reply_code == 406
    assert all("x" in worker.vhost.exchanges for worker in pair)


async def test_only_the_writer_of_a_row_writes_it_and_publishes_its_event(
    pair: list[Worker],
) -> None:
    """RabbitMQ clustering: exchanges, queues and bindings are replicated to every node, and
    the event exchange plugin emits one exchange.created / queue.created / exchange.deleted
    event per change, not one per node. The home writes exchange and binding rows, a queue's
    owner its queue's; a replica applies the same changes, including an auto-delete exchange
    going with its last binding (RabbitMQ: "deleted when last queue is unbound"), writing no
    exchange or binding row, and each change is one event across both workers."""
    _home, other = pair
    events: list[tuple[EventKind, str]] = []
    for worker in pair:
        worker.vhost.events.subscribe(
            lambda event: (
                events.append((event.kind, event.name))
                if event.kind.startswith(("exchange.", "queue."))
                else None
            )
        )
    journal = other.broker.journal
    written: list[str] = []
    for method in ("put_exchange", "delete_exchange", "put_binding", "delete_binding"):
        real = getattr(journal, method)

        def spy(*args: object, _real: Callable[..., None] = real, _name: str = method) -> None:
            written.append(_name)
            _real(*args)

        setattr(journal, method, spy)
    client = other.client()
    client.send(1, commands.Exchange.Declare(exchange="ad", durable=True, auto_delete=True))
    await answer(client, commands.Exchange.DeclareOk)
    client.send(1, commands.Queue.Declare(queue="q", durable=True))
    await answer(client, commands.Queue.DeclareOk)
    client.send(1, commands.Queue.Bind(queue="q", exchange="ad", routing_key="k"))
    await answer(client, commands.Queue.BindOk)
    client.send(1, commands.Queue.Unbind(queue="q", exchange="ad", routing_key="k"))
    await answer(client, commands.Queue.UnbindOk)
    assert all("ad" not in worker.vhost.exchanges for worker in pair)
    assert written == []
    assert events == [
        (EventKind.EXCHANGE_CREATED, "ad"),
        (EventKind.QUEUE_CREATED, "q"),
        (EventKind.EXCHANGE_DELETED, "ad"),
    ]


async def test_the_home_deletes_its_binding_rows_of_a_queue_another_worker_ran(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.delete: "all bindings to the queue are deleted"; durable bindings are
    rows the home wrote, so the home deletes them when the queue's owner deleted the queue:
    none is read back at the next start."""
    home, other = pair
    client = other.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct", durable=True))
    await answer(client, commands.Exchange.DeclareOk)
    client.send(1, commands.Queue.Declare(queue="q", durable=True))
    await answer(client, commands.Queue.DeclareOk)
    for key in ("k1", "k2"):
        client.send(1, commands.Queue.Bind(queue="q", exchange="x", routing_key=key))
        await answer(client, commands.Queue.BindOk)
    store = home.broker.journal.store
    assert store is not None
    assert await home.broker.journal.durable()
    assert [b.routing_key for b in (await store.recover()).bindings] == ["k1", "k2"]
    client.send(1, commands.Queue.Delete(queue="q"))
    await answer(client, commands.Queue.DeleteOk)
    assert await home.broker.journal.durable()
    assert (await store.recover()).bindings == []


async def test_a_method_naming_a_queue_waits_for_its_deletion_asked_before(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare passive: the server replies "with Declare-Ok if the queue
    already exists with the same name, and raise[s] an error if not" (404 NOT_FOUND). A
    passive declare on worker 1, after a deletion of the queue asked there (and sent to the
    home), waits for that deletion rather than answering from the copy that still has the
    queue: the client sees the queue gone, as on one worker."""
    home, other = pair
    setup = home.client()
    setup.send(1, commands.Queue.Declare(queue="q"))
    await answer(setup, commands.Queue.DeclareOk)
    deleting = other.client()
    asking = other.client()
    deleting.send(1, commands.Queue.Delete(queue="q"))
    asking.send(1, commands.Queue.Declare(queue="q", passive=True))
    await answer(deleting, commands.Queue.DeleteOk)
    refused = await answer(asking, commands.Channel.Close)
    assert refused.reply_code == 404


async def test_a_queue_purge_of_a_queue_another_worker_runs_answers_its_count(
    pair: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.purge: "removes all messages from a queue which are not awaiting
    acknowledgment", purge-ok's message-count says how many; asked on a worker that does not
    run the queue, the owner purges it."""
    home, other = pair
    owner = other.client()
    owner.send(1, commands.Queue.Declare(queue="q"))
    await answer(owner, commands.Queue.DeclareOk)
    for body in (b"a", b"b", b"c"):
        owner.publish(1, body, routing_key="q")
    client = home.client()
    client.send(1, commands.Queue.Purge(queue="q"))
    purged = await answer(client, commands.Queue.PurgeOk)
    assert purged.message_count == 3
    assert other.vhost.queues["q"].message_count == 0


@pytest.mark.parametrize(
    ("queue", "asking"),
    [("q", 0), ("q4", 1), ("q4", 0), ("q", 1)],
    ids=[
        "the home asks the owner",
        "a worker asks the home, which runs it",
        "the home runs it",
        "its owner asks the home",
    ],
)
@pytest.mark.parametrize(
    ("method", "answered"),
    [
        (commands.Queue.Delete, commands.Queue.DeleteOk),
        (commands.Queue.Purge, commands.Queue.PurgeOk),
        (commands.Queue.Declare, commands.Queue.DeclareOk),
    ],
    ids=["delete", "purge", "redeclare"],
)
async def test_a_method_right_after_publishes_on_its_channel_counts_them(
    pair: list[Worker],
    queue: str,
    asking: int,
    method: type[commands.Queue.Delete | commands.Queue.Purge | commands.Queue.Declare],
    answered: type[commands.Queue.DeleteOk | commands.Queue.PurgeOk | commands.Queue.DeclareOk],
) -> None:
    """A queue.delete, queue.purge or queue.declare right after publishes on the same channel
    counts them when another worker runs the queue: AMQP 0-9-1 queue.delete-ok message-count
    "Reports the number of messages deleted", purge-ok's "the number of messages purged",
    declare-ok's the queue's; in RabbitMQ a channel's publishes reach the queue before the
    channel's next method does. Here the method comes while the publishes are still gathered
    into one record (in the same read, as a client's frames often are)."""
    owner = pair[queue_owner("/", queue, 2)].client()
    owner.send(1, commands.Queue.Declare(queue=queue))
    await answer(owner, commands.Queue.DeclareOk)
    client = pair[asking].client()
    for body in (b"a", b"b", b"c"):
        client.publish(1, body, routing_key=queue)
    client.send(1, method(queue=queue))

    got = await answer(client, answered)

    assert got.message_count == 3


async def test_a_get_waiting_for_a_delete_behind_publishes_is_refused_when_the_link_goes(
    pair: list[Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """A queue.delete waits for the publishes its channel made before it to reach the queue's
    owner; a basic.get on the queue waits for the delete. When the link to the owner goes
    then, each is refused as it is when that worker is down: the delete in flight with 541
    (it may or may not have been made), the get with 404, with no traceback (the get was a
    541 "internal error" closing its connection)."""
    home, other = pair
    owner = other.client()
    owner.send(1, commands.Queue.Declare(queue="q"))
    await answer(owner, commands.Queue.DeclareOk)
    deleting, getting = home.client(), home.client()
    deleting.publish(1, b"m", routing_key="q")
    deleting.send(1, commands.Queue.Delete(queue="q"))
    getting.send(1, commands.Basic.Get(queue="q"))
    link = home.links.link(1)
    assert link is not None

    home.links.lost(link, ConnectionError("the other worker is gone"))

    closed = await answer(deleting, commands.Connection.Close)
    refused = await answer(getting, commands.Channel.Close)

    assert closed.reply_code == 541
    assert refused.reply_code == 404
    assert "is down" in refused.reply_text
    assert [record for record in caplog.records if record.exc_info] == []


async def test_arguments_a_record_cannot_carry_are_refused_with_406(pair: list[Worker]) -> None:
    """AMQP 0-9-1 §1.2, reply code 406 PRECONDITION_FAILED: the client asked for something the
    server will not do. Arguments the AMQP decoder read but no record can carry to the home (a
    table nested deeper than the record's writer recurses) refuse the method, not the
    connection with 541."""
    _home, other = pair
    deep: dict[str, object] = {}
    for _ in range(5000):
        deep = {"a": deep}
    op = QueueDeclared("q", False, False, None, deep)  # type: ignore[arg-type]
    replies: list[object] = []
    request = TopologyRequest(0, RequestFlags.NONE, "/", op, None)
    other.spreading.ask(0, request, lambda reply: replies.append(reply.outcome))
    [refused] = replies
    assert isinstance(refused, ProtocolError) and refused.reply_code == 406
    assert "nested too deep to cross between workers" in refused.reply_text
