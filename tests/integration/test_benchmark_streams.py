"""The stream benchmarks end to end, run as a user runs them, on a small stream: the 1 GB
replay beside dd (benchmarks/stream_disk.py) and the PySpark connector beside the raw AMQP rate
(benchmarks/spark_connector.py). They prove that the modules measure a whole stream, read and
written; no speed is asserted (speed is a benchmark's business, never a test's)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def run_module(module: str, *arguments: str, output: Path) -> object:
    finished = subprocess.run(
        [sys.executable, "-m", module, *arguments, "--json", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr[-3000:]
    return json.loads(output.read_text())


def test_the_replay_benchmark_reads_the_whole_stream_and_its_files_cold_and_warm(
    tmp_path: Path,
):
    """The issue: "a consumer replays a 1 GB stream at disk speed": the module replays every
    message, and reads the segment files with dd, with the page cache dropped (as root) and
    then warm."""
    results = run_module(
        "benchmarks.stream_disk",
        "--bytes",
        # 10,000 small messages: enough broker CPU to count in clock ticks (10 ms each), which
        # 2,000 replayed from the page cache may not reach.
        "10000000",
        "--body-sizes",
        "1000,40000",
        output=tmp_path / "r",
    )

    assert [(result["body_size"], result["messages"]) for result in results] == [
        (1000, 10000),
        (40000, 250),
    ]
    for result in results:
        assert result["stream_bytes"] > 10_000_000  # bodies, properties and chunk headers
        _check_reads(result, result["messages"])


def _check_reads(result: dict, messages: int) -> None:
    caches = ("cold", "warm") if os.geteuid() == 0 else ("warm",)
    assert {(read["reader"], read["cache"]) for read in result["reads"]} == {
        (reader, cache) for reader in ("batonmq", "dd") for cache in caches
    }
    for read in result["reads"]:
        assert read["mb_per_second"] > 0
        if read["reader"] == "batonmq":
            assert read["messages"] == messages
            if messages >= 1000:  # CPU time is in clock ticks: 250 large messages may take none
                assert read["cpu_us_per_message"] > 0
            assert read["consumer_busy"] > 0


@pytest.mark.skipif(
    shutil.which("java") is None and not os.environ.get("CI"),
    reason="PySpark needs a Java runtime (CI installs one; there this test must run)",
)
def test_the_connector_benchmark_reads_and_writes_every_row_beside_the_raw_rate(tmp_path: Path):
    """The issue: "a benchmark of the connector (rows/s read and written on local[2] ...)
    beside the raw AMQP rate"; each phase checks its row count itself."""
    if not os.environ.get("CI"):
        pytest.importorskip("pyspark", reason="the spark extra is not installed")

    phases = run_module("benchmarks.spark_connector", "--messages", "3000", output=tmp_path / "c")

    assert [(phase["name"], phase["rows"]) for phase in phases] == [
        ("raw write", 3000),
        ("raw read", 3000),
        ("spark read", 3000),
        ("spark readStream", 3000),
        ("spark write", 3000),
    ]
    assert all(phase["rows_per_second"] > 0 for phase in phases)
