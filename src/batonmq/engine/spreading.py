"""What a virtual host spread over worker processes asks of the link between them.

Every worker of a spread virtual host holds its whole topology (exchanges, bindings, the
declarations of all its queues), but runs only the queues it owns; a queue owned elsewhere is a
`RoutedQueue` that takes messages for its owner. One worker, the virtual host's home, decides
every change of the topology in order and tells the others (`batonmq.model.topology`). A
`VirtualHost` with a `Spreading` checks a change as it always does, then asks it to carry the
change out (`request`) instead of writing it itself, unless it is the home or owns what changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from batonmq.engine.change import Change
from batonmq.model.topology import ConnectionRef, QueueDeclared, TopologyOp
from batonmq.queues.protocol import Queue, RoutedQueue


@dataclass(frozen=True, slots=True)
class Declared:
    """What queue.declare answers: the queue, and its counts where it runs."""

    name: str
    message_count: int
    consumer_count: int
    queue: RoutedQueue


class Spreading(Protocol):
    """A spread virtual host's side of the links between workers (see the module docstring)."""

    #: Whether this worker is the virtual host's home: it decides and writes its topology.
    is_home: bool
    #: Whether this worker's copy of the topology is the home's current one.
    synced: bool

    def owns(self, queue: str) -> bool:
        """Whether this worker runs queue `queue` (and writes its rows)."""
        ...

    def owner_of(self, queue: str) -> int:
        """The index of the worker that runs queue `queue`."""
        ...

    def remote_queue(self, declared: QueueDeclared) -> RoutedQueue:
        """The stand-in of a queue another worker runs: it takes messages for that worker."""
        ...

    def request(
        self,
        op: TopologyOp,
        *,
        owner: ConnectionRef | None,
        if_unused: bool = False,
        if_empty: bool = False,
    ) -> Change[Declared | int | None]:
        """Have the home carry out `op` (checked here already), asked by connection `owner`."""
        ...

    def counts(self, queue: RoutedQueue, *, touch: bool) -> Change[Declared]:
        """A passive declare or a redeclare of a queue another worker runs: its counts there
        (`touch`: a redeclare, which restarts its x-expires)."""
        ...

    def purge(self, queue: RoutedQueue) -> Change[int]:
        """queue.purge of a queue another worker runs."""
        ...

    def gone(self, queue: Queue) -> None:
        """This worker removed `queue` by itself (auto-delete, x-expires, its exclusive
        connection gone): the others forget it."""
        ...

    def when_synced(self, callback: Callable[[bool], None]) -> None:
        """`callback(True)` once `synced`, `callback(False)` if that takes too long."""
        ...

    def tx_group(self) -> contextlib.AbstractContextManager[None]:
        """The publishes of one tx.commit are enqueued inside it: each owner takes its share
        at once."""
        ...
