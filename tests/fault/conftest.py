"""What the fault tests share: members of an HA cluster, real broker processes sharing one
PostgreSQL store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.brokerproc import RunningBroker, free_port, start_broker, wait_until

StartMember = Callable[[str], RunningBroker]


@pytest.fixture
def start_member(tmp_path: Path, postgres_dsn: str) -> Iterator[StartMember]:
    """`start(broker_id)`: a member of cluster "test" with heartbeats every second, thresholds
    2 (its data under tmp_path/broker_id); all are stopped before the database goes."""
    started: list[RunningBroker] = []

    def start(broker_id: str) -> RunningBroker:
        broker = start_broker(
            tmp_path / broker_id,
            environment={
                "BATONMQ__PERSIST__STORE": "postgres",
                "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
                "BATONMQ__CLUSTER__HA": "true",
                "BATONMQ__CLUSTER__CLUSTERID": "test",
                "BATONMQ__CLUSTER__BROKERID": broker_id,
                "BATONMQ__CLUSTER__HEARTBEAT__PORT": str(free_port()),
                "BATONMQ__CLUSTER__HEARTBEAT__INTERVAL": "1",
                "BATONMQ__CLUSTER__HEARTBEAT__THRESHOLD": "2",
                "BATONMQ__CLUSTER__MONITOR__INTERVAL": "1",
                "BATONMQ__CLUSTER__MONITOR__THRESHOLD": "2",
            },
        )
        started.append(broker)
        wait_until(lambda: "joined HA cluster" in broker.log(), f"{broker_id} joined")
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.stop()
