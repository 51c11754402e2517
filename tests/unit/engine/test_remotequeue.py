"""Publishing to a queue another worker owns (`batonmq.engine.remotequeue`): two real brokers,
each on its own SQLite file, whose peer links are joined by a real Unix socket pair. Worker 0
publishes through a `RemoteQueue` as the engine's publish path does (`publish`, then
`when_written` for the confirm); worker 1 owns the queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.errors import ProtocolError
from batonmq.amqp.frames import encode_header_payload
from batonmq.cluster.peerlink import RECORD_OCTETS, PeerLinks
from batonmq.cluster.publishrecords import PUBLISH, QUEUED
from batonmq.engine import messages
from batonmq.engine.api import EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.remoteconsumers import RemoteConsumers
from batonmq.engine.remotequeue import PublishLinks, RemoteQueue
from batonmq.model.message import Message
from batonmq.model.topology import QueueDeclared
from batonmq.queues.classic import ClassicQueue
from tests.memclient import MemClient, connect
from tests.peerpair import joined, linked_broker, records_seen

PERSISTENT = commands.Basic.Properties(delivery_mode=2)
TRANSIENT = commands.Basic.Properties()


@dataclass
class Worker:
    broker: Broker
    links: PeerLinks
    publishing: PublishLinks
    client: MemClient


@dataclass
class Pair:
    workers: list[Worker]

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not done():
                await asyncio.sleep(0.005)

    def remote(self, name: str, arguments: FieldTable | None = None) -> RemoteQueue:
        """Worker 0's view of queue `name` of worker 1, with the arguments worker 1 parsed."""
        owned = self.workers[1].broker.vhosts["/"].queues[name]
        declared = QueueDeclared(name, owned.durable, owned.auto_delete, None, owned.arguments)
        outbound = self.workers[0].publishing.outbound(1)
        return RemoteQueue(
            "/",
            declared,
            owned.options,
            outbound,
            RemoteConsumers(self.workers[0].broker.sessions, outbound),
        )

    async def declare(self, name: str, arguments: FieldTable | None = None) -> ClassicQueue:
        """A durable queue on worker 1, declared by a client and in its store."""
        owner = self.workers[1]
        owner.client.send(1, commands.Queue.Declare(queue=name, durable=True, arguments=arguments))
        await owner.broker.journal.durable()
        owner.client.expect(commands.Queue.DeclareOk, channel=1)
        queue = owner.broker.vhosts["/"].queues[name]
        assert isinstance(queue, ClassicQueue)
        return queue


def message(body: bytes, properties: commands.Basic.Properties = PERSISTENT) -> Message:
    return Message("", "q", encode_header_payload(properties, len(body)), body)


@contextlib.asynccontextmanager
async def _worker(directory: Path, index: int) -> AsyncIterator[Worker]:
    async with linked_broker(directory, index) as (broker, links):
        publishing = PublishLinks(broker, links)
        publishing.install()
        client, _session = connect(broker)
        yield Worker(broker, links, publishing, client)


@pytest.fixture
async def pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Pair]:
    async with _worker(tmp_path / "w0", 0) as first, _worker(tmp_path / "w1", 1) as second:
        await joined(first.links, second.links)
        yield Pair([first, second])
    # A broker whose log shows a traceback fails the test.
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def outcomes() -> tuple[list[bool], Callable[[bool], None]]:
    heard: list[bool] = []
    return heard, heard.append


def publish(remote: RemoteQueue, sent: Message, heard: Callable[[bool], None]) -> None:
    """What the engine's publish path does with a queue that writes itself under confirms."""
    remote.publish(sent)
    remote.when_written(heard)


async def test_a_persistent_message_to_a_durable_queue_is_confirmed_after_the_owners_commit(
    pair: Pair,
) -> None:
    """RabbitMQ "Publisher Confirms": "for routable messages, the basic.ack is sent when a
    message has been accepted by all the queues", and for a persistent message routed to a
    durable queue "this means persisting to disk". The confirm waits for worker 1's commit:
    when it comes, worker 1 shows the message (held until its write committed) and its store
    has it."""
    owned = await pair.declare("q")
    remote = pair.remote("q")
    heard: list[tuple[bool, int]] = []
    remote.publish(message(b"kept"))
    remote.when_written(lambda ok: heard.append((ok, owned.message_count)))
    await pair.until(lambda: bool(heard))
    assert heard == [(True, 1)]  # the message was ready on worker 1 before the ack
    stored = await pair.workers[1].broker.store.read_entries("/", "q", -1, 10)
    assert len(stored) == 1


