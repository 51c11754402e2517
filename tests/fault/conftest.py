"""What the fault tests share: members of an HA cluster, real broker processes sharing one
PostgreSQL store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.members import StartMember, members


@pytest.fixture
def start_member(tmp_path: Path, postgres_dsn: str) -> Iterator[StartMember]:
    """`start(broker_id)`: a member of cluster "test" with heartbeats every second, thresholds
    2 (its data under tmp_path/broker_id); all are stopped before the database goes."""
    with members(tmp_path, postgres_dsn) as start:
        yield start
