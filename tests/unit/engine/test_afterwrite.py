"""Persistent publishes wait for their write as one batch ("commit then apply"), and a delivery
count is written only when it comes to matter: the engine on a real SQLite store, driven by the
in-memory client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.engine.broker import Broker
from batonmq.engine.recovery import restore
from batonmq.store.journal import Journal
from batonmq.store.sqlite import SQLiteStore
from tests.memclient import MemClient, connect, describe

PERSISTENT = commands.Basic.Properties(delivery_mode=2)


@contextlib.asynccontextmanager
async def stored_broker(directory: Path) -> AsyncIterator[tuple[Broker, MemClient]]:
    store = SQLiteStore(directory / "batonmq.sqlite3", broker_id="b1", sync=False)
    await store.open()
    broker = Broker(store=store)
    restore(broker, await store.recover())
    broker.journal.start()
    client, _session = connect(broker)
    try:
        yield broker, client
    finally:
        await broker.journal.stop()
        await store.close()


async def stored_counts(broker: Broker) -> list[int]:
    """The delivery counts the broker's store holds for queue `q`, by sequence (read through the
    store, which writes out its append log first)."""
    return [entry.delivery_count for entry in await broker.store.read_entries("/", "q", -1, 100)]


async def declare(client: MemClient, journal: Journal, arguments: FieldTable | None = None) -> None:
    client.send(1, commands.Queue.Declare(queue="q", durable=True, arguments=arguments))
    await journal.durable()
    client.expect(commands.Queue.DeclareOk, channel=1)


async def test_a_batch_of_publishes_is_confirmed_and_delivered_once_its_write_commits(
    tmp_path: Path,
):
    """RabbitMQ's confirms guide: "for persistent messages routed to durable queues, this means
    persisting to disk"; and BatonMQ's rule that nothing is visible before its write commits:
    the consumer sees the messages, and the publisher its single multiple ack, only after the
    batch that holds all of them is written."""
    async with stored_broker(tmp_path) as (broker, client):
        await declare(client, broker.journal)
        client.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
        client.consume(1, "q", "c")
        publish = commands.Basic.Publish(routing_key="q")
        client.send_bytes(
            b"".join(client.content_bytes(1, publish, b"m%d" % n, PERSISTENT) for n in range(5))
        )
        assert client.receive() == []
        assert await broker.journal.durable()
        received = client.receive()
        assert describe(received) == ["1:Basic.Deliver"] * 5 + ["1:Basic.Ack"]
        ack = received[-1].method
        assert (ack.delivery_tag, ack.multiple) == (5, True)


async def test_the_batch_being_gathered_can_be_waited_for_when_nothing_is_written_in_it(
    tmp_path: Path,
):
    """A waiter for the batch being gathered hears of it even when nothing is recorded in it
    (a publish whose queues all refused it must still have its waiters told)."""
    async with stored_broker(tmp_path) as (broker, _client):
        heard: list[bool] = []
        broker.journal.when_batch_over(heard.append)
        assert await broker.journal.durable()
        assert heard == [True]


async def test_a_delivery_acknowledged_in_time_writes_no_delivery_count(tmp_path: Path):
    """RabbitMQ's classic queues mark every message of a dirty recovery delivered ("effectively
    marking all messages as previously delivered"), so a delivery's count matters only if the
    message comes back to its queue: it is written then (basic.nack with requeue here), not at
    each delivery."""
    async with stored_broker(tmp_path) as (broker, client):
        await declare(client, broker.journal)
        client.publish(1, b"m", routing_key="q", properties=PERSISTENT)
        await broker.journal.durable()
        got = client.get(1, "q")
        assert got is not None
        await broker.journal.durable()
        assert await stored_counts(broker) == [0]
        client.send(1, commands.Basic.Nack(delivery_tag=got.method.delivery_tag, requeue=True))
        await broker.journal.durable()
        assert await stored_counts(broker) == [1]


async def test_under_a_delivery_limit_each_delivery_count_is_written_at_once(tmp_path: Path):
    """x-delivery-limit counts deliveries ("the number of allowed unsuccessful delivery
    attempts"): the count is written at each delivery, so that a crash does not reset it."""
    async with stored_broker(tmp_path) as (broker, client):
        await declare(client, broker.journal, {"x-delivery-limit": 3})
        client.publish(1, b"m", routing_key="q", properties=PERSISTENT)
        await broker.journal.durable()
        assert client.get(1, "q") is not None
        await broker.journal.durable()
        assert await stored_counts(broker) == [1]
