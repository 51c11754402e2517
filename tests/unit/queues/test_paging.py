"""`Pager`, the store side of a queue's ready entries, on a broker that persists nothing (a
journal without a store): what it counts in the broker's holdings (MQ 3.5 admin guide, Table
2-4, imq.system.max_count and max_size) as entries are recovered, read back and cleared.
Spilling to and reading from a real store is tested with one in tests/integration/store."""

from __future__ import annotations

import struct

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.holdings import Holdings
from batonmq.queues.paging import Pager, Paging
from batonmq.queues.priority import PriorityReady
from batonmq.queues.ready import ReadyEntries
from batonmq.store.base import QueueBacklog


def entry(sequence: int, body: bytes) -> QueueEntry:
    return QueueEntry(Message("", "q", struct.pack(">HHQH", 60, 0, len(body), 0), body), sequence)


class Paged:
    def __init__(self, ready: ReadyEntries | PriorityReady | None = None) -> None:
        self.ready = ready or ReadyEntries()
        self.holdings = Holdings()
        self.reads = 0
        self.pager = Pager(
            "q",
            self.ready,
            Paging(holdings=self.holdings, window=4),
            persists=False,
            delivery_limit=None,
            paged_in=self._paged_in,
            saw_expiry=lambda: None,
        )

    def _paged_in(self) -> None:
        self.reads += 1

    def take_in(self, *entries: QueueEntry) -> None:
        for one in entries:
            self.ready.append(one)
            self.holdings.add(1, one.message.body_size)


def test_clear_lets_go_of_paged_holdings_and_returns_those_in_memory():
    """Holdings: an entry "leaves it for good" when purged; those in memory are the caller's to
    settle, those only in the store are let go of here."""
    paged = Paged()
    paged.ready.recovered(count=3, body_bytes=30, last_sequence=2)
    paged.holdings.add(3, 30)
    paged.take_in(entry(3, b"abcd"))
    count, in_memory = paged.pager.clear()
    assert count == 4
    assert [one.sequence for one in in_memory] == [3]
    assert (paged.holdings.messages, paged.holdings.bytes) == (1, 4)
    assert not paged.ready


def test_purge_empties_every_priority_level():
    paged = Paged(PriorityReady(2))
    paged.take_in(entry(0, b"a"), entry(1, b"bb"))
    paged.ready.recovered(count=2, body_bytes=5, last_sequence=9, priority=2)
    paged.holdings.add(2, 5)
    count, in_memory = paged.pager.purge()
    assert (count, len(in_memory)) == (4, 2)
    assert (paged.holdings.messages, paged.holdings.bytes) == (2, 3)


def test_recovery_counts_the_backlog_and_reads_the_head_back():
    """A queue coming back from the store holds its backlog, paged, and reads the first of it
    back at once (here: a journal without a store reads nothing)."""
    paged = Paged()
    paged.pager.recover([QueueBacklog("/", "q", count=5, bytes=50, last_sequence=11, priority=0)])
    assert len(paged.ready) == 5
    assert (paged.holdings.messages, paged.holdings.bytes) == (5, 50)
    assert paged.pager.ever_stored
    assert paged.reads == 1


def test_a_closed_pager_reads_nothing():
    paged = Paged()
    paged.ready.recovered(count=1, body_bytes=1, last_sequence=0)
    paged.pager.closed = True
    waited: list[str] = []
    paged.pager.when_paged_in(lambda: waited.append("x"))
    assert paged.reads == 0 and waited == []
