"""What waits for the journal batch being gathered ("commit then apply"): the queues holding
messages back until it commits (`RoutedQueue.release_held`) and the publishes to confirm then.

One journal callback per batch carries all of it. A persistent publish used to register a
callback of its own, with a closure and a list, and to ask each of its queues to release
after its commit; at thousands of messages per batch, that bookkeeping was a good part of what
persistence cost the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from batonmq.queues.protocol import RoutedQueue
from batonmq.store.journal import Journal

if TYPE_CHECKING:
    from batonmq.engine.channel import Channel


class _Waiting:
    """Everything that waits for one batch."""

    __slots__ = ("batch", "callbacks", "confirms", "queues")

    def __init__(self, batch: int) -> None:
        self.batch = batch
        #: Queues holding messages back for the batch, in the order they first did.
        self.queues: dict[RoutedQueue, None] = {}
        #: Per channel, its publishes to confirm: (sequence, whether every queue took it).
        self.confirms: dict[Channel, list[tuple[int, bool]]] = {}
        self.callbacks: list[Callable[[bool], None]] = []

    def over(self, committed: bool) -> None:
        # The queues first: a confirmed message is already on its queues.
        for queue in self.queues:
            queue.release_held(self.batch, committed)
        for channel, publishes in self.confirms.items():
            channel.settle_publishes(publishes, committed)
        for callback in self.callbacks:
            callback(committed)


class AfterWrite:
    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._waiting: _Waiting | None = None

    def _for(self, batch: int) -> _Waiting:
        waiting = self._waiting
        if waiting is None or waiting.batch != batch:
            assert batch == self._journal.batch, "only the batch being gathered is waited for"
            waiting = self._waiting = _Waiting(batch)
            self._journal.when_batch_over(waiting.over)
        return waiting

    def release(self, batch: int, queues: Iterable[RoutedQueue]) -> None:
        """`queues` hold messages back until journal batch `batch` is over: then they show them
        (committed) or drop them (failed)."""
        held = self._for(batch).queues
        for queue in queues:
            held[queue] = None

    def confirm(self, batch: int, channel: Channel, sequence: int, taken: bool) -> None:
        """Publish `sequence` of `channel` is acked once batch `batch` commits (if every queue
        took it), and nacked if the batch fails."""
        self._for(batch).confirms.setdefault(channel, []).append((sequence, taken))

    def call(self, batch: int, callback: Callable[[bool], None]) -> None:
        """`callback(committed)` once batch `batch` is over."""
        self._for(batch).callbacks.append(callback)
