"""A real broker per test, on a free loopback port; or, with --amqp-url, an external one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokerproc import RunningBroker, external_broker, start_broker


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> RunningBroker:
    """The broker under test: the --amqp-url one if given, else a BatonMQ of this test's own."""
    url = request.config.getoption("--amqp-url")
    if url:
        return external_broker(url)
    running: RunningBroker = request.getfixturevalue("batonmq")
    return running


@pytest.fixture
def batonmq(tmp_path: Path) -> Iterator[RunningBroker]:
    """Always a BatonMQ process of this test's own, even with --amqp-url: for tests that
    signal or measure the process, and for behaviour where BatonMQ follows the AMQP 0-9-1
    specification and RabbitMQ does not (each such test says where they differ)."""
    with start_broker(tmp_path) as running:
        yield running


@pytest.fixture(params=[1, 2], ids=["one-process", "two-workers"])
def workers_environment(request: pytest.FixtureRequest) -> dict[str, str]:
    """The configuration (as environment variables) of a broker of one process, and of one with
    two worker processes (README, "Worker processes") on a fresh PostgreSQL database: for the
    tests that hold for both."""
    if request.param == 1:
        return {}
    dsn: str = request.getfixturevalue("postgres_dsn")
    return {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": dsn,
        "BATONMQ__BROKER__WORKERS": str(request.param),
    }
