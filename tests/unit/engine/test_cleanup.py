"""Teardown that cannot be interrupted (hardening, defect 8): "Channel close, session teardown and
store-journal waiters must finish their cleanup when a step raises or the task is cancelled ...:
a failure in one consumer's cleanup never leaves other consumers' messages unacked-forever."

The failing step is a real queue of the broker whose consumer removal is made to raise, as a
defect in it would."""

from __future__ import annotations

import asyncio

import pytest
from pamqp import commands

from batonmq.engine.broker import Broker
from batonmq.queues.classic import ClassicQueue
from batonmq.store.journal import Journal
from tests.memclient import MemClient, connect


def broken(queue: ClassicQueue, error: BaseException | None = None) -> None:
    def remove_consumer(_consumer: object) -> None:
        raise error or RuntimeError("a defect in this queue's consumer removal")

    queue.remove_consumer = remove_consumer  # type: ignore[method-assign]


def two_consumers_holding_a_message_each(broker: Broker) -> MemClient:
    client, _session = connect(broker)
    for name in ("first", "second"):
        client.declare_queue(1, name)
        client.publish(1, name.encode(), routing_key=name)
    for name in ("first", "second"):
        client.consume(1, name)
        assert len(client.deliveries(1)) == 1
    return client


def test_a_consumer_whose_cleanup_raises_leaves_the_others_requeued_on_channel_close(
    caplog: pytest.LogCaptureFixture,
):
    """ "How BatonMQ code reads" 10: "A consumer that disconnects mid-delivery gets its unacked
    messages requeued, always, whatever raised": the other consumer's message and its own go
    back."""
    broker = Broker()
    client = two_consumers_holding_a_message_each(broker)
    queues = broker.vhosts["/"].queues
    broken(queues["first"])
    client.call(1, commands.Channel.Close(200, "bye", 0, 0), commands.Channel.CloseOk)
    assert queues["second"].message_count == 1
    assert queues["first"].message_count == 1
    assert "cleanup step failed: cancelling a consumer; cleanup goes on" in caplog.text


def test_a_connection_whose_channel_cleanup_raises_still_requeues_and_ends(
    caplog: pytest.LogCaptureFixture,
):
    """Session teardown goes on past a channel whose cleanup raised: every message comes
    back, and the connection is counted out of the broker."""
    broker = Broker()
    client = two_consumers_holding_a_message_each(broker)
    queues = broker.vhosts["/"].queues
    broken(queues["first"])
    client.call(0, commands.Connection.Close(200, "bye", 0, 0), commands.Connection.CloseOk)
    assert queues["second"].message_count == 1
    assert queues["first"].message_count == 1
    assert not broker.sessions
    assert "cleanup step failed: " in caplog.text


def test_a_channel_close_cancelled_mid_way_still_cancels_and_requeues_the_others() -> None:
    """Defect 8: channel close "must finish [its] cleanup when ... the task is cancelled": a
    cancellation raised by the first consumer's removal does not skip the second's. Every
    consumer is gone from its queue and every message is back; the cancellation then goes on
    (it is not swallowed)."""
    broker = Broker()
    client = two_consumers_holding_a_message_each(broker)
    queues = broker.vhosts["/"].queues
    broken(queues["first"], asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        client.send(1, commands.Channel.Close(200, "bye", 0, 0))
    assert queues["second"].consumer_count == 0
    assert queues["second"].message_count == 1
    assert queues["first"].message_count == 1


def test_a_session_teardown_cancelled_mid_way_still_ends_every_channel() -> None:
    """Defect 8: session teardown "must finish [its] cleanup when ... the task is cancelled": a
    cancellation in one channel's close does not skip the next channel, nor the exclusive
    queues; the connection is counted out, and the cancellation goes on."""
    broker = Broker()
    client, _session = connect(broker)
    client.open_channel(2)
    for channel, name in ((1, "first"), (2, "second")):
        client.declare_queue(channel, name)
        client.publish(channel, name.encode(), routing_key=name)
        client.consume(channel, name)
        assert len(client.deliveries(channel)) == 1
    owned = client.declare_queue(2, "owned", exclusive=True)
    queues = broker.vhosts["/"].queues
    broken(queues["first"], asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        client.send(0, commands.Connection.Close(200, "bye", 0, 0))
    assert queues["second"].consumer_count == 0
    assert (queues["first"].message_count, queues["second"].message_count) == (1, 1)
    assert owned not in queues
    assert not broker.sessions


class HungStore:
    """A store whose commit never returns (a database that stopped answering)."""

    location = "hung"

    async def commit(self, _batch: object) -> None:
        await asyncio.Event().wait()


async def test_waiters_hear_false_when_the_journal_is_cancelled_mid_commit():
    """A journal task cancelled while its store hangs tells every waiter the write did not
    happen, those of the batch being written and those gathered since."""
    journal = Journal(HungStore())  # type: ignore[arg-type]
    journal.start()
    heard: list[bool] = []
    journal.put_vhost("one")
    journal.when_durable(heard.append)
    await asyncio.sleep(0.01)  # the batch is being written now
    journal.put_vhost("two")
    journal.when_durable(heard.append)
    task = journal._task
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert heard == [False, False]
