"""BatonMQ as N processes that share nothing, each owning some of the queues: the ceiling of
spreading a broker over cores by partitioning its queues (see docs/multi-core.md).

Each shard is a whole `BatonMQ` with a store of its own. Queues are placed round-robin in the
order the row declares them, and every client connects to the shard that owns its queue, as if
an accepted connection had been handed to its owner at no cost: no message ever crosses from one
process to another. Rows that route through an exchange are refused: an exchange would have to
reach queues in other processes, which takes an inter-process link this target does not have.
"""

from __future__ import annotations

from benchmarks.brokers.base import Broker, BrokerError
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.loadgen.client import Endpoint
from benchmarks.topology import Topology
from benchmarks.workloads import SHARDS_PREFIX


class BatonMQShards(Broker):
    def __init__(self, count: int) -> None:
        if count < 2:
            raise ValueError(f"shards of one broker take at least 2 processes, got {count}")
        self.shards = [BatonMQ() for _ in range(count)]
        self.name = f"{SHARDS_PREFIX}{count}"
        self.label = f"BatonMQ (sqlite) x{count} processes"
        #: Queue name -> the shard that owns it, from the last `place`.
        self._owners: dict[str, BatonMQ] = {}

    def start(self) -> None:
        for shard in self.shards:
            shard.start()
        self.port = self.shards[0].port

    def stop(self) -> None:
        for shard in self.shards:
            shard.stop()
        self.log_problems = tuple(
            problem for shard in self.shards for problem in shard.log_problems
        )

    def alive(self) -> bool:
        return all(shard.alive() for shard in self.shards)

    def measured_pids(self) -> list[int]:
        return [pid for shard in self.shards for pid in shard.measured_pids()]

    def place(self, topology: Topology) -> list[tuple[Endpoint, Topology]]:
        if topology.exchange:
            raise BrokerError(
                f"{self.name} cannot route through an exchange: its queues live in processes "
                "that share nothing"
            )
        self._owners = {
            queue: self.shards[index % len(self.shards)]
            for index, queue in enumerate(topology.queues)
        }
        return [
            (shard.endpoint, Topology(owned, topology.durable))
            for shard in self.shards
            if (owned := tuple(q for q, owner in self._owners.items() if owner is shard))
        ]

    def endpoint_for(self, queue: str) -> Endpoint:
        return self._owners[queue].endpoint
