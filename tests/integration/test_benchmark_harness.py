"""The benchmark harness end to end: `python -m benchmarks.compare` against a real BatonMQ.

Issue 7 asks for one command that runs the workload matrix, prints per row msgs/s, p50/p99/p99.9,
the broker's CPU seconds and peak RSS, writes JSON, and reports the load generator's own ceiling
(a publisher into a sink that discards). This runs that command as a user would, on a few short
rows, with RabbitMQ skipped: CI has no RabbitMQ, and the ratios are covered by the unit tests of
benchmarks/report.py. It proves the harness measures something real; no speed is asserted
(speed is a benchmark's business, never a test's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The first test runs the command (about half a minute) for all of them.
pytestmark = pytest.mark.timeout(150)

ROOT = Path(__file__).resolve().parents[2]
ROWS = (
    "transient-1x1-128B",
    "persistent-1x1-128B",
    "latency-1000",
    "sink-publish-128B",
    "sink-consume-128B",
    "memory-1M",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    output = tmp_path_factory.mktemp("bench") / "run.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.compare",
        "--quick",
        "--rows",
        ",".join(ROWS),
        "--skip",
        "rabbitmq",
        "--skip",
        "batonmq-pg",
        "--duration",
        "1",
        "--warmup",
        "0.2",
        "--no-chart",
        "--output",
        str(output),
    ]
    finished = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=100, check=False
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return finished.stdout, json.loads(output.read_text())


def _measured(run: tuple[str, dict[str, Any]], row: str, target: str) -> dict[str, Any]:
    (found,) = [entry for entry in run[1]["rows"] if entry["name"] == row]
    measurement: dict[str, Any] = found["measurements"][target]
    assert measurement["error"] is None, measurement["error"]
    return measurement


def test_every_row_asked_for_is_in_the_json_in_matrix_order(run: tuple[str, dict[str, Any]]):
    assert [row["name"] for row in run[1]["rows"]] == list(ROWS)
    assert run[1]["skipped"] == {}


@pytest.mark.parametrize("row", ["transient-1x1-128B", "persistent-1x1-128B", "latency-1000"])
def test_a_broker_row_has_rates_latency_percentiles_cpu_and_rss(
    run: tuple[str, dict[str, Any]], row: str
):
    measured = _measured(run, row, "batonmq")
    assert measured["deliver_rate"] > 0
    assert measured["publish_rate"] > 0
    assert 0 < measured["p50_ms"] <= measured["p99_ms"] <= measured["p999_ms"]
    assert measured["cpu_seconds"] > 0
    assert measured["peak_rss_bytes"] > 0
    assert measured["nacked"] == 0


def test_a_skipped_broker_is_not_run(run: tuple[str, dict[str, Any]]):
    (row,) = [entry for entry in run[1]["rows"] if entry["name"] == "persistent-1x1-128B"]
    assert set(row["measurements"]) == {"batonmq"}


def test_the_memory_row_reports_bytes_per_queued_message(run: tuple[str, dict[str, Any]]):
    measured = _measured(run, "memory-1M", "batonmq")
    assert measured["published"] == 200_000
    assert measured["bytes_per_message"] is not None
    assert measured["peak_rss_bytes"] > 0


@pytest.mark.parametrize(
    ("row", "rate"), [("sink-publish-128B", "publish_rate"), ("sink-consume-128B", "deliver_rate")]
)
def test_the_load_generator_reports_its_own_ceiling_against_a_sink(
    run: tuple[str, dict[str, Any]], row: str, rate: str
):
    measured = _measured(run, row, "sink")
    assert measured[rate] > 0


def test_the_printed_table_names_every_row_and_the_headline_goals(
    run: tuple[str, dict[str, Any]],
):
    printed = run[0]
    for row in ROWS:
        assert row in printed
    assert "Headline rows" in printed
    assert "msgs/s" in printed and "p99.9 ms" in printed and "peak RSS MiB" in printed
