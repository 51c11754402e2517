"""Durability policies against a real PostgreSQL primary and a streaming standby started by the
test (the Apache Qpid broker manual, "Durability Guarantees": "<master sync policy>,<replica sync
policy>,<replica acknowledgement policy>"). The primary names the standby synchronous
(synchronous_standby_names = '*'), as an operator does for a policy with replica
acknowledgements; what the policy decides is whether a confirm waits for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.brokerproc import RunningBroker, confirming_channel, connect, start_broker, wait_until
from tests.pgserver import start_throwaway_server
from tests.pgthrowaway import ThrowawayServer, find_postgres_binaries

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def replicated() -> Iterator[tuple[ThrowawayServer, ThrowawayServer]]:
    """A primary and its synchronous streaming standby, both running."""
    primary = start_throwaway_server()
    standby: ThrowawayServer | None = None
    try:
        primary.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.query("SELECT pg_reload_conf()")
        standby = ThrowawayServer(find_postgres_binaries(), primary=primary)
        standby.start()
        wait_until(
            lambda: (
                primary.query("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
                == 1
            ),
            "the standby to stream as the primary's synchronous standby",
        )
        yield primary, standby
    finally:
        # The primary first: it hands its last WAL to the standby as it stops.
        for server in (primary, standby):
            if server is not None:
                try:
                    server.stop()
                finally:
                    server.remove()


def _broker(workdir: Path, server: ThrowawayServer, durability: str) -> RunningBroker:
    return start_broker(
        workdir,
        environment={
            "BATONMQ__PERSIST__STORE": "postgres",
            "BATONMQ__PERSIST__POSTGRES__DSN": server.admin_dsn,
            "BATONMQ__PERSIST__POSTGRES__DURABILITY": durability,
        },
    )


class _Publisher(threading.Thread):
    """Publishes one persistent message with confirms on a connection of its own; `confirmed`
    is set once the broker confirmed it."""

    def __init__(self, broker: RunningBroker, body: bytes) -> None:
        super().__init__(daemon=True)
        self.broker, self.body = broker, body
        self.confirmed = threading.Event()

    def run(self) -> None:
        with confirming_channel(self.broker) as channel:
            channel.basic_publish("", "orders", self.body, PERSISTENT)
            self.confirmed.set()


def _declare(broker: RunningBroker) -> None:
    with confirming_channel(broker) as channel:
        channel.queue_declare("orders", durable=True)


def _bodies(broker: RunningBroker) -> list[bytes]:
    connection = connect(broker)
    try:
        channel = connection.channel()
        bodies = []
        while (got := channel.basic_get("orders", auto_ack=True))[0] is not None:
            bodies.append(got[2])
        return bodies
    finally:
        connection.close()


def test_with_replica_acknowledgement_a_confirm_waits_until_the_standby_has_the_message(
    tmp_path: Path, replicated: tuple[ThrowawayServer, ThrowawayServer]
) -> None:
    """NO_SYNC,SYNC,ALL (synchronous_commit on): "Before the commit returns to the client, the
    transaction will be written/sync'd to the Master's disk ... and [the] replica(s) will have
    acknowledged" it. With the standby down, a confirm does not come; once it is back, it does."""
    primary, standby = replicated
    broker = _broker(tmp_path, primary, "NO_SYNC,SYNC,ALL")
    assert "synchronous_commit=on" in broker.log()
    _declare(broker)

    standby.stop()
    publisher = _Publisher(broker, b"waits for the standby")
    publisher.start()
    assert not publisher.confirmed.wait(3), "confirmed while the synchronous standby was down"
    standby.start()
    assert publisher.confirmed.wait(60), "not confirmed once the standby was back"
    assert _bodies(broker) == [b"waits for the standby"]
    broker.stop()


def test_without_replica_acknowledgement_a_confirm_does_not_wait_for_the_standby(
    tmp_path: Path, replicated: tuple[ThrowawayServer, ThrowawayServer]
) -> None:
    """NO_SYNC,NO_SYNC,NONE with coalescing-sync (synchronous_commit local): written and flushed
    on the primary; the replicas "write and sync the transaction to their disk at a point in the
    future" — so a confirm comes while the standby is down."""
    primary, standby = replicated
    broker = _broker(tmp_path, primary, "NO_SYNC,NO_SYNC,NONE")
    assert "synchronous_commit=local" in broker.log()
    _declare(broker)

    standby.stop()
    publisher = _Publisher(broker, b"primary only")
    publisher.start()
    assert publisher.confirmed.wait(30), "a confirm waited for the standby"
    broker.stop()


def test_every_confirmed_message_survives_the_loss_of_the_primary_on_the_promoted_standby(
    tmp_path: Path, replicated: tuple[ThrowawayServer, ThrowawayServer]
) -> None:
    """What replica acknowledgement is for: the primary is lost (an immediate stop, as a crash),
    the standby is promoted, and a broker started on it finds every message that was confirmed."""
    primary, standby = replicated
    broker = _broker(tmp_path / "before", primary, "NO_SYNC,SYNC,ALL")
    with confirming_channel(broker) as channel:
        channel.queue_declare("orders", durable=True)
        for number in range(200):
            channel.basic_publish("", "orders", b"%d" % number, PERSISTENT)
    broker.kill()
    primary.kill()

    standby.promote()
    # The operator's part of a failover: the new primary has no standby to wait for (yet).
    standby.query("ALTER SYSTEM RESET synchronous_standby_names")
    standby.query("SELECT pg_reload_conf()")
    survivor = _broker(tmp_path / "after", standby, "NO_SYNC,SYNC,ALL")
    assert _bodies(survivor) == [b"%d" % number for number in range(200)]
    survivor.stop()


def test_a_policy_asking_for_standbys_on_a_server_naming_none_is_warned_about(
    tmp_path: Path,
) -> None:
    """PostgreSQL waits for no standby when synchronous_standby_names is empty, whatever
    synchronous_commit says: the broker tells the operator at start (and still starts)."""
    server = start_throwaway_server()
    try:
        broker = _broker(tmp_path, server, "NO_SYNC,NO_SYNC,SIMPLE_MAJORITY")
        log = broker.log()
        assert "synchronous_standby_names is empty: commits wait for no standby" in log, log
        assert "logcode=BMQ-4006" in log
        assert "synchronous_commit=remote_write" in log
        broker.stop()
    finally:
        server.stop()
        server.remove()
