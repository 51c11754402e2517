"""The shared-nothing prototype end to end: the two-queue many-clients row on two BatonMQ
processes, each owning one queue (benchmarks/brokers/shards.py), with real load-generator
processes over real sockets. It proves the target measures something real (both processes
move messages, their CPU is counted); no speed is asserted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from benchmarks.brokers.shards import BatonMQShards
from benchmarks.procstats import cpu_seconds
from benchmarks.runner import RunSettings, run_row
from benchmarks.workloads import select

SETTINGS = RunSettings(duration=0.5, warmup=0.2)


@pytest.fixture(scope="module")
def shards() -> Iterator[BatonMQShards]:
    with BatonMQShards(2) as broker:
        yield broker
    assert broker.log_problems == (), "a shard's log showed errors or tracebacks"


def test_the_two_queue_row_moves_messages_through_both_processes(shards: BatonMQShards) -> None:
    (row,) = select(["clients-4x4-1KiB-2q"], quick=False)
    before = [cpu_seconds(shard.measured_pids()) for shard in shards.shards]

    measurement = run_row(row, shards, SETTINGS, "bench.shards")

    assert measurement.error is None
    assert measurement.delivered > 0
    assert measurement.cpu_seconds is not None and measurement.cpu_seconds > 0
    after = [cpu_seconds(shard.measured_pids()) for shard in shards.shards]
    assert all(used > was for used, was in zip(after, before, strict=True)), (
        "each shard owns a queue, so each must have worked"
    )


def test_a_row_through_an_exchange_is_reported_as_failed_not_run(shards: BatonMQShards) -> None:
    (fanout,) = select(["fanout10-128B"], quick=False)

    measurement = run_row(fanout, shards, SETTINGS, "bench.shards-fanout")

    assert measurement.error is not None
    assert "cannot route through an exchange" in measurement.error
    assert shards.alive()
