"""Options and fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokerproc import BrokerLife, log_problems, take_started_brokers

#: PostgreSQL for the tests that need it: `postgres_server`, `postgres_dsn`.
pytest_plugins = ["tests.pgserver"]


@pytest.fixture(scope="session", autouse=True)
def compiled_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The Python processes the tests start (each broker, batonctl, clients and drivers) keep
    the bytecode they compile in one directory of this session's: a broker's modules are
    compiled at the first start, not at each of its thousands. PYTHONDONTWRITEBYTECODE (which
    keeps the source tree free of __pycache__) would make every process compile them all again;
    the cache is outside the tree, so the tree stays clean all the same."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        patch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("bytecode")))
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "expected_log_errors(*patterns, reason): regular expressions for the error records "
        "and tracebacks this test provokes in a broker's log on purpose, and why it does; "
        "any other fails the test",
    )


@pytest.fixture(autouse=True)
def broker_logs_are_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every broker a test started (start_broker, by any fixture or the test itself) is stopped
    when the test ends, and the test fails if the broker's log holds a traceback or an error
    record that the test did not declare with
    `@pytest.mark.expected_log_errors(regex, ..., reason="why the test provokes them")`:
    a crash that the client never sees cannot pass (hardening, "The test harness").

    Autouse, so it is set up before the test's other fixtures and torn down after them: the
    brokers they started have been stopped, and their logs are complete."""
    # Brokers started before this test's own fixtures (by a fixture of a wider scope) are
    # not this test's to stop.
    take_started_brokers()
    yield
    logs: dict[Path, str] = {}
    for started in take_started_brokers():
        started.stop()
        assert started.log_path is not None
        # A broker restarted on the same data appends to the same log: the latest text holds it all.
        logs[started.log_path] = started.last_log()
    markers = list(request.node.iter_markers("expected_log_errors"))
    for marker in markers:
        if not marker.kwargs.get("reason"):
            pytest.fail("expected_log_errors needs reason=: why the test provokes these errors")
    expected = [pattern for marker in markers for pattern in marker.args]
    reports = [
        f"{path}:\n" + "\n".join(problems)
        for path, text in logs.items()
        if (problems := log_problems(text, expected))
    ]
    if reports:
        pytest.fail(
            "the broker log holds tracebacks or error records this test did not expect "
            "(declare the ones it provokes on purpose with "
            "@pytest.mark.expected_log_errors(regex, ..., reason=...)):\n" + "\n".join(reports),
            pytrace=False,
        )


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