async def test_a_reject_publish_queue_that_is_full_nacks_the_publish(pair: Pair) -> None:
    """RabbitMQ "Queue Length Limit": with x-overflow reject-publish, "the most recently
    published messages will be discarded" and, with publisher confirms, "the publisher will
    be informed of the reject via a basic.nack"."""
    owned = await pair.declare("q", {"x-max-length": 1, "x-overflow": "reject-publish"})
    remote = pair.remote("q")
    heard, hear = outcomes()
    for body in (b"first", b"second"):
        publish(remote, message(body), hear)
    await pair.until(lambda: len(heard) == 2)
    assert heard == [True, False]
    assert [m.message.body for m in owned.browse()] == [b"first"]


async def test_publishes_in_flight_when_the_link_closes_are_nacked(pair: Pair) -> None:
    """A nack means the message may be on no queue (RabbitMQ "Publisher Confirms": a nack when
    the broker cannot take responsibility for a message). A publish whose answer cannot come
    any more, and one made while there is no link, is nacked, not left waiting."""
    await pair.declare("q")
    remote = pair.remote("q")
    heard, hear = outcomes()
    for n in range(10):
        publish(remote, message(b"%d" % n), hear)
    link = pair.workers[0].links.link(1)
    assert link is not None
    link.close()
    await pair.until(lambda: len(heard) == 10)
    assert heard == [False] * 10
    publish(remote, message(b"after"), hear)
    assert heard == [False] * 11
    await pair.until(lambda: pair.workers[1].links.link(0) is None)


async def test_a_message_routed_to_two_queues_of_the_owner_crosses_once(pair: Pair) -> None:
    """A message is stored once however many queues hold it (BatonMQ architecture, "The
    message path"): a fanout to two queues of worker 1 is one PUBLISH record naming both."""
    owned = [await pair.declare("a"), await pair.declare("b")]
    remotes = [pair.remote("a"), pair.remote("b")]
    received = records_seen(pair.workers[1].links, PUBLISH)
    heard, hear = outcomes()
    fanned = message(b"fanout")
    for remote in remotes:
        publish(remote, fanned, hear)
    await pair.until(lambda: len(heard) == 2)
    assert heard == [True, True]
    assert len(received) == 1
    assert [[m.message.body for m in queue.browse()] for queue in owned] == [[b"fanout"]] * 2
    assert owned[0].browse()[0].message is owned[1].browse()[0].message


async def test_a_thousand_messages_arrive_in_the_order_they_were_published(pair: Pair) -> None:
    """AMQP 0-9-1 §4.7: messages published on one channel to one queue are seen in that
    order; persistent and transient ones mixed, all acked."""
    owned = await pair.declare("q")
    remote = pair.remote("q")
    heard, hear = outcomes()
    bodies = [b"%d" % n for n in range(1000)]
    for n, body in enumerate(bodies):
        publish(remote, message(body, PERSISTENT if n % 3 else TRANSIENT), hear)
        if n % 100 == 99:
            await asyncio.sleep(0)  # publishes spread over several turns and batches
    await pair.until(lambda: len(heard) == 1000)
    assert heard == [True] * 1000
    assert [m.message.body for m in owned.browse()] == bodies
    assert owned.counters.publish == 1000


async def test_the_messages_of_a_turn_that_share_their_names_cross_as_one_record(
    pair: Pair,
) -> None:
    """Coalesce per loop turn (BatonMQ architecture, "The message path"): the messages of a
    turn for the same queues cross as one PUBLISH record; a message for other queues between
    them begins another, so each queue still gets its messages in the order they were published
    (AMQP 0-9-1 §4.7). A record gathers up to RECORD_OCTETS of messages."""
    owned = {name: await pair.declare(name) for name in ("a", "b")}
    remotes = {name: pair.remote(name) for name in ("a", "b")}
    received = records_seen(pair.workers[1].links, PUBLISH)
    heard, hear = outcomes()
    sent: dict[str, list[bytes]] = {"a": [], "b": []}
    for n, names in enumerate(["a", "a", "a", "ab", "ab", "b", "a", "a"]):
        body = b"%d" % n
        routed = message(body, TRANSIENT)
        for name in names:
            publish(remotes[name], routed, hear)
            sent[name].append(body)
    await pair.until(lambda: len(heard) == 10)
    assert heard == [True] * 10
    assert len(received) == 4  # a a a | ab ab | b | a a
    assert {name: [m.message.body for m in queue.browse()] for name, queue in owned.items()} == sent
    received.clear()
    big = message(b"x" * 1024, TRANSIENT)
    count = RECORD_OCTETS // 1024 + 10
    for _ in range(count):
        publish(remotes["a"], big, hear)
        big = message(b"x" * 1024, TRANSIENT)
    await pair.until(lambda: len(heard) == 10 + count)
    assert len(received) == 2
    assert max(received) < RECORD_OCTETS * 1.05  # framing: 8 octets and a header each


