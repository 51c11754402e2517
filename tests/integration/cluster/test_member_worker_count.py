"""An HA member started again with another number of worker processes (docs/multi-core.md,
"What the choice means for HA clusters"): each worker writes as a store identity of its own, and
whatever the identities of the member's last run hold is served by the worker that owns its
virtual host now, once.

MQ 4.1 HA guide: a broker's persistent data is its own until another broker takes it over; the
RabbitMQ documentation (Persistence Configuration): "persistent messages ... will be recovered
upon a node restart"."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pika
import pytest

from batonmq.server.placement import owner_of
from tests.brokerproc import RunningBroker, connect
from tests.httpapi import call
from tests.members import start_member

pytestmark = pytest.mark.integration

#: Enough virtual hosts that each worker of 2 and of 3 owns one, and some change owner.
VHOSTS = ["/", *(f"tenant{n}" for n in range(6))]
FIRST, LATER = 30, 10
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _workers(count: int) -> dict[str, str]:
    return {"BATONMQ__BROKER__WORKERS": str(count)}


def _publish(broker: RunningBroker, vhost: str, bodies: list[bytes]) -> None:
    with connect(broker, vhost=vhost) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q", durable=True)
        for body in bodies:
            channel.basic_publish("", "q", body, PERSISTENT, mandatory=True)


def _count(broker: RunningBroker, vhost: str) -> int:
    with connect(broker, vhost=vhost) as connection:
        declared = connection.channel().queue_declare("q", durable=True, passive=True)
        return int(declared.method.message_count)


def _consume(broker: RunningBroker, vhost: str) -> list[bytes]:
    received: list[bytes] = []
    with connect(broker, vhost=vhost) as connection:
        channel = connection.channel()
        for method, _properties, body in channel.consume("q", inactivity_timeout=2.0):
            if method is None:
                break
            received.append(body)
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
    return received


def _bodies(vhost: str, run: str, count: int) -> list[bytes]:
    return [f"{vhost} {run} {number}".encode() for number in range(count)]


def _end(broker: RunningBroker, kill: bool) -> None:
    if kill:
        broker.kill()
    else:
        broker.stop()


@pytest.mark.parametrize("kill", [False, True], ids=["stopped", "killed"])
def test_a_member_started_with_fewer_then_more_workers_serves_every_message_once(
    tmp_path: Path, postgres_dsn: str, kill: bool
) -> None:
    """Member A with two workers holds confirmed persistent messages in a queue of each of
    seven virtual hosts, and is stopped (or SIGKILLed: its leases still run when it starts
    again). Started with one worker, every queue holds all of them, and takes more; stopped (or
    killed) again and started with three workers, each virtual host's queue gives every message
    it was sent exactly once, in order."""
    assert {owner_of(name, 2) for name in VHOSTS} == {0, 1}
    assert {owner_of(name, 3) for name in VHOSTS} == {0, 1, 2}
    assert any(owner_of(name, 2) != owner_of(name, 3) for name in VHOSTS)
    a = start_member(tmp_path, postgres_dsn, "A", http=True, environment=_workers(2))
    try:
        for vhost in VHOSTS[1:]:
            assert call(a, "PUT", f"/api/vhosts/{urllib.parse.quote(vhost, safe='')}")[0] == 201
        for vhost in VHOSTS:
            _publish(a, vhost, _bodies(vhost, "first", FIRST))
        _end(a, kill)

        a = start_member(tmp_path, postgres_dsn, "A", http=True, environment=_workers(1))
        assert {vhost: _count(a, vhost) for vhost in VHOSTS} == dict.fromkeys(VHOSTS, FIRST)
        for vhost in VHOSTS:
            _publish(a, vhost, _bodies(vhost, "later", LATER))
        _end(a, kill)

        a = start_member(tmp_path, postgres_dsn, "A", http=True, environment=_workers(3))
        for vhost in VHOSTS:
            expected = _bodies(vhost, "first", FIRST) + _bodies(vhost, "later", LATER)
            assert _consume(a, vhost) == expected, vhost
    finally:
        a.stop()
