"""`batonctl db remove bkr` and `batonctl db upgrade hastore` as an operator runs them: a real
batonctl process, real broker processes and a real PostgreSQL database, pika clients.

MQ 4.1 HA guide, Table 8 (imqdbmgr): "remove bkr: Remove broker from HA shared store. The broker
must not be running." and "upgrade hastore: Upgrade standalone store to high-availability (HA)
shared store"; Table 9: "-n brokerID: Broker identifier of broker to be removed from HA shared
store"; "To Remove a Broker from an HA Cluster: 1. Make sure the broker is not running. ...
2. Remove the broker from the cluster with the command imqdbmgr remove bkr".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pika
import pytest

from tests.brokerproc import RunningBroker, confirming_channel, start_broker, wait_until
from tests.integration.test_batonctl_db import fails, succeeds
from tests.members import start_member

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)
QUEUE = "orders"
SHARED_SCHEMA = "batonmq_c_test"

StartMember = Callable[[str], RunningBroker]


@pytest.fixture
def member(tmp_path: Path, postgres_dsn: str) -> Iterator[StartMember]:
    """`member(broker_id)`: a member of cluster "test"; all stopped before the database goes."""
    started: list[RunningBroker] = []

    def start(broker_id: str) -> RunningBroker:
        started.append(start_member(tmp_path, postgres_dsn, broker_id))
        return started[-1]

    try:
        yield start
    finally:
        for broker in started:
            broker.stop()


def operator(dsn: str, brokerid: str = "admin") -> dict[str, str]:
    """The configuration an operator of cluster "test" runs batonctl with."""
    return {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": dsn,
        "BATONMQ__CLUSTER__HA": "true",
        "BATONMQ__CLUSTER__CLUSTERID": "test",
        "BATONMQ__CLUSTER__BROKERID": brokerid,
    }


def recorded(dsn: str, schema: str = SHARED_SCHEMA) -> list[str]:
    """The broker ids the store in `schema` records: a broker with several workers once, as the
    member its workers' store identities belong to."""

    async def read() -> list[str]:
        connection = await asyncpg.connect(dsn)
        try:
            rows = await connection.fetch(
                f"SELECT DISTINCT COALESCE(member_of, broker_id) FROM {schema}.brokers ORDER BY 1"
            )
        finally:
            await connection.close()
        return [row[0] for row in rows]

    return asyncio.run(read())


def publish(channel: pika.adapters.blocking_connection.BlockingChannel, count: int) -> None:
    channel.queue_declare(QUEUE, durable=True)
    for number in range(count):
        channel.basic_publish("", QUEUE, str(number).encode(), PERSISTENT, mandatory=True)


def test_remove_bkr_is_refused_while_the_broker_runs_or_owns_records(
    tmp_path: Path, postgres_dsn: str, member: StartMember
) -> None:
    """A running member is refused (its lease runs); a killed member holding messages is refused
    while it owns them; once a survivor has taken it over, it is removed (asked first: without
    -y and without a terminal, nothing is removed), and the survivor serves its messages."""
    environment = operator(postgres_dsn)
    a = member("A")
    with confirming_channel(a) as channel:
        publish(channel, 20)

    refused = fails(environment, tmp_path, "db", "remove", "bkr", "-n", "A", "-y")
    assert refused.startswith("batonctl: cannot remove broker 'A': broker 'A' is running: its ")
    refused = fails(environment, tmp_path, "db", "remove", "bkr", "-n", "Z", "-y")
    assert refused.startswith("batonctl: cannot remove broker 'Z': there is no broker 'Z' in ")

    a.kill()
    wait_until(
        lambda: "is running" not in fails(environment, tmp_path, "db", "remove", "bkr", "-n", "A"),
        "A's lease ran out",
    )
    refused = fails(environment, tmp_path, "db", "remove", "bkr", "-n", "A", "-y")
    assert refused == (
        "batonctl: cannot remove broker 'A': broker 'A' still owns records (1 queues, "
        "20 messages, 20 entries): take it over first, or start it and let its clients empty "
        "it\n"
    )

    b = member("B")
    wait_until(lambda: "takeover complete" in b.log(), "B took A over")
    assert recorded(postgres_dsn) == ["A", "B"]
    unasked = fails(environment, tmp_path, "db", "remove", "bkr", "-n", "A")
    assert "no terminal to ask for confirmation on: give -y" in unasked
    assert recorded(postgres_dsn) == ["A", "B"]

    out = succeeds(environment, tmp_path, "db", "remove", "bkr", "-n", "A", "-y")

    assert out == "removed broker 'A' from the shared store (it was FAILOVER_COMPLETE)\n"
    assert recorded(postgres_dsn) == ["B"]
    with confirming_channel(b) as channel:
        declared = channel.queue_declare(QUEUE, durable=True, passive=True)
        assert declared.method.message_count == 20
    refused = fails(environment, tmp_path, "db", "remove", "bkr", "-n", "B", "-y")
    assert "broker 'B' is running" in refused


def test_upgrade_hastore_makes_a_standalone_store_the_clusters_shared_store(
    tmp_path: Path, postgres_dsn: str, member: StartMember
) -> None:
    """A standalone broker's PostgreSQL store, with confirmed persistent messages, becomes the
    shared store of cluster "test" owned by member A: refused on SQLite, without cluster.ha, and
    while the standalone broker runs; done once it is stopped; A starts on its messages, B joins
    empty, and the upgrade cannot be run twice."""
    standalone = {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
        "BATONMQ__BROKER__NAME": "orders-1",
    }
    ha = {**operator(postgres_dsn, "A"), "BATONMQ__BROKER__NAME": "orders-1"}
    broker = start_broker(tmp_path / "standalone", environment=standalone)
    with confirming_channel(broker) as channel:
        publish(channel, 50)

    on_sqlite = fails({}, tmp_path / "sqlite", "db", "upgrade", "hastore")
    assert on_sqlite == (
        "batonctl: cannot upgrade to the HA shared store: upgrade hastore works on an HA "
        "cluster's shared store, which is PostgreSQL (persist.store = postgres); this broker's "
        "store is sqlite, one broker's own\n"
    )
    not_ha = fails(standalone, tmp_path, "db", "upgrade", "hastore")
    assert "set cluster.ha = true, cluster.clusterid and cluster.brokerid first" in not_ha
    running = fails(ha, tmp_path, "db", "upgrade", "hastore")
    assert "broker 'orders-1' is running on " in running
    broker.stop()

    out = succeeds(ha, tmp_path, "db", "upgrade", "hastore")

    assert out.startswith(
        "upgraded the standalone store of broker 'orders-1' (schema batonmq_s_orders_1) to the "
        "shared store of HA cluster 'test' (schema batonmq_c_test): "
    )
    assert out.endswith(" records now owned by member 'A'\n")
    assert recorded(postgres_dsn) == ["A"]
    a = member("A")
    b = member("B")
    with confirming_channel(a) as channel:
        declared = channel.queue_declare(QUEUE, durable=True, passive=True)
        assert declared.method.message_count == 50
    with confirming_channel(b) as channel:
        assert channel.queue_declare(QUEUE, durable=True).method.message_count == 0
    again = fails(ha, tmp_path, "db", "upgrade", "hastore")
    assert "schema batonmq_s_orders_1 holds no BatonMQ store" in again