@pytest.mark.parametrize("seed", range(5))
async def test_messages_reach_each_queue_in_order_however_records_gather_them(
    pair: Pair, seed: int
) -> None:
    """AMQP 0-9-1 §4.7: messages published on one channel to one queue are seen in that order;
    RabbitMQ "Publisher Confirms": each is acked once every queue accepted it. 300 messages,
    each for some of three queues of the owner, with one of two routing keys, persistent or
    not, over loop turns of random length: however they are gathered into records."""
    draw = random.Random(seed)
    names = ("a", "b", "c")
    owned = {name: await pair.declare(name) for name in names}
    remotes = {name: pair.remote(name) for name in names}
    heard, hear = outcomes()
    sent: dict[str, list[bytes]] = {name: [] for name in names}
    for n in range(300):
        body = b"%d" % n
        properties = PERSISTENT if draw.random() < 0.3 else TRANSIENT
        routed = Message(
            "", draw.choice(["k1", "k2"]), encode_header_payload(properties, len(body)), body
        )
        for name in sorted(draw.sample(names, draw.randint(1, 3))):
            publish(remotes[name], routed, hear)
            sent[name].append(body)
        if draw.random() < 0.1:
            await asyncio.sleep(0)
    expected = sum(map(len, sent.values()))
    await pair.until(lambda: len(heard) == expected)
    assert heard == [True] * expected
    assert {name: [m.message.body for m in queue.browse()] for name, queue in owned.items()} == sent


async def test_a_queue_the_owner_no_longer_has_counts_as_having_taken_the_message(
    pair: Pair,
) -> None:
    """A publish that crosses while its queue is deleted on the owner is acked, as if it had
    been published just before the deletion (spec queue.delete: the queue's messages go with
    it): it is not a failure of the broker's to take responsibility."""
    await pair.declare("q")
    remote = pair.remote("q")
    owner = pair.workers[1]
    owner.client.send(1, commands.Queue.Delete(queue="q"))
    await owner.broker.journal.durable()
    owner.client.expect(commands.Queue.DeleteOk, channel=1)
    heard, hear = outcomes()
    publish(remote, message(b"late"), hear)
    await pair.until(lambda: bool(heard))
    assert heard == [True]


async def test_the_answers_of_one_turn_come_back_as_one_record(pair: Pair) -> None:
    """Coalesce socket writes per loop turn (BatonMQ architecture, "The message path"): a run
    of publishes answered in one turn is one QUEUED record for the whole run."""
    await pair.declare("q")
    remote = pair.remote("q")
    answers = records_seen(pair.workers[0].links, QUEUED)
    heard, hear = outcomes()
    for n in range(100):
        publish(remote, message(b"%d" % n, TRANSIENT), hear)
    await pair.until(lambda: len(heard) == 100)
    assert heard == [True] * 100
    assert len(answers) == 1


async def test_a_link_that_takes_no_more_holds_the_publisher_until_it_does(pair: Pair) -> None:
    """Qpid broker manual §1.5.1, producer flow control: "Flow control is enabled on a
    producer when it sends a message to a Queue which is overfull" and released once it is
    not. A remote queue is overfull while its owner's link is over its high-water mark (the
    owner does not read), so the engine holds its publishers (`Channel.hold_for`) until the
    link takes more; nothing published is lost meanwhile."""
    await pair.declare("q")
    remote = pair.remote("q")
    sending, receiving = pair.workers[0].links.link(1), pair.workers[1].links.link(0)
    assert sending is not None and sending.transport is not None
    assert receiving is not None and receiving.transport is not None
    sending.transport.set_write_buffer_limits(high=16384)
    receiving.transport.pause_reading()
    heard, hear = outcomes()
    sent = 0
    async with asyncio.timeout(5):
        while not remote.overfull:
            publish(remote, message(bytes(65536), TRANSIENT), hear)
            sent += 1
            await asyncio.sleep(0.001)
    released: list[bool] = []
    remote.when_underfull(lambda: released.append(remote.overfull))
    await asyncio.sleep(0.05)
    assert released == [] and heard == []
    receiving.transport.resume_reading()
    await pair.until(lambda: len(heard) == sent)
    assert released == [False]
    assert heard == [True] * sent


