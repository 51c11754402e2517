"""A bound on the messages in flight between publishers and consumers, shared by all the load
generator's processes.

Without one, publishers that outrun the consumers make the queue grow for the whole run: the
consumers' rate is then the throughput, but the latencies are those of an ever longer queue and the
broker's memory grows without limit (RabbitMQ slows such publishers with its credit flow; BatonMQ
pauses reading at `server.write_buffer_high`). With it, a publisher waits while
`published - delivered / deliveries_per_publish` leaves no room below the limit for its next
batch, so every broker is measured in the same steady state. Each process adds to its own slot
of a shared array, so no lock is needed.

Processes that share no queue are bounded apart (`peers`, from runner.backlog_peers): over two
queues with their own producers and consumers, one bound let the queue that fell behind hold
back the other's publishers, so a broker serving the two queues on two cores ran at twice the
rate of the slower.
"""

from __future__ import annotations

import ctypes
import math
from typing import TypeAlias

Counters: TypeAlias = "ctypes.Array[ctypes.c_int64]"


class Backlog:
    __slots__ = ("_peers", "_slot", "delivered", "deliveries_per_publish", "limit", "published")

    def __init__(
        self,
        published: Counters,
        delivered: Counters,
        slot: int,
        deliveries_per_publish: int,
        limit: int,
        peers: tuple[int, ...] = (),
    ) -> None:
        """`peers`: the slots whose messages count against `limit` (the processes that share
        queues with this one, itself among them); (): every slot."""
        self.published = published
        self.delivered = delivered
        self._slot = slot
        self._peers = peers or tuple(range(len(published)))
        self.deliveries_per_publish = deliveries_per_publish
        self.limit = limit

    def in_flight(self) -> float:
        published, delivered = self.published, self.delivered
        sent = sum(published[peer] for peer in self._peers)
        received = sum(delivered[peer] for peer in self._peers)
        return sent - received / self.deliveries_per_publish

    def room(self) -> float:
        """How many more messages may be published now (unbounded: infinity)."""
        return self.limit - self.in_flight() if self.limit > 0 else math.inf

    def add_published(self, count: int) -> None:
        self.published[self._slot] += count

    def add_delivered(self, count: int) -> None:
        self.delivered[self._slot] += count
