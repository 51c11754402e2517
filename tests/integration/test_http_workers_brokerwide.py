"""What the management plane says of the broker's processes, with `[broker] workers = 2`: one
broker, as a RabbitMQ node is one node on all its cores, whichever worker a request reaches.
The process figures of /metrics, the recent log and its level, and the metrics topic are the
whole broker's, not the answering (or publishing) worker's.

Each check is repeated over several HTTP connections, so that both workers take some of them
(the kernel spreads the accepted connections over the workers that accept on the socket)."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from batonmq.engine.memory import resident_bytes
from batonmq.management.processes import process_figures
from tests.brokerproc import (
    RunningBroker,
    connect,
    start_broker,
    vhost_of_each_worker,
    wait_until,
    worker_pids,
)
from tests.httpapi import call

pytestmark = pytest.mark.integration

WORKERS = 2
#: A virtual host owned by each worker ("/" is one of them).
VHOSTS = vhost_of_each_worker(WORKERS)
#: Requests per check: enough that both workers answer some.
ATTEMPTS = 6
METRICS = "amq.batonmq.metrics"
OPENED = 'msg="connection opened"'
#: Metrics snapshots of the broker to wait for.
SNAPSHOTS = 3


@pytest.fixture
def broker(tmp_path: Path, postgres_dsn: str) -> Iterator[RunningBroker]:
    """Two workers with the API on, metrics snapshots every second, and a virtual host of each
    worker (created over the API, which gives its creator, guest, every permission in it)."""
    environment = {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
        "BATONMQ__BROKER__WORKERS": str(WORKERS),
        "BATONMQ__METRICS__TOPIC__INTERVAL": "1",
    }
    with start_broker(tmp_path, http=True, environment=environment) as running:
        for vhost in VHOSTS.values():
            if vhost != "/":
                path = f"/api/vhosts/{urllib.parse.quote(vhost, safe='')}"
                assert call(running, "PUT", path)[0] == 201
        yield running


def _open_and_close(broker: RunningBroker, vhost: str) -> None:
    """A connection to `vhost`, served (and logged as opened) by the worker that owns it."""
    with connect(broker, vhost=vhost):
        pass


def _all_running(broker: RunningBroker) -> bool:
    """Whether /api/nodes says every worker runs."""
    _, nodes = call(broker, "GET", "/api/nodes")
    assert isinstance(nodes, list)
    return all(worker["running"] for worker in nodes[0]["workers"])


def _cpu_seconds(pid: int) -> float:
    """The user and system CPU time of `pid` so far, from /proc (proc(5): utime and stime,
    fields 14 and 15 of /proc/<pid>/stat, in clock ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(broker: RunningBroker) -> dict[str, float]:
    url = f"http://127.0.0.1:{broker.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("process_"):
            [sample] = family.samples  # each series once
            samples[sample.name] = sample.value
    return samples


def test_process_metrics_are_the_supervisors_and_every_workers_summed(
    broker: RunningBroker,
) -> None:
    """prometheus-client's standard process collector (which RabbitMQ's plugin serves too)
    describes one node: with workers, the CPU seconds, resident memory and open files of the
    supervisor and every worker summed, and the start time the broker's (its supervisor's)."""
    supervisor = broker.process.pid if broker.process is not None else 0
    [start] = [
        figure.value
        for figure in process_figures(supervisor)
        if figure.sample == "process_start_time_seconds"
    ]
    for _ in range(ATTEMPTS):
        pids = [supervisor, *worker_pids(broker.log()).values()]
        cpu_before = sum(_cpu_seconds(pid) for pid in pids)
        largest = max(resident_bytes(pid) for pid in pids)
        samples = _scrape(broker)
        # Each process's CPU is whole clock ticks (10 ms) as a float; the broker sums them in its
        # own order, so the two sums may differ in the last bit, never by a tick.
        assert samples["process_cpu_seconds_total"] >= cpu_before - 1e-9
        assert samples["process_resident_memory_bytes"] > largest
        assert samples["process_open_fds"] > max(len(os.listdir(f"/proc/{p}/fd")) for p in pids)
        assert samples["process_start_time_seconds"] == start


def test_the_log_holds_every_workers_lines_each_naming_its_worker(broker: RunningBroker) -> None:
    """The recent log of a broker with workers is one log: a line a worker logged is in the
    answer whichever worker takes the request, in time order, with the worker that logged it."""
    for vhost in VHOSTS.values():
        _open_and_close(broker, vhost)
    for _ in range(ATTEMPTS):
        status, records = call(broker, "GET", "/api/broker/log?lines=1000")
        assert status == 200 and isinstance(records, list)
        opened = {
            record["vhost"]: record["worker"]
            for record in records
            if record["msg"] == "connection opened"
        }
        assert opened == {vhost: owner for owner, vhost in VHOSTS.items()}
        stamps = [record["ts"] for record in records]
        assert stamps == sorted(stamps)


def test_a_level_set_through_one_worker_is_every_workers_and_a_restarted_ones(
    broker: RunningBroker,
) -> None:
    """PUT /api/broker/log-level changes the broker's level "and all higher categories" are
    logged (MQ 3.5 admin guide, Table 2-7): whichever worker takes the request, every worker
    logs at the new level, and so does a worker the supervisor starts again after a crash."""
    assert call(broker, "PUT", "/api/broker/log-level", {"level": "warning"})[0] == 204
    for _ in range(ATTEMPTS):
        assert call(broker, "GET", "/api/broker/log-level") == (200, {"level": "warning"})
    before = broker.log().count(OPENED)
    for vhost in VHOSTS.values():
        _open_and_close(broker, vhost)
    victim = 1
    killed = worker_pids(broker.log())[victim]
    os.kill(killed, signal.SIGKILL)
    # Its "worker started" line is below the level: the supervisor's warning says it ended.
    wait_until(lambda: "worker died; restarting" in broker.log(), "the supervisor to see it")
    wait_until(lambda: _all_running(broker), "the restarted worker to serve")
    for _ in range(ATTEMPTS):
        assert call(broker, "GET", "/api/broker/log-level") == (200, {"level": "warning"})
    _open_and_close(broker, VHOSTS[victim])
    assert broker.log().count(OPENED) == before  # info: below the level, in every worker


def test_the_metrics_topic_publishes_the_whole_broker_once_per_interval(
    broker: RunningBroker,
) -> None:
    """Sun MQ 3.5 admin guide, "Metrics Message Producer": the broker's metrics go to the
    metrics topic at imq.metrics.topic.interval. One broker, one snapshot of each kind per
    interval, with every worker's queues and connections."""
    for owner, vhost in VHOSTS.items():
        with connect(broker, vhost=vhost) as connection:
            connection.channel().queue_declare(f"w{owner}", durable=True)
    with connect(broker) as connection:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        for key in ("broker", "queue.#"):
            channel.queue_bind(queue, METRICS, routing_key=key)
        watched_at = time.monotonic()
        deliveries: list[tuple[str, dict[str, object]]] = []
        while sum(key == "broker" for key, _snapshot in deliveries) < SNAPSHOTS:
            assert time.monotonic() < watched_at + 30, f"fewer than {SNAPSHOTS} in 30 s"
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                time.sleep(0.05)
            else:
                deliveries.append((method.routing_key, json.loads(body)))
        elapsed = time.monotonic() - watched_at
    # The first may come at once, each next one an interval (1 s) later: N per interval would
    # have them all in about one second.
    assert elapsed > SNAPSHOTS - 1.5
    for key, snapshot in deliveries:
        if key == "broker":
            assert snapshot["queues"] >= 3  # w0, w1 and the watcher
            assert snapshot["connections"] == 1
    for owner, vhost in VHOSTS.items():
        named = [s for key, s in deliveries if key == f"queue.{vhost}.w{owner}"]
        assert SNAPSHOTS - 1 <= len(named) <= SNAPSHOTS