@pytest.mark.parametrize("routing_key", ["k" * 300, "\ud800"], ids=["too long", "not UTF-8"])
async def test_a_routing_key_that_cannot_cross_is_nacked_and_the_link_goes_on(
    pair: Pair, routing_key: str
) -> None:
    """A routing key published over HTTP may be longer than the 255 octets a record's short
    string holds, or a lone surrogate (JSON spells one, "\\ud800", and it is no UTF-8): that
    publish is nacked at once (RabbitMQ "Publisher Confirms": a nack when the broker cannot
    take responsibility), and takes no number, so the link goes on and the next publish is
    confirmed."""
    await pair.declare("q")
    remote = pair.remote("q")
    heard, hear = outcomes()
    unfit = Message("", routing_key, encode_header_payload(PERSISTENT, 4), b"unfit")
    publish(remote, unfit, hear)
    publish(remote, message(b"next"), hear)
    await pair.until(lambda: len(heard) == 2)
    assert heard == [False, True]
    assert pair.workers[0].links.link(1) is not None


async def test_a_message_published_through_the_api_is_answered_once_the_owner_has_it(
    pair: Pair,
) -> None:
    """The management API's publish is a confirmed basic.publish (RabbitMQ management,
    POST /api/exchanges/vhost/name/publish: "routed" true once a queue took it): to a queue
    another worker runs, the answer waits for the owner's QUEUED, and a publish that owner
    cannot vouch for (the link is gone) is an error, not "routed"."""
    owned = await pair.declare("q")
    near = pair.workers[0].broker
    host = near.vhosts["/"]
    host.remote["q"] = pair.remote("q")
    default = host.exchanges[""]

    assert await messages.publish(host, default, message(b"one"), near.journal)
    assert [m.message.body for m in owned.browse()] == [b"one"]

    link = pair.workers[0].links.link(1)
    assert link is not None
    sent = asyncio.ensure_future(messages.publish(host, default, message(b"two"), near.journal))
    link.close()
    with pytest.raises(ProtocolError, match="could not write the message"):
        await sent


async def _source_of(api: EngineApi, *bodies: bytes) -> dict[bytes, int]:
    """Durable queue "source" of worker 0 holding `bodies`, persistent; their message ids."""
    await api.declare_queue("guest", "/", "source")
    for body in bodies:
        assert await api.publish("guest", "/", "", "source", PERSISTENT, body)
    return {
        seen.message.body: seen.message.message_id for seen in api.browse("guest", "/", "source")
    }


async def test_chosen_messages_are_copied_and_moved_to_a_queue_another_worker_runs(
    pair: Pair,
) -> None:
    """The Qpid broker manual's management console: "One or more messages can be selected in
    the table and moved to another queue in the VirtualHost ... Newer servers support the
    ability to similarly copy the selected messages to another queue". Another queue of the
    virtual host may be one another worker runs: the copies cross the link, and the call
    returns once that worker has them in its store; a move then removes them from the source."""
    owned = await pair.declare("target")
    near, far = pair.workers[0].broker, pair.workers[1].broker
    near.vhosts["/"].remote["target"] = pair.remote("target")
    api = EngineApi(near)
    ids = await _source_of(api, b"a", b"b", b"c")

    copied = await api.copy_messages("guest", "/", "source", "target", [ids[b"a"]])
    assert (copied.done, copied.missing) == ((ids[b"a"],), ())
    moved = await api.move_messages("guest", "/", "source", "target", [ids[b"c"], ids[b"b"]])
    assert (moved.done, moved.missing) == ((ids[b"b"], ids[b"c"]), ())

    assert [seen.message.body for seen in owned.browse()] == [b"a", b"b", b"c"]
    assert far.store is not None and (await far.store.stats()).messages == 3
    assert [seen.message.body for seen in api.browse("guest", "/", "source")] == [b"a"]


async def test_a_message_the_other_workers_queue_refuses_stays_in_the_source(pair: Pair) -> None:
    """RabbitMQ "Queue Length Limit": with x-overflow reject-publish a full queue refuses the
    message (a publisher confirm nacks it); a move to such a queue another worker runs leaves
    the message where it was and names it as not moved, as a local refusal does (the move's
    rule: at worst in both queues, never in neither)."""
    owned = await pair.declare("full", {"x-max-length": 1, "x-overflow": "reject-publish"})
    assert await EngineApi(pair.workers[1].broker).publish(
        "guest", "/", "", "full", PERSISTENT, b"there"
    )
    near = pair.workers[0].broker
    near.vhosts["/"].remote["full"] = pair.remote("full")
    api = EngineApi(near)
    ids = await _source_of(api, b"kept")

    moved = await api.move_messages("guest", "/", "source", "full", [ids[b"kept"]])

    assert (moved.done, moved.missing) == ((), (ids[b"kept"],))
    assert [seen.message.body for seen in api.browse("guest", "/", "source")] == [b"kept"]
    assert [seen.message.body for seen in owned.browse()] == [b"there"]
