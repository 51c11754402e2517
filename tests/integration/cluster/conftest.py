"""Fixtures of the HA cluster tests: members started as real broker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.members import StartMember, members


@pytest.fixture
def member(tmp_path: Path, postgres_dsn: str) -> Iterator[StartMember]:
    """`member(broker_id)`: an HA member with its management API; all stopped before the
    database goes."""
    with members(tmp_path, postgres_dsn, http=True) as start:
        yield start
