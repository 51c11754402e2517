"""A member sends heartbeats from the moment it joins: two members of one HA cluster in this
process, on PostgreSQL stores of the cluster's schema.

MQ 4.1 HA guide: "Brokers within an HA cluster periodically inform each other that they are
still in operation by exchanging heartbeat packets"; a broker whose heartbeats stop is suspect,
and failed when it "fails to update its state within the number of monitor intervals". A member
that joined just before the store went away could not read who its peers are until the store
came back: had it waited for its first round to send heartbeats, it would have been silent in
both places, and taken over while alive.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest

from batonmq import __version__
from batonmq.cluster.agreement import shared_settings
from batonmq.cluster.heartbeat import HeartbeatService
from batonmq.cluster.member import ClusterMember, advertised
from batonmq.config.cluster import ClusterConfig, HeartbeatConfig, MonitorConfig
from batonmq.config.schema import Config
from batonmq.engine.broker import Broker
from batonmq.store.postgres import PostgresStore

pytestmark = pytest.mark.integration

SCHEMA = "batonmq_c_join"
#: Seconds between a member's rounds (heartbeats every minute, the store read every minute):
#: far longer than the test waits for the first heartbeat.
ROUND = 60


def config(broker_id: str) -> Config:
    return Config(
        cluster=ClusterConfig(
            ha=True,
            clusterid="test",
            brokerid=broker_id,
            heartbeat=HeartbeatConfig(interval=ROUND),
            monitor=MonitorConfig(interval=ROUND),
        )
    )


@pytest.fixture
async def stores(postgres_dsn: str) -> AsyncIterator[dict[str, PostgresStore]]:
    opened = {
        broker_id: PostgresStore(postgres_dsn, broker_id=broker_id, schema=SCHEMA)
        for broker_id in ("A", "B")
    }
    for store in opened.values():
        await store.open()
    try:
        yield opened
    finally:
        for store in opened.values():
            await store.close()


async def test_a_member_heartbeats_the_members_listed_as_it_joins_before_its_first_round(
    stores: dict[str, PostgresStore],
) -> None:
    heard_by_a: list[str] = []
    a = HeartbeatService(cluster="test", broker="A", interval=ROUND, on_heartbeat=heard_by_a.append)
    address_a = await a.listen("127.0.0.1", 0)
    await stores["A"].register(
        "127.0.0.1:5672",
        advertised(*address_a),
        __version__,
        json.dumps(shared_settings(config("A")), sort_keys=True),
    )
    b = ClusterMember(config("B"), Broker(), stores["B"])
    try:
        await b.start(("127.0.0.1", 5673))
        deadline = time.monotonic() + ROUND / 6
        while not heard_by_a and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await b.close()
        await a.close()

    assert heard_by_a == ["B"]
