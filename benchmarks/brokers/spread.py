"""BatonMQ with `[broker] workers = N` and its default virtual host spread over them
(`spread_vhosts = ["/"]`, README "Worker processes"): `batonmq-s<N>`, on SQLite.

Every client connects to the one port and stays with the worker that accepted it, as a client
of a spread virtual host does: a publish to a queue another worker runs crosses to that worker,
and so do the deliveries to a consumer of it (docs/multi-core.md, step 6). The row's queues are
named so that each worker runs as many as `batonmq-w<N>` gives it by virtual host: the two
targets share the load out alike, and differ only in what crosses between workers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from batonmq.server.placement import queue_owner
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.workloads import SPREAD_PREFIX

#: The virtual host the target spreads, the one the rows use.
VHOST = "/"
#: Prefixes tried before `balanced_prefix` gives up.
_TRIES = 10_000


def balanced_prefix(prefix: str, names: Callable[[str], tuple[str, ...]], workers: int) -> str:
    """`prefix` with the first suffix ("-0", "-1", ...) under which the queues `names(...)`
    are shared out evenly over `workers`: as many on each as on any other, give or take one."""
    for n in range(_TRIES):
        candidate = f"{prefix}-{n}"
        counts = Counter(queue_owner(VHOST, queue, workers) for queue in names(candidate))
        least = min(counts.get(worker, 0) for worker in range(workers))
        if max(counts.values()) - least <= 1:
            return candidate
    raise ValueError(f"no prefix of {prefix!r} shares its queues out evenly over {workers} workers")


class BatonMQSpread(BatonMQ):
    def __init__(self, count: int) -> None:
        if count < 2:
            raise ValueError(f"a broker of workers takes at least 2, got {count}")
        self.count = count
        super().__init__(
            name=f"{SPREAD_PREFIX}{count}",
            label=f"BatonMQ (sqlite) workers = {count}, one virtual host spread",
            workers=count,
            spread_vhosts=(VHOST,),
        )

    def queue_prefix(self, prefix: str, names: Callable[[str], tuple[str, ...]]) -> str:
        return balanced_prefix(prefix, names, self.count)
