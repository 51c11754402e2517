"""Members of an HA cluster with two worker processes each (docs/multi-core.md, "What the choice
means for HA clusters"): a broker with workers is one member to its peers and to `list bkr`,
and when it fails a survivor takes over all of its workers' messages, each virtual host's served
by the survivor's worker that owns it, through the one port.

MQ 4.1 HA guide: "When a broker fails, another broker in the cluster takes over its persistent
data ... Message Queue clients ... are automatically reconnected to the takeover broker"; Example
1: `list bkr` lists each broker of the cluster once."""

from __future__ import annotations

import os
import signal
import time
import urllib.parse
from pathlib import Path

import pika
import pika.exceptions
import pytest

from batonmq.server.placement import owner_of
from tests.brokerproc import RunningBroker, connect, wait_until, worker_pids
from tests.httpapi import call
from tests.members import start_member

pytestmark = pytest.mark.integration

TWO_WORKERS = {"BATONMQ__BROKER__WORKERS": "2"}
#: A virtual host owned by each worker ("/" is one of them).
VHOSTS = [
    next(name for name in ["/", *(f"tenant{n}" for n in range(20))] if owner_of(name, 2) == owner)
    for owner in range(2)
]
MESSAGES = 50
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _publish(broker: RunningBroker, vhost: str) -> list[bytes]:
    bodies = [f"{vhost} {number}".encode() for number in range(MESSAGES)]
    with connect(broker, vhost=vhost) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q", durable=True)
        for body in bodies:
            channel.basic_publish("", "q", body, PERSISTENT, mandatory=True)
    return bodies


def _consume(broker: RunningBroker, vhost: str) -> list[tuple[bytes, bool]]:
    received: list[tuple[bytes, bool]] = []
    with connect(broker, vhost=vhost) as connection:
        channel = connection.channel()
        for method, _properties, body in channel.consume("q", inactivity_timeout=3.0):
            if method is None:
                break
            received.append((body, bool(method.redelivered)))
            channel.basic_ack(method.delivery_tag)
            if len(received) == MESSAGES:
                break
        channel.cancel()
    return received


def test_a_member_with_workers_is_listed_once_and_taken_over_whole(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """A is killed holding confirmed persistent messages in a virtual host of each of its
    workers; B, with two workers too, takes A over: its worker 0 claims A whole and takes its
    own virtual host's messages, its worker 1 adopts the other's. Every message is consumed
    from B, in order, flagged redelivered."""
    started: list[RunningBroker] = []
    try:
        for broker_id in ("A", "B"):
            started.append(
                start_member(tmp_path, postgres_dsn, broker_id, http=True, environment=TWO_WORKERS)
            )
        a, b = started
        assert call(a, "PUT", f"/api/vhosts/{urllib.parse.quote(VHOSTS[1], safe='')}")[0] == 201
        published = {vhost: _publish(a, vhost) for vhost in VHOSTS}
        status, listed = call(b, "GET", "/api/cluster/brokers")
        assert status == 200 and isinstance(listed, list)
        assert [row["broker_id"] for row in listed] == ["A", "B"]
        assert {row["broker_id"]: row["messages"] for row in listed}["A"] == 2 * MESSAGES

        a.kill()
        wait_until(lambda: "takeover complete" in b.log(), "B took A over", timeout=30)
        wait_until(lambda: "takeover adopted" in b.log(), "B's other worker adopted", timeout=30)

        for vhost in VHOSTS:
            received = _consume(b, vhost)
            assert received == [(body, True) for body in published[vhost]]
        status, listed = call(b, "GET", "/api/cluster/brokers/A")
        assert status == 200 and isinstance(listed, dict)
        assert (listed["state"], listed["taken_over_by"]) == ("FAILOVER_COMPLETE", "B")
    finally:
        for broker in started:
            broker.stop()


def _own_state(broker: RunningBroker, broker_id: str) -> object:
    status, row = call(broker, "GET", f"/api/cluster/brokers/{broker_id}")
    assert status == 200 and isinstance(row, dict), row
    return row["state"]


def _refused(broker: RunningBroker, vhost: str) -> bool:
    try:
        connect(broker, vhost=vhost).close()
    except pika.exceptions.AMQPConnectionError:
        return True
    return False


def test_a_quiesced_member_with_workers_counts_every_workers_clients_and_stays_quiesced(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """MQ 4.1 HA guide: quiesce bkr: "The broker will stop accepting new connections; existing
    connections will continue to operate"; Example 1 shows QUIESCING, then QUIESCE_COMPLETE
    once no client is connected. With two workers, a client of either keeps the member
    QUIESCING; a worker killed (SIGKILL) while the member is quiesced, worker 1 and then worker
    0, is started again by the supervisor quiesced: it refuses new connections too, until
    unquiesce bkr."""
    a = start_member(tmp_path, postgres_dsn, "A", http=True, environment=TWO_WORKERS)
    try:
        assert call(a, "PUT", f"/api/vhosts/{urllib.parse.quote(VHOSTS[1], safe='')}")[0] == 201
        clients = [connect(a, vhost=vhost) for vhost in VHOSTS]  # one on each worker
        status, row = call(a, "PUT", "/api/cluster/brokers/A/quiesce")
        assert status == 200 and isinstance(row, dict) and row["state"] == "QUIESCING"
        assert _refused(a, VHOSTS[0]) and _refused(a, VHOSTS[1])

        clients[0].close()  # worker 0's client: worker 1's is still open
        time.sleep(2.5)  # more than two rounds of the member's check (one second each)
        assert _own_state(a, "A") == "QUIESCING"
        clients[1].close()
        wait_until(lambda: _own_state(a, "A") == "QUIESCE_COMPLETE", "quiesce complete")

        before = worker_pids(a.log())
        os.kill(before[1], signal.SIGKILL)
        wait_until(lambda: worker_pids(a.log())[1] != before[1], "worker 1 started again")
        assert "started again quiesced" in a.log()
        # The listening socket is shared: each attempt may reach either worker's accept.
        assert all(_refused(a, VHOSTS[1]) for _ in range(10))
        assert _own_state(a, "A") == "QUIESCE_COMPLETE"

        # Worker 0 too, the member's voice: it starts again quiesced, and says so.
        before = worker_pids(a.log())
        os.kill(before[0], signal.SIGKILL)
        wait_until(lambda: worker_pids(a.log())[0] != before[0], "worker 0 started again")
        assert a.log().count("started again quiesced") == 2
        assert all(_refused(a, VHOSTS[0]) for _ in range(10))
        wait_until(lambda: _own_state(a, "A") == "QUIESCE_COMPLETE", "worker 0 says so")

        status, row = call(a, "PUT", "/api/cluster/brokers/A/unquiesce")
        assert status == 200 and isinstance(row, dict) and row["state"] == "OPERATING"
        for _ in range(5):
            for vhost in VHOSTS:
                connect(a, vhost=vhost).close()
    finally:
        a.stop()
