"""--rabbitmq-url end to end: the harness measures a broker it did not start, through
`RunningRabbitMQ`. A BatonMQ started here stands for the running RabbitMQ (both speak AMQP
0-9-1; what is tested is the harness, not the broker). The Hardening requirements: "`python -m
benchmarks.compare` can target an already running RabbitMQ (`--rabbitmq-url`) as well as start its
own." """

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from benchmarks.brokers.base import HOST, BrokerError
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.brokers.rabbitmq import RunningRabbitMQ
from benchmarks.loadgen.client import Endpoint
from benchmarks.procstats import listening_pids
from benchmarks.runner import UNMEASURED, RunSettings, run_row
from benchmarks.workloads import matrix

SETTINGS = RunSettings(duration=0.5, warmup=0.2)


@pytest.fixture(scope="module")
def running() -> Iterator[BatonMQ]:
    with BatonMQ() as broker:
        yield broker


def _row(name: str):
    (workload,) = [workload for workload in matrix() if workload.name == name]
    return workload


def test_its_processes_are_found_by_the_port_it_listens_on(running: BatonMQ) -> None:
    broker = RunningRabbitMQ(Endpoint.from_url(f"amqp://guest:guest@{HOST}:{running.port}/%2F"))

    broker.start()

    assert running.process is not None
    assert running.process.pid in broker.measured_pids()
    assert broker.alive()


def test_a_row_on_it_measures_its_cpu_and_memory(running: BatonMQ) -> None:
    broker = RunningRabbitMQ(Endpoint(HOST, running.port))
    broker.start()

    measurement = run_row(_row("transient-1x1-128B"), broker, SETTINGS, "bench.running")

    assert measurement.error is None
    assert measurement.delivered > 0
    assert measurement.cpu_seconds is not None
    assert measurement.peak_rss_bytes
    assert UNMEASURED not in measurement.notes


def test_without_its_processes_a_row_says_cpu_and_memory_were_not_measured(
    running: BatonMQ,
) -> None:
    broker = RunningRabbitMQ(Endpoint(HOST, running.port))
    broker.start()
    broker.pids = []  # as for a broker on another machine, or another user's

    measurement = run_row(_row("transient-1x1-128B"), broker, SETTINGS, "bench.elsewhere")
    memory = run_row(
        replace(_row("memory-1M"), messages=1000), broker, SETTINGS, "bench.elsewhere-memory"
    )

    assert measurement.error is None
    assert measurement.delivered > 0
    assert (measurement.cpu_seconds, measurement.peak_rss_bytes) == (None, None)
    assert measurement.notes == [UNMEASURED]
    assert memory.error == f"RuntimeError: a memory row needs the broker's processes: {UNMEASURED}"


def test_a_host_of_another_machine_has_no_processes_here(running: BatonMQ) -> None:
    assert listening_pids("192.0.2.1", running.port) == []  # TEST-NET-1, RFC 5737


@pytest.mark.parametrize(
    ("url", "says"),
    [
        pytest.param("amqp://guest:wrong@{host}:{port}/%2F", "as 'guest'", id="wrong-password"),
        pytest.param("amqp://guest:guest@{host}:{port}/nowhere", "vhost 'nowhere'", id="vhost"),
    ],
)
def test_a_url_it_cannot_log_in_with_stops_the_harness_from_using_it(
    url: str, says: str, running: BatonMQ
) -> None:
    broker = RunningRabbitMQ(Endpoint.from_url(url.format(host=HOST, port=running.port)))

    with pytest.raises(BrokerError, match=says):
        broker.start()
