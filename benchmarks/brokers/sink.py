"""The load generator's sink (benchmarks/loadgen/sink.py) as a broker process of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.ports import free_port

from benchmarks.brokers.base import Broker, wait_for_amqp

#: The directory `python -m benchmarks...` must run in.
REPO_ROOT = Path(__file__).resolve().parents[2]


class Sink(Broker):
    name = "sink"

    def __init__(self, mode: str, body_size: int) -> None:
        self.mode = mode
        self.body_size = body_size
        self.label = f"sink ({mode})"
        self.directory: Path | None = None

    def start(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="batonmq-bench-sink-"))
        self.port = free_port()
        log_path = self.directory / "sink.log"
        with log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.loadgen.sink",
                    "--port",
                    str(self.port),
                    "--mode",
                    self.mode,
                    "--body-size",
                    str(self.body_size),
                ],
                cwd=REPO_ROOT,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for_amqp(self.port, self.process, log_path, timeout=30.0)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
