"""What the harness needs of a broker: start, stop, a port, and the processes to measure."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.loadgen.client import BrokerClosed, Endpoint, connect
from benchmarks.procstats import process_tree
from benchmarks.topology import Topology

HOST = "127.0.0.1"


class BrokerError(RuntimeError):
    """A broker could not be started (the message says why, with its log's tail)."""


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


async def probe(endpoint: Endpoint) -> None:
    """Open a connection (handshake, login, channel) and close it."""
    client = await connect(endpoint, timeout=5.0)
    await client.close()


def wait_for_amqp(
    port: int, process: subprocess.Popen[bytes], log_path: Path, timeout: float
) -> None:
    """Wait until an AMQP handshake on `port` succeeds (a listening socket is not enough:
    RabbitMQ listens before its virtual hosts are up)."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise BrokerError(f"exited with {process.returncode}:\n{log_tail(log_path)}")
        try:
            asyncio.run(probe(Endpoint(HOST, port)))
            return
        except (OSError, BrokerClosed, TimeoutError) as error:
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"no AMQP handshake on port {port} within {timeout:.0f} s ({error}):\n"
                    f"{log_tail(log_path)}"
                ) from error
            time.sleep(0.25)


class Broker(abc.ABC):
    """A broker process the harness runs. `name` identifies it in results ("rabbitmq",
    "batonmq", "batonmq-pg", "sink"); `label` is how tables show it."""

    name: str
    label: str
    host = HOST
    port = 0
    process: subprocess.Popen[bytes] | None = None
    #: After `stop`: the errors and tracebacks its log showed (brokers whose log is not read: []).
    log_problems: tuple[str, ...] = ()

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @property
    def endpoint(self) -> Endpoint:
        """Where the load generator connects, and as whom (guest, on a broker of our own)."""
        return Endpoint(self.host, self.port)

    def place(self, topology: Topology) -> list[tuple[Endpoint, Topology]]:
        """Where each part of `topology` is declared; a broker of one process holds all of it.
        A broker of several processes (brokers/shards.py) gives each its part."""
        return [(self.endpoint, topology)]

    def queue_prefix(self, prefix: str, names: Callable[[str], tuple[str, ...]]) -> str:
        """The prefix of a row's queue names on this broker, `names(prefix)` being the names a
        prefix gives: `prefix` itself, unless where a queue runs follows from its name."""
        return prefix

    def endpoint_for(self, queue: str) -> Endpoint:
        """Where a client of `queue` (its publisher, through the default exchange, or its
        consumer) connects, once `place` has placed it."""
        return self.endpoint

    def measured_pids(self) -> list[int]:
        """The processes whose CPU and memory are the broker's; [] when they are unknown (the
        rows then report no CPU and no RSS)."""
        assert self.process is not None
        return process_tree(self.process.pid)

    def store_pids(self) -> list[int]:
        """Those of `measured_pids` that are a database server doing the broker's store work
        (BatonMQ on PostgreSQL), reported apart as well; [] for a broker that has none."""
        return []

    def data_paths(self) -> list[Path]:
        """The directories where the broker keeps its data (its store, its message files)."""
        return []

    def disk_bytes(self) -> int:
        """Bytes of the files under `data_paths` (what a backlog costs on disk)."""
        total = 0
        for root in self.data_paths():
            for directory, _, files in os.walk(root):
                for name in files:
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(directory, name)).st_size
        return total

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> Broker:
        try:
            self.start()
        except BaseException:
            self.stop()  # what did start (a process, a directory) goes
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
