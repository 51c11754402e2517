"""BatonMQ with `[broker] workers = N` (README, "Worker processes"): one broker of N worker
processes on the SQLite store (`batonmq-w<N>`) or the PostgreSQL one (`batonmq-pg-w<N>`), each
worker owning some virtual hosts (docs/multi-core.md).

A worker owns whole virtual hosts, so each queue of a row is declared in a virtual host of its
own, placed round-robin over the workers in the order the row declares the queues: queue i in a
virtual host that worker i mod N owns. Every client connects to the one port and names its
queue's virtual host; the broker hands the connection to the owner at connection.open, so no
message crosses between workers. The virtual hosts are added on the store before the broker
starts (`batonctl vhost add`, `permissions set` for guest; SQLite's only path for them). Rows
that route through an exchange are refused: an exchange lives in one virtual host and cannot
reach queues in others.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from batonmq.server.placement import owner_of
from benchmarks.brokers.base import Broker, BrokerError, probe
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.brokers.postgres import BenchPostgres
from benchmarks.loadgen.client import BrokerClosed, Endpoint
from benchmarks.topology import Topology
from benchmarks.workloads import PG_WORKERS_PREFIX, WORKERS_PREFIX

#: Seconds for the workers to take up the virtual hosts added on the store.
_VHOSTS_TIMEOUT = 30.0


def owned_vhost(worker: int, workers: int) -> str:
    """A virtual host name that `worker` owns among `workers`."""
    return next(name for n in range(1000) if owner_of(name := f"bench{n}", workers) == worker)


class BatonMQWorkers(Broker):
    def __init__(self, count: int, postgres: BenchPostgres | None = None) -> None:
        """`postgres`: the server of the PostgreSQL store (None: SQLite)."""
        if count < 2:
            raise ValueError(f"a broker of workers takes at least 2, got {count}")
        self.count = count
        self.name = f"{WORKERS_PREFIX if postgres is None else PG_WORKERS_PREFIX}{count}"
        store = "sqlite" if postgres is None else "postgres"
        self.label = f"BatonMQ ({store}) workers = {count}"
        self.vhosts = [owned_vhost(worker, count) for worker in range(count)]
        self.broker = BatonMQ(
            postgres,
            name=self.name,
            label=self.label,
            workers=count,
            prepare=self._add_vhosts,
        )
        #: Queue name -> its virtual host, from the last `place`.
        self._vhost_of: dict[str, str] = {}

    def _add_vhosts(self, config: Path) -> None:
        for vhost in self.vhosts:
            for command in (
                ("vhost", "add", vhost),
                ("permissions", "set", "guest", ".*", ".*", ".*", "--vhost", vhost),
            ):
                finished = subprocess.run(
                    [sys.executable, "-m", "batonmq.cli.ctl", "--config", str(config), *command],
                    capture_output=True,
                    text=True,
                    env={k: v for k, v in os.environ.items() if not k.startswith("BATONMQ")},
                    check=False,
                )
                if finished.returncode != 0:
                    raise BrokerError(f"batonctl {' '.join(command)}: {finished.stderr}")

    def start(self) -> None:
        self.broker.start()
        self.port = self.broker.port
        self.process = self.broker.process
        deadline = time.monotonic() + _VHOSTS_TIMEOUT
        for vhost in self.vhosts:
            while True:
                try:
                    asyncio.run(probe(dataclasses.replace(self.endpoint, vhost=vhost)))
                    break
                except (OSError, BrokerClosed, TimeoutError) as error:
                    if time.monotonic() > deadline:
                        raise BrokerError(f"virtual host {vhost} not served: {error}") from error
                    time.sleep(0.25)

    def stop(self) -> None:
        self.broker.stop()
        self.log_problems = self.broker.log_problems

    def alive(self) -> bool:
        return self.broker.alive()

    def measured_pids(self) -> list[int]:
        return self.broker.measured_pids()

    def place(self, topology: Topology) -> list[tuple[Endpoint, Topology]]:
        if topology.exchange:
            raise BrokerError(
                f"{self.name} cannot route through an exchange: each queue is in a virtual "
                "host of its own"
            )
        self._vhost_of = {
            queue: self.vhosts[index % self.count] for index, queue in enumerate(topology.queues)
        }
        return [
            (dataclasses.replace(self.endpoint, vhost=vhost), Topology(owned, topology.durable))
            for vhost in self.vhosts
            if (owned := tuple(q for q, v in self._vhost_of.items() if v == vhost))
        ]

    def endpoint_for(self, queue: str) -> Endpoint:
        return dataclasses.replace(self.endpoint, vhost=self._vhost_of[queue])
