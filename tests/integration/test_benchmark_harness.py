"""The benchmark harness end to end: `python -m benchmarks.compare` against real brokers.

The Benchmarks requirements ask for "one command ... that runs a workload matrix against BatonMQ
and against RabbitMQ (installed from Debian's packages if missing, started on a free port, stopped
after) and prints, per row, msgs/s, p50/p99/p99.9 latency, the broker's CPU seconds and peak RSS,
and the ratio BatonMQ/RabbitMQ; it also writes JSON and a PNG chart", and the load generator's own
ceiling (a publisher into a sink that discards). This runs that command as a user would, on a few
short rows, against RabbitMQ (installed first where it is missing: CI's machine has none), BatonMQ
on SQLite and on PostgreSQL, with its HTTP listener on as well (--http), and a build of BatonMQ
from another source tree (--build). It proves the harness measures something real; no speed is
asserted (speed is a benchmark's business, never a test's).
"""

from __future__ import annotations

import bisect
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from benchmarks.brokers.batonmq import BatonMQ, Build
from benchmarks.brokers.rabbitmq import rabbitmq_scripts
from benchmarks.workloads import QUICK_MEMORY_MESSAGES

import batonmq
from tests.needs_root import require_root
from tests.rawclient import RawClient

# The first test runs the command for all of them: about a minute and a half, and as much again
# where RabbitMQ must be installed first. The many-clients run starts 234 client processes: about
# a minute and a quarter more.
pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
ROWS = (
    "idle1000-1x1-128B",
    "transient-1x1-128B",
    "persistent-1x1-128B",
    "stream-publish-1x0-128B",
    "stream-replay-500k-128B",
    "latency-1000",
    "sink-publish-128B",
    "sink-consume-128B",
    "memory-1M",
)
#: Every client in an OS process of its own: 4 publishers and 4 consumers over one queue and
#: over two, and 100 publishers at a fixed rate in all with one consumer.
MANY_CLIENTS_ROWS = ("clients-4x4-1KiB", "clients-4x4-1KiB-2q", "latency-100pub")
BUILD_VERSION = f"{batonmq.__version__}+copy"
INSTALLING = "rabbitmq-server is not installed: apt-get install rabbitmq-server"
#: A load-generator process is a multiprocessing child of the harness; its command line says so.
SPAWNED = b"spawn_main"
#: Seconds between looks at them: each lives more than the row's warm-up and window.
SIGHTING_INTERVAL = 0.2


@dataclass(frozen=True)
class Run:
    printed: str
    said: str  # standard error: progress, and what the harness did to start the brokers
    json: dict[str, Any]
    chart: Path
    rabbitmq_was_installed: bool
    #: (row, broker): the load-generator processes the harness started to run it.
    client_processes: dict[tuple[str, str], int]


class ClientProcesses:
    """The load-generator processes of one run of the harness, seen from outside: its
    multiprocessing children, sampled from /proc while it runs. Rows run one after another,
    each row's processes gone before its progress line is printed, so each process is credited
    to the progress line that followed most of its sightings."""

    def __init__(self, harness: int) -> None:
        self.harness = harness
        #: (when, the processes alive, each as (pid, start time): pids are reused).
        self.sightings: list[tuple[float, frozenset[tuple[int, int]]]] = []
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stopping.wait(SIGHTING_INTERVAL):
            self.sightings.append((time.monotonic(), frozenset(self._alive())))

    def _alive(self) -> list[tuple[int, int]]:
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                # After the command name: state, ppid, ...; the start time is the 20th.
                fields = stat[stat.rindex(")") + 2 :].split()
                if int(fields[1]) == self.harness and SPAWNED in (entry / "cmdline").read_bytes():
                    alive.append((int(entry.name), int(fields[19])))
            except (FileNotFoundError, ProcessLookupError):
                continue  # gone meanwhile
        return alive

    def stop(self) -> None:
        self._stopping.set()
        self._watcher.join()

    def per_row(self, progress: list[tuple[float, str, str]]) -> dict[tuple[str, str], int]:
        """Processes per (row, broker), from the progress lines' (when, row, broker)."""
        ends = [when for when, _, _ in progress]
        windows: defaultdict[tuple[int, int], Counter[int]] = defaultdict(Counter)
        for when, alive in self.sightings:
            for process in alive:
                windows[process][bisect.bisect_left(ends, when)] += 1
        counts = Counter(seen.most_common(1)[0][0] for seen in windows.values())
        return {(row, target): counts[index] for index, (_, row, target) in enumerate(progress)}


