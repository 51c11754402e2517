"""Fixtures of the HA cluster tests: members started as real broker processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.brokerproc import RunningBroker
from tests.members import start_member

StartMember = Callable[[str], RunningBroker]


@pytest.fixture
def member(tmp_path: Path, postgres_dsn: str) -> Iterator[StartMember]:
    """`member(broker_id)`: an HA member with its management API; all stopped before the
    database goes."""
    started: list[RunningBroker] = []

    def start(broker_id: str) -> RunningBroker:
        broker = start_member(tmp_path, postgres_dsn, broker_id, http=True)
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.stop()
