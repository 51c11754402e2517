"""Entries published to a queue and not yet visible: each waits for the journal batch that writes
it to commit ("How BatonMQ code reads" 13, commit then apply), so that a publish that must be
durable is seen only after its write commits, and a failed write leaves no trace of it (a nack
means the message is on no queue). What arrives after a held entry waits behind it, so that the
queue keeps publish order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from batonmq.model.message import QueueEntry


class HeldBack:
    """Held entries in publish order, each with the batch it waits for (None: it waits only for
    the entries before it)."""

    __slots__ = ("_waiters", "bytes", "entries")

    def __init__(self) -> None:
        #: (entry, batch), oldest first: read by the queue (its truth is "something is held"),
        #: changed only here.
        self.entries: deque[tuple[QueueEntry, int | None]] = deque()
        #: Body bytes of the held entries.
        self.bytes = 0
        self._waiters: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self.entries)

    def hold(self, entry: QueueEntry, until_batch: int | None) -> None:
        self.entries.append((entry, until_batch))
        self.bytes += entry.message.body_size

    def next_released(self, batch: int) -> tuple[QueueEntry, bool] | None:
        """The oldest entry that batch `batch` being over lets go, and whether it waited for a
        write of its own (so that it is dropped if that write failed); None when the oldest
        still waits for a later batch, or nothing is held."""
        entries = self.entries
        if not entries or (entries[0][1] is not None and entries[0][1] > batch):
            return None
        entry, until_batch = entries.popleft()
        self.bytes -= entry.message.body_size
        return entry, until_batch is not None

    def when_released(self, callback: Callable[[], None]) -> None:
        """Call `callback` once nothing is held (see `call_if_released`)."""
        self._waiters.append(callback)

    def call_if_released(self) -> None:
        """Call the waiters of `when_released` if nothing is held any more."""
        if not self.entries and self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter()

    def drop_all(self) -> None:
        """The queue is deleted: what it held goes, and its waiters are called."""
        self.entries.clear()
        self.bytes = 0
        self.call_if_released()