def _run_harness(rows: tuple[str, ...], arguments: list[str], output: Path) -> Run:
    """Run `python -m benchmarks.compare` on `rows` with `arguments`, watching the load-generator
    processes it starts; it must succeed."""
    rabbitmq_was_installed = rabbitmq_scripts() is not None
    if not rabbitmq_was_installed:
        require_root("the harness installs rabbitmq-server with apt-get")
    command = [sys.executable, "-m", "benchmarks.compare", "--rows", ",".join(rows), *arguments]
    command += ["--output", str(output)]
    said: list[tuple[float, str]] = []  # standard error's lines, each with when it came
    with (
        tempfile.TemporaryFile("w+") as printed,
        subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=printed,
            stderr=subprocess.PIPE,
            text=True,
        ) as harness,
    ):
        watched = ClientProcesses(harness.pid)
        try:
            for line in harness.stderr:
                said.append((time.monotonic(), line))
            returncode = harness.wait()
        finally:
            harness.kill()
            watched.stop()
        printed.seek(0)
        stdout = printed.read()
    stderr = "".join(line for _, line in said)
    assert returncode == 0, stdout + stderr
    progress = [
        (when, words[0], words[1])
        for when, line in said
        if (words := line.split()) and words[0] in rows
    ]
    return Run(
        stdout,
        stderr,
        json.loads(output.read_text()),
        output.with_suffix(".png"),
        rabbitmq_was_installed,
        watched.per_row(progress),
    )


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """A copy of this source tree that says it is another version in connection.start."""
    root = tmp_path_factory.mktemp("build")
    shutil.copytree(
        ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    init = root / "src" / "batonmq" / "__init__.py"
    init.write_text(init.read_text().replace(batonmq.__version__, BUILD_VERSION))
    return Build("copy", root)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, build: Build) -> Run:
    arguments = [
        "--quick",
        "--duration",
        "1",
        "--warmup",
        "0.2",
        "--skip",
        "batonmq-pg",
        "--http",
        "--skip",
        "batonmq-pg+http",
        "--build",
        f"{build.name}={build.root}",
    ]
    return _run_harness(ROWS, arguments, tmp_path_factory.mktemp("bench") / "run.json")


@pytest.fixture(scope="module")
def many_clients_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The many-clients rows on RabbitMQ and BatonMQ alone: each row starts up to 101 processes
    per broker, too many to run on every broker of the first run. The two-queue row's runs on
    BatonMQ with workers (by virtual host and spread) have tests of their own."""
    arguments = [
        "--duration",
        "1",
        "--warmup",
        "0.2",
        "--skip",
        "batonmq-w2",
        "--skip",
        "batonmq-s2",
        "--no-chart",
    ]
    output = tmp_path_factory.mktemp("bench") / "many-clients.json"
    return _run_harness(MANY_CLIENTS_ROWS, arguments, output)


def _measured(run: Run, row: str, target: str) -> dict[str, Any]:
    (found,) = [entry for entry in run.json["rows"] if entry["name"] == row]
    measurement: dict[str, Any] = found["measurements"][target]
    assert measurement["error"] is None, measurement["error"]
    return measurement


def test_every_row_asked_for_is_in_the_json_in_matrix_order(run: Run):
    assert [row["name"] for row in run.json["rows"]] == list(ROWS)
    assert run.json["skipped"] == {}
    assert run.json["log_problems"] == {}, "a broker's log showed errors or tracebacks"


@pytest.mark.parametrize(
    ("row", "target"),
    [
        (row, target)
        for row in ("transient-1x1-128B", "persistent-1x1-128B", "latency-1000")
        for target in ("rabbitmq", "batonmq", "batonmq@copy")
    ]
    + [("persistent-1x1-128B", "batonmq-pg@copy")],
)
def test_a_broker_row_has_rates_latency_percentiles_cpu_and_rss(run: Run, row: str, target: str):
    measured = _measured(run, row, target)
    assert measured["deliver_rate"] > 0
    assert measured["publish_rate"] > 0
    assert 0 < measured["p50_ms"] <= measured["p99_ms"] <= measured["p999_ms"]
    assert measured["cpu_seconds"] > 0
    assert measured["peak_rss_bytes"] > 0
    if "-pg" in target:  # the PostgreSQL server's part of it, reported apart
        assert 0 < measured["store_cpu_seconds"] < measured["cpu_seconds"]
        assert 0 < measured["store_cpu_us_per_message"] < measured["cpu_us_per_message"]
    else:
        assert measured["store_cpu_seconds"] is None


@pytest.mark.parametrize("target", ["rabbitmq", "batonmq", "batonmq@copy"])
def test_the_idle_connections_row_moves_messages_and_weighs_each_idle_connection(
    run: Run, target: str
):
    """The many-clients requirements: "1,000 idle connections plus one busy pair (the cost of
    idle connections: heartbeats, timers, memory per connection)"."""
    measured = _measured(run, "idle1000-1x1-128B", target)
    assert measured["deliver_rate"] > 0
    assert measured["cpu_seconds"] > 0
    assert measured["bytes_per_connection"] > 0


