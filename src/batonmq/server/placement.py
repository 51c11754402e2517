"""Which worker process serves a virtual host, when the broker runs several (`broker.workers`
above 1, `batonmq.server.supervisor`), and what a worker inherits from the supervisor.

A worker owns whole virtual hosts: every connection to a virtual host is served by its owner,
so a queue, its publishers and its consumers always share one process and no message crosses
between processes. The owner of a virtual host is a stable hash of its name: the first eight
octets of the BLAKE2b digest of its UTF-8 bytes, as an integer, modulo the number of workers.
It is the same in every worker, at every restart and in every Python release (unlike `hash`,
which is salted per process). It is not CRC-32: a CRC is linear, so names that differ in one
bit of one character ("app0" and "app1", "orders.q0" to "orders.q3") always fell to the same
worker of two, or of four, whatever came before it. So changing
`broker.workers` moves virtual hosts to other workers, whose store identity differs: the broker
moves their rows to the new owners as it starts (`batonmq.store.placement` on SQLite,
`batonmq.store.pgfamily` on PostgreSQL, an HA member's too).

A virtual host named in `broker.spread_vhosts` is spread over the workers instead: every worker
serves it (a connection to it stays in the worker that accepted it, `WorkerSeat.serves`), and
each of its queues is run by one worker, its owner (`queue_owner`, the same kind of hash of the
virtual host's and the queue's names), whose rows are placed per queue (`store_placement`).
"""

from __future__ import annotations

import hashlib
import socket
from dataclasses import dataclass
from functools import partial

from batonmq.config import Config
from batonmq.store.configured import store_broker_id
from batonmq.store.placement import Placement, is_spread


def owner_of(vhost: str, workers: int) -> int:
    """The index (from 0) of the worker that serves `vhost` among `workers`."""
    digest = hashlib.blake2b(vhost.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % workers


def queue_owner(vhost: str, queue: str, workers: int) -> int:
    """The index (from 0) of the worker that owns queue `queue` of a spread virtual host
    `vhost` among `workers`: `owner_of` "<vhost>\\0<queue>". Stable as
    `owner_of` is, so every worker finds a queue's owner without asking, and a start with
    another number of workers moves each queue's rows by the same rule. The NUL between the
    names keeps ("a", "bc") and ("ab", "c") apart."""
    return owner_of(f"{vhost}\0{queue}", workers)


@dataclass(frozen=True, slots=True)
class WorkerSeat:
    """One worker process's place among its siblings: what the supervisor set up for it."""

    #: This worker's index, from 0; its store identity is the broker's with "w<index>".
    index: int
    #: How many workers the broker runs.
    count: int
    #: The listening sockets the supervisor bound, by listener name ("amqp", and "http" for
    #: the management API when it is enabled).
    listening: dict[str, list[socket.socket]]
    #: Each worker's inbox (`batonmq.server.handoff`), by index: the end its owner reads, and
    #: the end the other workers send connections on.
    inboxes: list[tuple[socket.socket, socket.socket]]
    #: The pipe this worker writes one byte to once it serves (the supervisor waits for it).
    ready: int
    #: Each worker's control inbox (`batonmq.server.siblings`), by index, as `inboxes`.
    controls: list[tuple[socket.socket, socket.socket]]
    #: The token of the broker's run, drawn by the supervisor as it starts and kept by a worker
    #: it starts again: the worker's PostgreSQL lease names it, so that its siblings know it
    #: for a process of this run (`batonmq.store.pglease`).
    run: str
    #: The SQLite store's lock, which the supervisor holds for every worker (None: PostgreSQL).
    store_lock: int | None = None
    #: Whether the supervisor started this worker again, after it ended (its siblings serve).
    started_again: bool = False
    #: The virtual hosts spread over the workers (`broker.spread_vhosts`; "*": every one).
    spread: frozenset[str] = frozenset()

    def owns(self, vhost: str) -> bool:
        """Whether this worker is `vhost`'s owner: the one process that runs it whole, or its
        home (the worker that keeps its topology's rows) when it is spread."""
        return owner_of(vhost, self.count) == self.index

    def serves(self, vhost: str) -> bool:
        """Whether this worker serves connections to `vhost`: its owner does, and every worker
        serves a spread one."""
        return self.owns(vhost) or self.spreads(vhost)

    def spreads(self, vhost: str) -> bool:
        """Whether `vhost` is spread over the workers."""
        return is_spread(vhost, self.spread, self.count)

    @property
    def inbox(self) -> socket.socket:
        return self.inboxes[self.index][0]

    def outbox(self, vhost: str) -> socket.socket:
        """Where a connection to `vhost` is handed: its owner's inbox."""
        return self.inboxes[owner_of(vhost, self.count)][1]


def inbox_pairs(workers: int) -> list[tuple[socket.socket, socket.socket]]:
    """One Unix SOCK_SEQPACKET socket pair per worker, non-blocking: the supervisor makes them
    before it starts the workers (hand-off and control inboxes), and holds both ends."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(workers)]
    for ends in pairs:
        for end in ends:
            end.setblocking(False)  # the flag is the open file's: every worker's too
    return pairs


def store_placement(config: Config) -> Placement:
    """The owner of each virtual host's rows, or of each queue's in a spread one, when the
    broker starts with `config`."""
    return Placement(
        store_broker_id(config),
        config.workers,
        partial(owner_of, workers=config.workers),
        config.data_dir,
        spread=frozenset(config.spread_vhosts),
        queue_owner=partial(queue_owner, workers=config.workers),
    )
