"""A real broker per test, on a free loopback port; or, with --amqp-url, an external one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokerproc import RunningBroker, external_broker, start_broker


@pytest.fixture
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    url = request.config.getoption("--amqp-url")
    if url:
        yield external_broker(url)
        return
    running = start_broker(tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def broker_process(request: pytest.FixtureRequest, broker: RunningBroker) -> RunningBroker:
    """The broker, for tests that signal or restart it: those need a process of their own."""
    if broker.process is None:
        pytest.skip("needs a broker process of its own, not the external --amqp-url broker")
    return broker


@pytest.fixture
def batonmq(tmp_path: Path) -> Iterator[RunningBroker]:
    """Always a BatonMQ process, even with --amqp-url: for behaviour where BatonMQ follows the
    AMQP 0-9-1 specification and RabbitMQ does not (each such test says where they differ)."""
    running = start_broker(tmp_path)
    try:
        yield running
    finally:
        running.stop()
