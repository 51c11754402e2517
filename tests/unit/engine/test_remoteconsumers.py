"""Consuming from a queue another worker owns (`batonmq.engine.remoteconsumers` on the
consuming worker, `batonmq.engine.linkedconsumers` on the owner): two real brokers, each on its
own SQLite file, whose peer links are joined by a real Unix socket pair. A client of worker 0
consumes and gets from queues worker 1 runs, which worker 0 knows as `RemoteQueue`s; a client
of worker 1 declares and publishes. RabbitMQ's rule for all of it: a client cannot tell where
the queue runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
from pamqp import base, commands, frame
from pamqp.common import FieldTable

from batonmq.cluster.consumerecords import DELIVER, GOT, SETTLE, Got, Settle, SettleOutcome
from batonmq.cluster.peerlink import RECORD_OCTETS, PeerLinks
from batonmq.config import SlowConsumerConfig
from batonmq.engine.broker import Broker
from batonmq.engine.consumer import cancel_consumers_of
from batonmq.engine.remoteconsumers import ConsumeLinks
from batonmq.engine.session import Session
from batonmq.engine.slowconsumers import SlowConsumerDetector
from batonmq.logcodes import code_of
from batonmq.model.message import Message
from batonmq.queues.classic import ClassicQueue
from tests.memclient import Content, MemClient, Received, bodies, connect, describe
from tests.peerpair import LinkedWorker, joined, linked_worker, records_seen

Basic = commands.Basic
TRANSIENT = Basic.Properties()
PERSISTENT = Basic.Properties(delivery_mode=2)
M = TypeVar("M", bound=base.Frame)


@dataclass
class Worker:
    linked: LinkedWorker
    client: MemClient
    session: Session

    @property
    def broker(self) -> Broker:
        return self.linked.broker

    @property
    def links(self) -> PeerLinks:
        return self.linked.links

    @property
    def consuming(self) -> ConsumeLinks:
        return self.linked.consuming


@dataclass
class Pair:
    workers: list[Worker]
    #: What the consuming client got and no test took yet.
    inbox: list[Received] = field(default_factory=list)

    @property
    def client(self) -> MemClient:
        """The consuming client, on worker 0."""
        return self.workers[0].client

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not done():
                await asyncio.sleep(0.005)

    async def settle(self) -> None:
        """Let the records of a few loop turns cross both ways."""
        for _ in range(20):
            await asyncio.sleep(0.002)

    async def declare(self, name: str, arguments: FieldTable | None = None) -> ClassicQueue:
        """A durable queue on worker 1, declared by its client, known to worker 0."""
        owner = self.workers[1]
        owner.client.send(1, commands.Queue.Declare(queue=name, durable=True, arguments=arguments))
        await owner.broker.journal.durable()
        owner.client.expect(commands.Queue.DeclareOk, channel=1)
        return await self.declare_known(name)

    async def declare_known(self, name: str) -> ClassicQueue:
        """Worker 1's queue `name`, known to worker 0 as a queue that worker 1 runs."""
        return self.workers[0].linked.know(self.workers[1].broker, name)

    def publish(self, queue: str, *payloads: bytes) -> None:
        """Transient messages to `queue` through worker 1's default exchange."""
        for body in payloads:
            self.workers[1].client.publish(1, body, routing_key=queue)

    async def received(self, count: int) -> list[Received]:
        """The next `count` methods and contents the consuming client gets."""
        inbox = self.inbox

        def arrived() -> bool:
            inbox.extend(self.client.receive())
            return len(inbox) >= count

        await self.until(arrived)
        taken, self.inbox = inbox[:count], inbox[count:]
        return taken

    async def answer(self, method: type[M]) -> M:
        """The answer the consuming client waits for (its held input goes on after it)."""
        [item] = await self.received(1)
        assert not isinstance(item, Content) and isinstance(item.method, method), item
        self.workers[0].session.resume_input()
        return item.method

    async def consume(self, queue: str, *, no_ack: bool = False, tag: str = "") -> str:
        self.client.send(1, Basic.Consume(queue=queue, consumer_tag=tag, no_ack=no_ack))
        return (await self.answer(Basic.ConsumeOk)).consumer_tag

    async def consuming_no_ack(self, queue: str, tag: str) -> list[Received]:
        """Consume `queue` with no_ack and wait for consume-ok only, deliveries going on: what
        the client got so far, consume-ok among it (its held input goes on after it)."""
        self.client.send(1, Basic.Consume(queue=queue, consumer_tag=tag, no_ack=True))
        received: list[Received] = []

        def consume_ok() -> bool:
            received.extend(self.client.receive())
            return any(not isinstance(item, Content) for item in received)

        await self.until(consume_ok)
        self.workers[0].session.resume_input()
        return received

    async def no_ack_cancelled_midway(self, owned: ClassicQueue, count: int) -> list[Received]:
        """`count` messages published to `owned` (queue "q"), consumed with no_ack and the
        consumer cancelled while they cross: everything the client got."""
        self.publish("q", *[b"%d" % n for n in range(count)])
        await self.until(lambda: owned.message_count == count)
        received = await self.consuming_no_ack("q", "c")
        self.client.send(1, Basic.Cancel(consumer_tag="c"))
        await self.until(lambda: owned.unacked == 0 and not owned.consumers)
        await self.settle()
        return received + self.client.receive()

    async def publish_then_get(
        self, publish: Basic.Publish, properties: Basic.Properties
    ) -> Received:
        """What a basic.get of "q" on channel 1 brings right after `publish` of b"m" on it,
        both in one read (the get crosses as the publish is still being built)."""
        client = self.client
        client.send_bytes(
            client.content_bytes(1, publish, b"m", properties)
            + frame.marshal(Basic.Get(queue="q"), 1)
        )
        [got] = await self.received(1)
        self.workers[0].session.resume_input()
        return got

    async def deliveries(self, count: int) -> list[Content]:
        got = await self.received(count)
        assert all(isinstance(item, Content) for item in got), describe(got)
        return [item for item in got if isinstance(item, Content)]

    async def nothing_more(self) -> None:
        await self.settle()
        assert self.inbox + self.client.receive() == []


@contextlib.asynccontextmanager
async def _worker(directory: Path, index: int) -> AsyncIterator[Worker]:
    async with linked_worker(directory, index) as linked:
        client, session = connect(linked.broker, capabilities={"consumer_cancel_notify": True})
        yield Worker(linked, client, session)


