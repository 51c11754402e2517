"""The `batonmq-w2` and `batonmq-pg-w2` targets end to end: the two-queue many-clients row on
BatonMQ with `[broker] workers = 2` (benchmarks/brokers/workers.py) on SQLite and on
PostgreSQL, each queue in a virtual host of a
different worker, with real load-generator processes over real sockets. It proves the target
measures something real (both workers move messages, their CPU is counted); no speed is
asserted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from benchmarks.brokers.postgres import BenchPostgres
from benchmarks.brokers.spread import BatonMQSpread
from benchmarks.brokers.workers import BatonMQWorkers
from benchmarks.procstats import cpu_seconds, process_tree
from benchmarks.runner import RunSettings, run_row
from benchmarks.workloads import select

SETTINGS = RunSettings(duration=0.5, warmup=0.2)


@pytest.fixture(params=["sqlite", "postgres"])
def workers(request: pytest.FixtureRequest) -> Iterator[BatonMQWorkers]:
    postgres = (
        None
        if request.param == "sqlite"
        else BenchPostgres(request.getfixturevalue("postgres_throwaway_server"))
    )
    with BatonMQWorkers(2, postgres) as broker:
        yield broker
    assert broker.log_problems == (), "a worker's log showed errors or tracebacks"


def test_the_two_queue_row_moves_messages_through_both_workers(workers: BatonMQWorkers) -> None:
    (row,) = select(["clients-4x4-1KiB-2q"], quick=False)
    children = [pid for pid in process_tree(workers.process.pid) if pid != workers.process.pid]
    assert len(children) == 2
    before = [cpu_seconds([pid]) for pid in children]

    measurement = run_row(row, workers, SETTINGS, "bench.workers")

    assert measurement.error is None
    assert measurement.delivered > 0
    assert measurement.cpu_seconds is not None and measurement.cpu_seconds > 0
    after = [cpu_seconds([pid]) for pid in children]
    assert all(used > was for used, was in zip(after, before, strict=True)), (
        "each worker owns a queue's virtual host, so each must have worked"
    )

    (fanout,) = select(["fanout10-128B"], quick=False)
    refused = run_row(fanout, workers, SETTINGS, "bench.workers-fanout")

    assert refused.error is not None
    assert "cannot route through an exchange" in refused.error
    assert workers.alive()


def test_the_spread_target_moves_messages_across_its_workers() -> None:
    """`batonmq-s2` (benchmarks/brokers/spread.py): the two-queue row on one virtual host spread
    over two workers, each running one of its queues, with clients wherever the kernel put
    them. Both workers work, and the messages reach the consumers, across workers when a
    client and its queue live apart."""
    (row,) = select(["clients-4x4-1KiB-2q"], quick=False)
    with BatonMQSpread(2) as spread:
        assert spread.process is not None
        children = [pid for pid in process_tree(spread.process.pid) if pid != spread.process.pid]
        assert len(children) == 2
        before = [cpu_seconds([pid]) for pid in children]

        measurement = run_row(row, spread, SETTINGS, "bench.spread")

        assert measurement.error is None
        assert measurement.delivered > 0
        after = [cpu_seconds([pid]) for pid in children]
        assert all(used > was for used, was in zip(after, before, strict=True))
    assert spread.log_problems == (), "a worker's log showed errors or tracebacks"
