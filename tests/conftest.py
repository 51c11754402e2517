"""Options and fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokerproc import BrokerLife

#: PostgreSQL for the tests that need it: `postgres_server`, `postgres_dsn`.
pytest_plugins = ["tests.pgserver"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--amqp-url",
        default=None,
        help=(
            "run the integration tests against this already-running broker (for example a "
            "RabbitMQ, to check that a test encodes RabbitMQ's behaviour) instead of starting "
            "BatonMQ"
        ),
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store_environment(request: pytest.FixtureRequest) -> dict[str, str]:
    """The configuration (as environment variables) of a broker on each store: the default
    SQLite file under its data directory, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return {"BATONMQ__PERSIST__STORE": "sqlite"}
    dsn: str = request.getfixturevalue("postgres_dsn")
    return {"BATONMQ__PERSIST__STORE": "postgres", "BATONMQ__PERSIST__POSTGRES__DSN": dsn}


@pytest.fixture
def broker_life(tmp_path: Path, store_environment: dict[str, str]) -> Iterator[BrokerLife]:
    """A BatonMQ process on each store, which the test may stop, kill and start again on the
    same data; whichever process is current is stopped at the end."""
    life = BrokerLife(tmp_path, store_environment)
    try:
        yield life
    finally:
        life.stop()
