"""The sync and the owner step of a spread virtual host's sequencer
(`batonmq.engine.spread`): the two-worker set-up of `test_spread` (real brokers on their own
SQLite files, peer links over a real Unix socket pair; "/" has its home on worker 0, queue "q"
is run by worker 1, "q4" by worker 0)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pamqp import commands

from batonmq.amqp.errors import ProtocolError
from batonmq.cluster.topologyrecords import (
    OwnerAction,
    OwnerRequest,
    RequestFlags,
    TopologyRequest,
)
from batonmq.engine.api import EngineApi
from batonmq.engine.spread import Spread, _Reply
from batonmq.engine.vhost import VirtualHost
from batonmq.model.topology import ConnectionRef, ExchangeDeclared, QueueDeclared, QueueDeleted
from batonmq.store.base import StoreError, WriteBatch
from tests.unit.engine.test_spread import Worker, answer, join, message, running, until


@pytest.fixture
async def workers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[list[Worker]]:
    async with running(tmp_path / "w0", 0) as first, running(tmp_path / "w1", 1) as second:
        await join(first, second)
        yield [first, second]
    # A broker whose log shows a traceback (or any error) fails the test.
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def fail_next_commit(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    """`worker`'s store fails its next commit (a full disk), once."""
    store = worker.broker.journal.store
    assert store is not None
    commit = store.commit

    async def fails_once(batch: WriteBatch) -> None:
        monkeypatch.setattr(store, "commit", commit)
        raise StoreError("the disk is full")

    monkeypatch.setattr(store, "commit", fails_once)


async def test_a_vhost_made_after_the_links_are_up_gets_the_homes_topology(
    workers: list[Worker],
) -> None:
    """RabbitMQ clustering: every node has the whole topology. Virtual host "v1" (home: worker
    0) is made on worker 1 after worker 0 made it and declared exchange "x" in it, the links
    up all along: worker 1 asks the home for its topology and takes the changes after it."""
    home, other = workers
    for worker in workers:
        worker.spreading.spread = frozenset({"/", "v1"})
    made = home.broker.add_vhost("v1")
    home_spread = made.spread
    assert isinstance(home_spread, Spread) and home_spread.is_home
    await until(lambda: home_spread.synced)
    await declared(made, "x")
    late = other.broker.add_vhost("v1")
    late_spread = late.spread
    assert isinstance(late_spread, Spread)
    await until(lambda: late_spread.synced)
    assert "x" in late.exchanges
    await declared(made, "y")
    assert "y" in late.exchanges


async def declared(vhost: VirtualHost, exchange: str) -> None:
    """Declare `exchange` in spread `vhost` at its home; back once every worker has it."""
    spread = vhost.spread
    assert isinstance(spread, Spread)
    op = ExchangeDeclared(exchange, "direct", False, False, False, {})
    done: list[object] = []
    vhost.carry_out(spread.request(op, owner=None), done.append, pytest.fail)
    await until(lambda: done != [])