@pytest.mark.parametrize("target", ["rabbitmq", "batonmq", "batonmq@copy"])
def test_the_stream_rows_publish_with_confirms_and_replay_the_whole_stream(run: Run, target: str):
    """The stream-replay row fills a stream (in --quick, QUICK_MEMORY_MESSAGES) and one consumer
    reads every message of it from x-stream-offset first; the publish row is confirmed."""
    published = _measured(run, "stream-publish-1x0-128B", target)
    assert published["publish_rate"] > 0
    assert published["cpu_seconds"] > 0
    assert published["nacked"] == 0
    replayed = _measured(run, "stream-replay-500k-128B", target)
    assert replayed["delivered"] == QUICK_MEMORY_MESSAGES
    assert replayed["deliver_rate"] > 0
    assert replayed["cpu_seconds"] > 0


@pytest.mark.parametrize("target", ["rabbitmq", "batonmq", "batonmq@copy", "batonmq-pg@copy"])
def test_every_persistent_publish_is_confirmed_not_nacked(run: Run, target: str):
    """Only the persistent rows publish with confirms, so only they can count a nack."""
    assert _measured(run, "persistent-1x1-128B", target)["nacked"] == 0


@pytest.mark.parametrize("target", ["batonmq", "batonmq@copy"])
def test_each_batonmq_is_compared_with_rabbitmq_measured_in_the_same_run(run: Run, target: str):
    (row,) = [entry for entry in run.json["rows"] if entry["name"] == "transient-1x1-128B"]
    ours, theirs = _measured(run, row["name"], target), _measured(run, row["name"], "rabbitmq")
    assert row["ratios"][target]["deliver_rate"] == pytest.approx(
        ours["deliver_rate"] / theirs["deliver_rate"]
    )
    assert f"ratio {target}/rabbitmq" in run.printed


def test_rabbitmq_is_installed_from_debians_package_when_it_is_missing(run: Run):
    """The Benchmarks requirements: RabbitMQ is "installed from Debian's packages if missing,
    started on a free port, stopped after". On a machine without it (CI's), the run installs it
    first and says so."""
    assert (INSTALLING in run.said) is not run.rabbitmq_was_installed
    assert run.json["brokers"]["rabbitmq"].startswith("RabbitMQ 3.")


def test_a_skipped_broker_is_not_run(run: Run):
    (row,) = [entry for entry in run.json["rows"] if entry["name"] == "persistent-1x1-128B"]
    assert set(row["measurements"]) == {
        "rabbitmq",
        "batonmq",
        "batonmq+http",
        "batonmq@copy",
        "batonmq-pg@copy",
    }


def test_http_runs_batonmq_with_its_http_listener_on_and_prints_each_rows_on_off_ratio(run: Run):
    """The management issue's benchmark row: "statistics cost on the hot path (headline rows
    with the HTTP listener on and off ...)". --http runs each row on BatonMQ with the listener
    on beside BatonMQ with it off, and prints the ratios."""
    assert run.json["brokers"]["batonmq+http"] == "BatonMQ (sqlite, HTTP on)"
    assert _measured(run, "transient-1x1-128B", "batonmq+http")["deliver_rate"] > 0
    table = run.printed.split("HTTP listener on/off (the statistics' cost):\n")[1]
    [line] = [line for line in table.splitlines() if line.startswith("transient-1x1-128B ")]
    assert line.split()[1:3] == ["batonmq", "deliver_rate"]


def test_the_run_draws_its_chart_as_a_png(run: Run):
    """The Benchmarks requirements: "it also writes JSON and a PNG chart"."""
    assert f"chart: {run.chart}" in run.printed
    image = run.chart.read_bytes()
    assert image.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(image) > 10_000


def test_the_json_names_each_build_and_where_its_source_is(run: Run, build: Build):
    assert run.json["builds"] == {"copy": {"path": str(build.root), "commit": None}}
    assert run.json["brokers"]["batonmq@copy"] == "BatonMQ (sqlite) @copy"
    assert run.json["brokers"]["batonmq-pg@copy"] == "BatonMQ (postgres) @copy"


