"""The loss checker run against a real broker under a nemesis: SIGKILL and restart, SIGSTOP and
SIGCONT, clean restarts, and (on PostgreSQL) restarts of the database. Every confirmed message
is delivered, nothing unpublished or nacked is, and a message delivered twice is flagged
`redelivered` the second time (tests/losscheck.py says why each rule holds).

The checker is itself proven: on the deliberately lossy setting (a transient queue, whose
confirmed messages a crash takes with it) it reports the loss."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.brokerproc import BrokerLife
from tests.losscheck import Report, Workload, analyse, check
from tests.pgthrowaway import ThrowawayServer

pytestmark = pytest.mark.integration

#: Seconds of faults per run.
DURATION = 20.0


def broker_faults(life: BrokerLife) -> list[Callable[[], str]]:
    def kill() -> str:
        life.restart(kill=True)
        return "SIGKILL and restart"

    def restart() -> str:
        life.restart(kill=False)
        return "clean restart"

    def pause() -> str:
        """SIGSTOP the whole broker (with workers, each of its processes) for 2 s, then
        SIGCONT it."""
        life.current.pause()
        time.sleep(2.0)
        life.current.resume()
        return "paused 2.0 s"

    return [kill, restart, pause]


def run(life: BrokerLife, faults: list[Callable[[], str]], workload: Workload) -> Report:
    seed = random.randrange(1 << 30)
    started = time.monotonic()
    history = asyncio.run(
        check(lambda: life.current.url, faults, duration=DURATION, workload=workload, seed=seed)
    )
    report = analyse(history)
    print(f"seed {seed}, {time.monotonic() - started:.0f} s: {report}")
    assert report.faults, "the nemesis did nothing"
    assert report.confirmed > 500, report
    return report


@pytest.mark.timeout(300)
def test_nothing_confirmed_is_lost_on_sqlite(tmp_path: Path) -> None:
    life = BrokerLife(tmp_path, {})
    try:
        report = run(life, broker_faults(life), Workload())
    finally:
        life.stop()

    assert report.problems() == [], report


@pytest.mark.timeout(300)
@pytest.mark.expected_log_errors(
    r"store \w+ failed", reason="the nemesis restarts the broker's PostgreSQL under it"
)
def test_nothing_confirmed_is_lost_on_postgresql(
    tmp_path: Path, postgres_throwaway_server: ThrowawayServer
) -> None:
    server = postgres_throwaway_server
    life = BrokerLife(
        tmp_path,
        {
            "BATONMQ__PERSIST__STORE": "postgres",
            "BATONMQ__PERSIST__POSTGRES__DSN": server.admin_dsn,
        },
    )

    def restart_postgres() -> str:
        server.stop()
        time.sleep(1.0)
        server.start()
        return "PostgreSQL restart"

    try:
        report = run(life, [*broker_faults(life), restart_postgres], Workload())
    finally:
        if not server.running:
            server.start()
        life.stop()

    assert report.problems() == [], report


@pytest.mark.timeout(300)
def test_the_checker_catches_a_broker_that_loses_confirmed_messages(tmp_path: Path) -> None:
    """A transient queue is the broker keeping confirmed messages in memory only: SIGKILL takes
    them, and the checker must say so."""
    life = BrokerLife(tmp_path, {})

    def kill() -> str:
        life.restart(kill=True)
        return "SIGKILL and restart"

    try:
        # A slow consumer: the queue holds a backlog whenever the broker is killed.
        report = run(life, [kill], Workload(durable=False, consumer_delay=0.002))
    finally:
        life.stop()

    # Loss, and nothing else: no message appears from nowhere or twice without the flag.
    assert report.lost, report
    assert report.problems() == [f"{len(report.lost)} lost, e.g. {report.lost[:5]}"], report
