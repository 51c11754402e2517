"""An ack wakes the queue whose consumer it gave room to, and no other.

The rule pinned (the issue on per-connection costs): remove "per-consumer scheduling that
walks all consumers, dispatch that wakes every channel". AMQP 0-9-1 basic.qos: "The client can
request that messages be sent in advance so that when the client finishes processing a
message, the following message is already held locally"; the prefetch window that an ack
reopens is its consumer's (global=false), so only that consumer's queue has anything to do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from pamqp import commands

from batonmq.engine.broker import Broker
from batonmq.engine.consumer import Consumer
from tests.memclient import Content, connect

CHANNELS = 16
ACKED = 5


def test_one_ack_dispatches_only_its_own_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 channels, each consuming from its own queue with prefetch 1 and a message waiting
    behind the one delivered: an ack on one channel asks that queue's consumer for room and
    dispatches that queue, once; the other 15 queues and consumers are not touched."""
    broker = Broker()
    channels = tuple(range(1, CHANNELS + 1))
    client, _session = connect(broker, channels=channels)
    for channel in channels:
        client.declare_queue(channel, f"q{channel}")
        client.publish(channel, b"first", routing_key=f"q{channel}")
        client.publish(channel, b"second", routing_key=f"q{channel}")
        client.qos(channel, 1)
    for channel in channels:
        client.send(channel, commands.Basic.Consume(queue=f"q{channel}"))
    first = [item for item in client.receive() if isinstance(item, Content)]
    assert sorted((content.channel, content.body) for content in first) == [
        (channel, b"first") for channel in channels
    ]

    dispatched: Counter[str] = Counter()
    for name, queue in broker.vhosts["/"].queues.items():
        real_dispatch = queue.dispatch

        def counting_dispatch(name: str = name, real: Callable[[], None] = real_dispatch) -> None:
            dispatched[name] += 1
            real()

        monkeypatch.setattr(queue, "dispatch", counting_dispatch)
    asked: Counter[str] = Counter()
    real_has_room = Consumer.has_room

    def counting_has_room(consumer: Consumer) -> bool:
        asked[consumer.queue.name] += 1
        return real_has_room(consumer)

    monkeypatch.setattr(Consumer, "has_room", counting_has_room)

    tag = next(c.method.delivery_tag for c in first if c.channel == ACKED)
    client.send(ACKED, commands.Basic.Ack(delivery_tag=tag))
    second = client.deliveries()

    assert [(content.channel, content.body) for content in second] == [(ACKED, b"second")]
    assert dispatched == {f"q{ACKED}": 1}
    assert set(asked) == {f"q{ACKED}"}
