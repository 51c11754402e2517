"""A fault inside one queue's work stays in that queue (hardening, defect 3).

Rules: "no message the broker holds can make a consumer, a dead-letter path or a timer fail";
"a fault inside one queue's work is contained to that queue and logged, never delays others".
Every header a publisher sends is checked at the edge (amqp/properties.py), so the message that
makes dead-lettering fail here is one the edge never saw: a store written by an older version,
put into a queue as paging does.
"""

from __future__ import annotations

import logging
import struct

import pytest
from pamqp import commands

from batonmq.engine.broker import Broker
from batonmq.engine.vhost import VirtualHost
from batonmq.model.message import Message
from batonmq.queues.classic import ClassicQueue
from tests.manualtimers import ManualTimers
from tests.memclient import connect

Basic = commands.Basic
Queue = commands.Queue

#: A content header whose headers table holds a field of the unknown type 'Z': the edge refuses
#: it, an older broker did not.
UNDECODABLE = struct.pack(">HHQH", 60, 0, 3, 1 << 13) + struct.pack(">I", 3) + b"\x01kZ"


def test_a_dead_letter_that_fails_is_logged_and_the_consumer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hardening: "The dead-letter path then closes the *consumer's* connection (502) and the
    message vanishes"; rule: "no message the broker holds can make a consumer, a dead-letter
    path ... fail". The consumer rejects such a message (requeue=false) to a dead-letter
    exchange: its connection stays open and serves, the failure is logged with the vhost and
    the queue, and the message, which no consumer could decode, is dropped."""
    broker = Broker()
    client, _session = connect(broker)
    client.call(1, Queue.Declare(queue="dead"), Queue.DeclareOk)
    client.call(
        1,
        Queue.Declare(
            queue="work",
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
        ),
        Queue.DeclareOk,
    )
    broker.vhosts["/"].queues["work"].publish(Message("", "work", UNDECODABLE, b"old"))
    client.send(1, Basic.Get(queue="work"))
    delivered = client.raw_output()  # basic.get-ok, delivery-tag 1: not decoded, it cannot be
    assert UNDECODABLE in delivered

    with caplog.at_level(logging.ERROR, logger="batonmq.engine.deadletter"):
        client.send(1, Basic.Reject(delivery_tag=1, requeue=False))

    client.expect_nothing()
    assert client.get(1, "work") is None
    assert client.get(1, "dead") is None
    [record] = caplog.records
    assert "queue 'work' in vhost '/'" in record.getMessage()
    assert record.exc_info is not None
    client.publish(1, b"fresh", routing_key="dead")
    fresh = client.get(1, "dead")
    assert fresh is not None and fresh.body == b"fresh"


class FailingQueue(ClassicQueue):
    """A queue whose expiry raises: a fault injected where no real input reaches any more."""

    def expire(self) -> int:
        raise RuntimeError("injected fault")


def test_the_expiry_sweep_goes_on_past_a_queue_that_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hardening: "on the TTL path an exception in one queue's expiry delays every other queue's
    expiries"; rule: "a fault inside one queue's work is contained to that queue and logged,
    never delays others". The periodic sweep meets a failing queue first: it logs it with the
    vhost and the queue, and still expires the next queue's messages."""
    timers = ManualTimers()
    vhost = VirtualHost("/")
    vhost.queues["broken"] = FailingQueue("broken", timers=timers)
    vhost.queues["expiring"] = expiring = ClassicQueue(
        "expiring", timers=timers, arguments={"x-message-ttl": 1000}
    )
    for body in (b"a", b"b"):
        expiring.publish(Message("", "expiring", struct.pack(">HHQH", 60, 0, 1, 0), body))
    timers.now += 5000  # past the TTL, without firing the head timer

    with caplog.at_level(logging.ERROR, logger="batonmq.engine.vhost"):
        expired = vhost.expire_messages()

    assert expired == 2
    assert expiring.message_count == 0
    [record] = caplog.records
    assert record.getMessage() == "expiry of queue 'broken' in vhost '/' failed"
    assert record.exc_info is not None
