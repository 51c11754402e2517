"""What the fault tests share: members of an HA cluster, real broker processes sharing one
PostgreSQL store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.brokerproc import RunningBroker
from tests.members import start_member as start_ha_member

StartMember = Callable[[str], RunningBroker]


@pytest.fixture
def start_member(tmp_path: Path, postgres_dsn: str) -> Iterator[StartMember]:
    """`start(broker_id)`: a member of cluster "test" with heartbeats every second, thresholds
    2 (its data under tmp_path/broker_id); all are stopped before the database goes."""
    started: list[RunningBroker] = []

    def start(broker_id: str) -> RunningBroker:
        broker = start_ha_member(tmp_path, postgres_dsn, broker_id)
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.stop()