@pytest.fixture
async def pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Pair]:
    async with _worker(tmp_path / "w0", 0) as first, _worker(tmp_path / "w1", 1) as second:
        await joined(first.links, second.links)
        yield Pair([first, second])
    # A broker whose log shows a traceback fails the test.
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def tags(contents: list[Content]) -> list[int]:
    return [content.method.delivery_tag for content in contents]  # type: ignore[attr-defined]


def redelivered(contents: list[Content]) -> list[bool]:
    return [content.method.redelivered for content in contents]  # type: ignore[attr-defined]


async def test_a_consumer_on_another_worker_gets_every_message_and_its_acks_settle_them(
    pair: Pair,
) -> None:
    """RabbitMQ (consumer acknowledgements): each delivery carries a delivery tag of the
    channel, and an ack removes the message; the client cannot tell that another worker runs
    the queue. Worker 0 numbers its own tags from 1; worker 1 holds the entries unacked until
    the acks cross, then has none."""
    owned = await pair.declare("q")
    pair.publish("q", b"one", b"two", b"three")
    await pair.consume("q")
    got = await pair.deliveries(3)
    assert bodies(got) == [b"one", b"two", b"three"]
    assert tags(got) == [1, 2, 3] and redelivered(got) == [False] * 3
    assert (owned.unacked, owned.message_count) == (3, 0)
    pair.client.send(1, Basic.Ack(delivery_tag=3, multiple=True))
    await pair.until(lambda: owned.unacked == 0)
    assert owned.message_count == 0 and owned.counters.ack == 3
    await pair.nothing_more()


async def test_the_prefetch_of_the_consuming_channel_holds_across(pair: Pair) -> None:
    """RabbitMQ "Consumer Prefetch": basic.qos prefetch_count (global=false) "the maximum
    number of unacknowledged deliveries that are permitted on a channel" per consumer: with 2,
    two come, and each ack lets one more through."""
    owned = await pair.declare("q")
    pair.publish("q", *[b"%d" % n for n in range(5)])
    pair.client.qos(1, 2)
    await pair.consume("q")
    got = await pair.deliveries(2)
    await pair.nothing_more()
    assert owned.message_count == 3
    pair.client.send(1, Basic.Ack(delivery_tag=tags(got)[0]))
    got += await pair.deliveries(1)
    await pair.nothing_more()
    assert bodies(got) == [b"0", b"1", b"2"]