def test_a_build_runs_the_code_of_its_own_source_tree(build: Build):
    """The broker a build starts is that tree's: connection.start says the copy's version."""
    with BatonMQ(build=build) as broker, RawClient.connect(broker.host, broker.port) as client:
        start = client.start()
    assert start.server_properties["version"] == BUILD_VERSION


@pytest.mark.parametrize(
    ("row", "rate"), [("sink-publish-128B", "publish_rate"), ("sink-consume-128B", "deliver_rate")]
)
def test_the_load_generator_reports_its_own_ceiling_against_a_sink(run: Run, row: str, rate: str):
    measured = _measured(run, row, "sink")
    assert measured[rate] > 0


def test_the_printed_table_names_every_row_and_the_headline_goals(run: Run):
    printed = run.printed
    for row in ROWS:
        assert row in printed
    assert "Headline rows" in printed
    assert "msgs/s" in printed and "p99.9 ms" in printed and "peak RSS MiB" in printed


def _row(run: Run, name: str) -> dict[str, Any]:
    (row,) = [entry for entry in run.json["rows"] if entry["name"] == name]
    return row


def test_the_many_clients_run_measures_each_row_on_rabbitmq_and_batonmq_side_by_side(
    many_clients_run: Run,
):
    """The many-clients requirements' rows, "side by side with RabbitMQ in one run, with CPU
    µs per message for each broker": each row carries both brokers and BatonMQ's ratios."""
    assert [row["name"] for row in many_clients_run.json["rows"]] == list(MANY_CLIENTS_ROWS)
    assert many_clients_run.json["skipped"] == {}
    assert many_clients_run.json["log_problems"] == {}, "a broker's log showed errors or tracebacks"
    for name in MANY_CLIENTS_ROWS:
        row = _row(many_clients_run, name)
        assert set(row["measurements"]) == {"rabbitmq", "batonmq"}
        ours = _measured(many_clients_run, name, "batonmq")
        theirs = _measured(many_clients_run, name, "rabbitmq")
        assert row["ratios"]["batonmq"]["cpu_us_per_message"] == pytest.approx(
            ours["cpu_us_per_message"] / theirs["cpu_us_per_message"]
        )


@pytest.mark.parametrize("target", ["rabbitmq", "batonmq"])
@pytest.mark.parametrize("row", MANY_CLIENTS_ROWS)
def test_a_many_clients_row_has_rates_and_the_brokers_cpu_per_message(
    many_clients_run: Run, row: str, target: str
):
    measured = _measured(many_clients_run, row, target)
    assert measured["publish_rate"] > 0
    assert measured["deliver_rate"] > 0
    assert measured["cpu_seconds"] > 0
    assert measured["cpu_us_per_message"] == pytest.approx(
        measured["cpu_seconds"] / measured["delivered"] * 1e6
    )
    assert measured["peak_rss_bytes"] > 0


@pytest.mark.parametrize("target", ["rabbitmq", "batonmq"])
@pytest.mark.parametrize("row", MANY_CLIENTS_ROWS)
def test_a_many_clients_row_starts_a_process_for_every_client(
    many_clients_run: Run, row: str, target: str
):
    """The many-clients requirements: "each client its own OS process with its own
    connection". Counted outside the harness: its multiprocessing children while the row ran."""
    promised = _row(many_clients_run, row)
    assert promised["process_per_client"] is True
    clients = promised["producers"] + promised["consumers"]
    assert many_clients_run.client_processes[(row, target)] == clients


@pytest.mark.parametrize("target", ["rabbitmq", "batonmq"])
def test_the_100_publishers_row_publishes_at_its_fixed_total_rate(
    many_clients_run: Run, target: str
):
    """The many-clients requirements: "100 publisher connections at a fixed total rate". Each
    publisher sends its share, so together they publish at the row's rate; with 101 client
    processes on the machine's cores a short window can fall somewhat short of it, never by
    half, and never beyond it."""
    row = _row(many_clients_run, "latency-100pub")
    assert (row["producers"], row["rate"]) == (100, 10_000)
    published = _measured(many_clients_run, "latency-100pub", target)["publish_rate"]
    assert 0.5 * row["rate"] <= published <= 1.1 * row["rate"]


@pytest.mark.parametrize("target", ["rabbitmq", "batonmq"])
def test_the_100_publishers_row_reports_latency_p50_and_p99(many_clients_run: Run, target: str):
    """The many-clients requirements: that row's figures are "latency p50 / p99"."""
    measured = _measured(many_clients_run, "latency-100pub", target)
    assert 0 < measured["p50_ms"] <= measured["p99_ms"]