async def test_a_restarted_home_checks_a_request_on_its_synced_copy(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """AMQP 0-9-1 queue.bind: bind-ok once the binding is made; RabbitMQ clustering: transient
    exchanges live as long as a node of the cluster does. Transient exchange "x" outlives the
    home's restart in worker 1's copy; worker 1's bind to it, waiting for the home while it
    was down, reaches the restarted home before worker 1's copy: the home checks it once it
    has that copy, not on its stored rows alone (which have no "x": 404)."""
    home, other = workers
    client = other.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await answer(client, commands.Exchange.DeclareOk)
    client.send(1, commands.Queue.Declare(queue="q"))
    await answer(client, commands.Queue.DeclareOk)
    home.links.close()
    await until(lambda: other.links.link(0) is None)
    client.send(1, commands.Queue.Bind(queue="q", exchange="x", routing_key="k"))
    async with running(tmp_path / "w0-again", 0) as started:
        await join(started, other)
        await answer(client, commands.Queue.BindOk)
        for vhost in (started.vhost, other.vhost):
            assert [q.name for q in vhost.route(vhost.exchanges["x"], message("k"))] == ["q"]


async def test_a_home_waits_for_the_copies_from_its_first_link_up(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """RabbitMQ clustering: transient exchanges live as long as a node of the cluster does. A
    home that starts again and is linked only after longer than its wait for the others'
    copies (recovery, slow links) still takes worker 1's copy: the wait starts at its first
    link up, not when it was made."""
    home, other = workers
    client = other.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    await answer(client, commands.Exchange.DeclareOk)
    home.links.close()
    await until(lambda: other.links.link(0) is None)
    async with running(tmp_path / "w0-again", 0) as started:
        await asyncio.sleep(started.spreading.ask_wait * 2)
        assert not started.spread.synced
        await join(started, other)
        assert started.vhost.exchanges["x"].type_name == "direct"
        assert other.vhost.exchanges["x"].type_name == "direct"


async def test_a_restarted_worker_leaves_no_stand_in_for_a_queue_it_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """RabbitMQ: a transient (non-durable) queue is deleted when its node restarts; a durable
    one is recovered. Worker 1 runs transient "q" and durable "q1" and restarts: the home
    learns from worker 1's copy that "q" is gone and tells every worker, before worker 1's
    clients can find a stand-in of it; "q1" stays."""
    async with running(tmp_path / "w0", 0) as home:
        async with running(tmp_path / "w1", 1) as other:
            await join(home, other)
            client = other.client()
            for name, durable in (("q", False), ("q1", True)):
                client.send(1, commands.Queue.Declare(queue=name, durable=durable))
                await answer(client, commands.Queue.DeclareOk)
            assert set(home.vhost.remote) == {"q", "q1"}
        await until(lambda: home.links.link(1) is None)
        async with running(tmp_path / "w1", 1) as started:
            assert set(started.vhost.queues) == {"q1"}
            await join(home, started)
            await until(lambda: "q" not in home.vhost.remote)
            assert set(home.vhost.remote) == {"q1"}
            assert started.vhost.known_queue("q") is None
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


async def test_a_queue_its_owner_deleted_goes_everywhere_whatever_the_homes_store_says(
    workers: list[Worker], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """AMQP 0-9-1 queue.delete: delete-ok once the queue is deleted; RabbitMQ clustering: the
    topology is the same on every node. Worker 1 deleted queue "q" (the owner step); the
    home's write of the deletion of its stored binding to "q" fails once: "q" goes on every
    worker all the same (the failure is logged), not left routed to on the home."""
    home, other = workers
    client = home.client()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="direct", durable=True))
    await answer(client, commands.Exchange.DeclareOk)
    client.send(1, commands.Queue.Declare(queue="q", durable=True))
    await answer(client, commands.Queue.DeclareOk)
    client.send(1, commands.Queue.Bind(queue="q", exchange="x", routing_key="k"))
    await answer(client, commands.Queue.BindOk)
    fail_next_commit(home, monkeypatch)
    client.send(1, commands.Queue.Delete(queue="q"))
    await answer(client, commands.Queue.DeleteOk)
    for vhost in (home.vhost, other.vhost):
        assert vhost.known_queue("q") is None
        assert vhost.route(vhost.exchanges["x"], message("k")) == []
    assert "the stored bindings to a queue that went are not deleted" in caplog.text
    # Written again with the next batch: no stored binding to "q" comes back at a restart.
    store = home.broker.journal.store
    assert store is not None
    async with asyncio.timeout(5):
        while any(
            row.destination == "q" for row in (await store.definitions_of(["w0"]))["w0"].bindings
        ):
            await asyncio.sleep(0.05)
    caplog.clear()  # the store's failure, logged as an error, is this test's own doing


async def test_a_commit_whose_write_fails_at_the_owner_leaves_none_of_its_messages(
    workers: list[Worker], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """RabbitMQ "Broker Semantics": a transaction is atomic per queue. A tx.commit on worker 0
    of a transient then a persistent message to durable queue "q", which worker 1 runs: worker
    1's store fails the write, so "q" shows neither (not the transient one alone), and the
    commit fails (a channel error, not commit-ok)."""
    home, other = workers
    owner = other.client()
    owner.send(1, commands.Queue.Declare(queue="q", durable=True))
    await answer(owner, commands.Queue.DeclareOk)
    fail_next_commit(other, monkeypatch)
    client = home.client()
    client.send(1, commands.Tx.Select())
    await answer(client, commands.Tx.SelectOk)
    for body, mode in ((b"transient", 1), (b"persistent", 2)):
        properties = commands.Basic.Properties(delivery_mode=mode)
        client.publish(1, body, routing_key="q", properties=properties)
    client.send(1, commands.Tx.Commit())
    refused = await answer(client, commands.Channel.Close)
    assert isinstance(refused, commands.Channel.Close)
    await asyncio.sleep(0.05)
    assert other.vhost.queues["q"].message_count == 0
    caplog.clear()  # the store's failure, logged as an error, is this test's own doing


async def test_an_exclusive_queue_of_an_ended_connection_is_not_made(
    workers: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare exclusive: the queue is deleted when its connection closes. A
    request to make exclusive queue "q" (run by worker 1) for a connection of an earlier
    process of worker 0 than the one worker 1 is linked with comes after that connection's
    end was seen: worker 1 refuses it (405 RESOURCE_LOCKED) rather than keep a queue nothing
    would delete."""
    home, other = workers
    ended = ConnectionRef(0, home.links.start_id - 1, 1)
    declared = QueueDeclared("q", False, False, ended, {})
    record = OwnerRequest(0, OwnerAction.CREATE, RequestFlags.NONE, "/", declared, ended)
    replies: list[object] = []
    home.spreading.ask(1, record, lambda reply: replies.append(reply.outcome))
    await until(lambda: replies != [])
    [refused] = replies
    assert isinstance(refused, ProtocolError) and refused.reply_code == 405
    assert "q" not in other.vhost.queues


async def test_a_deleted_vhost_takes_no_more_changes(workers: list[Worker]) -> None:
    """RabbitMQ: deleting a virtual host deletes everything in it. Worker 1 deleted virtual
    host "v1" (home: worker 0): a request of the home to make queue "q2" in it, which worker 1
    would run, is refused (541 INTERNAL_ERROR) instead of making a queue in the deleted one."""
    home, other = workers
    for worker in workers:
        worker.spreading.spread = frozenset({"/", "v1"})
    made = home.broker.add_vhost("v1")
    late = other.broker.add_vhost("v1")
    late_spread = late.spread
    assert isinstance(late_spread, Spread)
    await until(lambda: late_spread.synced)
    await EngineApi(other.broker).delete_vhost("v1")
    spread = made.spread
    assert isinstance(spread, Spread)
    declare = QueueDeclared("q2", False, False, None, {})
    outcomes: list[object] = []
    made.carry_out(spread.request(declare, owner=None), outcomes.append, outcomes.append)
    await until(lambda: outcomes != [])
    [refused] = outcomes
    assert isinstance(refused, ProtocolError) and refused.reply_code == 541
    assert "q2" not in late.queues and made.known_queue("q2") is None


async def test_an_equivalent_redeclare_at_the_home_answers_the_queues_counts(
    workers: list[Worker],
) -> None:
    """AMQP 0-9-1 queue.declare-ok: message-count and consumer-count are the queue's. A
    declare that reaches the home for a queue it has already (another worker declared it
    first) is answered with the counts of the worker that runs the queue, not 0 and 0."""
    home, other = workers
    for worker, name in ((home, "q4"), (other, "q")):
        client = worker.client()
        client.send(1, commands.Queue.Declare(queue=name))
        await answer(client, commands.Queue.DeclareOk)
        for body in (b"a", b"b"):
            client.publish(1, body, routing_key=name)
        await until(lambda name=name, worker=worker: worker.vhost.queues[name].message_count == 2)
        request = TopologyRequest(
            0, RequestFlags.NONE, "/", QueueDeclared(name, False, False, None, {}), None
        )
        replies: list[_Reply] = []
        other.spreading.ask(0, request, replies.append)
        await until(lambda replies=replies: replies != [])
        assert [(r.outcome, r.message_count, r.consumer_count) for r in replies] == [(True, 2, 0)]


async def test_a_declare_ok_the_worker_cannot_show_is_refused_and_the_copy_synced(
    workers: list[Worker],
) -> None:
    """AMQP 0-9-1: 541 INTERNAL_ERROR when the server cannot complete the method. Worker 1's
    copy misses queue "q4" (as after a lost change): the home says it exists, which worker 1
    cannot show in a declare-ok; it refuses the declare (541 closes the connection), asks the
    home for its topology, and the declare on a new connection then succeeds."""
    home, other = workers
    client = home.client()
    client.send(1, commands.Queue.Declare(queue="q4"))
    await answer(client, commands.Queue.DeclareOk)
    other.vhost.apply(QueueDeleted("q4"))
    asking = other.client()
    asking.send(1, commands.Queue.Declare(queue="q4"))
    refused = await answer(asking, commands.Connection.Close)
    assert isinstance(refused, commands.Connection.Close) and refused.reply_code == 541
    await until(lambda: other.vhost.known_queue("q4") is not None)
    again = other.client()
    again.send(1, commands.Queue.Declare(queue="q4"))
    await answer(again, commands.Queue.DeclareOk)


async def test_a_home_with_no_worker_linked_goes_on_from_its_rows(tmp_path: Path) -> None:
    """A home that starts while the other workers are down (none linked) waits for a link only
    a while, then goes on from its stored rows alone: its own clients' declarations are
    answered (AMQP 0-9-1 exchange.declare: declare-ok), not refused for as long as its peers
    stay down."""
    async with running(tmp_path / "w0", 0) as home:
        await asyncio.sleep(home.spreading.alone_wait * 1.5)
        assert not home.spread.synced  # its worker does not serve yet (recovering)
        home.links.start()  # its link to worker 1 is made, never taken: worker 1 is down
        await until(lambda: home.spread.synced)
        await declared(home.vhost, "x")
        assert "x" in home.vhost.exchanges


async def test_a_message_whose_write_fails_here_never_reaches_a_queue_elsewhere(
    workers: list[Worker], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """RabbitMQ "Publisher Confirms": a nack when the broker cannot take responsibility for the
    message; BatonMQ: state follows the store (a failed write leaves memory as it was). A
    persistent message fanned out on worker 0 to its own durable queue "q4" and to durable
    queue "q" of worker 1: worker 0's write fails, the publisher is nacked, and "q" never shows
    it; the next one, written, reaches both, in order."""
    home, other = workers
    client = home.client()
    client.send(1, commands.Confirm.Select())
    await answer(client, commands.Confirm.SelectOk)
    for queue in ("q4", "q"):
        client.send(1, commands.Queue.Declare(queue=queue, durable=True))
        await answer(client, commands.Queue.DeclareOk)
        client.send(1, commands.Queue.Bind(queue=queue, exchange="amq.fanout"))
        await answer(client, commands.Queue.BindOk)
    fail_next_commit(home, monkeypatch)
    persistent = commands.Basic.Properties(delivery_mode=2)
    client.publish(1, b"lost", exchange="amq.fanout", properties=persistent)
    assert isinstance(await answer(client, commands.Basic.Nack), commands.Basic.Nack)
    client.publish(1, b"kept", exchange="amq.fanout", properties=persistent)
    assert isinstance(await answer(client, commands.Basic.Ack), commands.Basic.Ack)
    for queue in (home.vhost.queues["q4"], other.vhost.queues["q"]):
        assert [held.message.body for held in queue.browse()] == [b"kept"]
    caplog.clear()  # the store's failure, logged as an error, is this test's own doing


async def test_what_waits_for_a_write_here_holds_its_publishers_past_a_bound(
    workers: list[Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """BatonMQ's flow control: what a broker holds for a slow part is bounded, and the
    publishers wait (RabbitMQ "Flow Control": publishers are blocked rather than memory grow).
    Messages to worker 1's queue "q" that wait for worker 0's own write (fanned out to its
    durable "q4" too) count against a bound: past it "q" is overfull on worker 0, and once
    the write commits they cross and "q" takes more."""
    home, other = workers
    client = home.client()
    for queue in ("q4", "q"):
        client.send(1, commands.Queue.Declare(queue=queue, durable=True))
        await answer(client, commands.Queue.DeclareOk)
        client.send(1, commands.Queue.Bind(queue=queue, exchange="amq.fanout"))
        await answer(client, commands.Queue.BindOk)
    store = home.broker.journal.store
    assert store is not None
    commit, written = store.commit, asyncio.Event()

    async def stalled(batch: WriteBatch) -> None:
        await written.wait()
        await commit(batch)

    monkeypatch.setattr(store, "commit", stalled)
    remote = home.vhost.remote["q"]
    remote_outbound = home.spreading.publishing.outbound(1)
    remote_outbound.gate_most = 64
    client.publish(
        1, b"x" * 100, exchange="amq.fanout", properties=commands.Basic.Properties(delivery_mode=2)
    )
    try:
        await until(lambda: remote.overfull)
        assert other.vhost.queues["q"].message_count == 0
    finally:
        written.set()  # the store goes on, whatever the test found
    await until(lambda: not remote.overfull and other.vhost.queues["q"].message_count == 1)


async def test_a_spread_vhost_deleted_at_its_home_is_deleted_on_the_other_worker_too(
    workers: list[Worker],
) -> None:
    """RabbitMQ management, DELETE /api/vhosts/{name}: the virtual host and everything in it
    goes, on every node. Deleted at its home (worker 0) while worker 1's link with it was
    down, so worker 1's copy still has exchange "x": worker 1's own deletion (the catalogue's
    catch-up) deletes what it still holds itself, rather than asking a home that has no such
    virtual host any more (541 after the wait)."""
    home, other = workers
    other.spreading.home_wait = 0.2
    for worker in workers:
        worker.spreading.spread = frozenset({"/", "v1"})
    made = home.broker.add_vhost("v1")
    await until(lambda: made.spread is not None and made.spread.synced)
    late = other.broker.add_vhost("v1")
    await until(lambda: late.spread is not None and late.spread.synced)
    await declared(made, "x")
    home.links.close()
    await until(lambda: other.links.link(0) is None)
    await EngineApi(home.broker).delete_vhost("v1")
    assert "x" in late.exchanges
    await EngineApi(other.broker).delete_vhost("v1")
    assert "v1" not in home.broker.vhosts and "v1" not in other.broker.vhosts