async def test_nack_requeue_comes_back_redelivered_and_reject_dead_letters_on_the_owner(
    pair: Pair,
) -> None:
    """AMQP 0-9-1 basic.nack/basic.reject requeue=true put the message back, and it comes again
    with redelivered set; RabbitMQ "Dead Letter Exchanges": a message rejected with
    requeue=false goes to the queue's dead-letter exchange, here on the owner."""
    dead = await pair.declare("dead")
    await pair.declare("q", {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    pair.publish("q", b"a", b"b")
    await pair.consume("q")
    first = await pair.deliveries(2)
    pair.client.send(1, Basic.Nack(delivery_tag=tags(first)[0], requeue=True))
    again = await pair.deliveries(1)
    assert bodies(again) == [b"a"] and redelivered(again) == [True]
    assert tags(again) == [3]
    pair.client.send(1, Basic.Reject(delivery_tag=tags(first)[1], requeue=False))
    pair.client.send(1, Basic.Reject(delivery_tag=3, requeue=False))
    await pair.until(lambda: dead.message_count == 2)
    assert sorted(m.message.body for m in dead.browse()) == [b"a", b"b"]


async def test_a_cancelled_consumer_keeps_its_deliveries_until_acked(pair: Pair) -> None:
    """AMQP 0-9-1 basic.cancel: the consumer stops getting messages, and its unacked
    deliveries stay unacked (RabbitMQ keeps them until ack or channel close): the ack after
    cancel-ok still settles them on the owner."""
    owned = await pair.declare("q")
    pair.publish("q", b"kept")
    tag = await pair.consume("q")
    [got] = await pair.deliveries(1)
    pair.client.send(1, Basic.Cancel(consumer_tag=tag))
    assert (await pair.answer(Basic.CancelOk)).consumer_tag == tag
    await pair.until(lambda: not owned.consumers)
    pair.publish("q", b"after")
    await pair.nothing_more()
    assert (owned.unacked, owned.message_count) == (1, 1)
    pair.client.send(1, Basic.Ack(delivery_tag=tags([got])[0]))
    await pair.until(lambda: owned.unacked == 0)
    assert owned.message_count == 1


async def test_closing_the_channel_requeues_what_it_did_not_settle(pair: Pair) -> None:
    """AMQP 0-9-1 §3.1.4 (channel.close): unacknowledged messages go back to their queue, and
    come again with redelivered set."""
    owned = await pair.declare("q")
    pair.publish("q", b"x", b"y")
    await pair.consume("q")
    await pair.deliveries(2)
    pair.client.send(
        1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    await pair.answer(commands.Channel.CloseOk)
    await pair.until(lambda: owned.message_count == 2)
    assert owned.unacked == 0 and not owned.consumers
    assert [m.redelivered for m in owned.browse()] == [True, True]
    assert [m.message.body for m in owned.browse()] == [b"x", b"y"]


async def test_losing_the_link_requeues_on_the_owner_and_cancels_the_consumer(pair: Pair) -> None:
    """RabbitMQ "Consumer Cancel Notification": a consumer whose queue becomes unavailable gets
    basic.cancel (the client has the consumer_cancel_notify capability). The owner requeues
    what the other worker held (at least once, redelivered); an ack of such a tag afterwards
    settles nothing and is no error."""
    owned = await pair.declare("q")
    pair.publish("q", b"held")
    tag = await pair.consume("q")
    [got] = await pair.deliveries(1)
    link = pair.workers[0].links.link(1)
    assert link is not None
    link.close()
    cancel = await pair.answer(Basic.Cancel)
    assert cancel.consumer_tag == tag
    await pair.until(lambda: owned.message_count == 1)
    assert owned.unacked == 0 and not owned.consumers
    assert [m.redelivered for m in owned.browse()] == [True]
    pair.client.send(1, Basic.Ack(delivery_tag=tags([got])[0]))
    await pair.nothing_more()  # no channel.close 406


async def test_losing_the_link_closes_the_channel_of_a_client_that_cannot_hear_a_cancel(
    pair: Pair,
) -> None:
    """A client without the consumer_cancel_notify capability cannot be told that its
    consumer was cancelled: its channel is closed instead, so that it does not wait for
    deliveries that never come (541 INTERNAL_ERROR, as RabbitMQ closes a channel whose queue's
    process failed), and its deliveries were requeued by the owner."""
    owned = await pair.declare("q")
    pair.publish("q", b"held")
    client, _session = connect(pair.workers[0].broker)
    client.send(1, Basic.Consume(queue="q"))
    await pair.until(lambda: bool(owned.consumers))
    await pair.settle()
    client.expect(Basic.ConsumeOk, channel=1)
    client.expect_content(Basic.Deliver, channel=1)
    link = pair.workers[0].links.link(1)
    assert link is not None
    link.close()
    await pair.until(lambda: owned.message_count == 1)
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == 541 and "worker 1" in close.reply_text


async def test_basic_get_across_with_and_without_no_ack(pair: Pair) -> None:
    """AMQP 0-9-1 basic.get: get-ok with the message and the count left, or get-empty; with
    no_ack the message is settled as it is sent, else it waits for the ack."""
    owned = await pair.declare("q")
    pair.publish("q", b"first", b"second")
    await pair.settle()
    pair.client.send(1, Basic.Get(queue="q", no_ack=True))
    [first] = await pair.received(1)
    pair.workers[0].session.resume_input()
    assert isinstance(first, Content) and first.body == b"first"
    assert first.method.message_count == 1  # type: ignore[attr-defined]
    pair.client.send(1, Basic.Get(queue="q"))
    [second] = await pair.received(1)
    pair.workers[0].session.resume_input()
    assert isinstance(second, Content) and second.body == b"second"
    assert (owned.unacked, owned.message_count) == (1, 0)
    pair.client.send(1, Basic.Get(queue="q"))
    await pair.answer(Basic.GetEmpty)
    pair.client.send(1, Basic.Ack(delivery_tag=second.method.delivery_tag))  # type: ignore[attr-defined]
    await pair.until(lambda: owned.unacked == 0)
    assert owned.counters.get_no_ack == 1 and owned.counters.get == 1


async def test_an_exclusive_consumer_on_the_owner_refuses_a_consumer_across(pair: Pair) -> None:
    """AMQP 0-9-1 basic.consume exclusive: "Request exclusive consumer access, meaning only
    this consumer can access the queue"; RabbitMQ refuses another with 403 ACCESS_REFUSED, a
    channel error, wherever the other consumer is."""
    await pair.declare("q")
    owner = pair.workers[1].client
    owner.send(1, Basic.Consume(queue="q", exclusive=True))
    owner.expect(Basic.ConsumeOk, channel=1)
    pair.client.send(1, Basic.Consume(queue="q"))
    close = await pair.answer(commands.Channel.Close)
    assert close.reply_code == 403 and "in exclusive use" in close.reply_text


async def test_a_deleted_queue_cancels_the_consumer_across(pair: Pair) -> None:
    """RabbitMQ "Consumer Cancel Notification": when a queue is deleted its consumers get
    basic.cancel, where the client has the consumer_cancel_notify capability."""
    await pair.declare("q")
    tag = await pair.consume("q")
    owner = pair.workers[1].client
    owner.send(1, commands.Queue.Delete(queue="q"))
    await pair.workers[1].broker.journal.durable()
    cancel = await pair.answer(Basic.Cancel)
    assert cancel.consumer_tag == tag


async def test_a_thousand_messages_arrive_in_order(pair: Pair) -> None:
    """AMQP 0-9-1 §4.7: messages published on one channel to one queue are delivered in the
    order they were published, across workers too; no_ack's window is topped up as they go."""
    owned = await pair.declare("q")
    sent = [b"%d" % n for n in range(1000)]
    pair.publish("q", *sent)
    await pair.consume("q", no_ack=True)
    got = await pair.deliveries(1000)
    assert bodies(got) == sent
    # Each is settled on the owner as it reaches the client.
    await pair.until(lambda: owned.unacked == 0)
    assert owned.message_count == 0 and owned.counters.deliver_no_ack == 1000


async def test_the_deliveries_of_a_turn_to_each_consumer_cross_as_one_record(pair: Pair) -> None:
    """Coalesce per loop turn (BatonMQ architecture, "The message path"): what the owner hands
    each consumer across in a turn is one DELIVER record, the messages still in order (AMQP
    0-9-1 §4.7) and each with its own delivery tag; two consumers of one queue, which take
    turns, are two records."""
    await pair.declare("q")
    sent = [b"%d" % n for n in range(50)]
    delivered = records_seen(pair.workers[0].links, DELIVER)
    await pair.consume("q", tag="a")
    await pair.consume("q", tag="b")
    pair.publish("q", *sent)
    got = await pair.deliveries(50)
    by_tag = {
        tag: [content for content in got if content.method.consumer_tag == tag]  # type: ignore[attr-defined]
        for tag in ("a", "b")
    }
    assert sorted(bodies(got), key=int) == sent
    assert [len(by_tag["a"]), len(by_tag["b"])] == [25, 25]
    for contents in by_tag.values():  # each consumer's in the order published
        assert bodies(contents) == sorted(bodies(contents), key=int)
    assert tags(got) == list(range(1, 51))
    assert len(delivered) == 2


async def test_a_deliver_record_holds_one_big_message_alone(pair: Pair) -> None:
    """A record gathers messages up to RECORD_OCTETS: the next message begins another once that
    is reached, so a record is at most one message over it (and a link's record never near
    RECORD_MAX however big the messages a queue holds)."""
    await pair.declare("q")
    big = RECORD_OCTETS + 10
    sent = [b"a" * big, b"b" * big, b"c"]
    pair.publish("q", *sent)
    delivered = records_seen(pair.workers[0].links, DELIVER)
    await pair.consume("q")
    got = await pair.deliveries(3)
    assert bodies(got) == sent
    assert len(delivered) == 3 and max(delivered) < big + 1024


async def test_basic_recover_requeues_across_and_the_messages_come_again(pair: Pair) -> None:
    """AMQP 0-9-1 basic.recover requeue=true: "the server will attempt to requeue the message,
    potentially then delivering it to an alternative subscriber"; it comes again with
    redelivered set."""
    owned = await pair.declare("q")
    pair.publish("q", b"r")
    await pair.consume("q")
    await pair.deliveries(1)
    pair.client.send(1, Basic.Recover(requeue=True))
    await pair.answer(Basic.RecoverOk)
    again = await pair.deliveries(1)
    assert bodies(again) == [b"r"] and redelivered(again) == [True]
    assert owned.unacked == 1


async def test_a_single_active_consumer_across_is_active_first_and_hands_over_when_it_goes(
    pair: Pair,
) -> None:
    """RabbitMQ "Single Active Consumer": "only one consumer at a time consumes from the queue
    and fails over to another registered consumer in case the active one is cancelled", and
    registering one with the exclusive flag "will result in an error if single active consumer
    is enabled". The owner applies both to a consumer on another worker as to its own: the
    unacked deliveries of the cancelled one go to the next first, in their order, before
    anything newer (MQ 3.5 admin guide: the backup "takes over the work of the failed
    consumer"), and the cancelled one's ack of them settles nothing."""
    owned = await pair.declare("q", {"x-single-active-consumer": True})
    pair.client.qos(1, 2)
    tag = await pair.consume("q")
    owner = pair.workers[1].client
    owner.send(1, Basic.Consume(queue="q", consumer_tag="backup", no_ack=True))
    owner.expect(Basic.ConsumeOk, channel=1)
    pair.publish("q", b"1", b"2")
    first = await pair.deliveries(2)
    assert bodies(first) == [b"1", b"2"]
    pair.publish("q", b"3")
    await pair.until(lambda: owned.message_count == 1)  # over the active one's prefetch
    pair.client.send(1, Basic.Cancel(consumer_tag=tag))
    await pair.answer(Basic.CancelOk)
    await pair.until(lambda: owned.message_count == 0 and owned.unacked == 0)
    taken = [owner.expect_content(Basic.Deliver, channel=1) for _ in range(3)]
    assert [(c.body, c.method.redelivered) for c in taken] == [  # type: ignore[attr-defined]
        (b"1", True),
        (b"2", True),
        (b"3", False),
    ]
    pair.client.send(1, Basic.Ack(delivery_tag=tags(first)[1], multiple=True))
    await pair.nothing_more()
    pair.client.send(1, Basic.Consume(queue="q", exclusive=True))
    close = await pair.answer(commands.Channel.Close)
    assert close.reply_code == 403


async def _consuming_a_ticking_subscription(
    pair: Pair, arguments: FieldTable, *, auto_delete: bool = True
) -> str:
    """A subscription queue "sub" on worker 1 (`auto_delete`, or durable; with `arguments`),
    bound to amq.topic, consumed across with a prefetch of 1, and three messages published to
    it: the consumer's tag."""
    owner = pair.workers[1]
    declare = commands.Queue.Declare(
        queue="sub", durable=not auto_delete, auto_delete=auto_delete, arguments=arguments
    )
    owner.client.send(1, declare)
    await owner.broker.journal.durable()
    owner.client.expect(commands.Queue.DeclareOk, channel=1)
    owner.client.send(
        1, commands.Queue.Bind(queue="sub", exchange="amq.topic", routing_key="stocks.us")
    )
    await owner.broker.journal.durable()
    owner.client.expect(commands.Queue.BindOk, channel=1)
    await pair.declare_known("sub")
    pair.client.qos(1, 1)
    tag = await pair.consume("sub")
    for _ in range(3):
        owner.client.publish(1, b"tick", exchange="amq.topic", routing_key="stocks.us")
    return tag


async def _closed_as_slow(pair: Pair) -> str:
    """Run worker 1's slow consumer check (slow_consumer.message_count 1): the reply text of
    the connection.close 506 the consuming client gets."""
    config = SlowConsumerConfig(enabled=True, message_count=1)  # type: ignore[call-arg]
    SlowConsumerDetector(pair.workers[1].broker.vhosts, config, None).check()
    [close] = await pair.received(1)
    assert not isinstance(close, Content), describe([close])
    assert isinstance(close.method, commands.Connection.Close), describe([close])
    assert close.method.reply_code == 506
    assert pair.workers[0].session.ended
    return close.method.reply_text


async def test_a_slow_consumer_across_is_disconnected_with_506_and_its_deliveries_requeued(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """Qpid manual §2.11.2: "On triggering of a specified threshold the offending client will be
    disconnected from the broker with a 506 error code". The owner runs the check; the
    consumer's connection, on the other worker, is closed there with the text a local one
    gets, and logged as there. The close requeues what the consumer was given: the owner
    holds nothing unsettled for it, and the durable subscription (without delete_persistent)
    keeps every message, ready again, none delivered twice."""
    owner = pair.workers[1]
    await _consuming_a_ticking_subscription(pair, {}, auto_delete=False)
    owned = owner.broker.vhosts["/"].queues["sub"]
    await pair.deliveries(1)
    await pair.until(lambda: (owned.message_count, owned.unacked) == (2, 1))

    reason = await _closed_as_slow(pair)

    assert reason == (
        "RESOURCE_ERROR - Consuming to slow: queue 'sub' holds 2 messages, over "
        "slow_consumer.message_count (1)"
    )
    await pair.until(lambda: (owned.message_count, owned.unacked) == (3, 0))
    served = owner.consuming.served(0)
    assert served is not None and (served.consumers, served.unsettled) == ({}, {})
    assert not owned.consumers
    [warning] = [r for r in caplog.records if r.name == "batonmq.engine.slowconsumers"]
    assert warning.getMessage() == (
        "slow consumer disconnected: queue 'sub' holds 2 messages, over "
        "slow_consumer.message_count (1)"
    )
    assert (warning.__dict__["peer"], warning.__dict__["threshold"]) == (
        "127.0.0.1:5000",
        "slow_consumer.message_count",
    )
    await pair.nothing_more()


async def test_a_slow_consumer_across_is_disconnected_and_its_subscription_deleted(
    pair: Pair,
) -> None:
    """Qpid manual §2.11.2: "the offending client will be disconnected from the broker with a
    506 error code"; §2.11.5.6: a temporary subscription queue goes with it. The owner runs
    the check; the connection, on the other worker, is closed there."""
    owner = pair.workers[1]
    await _consuming_a_ticking_subscription(pair, {})
    await pair.deliveries(1)
    assert "Consuming to slow" in await _closed_as_slow(pair)
    assert "sub" not in owner.broker.vhosts["/"].queues


async def test_a_consumer_across_with_a_higher_priority_goes_first(pair: Pair) -> None:
    """RabbitMQ "Consumer Priorities": "messages only going to lower priority consumers when
    the high priority consumers block"; the owner weighs a consumer across by its x-priority
    as its own."""
    owned = await pair.declare("q")
    owner = pair.workers[1].client
    owner.send(1, Basic.Consume(queue="q", consumer_tag="low", no_ack=True))
    owner.expect(Basic.ConsumeOk, channel=1)
    pair.client.send(1, Basic.Consume(queue="q", no_ack=True, arguments={"x-priority": 10}))
    await pair.answer(Basic.ConsumeOk)
    await pair.until(lambda: len(owned.consumers) == 2)
    pair.publish("q", b"1", b"2", b"3")
    assert bodies(await pair.deliveries(3)) == [b"1", b"2", b"3"]
    assert owner.receive() == []


async def test_a_requeue_gives_a_consumer_with_a_prefetch_its_room_back(pair: Pair) -> None:
    """RabbitMQ "Consumer Prefetch": the prefetch limits the consumer's unacknowledged
    deliveries, and a nack or basic.recover with requeue settles them, so the requeued message
    comes again to the consumer whose room it freed (AMQP 0-9-1 basic.recover requeue=true:
    "potentially then delivering it to an alternative subscriber")."""
    await pair.declare("q")
    pair.publish("q", b"a")
    pair.client.qos(1, 1)
    await pair.consume("q")
    [got] = await pair.deliveries(1)
    pair.client.send(1, Basic.Nack(delivery_tag=tags([got])[0], requeue=True))
    again = await pair.deliveries(1)
    assert bodies(again) == [b"a"] and redelivered(again) == [True]
    pair.client.send(1, Basic.Recover(requeue=True))
    await pair.answer(Basic.RecoverOk)
    third = await pair.deliveries(1)
    assert bodies(third) == [b"a"] and redelivered(third) == [True]


async def test_an_ack_before_a_single_active_consumer_s_cancel_settles_what_it_names(
    pair: Pair,
) -> None:
    """AMQP 0-9-1 basic.ack: the server acknowledges the deliveries it names; RabbitMQ "Single
    Active Consumer": only the unacknowledged ones of a cancelled active consumer go to the
    next. An ack and a cancel sent together reach the owner in that order: the acked messages
    are done with, not handed to the backup, and the link stays up."""
    owned = await pair.declare("q", {"x-single-active-consumer": True})
    pair.client.qos(1, 5)
    tag = await pair.consume("q")
    owner = pair.workers[1].client
    owner.send(1, Basic.Consume(queue="q", consumer_tag="backup", no_ack=True))
    owner.expect(Basic.ConsumeOk, channel=1)
    pair.publish("q", b"1", b"2")
    first = await pair.deliveries(2)
    pair.client.send(1, Basic.Ack(delivery_tag=tags(first)[1], multiple=True))
    pair.client.send(1, Basic.Cancel(consumer_tag=tag))
    await pair.answer(Basic.CancelOk)
    await pair.until(lambda: owned.counters.ack == 2)
    await pair.settle()
    assert (owned.message_count, owned.unacked) == (0, 0)
    assert owner.receive() == []
    assert pair.workers[0].links.link(1) is not None


async def test_a_get_after_a_requeue_in_the_same_turn_finds_the_message(pair: Pair) -> None:
    """AMQP 0-9-1 basic.nack requeue=true puts the message back in the queue, and basic.get
    then "provides a direct access to the messages in a queue": a client that requeues and
    gets at once gets the message it requeued, not get-empty."""
    await pair.declare("q")
    pair.publish("q", b"a")
    await pair.settle()
    pair.client.send(1, Basic.Get(queue="q"))
    [got] = await pair.received(1)
    pair.workers[0].session.resume_input()
    assert isinstance(got, Content) and got.body == b"a"
    pair.client.send(1, Basic.Nack(delivery_tag=got.method.delivery_tag, requeue=True))  # type: ignore[attr-defined]
    pair.client.send(1, Basic.Get(queue="q"))
    [again] = await pair.received(1)
    pair.workers[0].session.resume_input()
    assert isinstance(again, Content) and again.body == b"a"
    assert again.method.redelivered  # type: ignore[attr-defined]


async def test_a_settlement_naming_a_delivery_the_owner_took_back_settles_the_others(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """RabbitMQ consumer acknowledgements: an ack settles the deliveries it names, and a
    delivery acknowledged is done with ("at least once": one the owner took back is delivered
    again). A settlement from the consuming worker that also names a delivery the owner no
    longer holds for it (taken back meanwhile) settles the others it names, and the link and
    its consumers go on."""
    owned = await pair.declare("q")
    pair.publish("q", b"a", b"b")
    await pair.consume("q")
    got = await pair.deliveries(2)
    # The owner's delivery ids are 1 and 2; 3 stands for one it took back.
    link = pair.workers[0].consuming.to(1).link
    assert link is not None
    link.send(SETTLE, Settle(SettleOutcome.ACK, [(1, 1), (3, 3)]).encode())
    await pair.until(lambda: owned.counters.ack == 1)
    assert owned.unacked == 1
    assert "not unsettled here, passed over: 1" in caplog.text
    assert pair.workers[1].links.link(0) is not None
    pair.publish("q", b"c")
    more = await pair.deliveries(1)
    assert bodies(more) == [b"c"]
    pair.client.send(1, Basic.Ack(delivery_tag=tags(more)[0], multiple=True))
    await pair.until(lambda: owned.unacked == 0 and owned.counters.ack == 3)
    assert tags(got) == [1, 2]


async def test_a_channel_wide_prefetch_holds_across_the_consumers_of_two_queues(
    pair: Pair,
) -> None:
    """RabbitMQ "Consumer Prefetch": basic.qos with global=true shares the limit among all
    the consumers on the channel: with 2, two deliveries come in all, from two queues, and
    each ack lets one more through."""
    first = await pair.declare("q1")
    second = await pair.declare("q2")
    pair.publish("q1", *[b"a%d" % n for n in range(5)])
    pair.publish("q2", *[b"b%d" % n for n in range(5)])
    await pair.until(lambda: first.message_count == 5 and second.message_count == 5)
    pair.client.qos(1, 2, global_=True)
    await pair.consume("q1")
    got = await pair.deliveries(2)
    await pair.consume("q2")
    await pair.nothing_more()
    assert first.message_count + second.message_count == 8
    pair.client.send(1, Basic.Ack(delivery_tag=tags(got)[0]))
    more = await pair.deliveries(1)
    # Each consumer across may be given the channel's room (not shared between them): two
    # of them may hold up to twice the prefetch unsettled, never more.
    more += pair.inbox + pair.client.receive()
    pair.inbox = []
    assert len(more) <= 2 * 2 - 1  # at least the one awaited above
    await pair.nothing_more()
    assert first.message_count + second.message_count == 8 - len(more)


async def test_a_get_waiting_on_the_owner_takes_nothing_once_the_link_is_gone(
    pair: Pair,
) -> None:
    """AMQP 0-9-1 basic.get: the message a get-ok carries is the client's to acknowledge; a get
    whose answer can no longer reach the client takes nothing from the queue. A get waiting on
    the owner for a message held back until its write commits, whose link goes meanwhile,
    leaves the message ready once it is released."""
    owned = await pair.declare("q")
    batch = 10**9  # a journal batch the owner has not committed
    body = b"held"
    header = struct.pack(">HHQH", 60, 0, len(body), 0)
    owned.publish(Message("", "q", header, body), until_batch=batch)
    assert owned.holds_back
    pair.client.send(1, Basic.Get(queue="q"))
    await pair.settle()
    link = pair.workers[0].links.link(1)
    assert link is not None
    link.close()
    await pair.until(lambda: pair.workers[1].links.link(0) is None)
    owned.release_held(batch, True)
    await pair.settle()
    assert (owned.message_count, owned.unacked) == (1, 0)


async def test_a_slow_single_active_consumer_across_leaves_no_settlement_for_the_owner(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """Qpid manual §2.11.2 (slow consumer disconnect: "disconnected from the broker with a 506
    error code"); RabbitMQ "Single Active Consumer": the unacknowledged deliveries of a
    cancelled active consumer go back to the queue for the next. The owner took them back
    itself, so the close of the client's connection settles nothing there, as after its own
    basic.cancel."""
    await _consuming_a_ticking_subscription(
        pair, {"x-single-active-consumer": True}, auto_delete=False
    )
    owned = pair.workers[1].broker.vhosts["/"].queues["sub"]
    await pair.deliveries(1)
    assert "Consuming to slow" in await _closed_as_slow(pair)
    await pair.until(lambda: (owned.message_count, owned.unacked) == (3, 0))
    await pair.nothing_more()
    assert "passed over" not in caplog.text


async def test_a_refusal_with_a_reply_code_amqp_does_not_have_closes_the_channel_541(
    pair: Pair,
) -> None:
    """AMQP 0-9-1 reply codes: 541 INTERNAL_ERROR, "the server could not complete the method
    because of an internal error". An answer from the owner with a reply code AMQP does not
    have is the broker's own fault: the channel that waited for it is closed with 541, and the
    link and the client's connection go on."""
    owned = await pair.declare("q")
    batch = 10**9  # a journal batch the owner has not committed: the get waits there
    body = b"held"
    owned.publish(
        Message("", "q", struct.pack(">HHQH", 60, 0, len(body), 0), body), until_batch=batch
    )
    pair.client.send(1, Basic.Get(queue="q"))
    await pair.settle()
    link = pair.workers[1].links.link(0)
    assert link is not None
    link.send(GOT, Got(1, 999, "not a reply code", None).encode())  # the first request asked
    close = await pair.answer(commands.Channel.Close)
    assert close.reply_code == 541
    assert pair.workers[0].links.link(1) is not None
    assert not pair.workers[0].session.ended


async def test_cancelling_a_no_ack_consumer_loses_nothing_that_was_on_its_way(
    pair: Pair,
) -> None:
    """AMQP 0-9-1 basic.cancel: after cancel-ok "the server will not send any more messages
    for that consumer"; RabbitMQ "Consumer Acknowledgements": with automatic acknowledgement a
    message is done with once it is sent to the client. What the owner had sent towards a
    no_ack consumer cancelled before it arrived was not sent to the client: it stays in the
    queue, so every message is either delivered or still there."""
    owned = await pair.declare("q")
    received = await pair.no_ack_cancelled_midway(owned, 3000)
    methods = [item for item in received if not isinstance(item, Content)]
    assert [type(item.method) for item in methods] == [Basic.ConsumeOk, Basic.CancelOk]
    after = received.index(methods[1])
    assert all(not isinstance(item, Content) for item in received[after:])
    delivered = [item for item in received if isinstance(item, Content)]
    assert len(delivered) < 3000  # cancelled while deliveries were on their way
    assert len(delivered) + owned.message_count == 3000
    assert owned.counters.deliver_no_ack == len(delivered)


async def _two_queues_on_a_global_prefetch(pair: Pair, prefetch: int) -> tuple[str, list[bytes]]:
    """Queue q1 empty, q2 with five messages, and the consuming channel with a channel-wide
    prefetch of `prefetch` consuming q1 first, then q2: q1's consumer tag, q2's bodies."""
    await pair.declare("q1")
    second = await pair.declare("q2")
    payloads = [b"b%d" % n for n in range(5)]
    pair.publish("q2", *payloads)
    await pair.until(lambda: second.message_count == 5)
    pair.client.qos(1, prefetch, global_=True)
    first = await pair.consume("q1")
    await pair.consume("q2")
    return first, payloads


async def test_a_consumer_of_an_empty_queue_leaves_a_channel_wide_prefetch_to_the_others(
    pair: Pair,
) -> None:
    """RabbitMQ "Consumer Prefetch": with global=true the limit is shared across all the
    consumers on the channel; AMQP 0-9-1 basic.qos: "the server will send a message in advance
    if it is equal to or less than the prefetch count". The consumer of an empty queue holds
    nothing unsettled, so the consumer of the other queue gets the prefetch's two at once."""
    _, payloads = await _two_queues_on_a_global_prefetch(pair, 2)
    assert bodies(await pair.deliveries(2)) == payloads[:2]
    await pair.nothing_more()


async def test_raising_a_channel_wide_prefetch_lets_more_through_to_any_of_its_consumers(
    pair: Pair,
) -> None:
    """AMQP 0-9-1 basic.qos: "the server will send a message in advance if it is equal to or
    less than the prefetch count" (RabbitMQ "Consumer Prefetch": global=true counts the whole
    channel). Raised from 1 to 3 while one delivery is unsettled, two more come, from the
    queue that has messages, not held back by the consumer of the empty one."""
    _, payloads = await _two_queues_on_a_global_prefetch(pair, 1)
    assert bodies(await pair.deliveries(1)) == payloads[:1]
    await pair.nothing_more()
    pair.client.qos(1, 3, global_=True)
    assert bodies(await pair.deliveries(2)) == payloads[1:3]
    await pair.nothing_more()


async def test_cancelling_a_consumer_leaves_a_channel_wide_prefetch_to_the_others(
    pair: Pair,
) -> None:
    """RabbitMQ "Consumer Prefetch": with global=true the limit is shared across all the
    consumers on the channel; AMQP 0-9-1 basic.qos: "the server will send a message in advance
    if it is equal to or less than the prefetch count". Once the consumer of the empty queue is
    cancelled, the other has the channel's prefetch, and each ack lets one more through."""
    first, payloads = await _two_queues_on_a_global_prefetch(pair, 2)
    pair.client.send(1, Basic.Cancel(consumer_tag=first))
    arrived = await pair.received(3)
    pair.workers[0].session.resume_input()
    [cancel_ok] = [item for item in arrived if not isinstance(item, Content)]
    assert isinstance(cancel_ok.method, Basic.CancelOk)
    got = [item for item in arrived if isinstance(item, Content)]
    assert bodies(got) == payloads[:2]
    pair.client.send(1, Basic.Ack(delivery_tag=tags(got)[-1], multiple=True))
    assert bodies(await pair.deliveries(2)) == payloads[2:4]
    await pair.nothing_more()


async def test_a_no_ack_delivery_that_reached_the_client_does_not_come_again_after_the_link_goes(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RabbitMQ "Consumer Acknowledgements": with automatic acknowledgement "messages are
    considered to be successfully delivered immediately after they are sent" (at most once).
    The link goes after deliveries reached a no_ack consumer's client and before the consuming
    worker told the owner so (the link is closed in place of that turn's report): the owner
    does not requeue them, so no message reaches the client twice."""
    owned = await pair.declare("q")
    pair.publish("q", *[b"%d" % n for n in range(5)])
    await pair.until(lambda: owned.message_count == 5)
    remote = pair.workers[0].consuming.to(1)
    report = remote._flush

    def drop_the_link_instead() -> None:
        link = remote.link
        if link is not None and any(remote._settling.values()):
            link.close()
            return
        report()

    monkeypatch.setattr(remote, "_flush", drop_the_link_instead)
    tag = await pair.consume("q", no_ack=True)
    await pair.until(lambda: pair.workers[1].links.link(0) is None)
    await pair.settle()
    received = pair.inbox + pair.client.receive()
    [cancel] = [item for item in received if not isinstance(item, Content)]
    assert isinstance(cancel.method, Basic.Cancel) and cancel.method.consumer_tag == tag
    got = bodies([item for item in received if isinstance(item, Content)])
    assert got
    assert owned.unacked == 0
    assert sorted(got + [m.message.body for m in owned.browse()]) == sorted(
        b"%d" % n for n in range(5)
    )


async def test_a_no_ack_single_active_consumer_cancelled_mid_flight_hands_over_in_order(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """RabbitMQ "Single Active Consumer": when the active consumer is cancelled, "the first
    backup consumer is made active" and takes over its work; AMQP 0-9-1 basic.cancel: after
    cancel-ok no more messages reach the cancelled consumer. What was on its way across to a
    no_ack active consumer cancelled meanwhile goes back ahead of anything newer: the backup
    gets the rest of the queue in order, and every message reaches one of them once."""
    owned = await pair.declare("q", {"x-single-active-consumer": True})
    pair.publish("q", *[b"%d" % n for n in range(1000)])
    await pair.until(lambda: owned.message_count == 1000)
    received = await pair.consuming_no_ack("q", "c")
    backup = pair.workers[1].client
    backup.send(1, Basic.Consume(queue="q", consumer_tag="backup", no_ack=True))
    backup.expect(Basic.ConsumeOk, channel=1)
    pair.client.send(1, Basic.Cancel(consumer_tag="c"))
    await pair.until(lambda: owned.message_count == 0 and owned.unacked == 0)
    await pair.settle()
    received += pair.client.receive()
    first = [int(body) for body in bodies([i for i in received if isinstance(i, Content)])]
    taken_over = [
        int(body) for body in bodies([i for i in backup.receive() if isinstance(i, Content)])
    ]
    assert 0 < len(first) < 1000
    assert first + taken_over == list(range(1000))
    assert "passed over" not in caplog.text


async def test_deliveries_forgotten_with_a_lost_link_free_a_channel_wide_prefetch(
    pair: Pair,
) -> None:
    """RabbitMQ "Consumer Prefetch": with global=true the limit is shared by all the channel's
    consumers. A delivery across that the channel forgets when the link to its queue's worker
    goes (that worker requeued it) no longer counts: the channel's local consumer gets its
    message at once, without waiting for the client to ack the forgotten tag."""
    await pair.declare("q")
    pair.publish("q", b"remote")
    pair.client.qos(1, 1, global_=True)
    await pair.consume("q", tag="A")
    await pair.deliveries(1)
    pair.client.send(1, commands.Queue.Declare(queue="local"))
    await pair.answer(commands.Queue.DeclareOk)
    pair.client.publish(1, b"local", routing_key="local")
    await pair.consume("local", tag="L")
    await pair.nothing_more()
    link = pair.workers[0].links.link(1)
    assert link is not None
    link.close()
    got = await pair.received(2)
    contents = [item for item in got if isinstance(item, Content)]
    [cancel] = [item.method for item in got if not isinstance(item, Content)]
    assert isinstance(cancel, Basic.Cancel) and cancel.consumer_tag == "A"
    assert bodies(contents) == [b"local"]


@pytest.mark.parametrize(
    "ending",
    [
        Basic.Cancel(consumer_tag="c"),
        commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
    ],
    ids=["basic.cancel", "channel.close"],
)
async def test_a_single_active_consumer_ended_with_deliveries_on_their_way_warns_of_nothing(
    pair: Pair, caplog: pytest.LogCaptureFixture, ending: base.Frame
) -> None:
    """RabbitMQ "Single Active Consumer": when the active consumer is cancelled, the next one
    takes over; AMQP 0-9-1 basic.cancel: after cancel-ok no more messages reach the cancelled
    consumer. The owner takes back everything it gave an acked active consumer cancelled
    across, what was still on its way to it too: the consuming worker sends none of that back,
    so the owner's log has no settlement of an unknown delivery (BMQ-1062) for normal work, and
    the next consumer gets every message once, in order."""
    owned = await pair.declare("q", {"x-single-active-consumer": True})
    pair.publish("q", *[b"%d " % n + bytes(1000) for n in range(1000)])  # many reads of the link
    await pair.until(lambda: owned.message_count == 1000)
    # One read: the end waits, held, until the owner answered the consume.
    pair.client.send_bytes(
        frame.marshal(Basic.Consume(queue="q", consumer_tag="c"), 1) + frame.marshal(ending, 1)
    )
    received: list[Received] = []
    async with asyncio.timeout(5):
        while not received:
            await asyncio.sleep(0)  # a loop turn: the records of one read of the link
            received += pair.client.receive()
    pair.workers[0].session.resume_input()
    await pair.until(lambda: owned.unacked == 0 and not owned.consumers)
    received += pair.client.receive()
    first = [item for item in received if isinstance(item, Content)]
    assert len(first) < 1000  # ended while deliveries were on their way
    backup = pair.workers[1].client
    backup.send(1, Basic.Consume(queue="q", consumer_tag="backup", no_ack=True))
    backup.expect(Basic.ConsumeOk, channel=1)
    await pair.until(lambda: owned.message_count == 0)
    await pair.settle()
    taken_over = [item for item in backup.receive() if isinstance(item, Content)]
    assert [int(body.split()[0]) for body in bodies(taken_over)] == list(range(1000))
    assert [r for r in caplog.records if code_of(r.getMessage()) == "BMQ-1062"] == []
    # The owner's answer to a later request comes after any DELIVER to the cancelled
    # consumer: the consuming worker forgets it then.
    pair.client.open_channel(2)
    pair.client.send(2, Basic.Get(queue="q"))
    await pair.answer(Basic.GetEmpty)
    assert pair.workers[0].consuming.to(1)._taken_back == {}


@pytest.mark.parametrize(
    "arguments", [None, {"x-single-active-consumer": True}], ids=["shared", "single-active"]
)
async def test_what_never_reached_a_cancelled_no_ack_consumer_is_not_marked_redelivered(
    pair: Pair, arguments: FieldTable | None
) -> None:
    """AMQP 0-9-1 basic.deliver redelivered: "this indicates that the message may have been
    previously delivered to this or another client". A message on its way across to a no_ack
    consumer cancelled before it arrived never reached any client: it stays in the queue
    unmarked, whether the consuming worker sends it back or the owner takes it back itself
    (single active consumer)."""
    owned = await pair.declare("q", arguments)
    received = await pair.no_ack_cancelled_midway(owned, 3000)
    delivered = [item for item in received if isinstance(item, Content)]
    left = owned.browse()
    assert len(delivered) < 3000  # cancelled while deliveries were on their way
    assert len(delivered) + len(left) == 3000
    assert [m.redelivered for m in left] == [False] * len(left)


async def test_a_deleted_single_active_queue_leaves_nothing_unsettled_at_its_owner(
    pair: Pair,
) -> None:
    """RabbitMQ (consumer cancel notification): a deleted queue's consumers are cancelled
    (basic.cancel to the client). Where the queue handed a consumer's work over (single active
    consumer), the consuming worker counts what the consumer held as taken back by the owner
    and settles none of it; the owner, its queue gone, forgets it too, even when the client
    cancelled at the same moment and the deliveries on their way were dropped: nothing is
    held at the owner until the link ends."""
    owned = await pair.declare("q", {"x-single-active-consumer": True})
    pair.publish("q", *[b"%d " % n + bytes(1000) for n in range(1000)])
    await pair.until(lambda: owned.message_count == 1000)
    pair.client.send(1, Basic.Consume(queue="q", consumer_tag="c"))
    received: list[Received] = []

    def delivering() -> bool:
        received.extend(pair.client.receive())
        return any(isinstance(item, Content) for item in received)

    await pair.until(delivering)
    pair.workers[0].session.resume_input()
    # In one loop turn: the owner deletes the queue (CANCELLED on its way) as the client
    # cancels (CANCEL on its way), deliveries still crossing.
    pair.workers[1].broker.vhosts["/"].remove_queue(owned, on_delete=cancel_consumers_of)
    pair.client.send(1, Basic.Cancel(consumer_tag="c"))
    await pair.settle()
    await pair.settle()
    served = pair.workers[1].consuming.served(0)
    assert served is not None and served.unsettled == {}


@pytest.mark.parametrize("properties", [TRANSIENT, PERSISTENT], ids=["transient", "persistent"])
async def test_a_get_right_after_a_publish_on_the_same_channel_finds_the_message(
    pair: Pair, properties: Basic.Properties
) -> None:
    """AMQP 0-9-1 basic.get "provides a direct access to the messages in a queue", and RabbitMQ
    keeps a channel's methods in order: a basic.publish followed by a basic.get on the same
    channel finds the message, here too where both arrive in one read and the GET crosses to
    the owner as the PUBLISH is still being built."""
    owned = await pair.declare("q")
    await pair.declare_known("q")
    got = await pair.publish_then_get(Basic.Publish(routing_key="q"), properties)
    assert isinstance(got, Content) and got.body == b"m", describe([got])
    assert (owned.unacked, owned.message_count) == (1, 0)


async def _closed_by(client: MemClient, session: Session, method: base.Frame) -> str:
    """The reply text of the channel.close that `method` on channel 1 of `client` brings."""
    client.send(1, method)
    received: list[Received] = []

    async with asyncio.timeout(5):
        while not received:
            await asyncio.sleep(0.005)
            received.extend(client.receive())
    [close] = received
    assert not isinstance(close, Content) and isinstance(close.method, commands.Channel.Close)
    session.resume_input()
    return close.method.reply_text


@pytest.mark.parametrize(
    "method",
    [
        Basic.Consume(queue="q", arguments={"x-priority": "high"}),
        Basic.Get(queue="x"),
    ],
    ids=["consume", "get"],
)
async def test_a_refusal_across_closes_the_channel_with_the_text_of_a_local_one(
    pair: Pair, method: base.Frame
) -> None:
    """AMQP 0-9-1 channel.close carries the reply code and text of the refused method, and
    RabbitMQ's rule for a queue on another worker: a client cannot tell where it runs. A
    consume (an x-priority that is not a number) or a get (another connection's exclusive
    queue, 405) refused by the owner closes the channel with the very text a refusal on the
    owner's own worker gives, its code's name once at its head."""
    await pair.declare("q")
    owner = pair.workers[1]
    owner.client.send(1, commands.Queue.Declare(queue="x", exclusive=True))
    owner.client.expect(commands.Queue.DeclareOk, channel=1)
    await pair.declare_known("x")
    local, session = connect(owner.broker)
    expected = await _closed_by(local, session, method)
    across = await _closed_by(pair.client, pair.workers[0].session, method)
    assert across == expected
    assert across.count(" - ") == 1, across


async def test_a_get_right_after_a_publish_also_kept_here_waits_for_the_commit_here(
    pair: Pair,
) -> None:
    """AMQP 0-9-1 basic.get "provides a direct access to the messages in a queue", in channel
    order: a persistent message routed to a durable queue of worker 0 as well crosses only once
    worker 0's write of it commits (a message is shown only once its write commits); the GET
    that follows it on the same channel waits behind it, and finds it."""
    owned = await pair.declare("q")
    await pair.declare_known("q")
    client = pair.client
    client.send(1, commands.Queue.Declare(queue="here", durable=True))
    await pair.workers[0].broker.journal.durable()
    client.expect(commands.Queue.DeclareOk, channel=1)
    for queue in ("here", "q"):
        client.send(1, commands.Queue.Bind(queue=queue, exchange="amq.fanout"))
        await pair.answer(commands.Queue.BindOk)
    got = await pair.publish_then_get(Basic.Publish(exchange="amq.fanout"), PERSISTENT)
    assert isinstance(got, Content) and got.body == b"m", describe([got])
    assert (owned.unacked, owned.message_count) == (1, 0)
