"""Paged entries that the store quarantined instead of reading back (their message failed its
checksum, batonmq.store.integrity): hardening, defect 5, "quarantine a record that fails ... never
delivered", and the brief's "the entry no longer counts in the queue"."""

from __future__ import annotations

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.priority import PriorityReady
from batonmq.queues.ready import ReadyEntries
from batonmq.store.base import QuarantinedEntry


def entry(sequence: int) -> QueueEntry:
    """An entry of level 0 (no properties)."""
    return QueueEntry(Message("", "q", b"\x00" * 14, f"m{sequence}".encode()), sequence)


def quarantined(sequence: int, priority: int = 0) -> QuarantinedEntry:
    return QuarantinedEntry(sequence, 1000 + sequence, priority, len(f"m{sequence}".encode()))


def pop_all(ready: ReadyEntries | PriorityReady) -> list[int]:
    popped = []
    while (next_entry := ready.pop()) is not None:
        popped.append(next_entry.sequence)
    return popped


def test_a_quarantined_entry_leaves_the_queue_and_the_rest_is_served_in_order() -> None:
    """A queue recovered with entries 0..4 in the store, of which the store quarantines 2 and 4
    (the last): the others are served in order, the queue's length and bytes count neither, and
    what left is reported for the broker's holdings."""
    ready = ReadyEntries()
    ready.recovered(5, 10, 4)
    request = ready.page_in_request(16)
    assert request is not None and (request.after, request.limit) == (-1, 5)

    left = ready.paged_in([entry(0), entry(1), entry(3)], [quarantined(2), quarantined(4)])

    assert left == (2, 4)
    assert (len(ready), ready.bytes, ready.paged_count, ready.paged_bytes) == (3, 6, 0, 0)
    ready.append(entry(5))
    assert pop_all(ready) == [0, 1, 3, 5]
    assert ready.page_in_request(16) is None


def test_a_quarantined_entry_of_a_purged_queue_is_not_counted_again() -> None:
    """A purge while the read was under way already took every paged entry out: the read's
    quarantined entries change nothing and report nothing."""
    ready = ReadyEntries()
    ready.recovered(3, 6, 2)
    assert ready.clear()[0] == 3

    assert ready.paged_in([entry(0)], [quarantined(1)]) == (0, 0)
    assert (len(ready), ready.bytes) == (0, 0)


def test_a_priority_level_whose_only_read_entry_is_quarantined_is_emptied() -> None:
    """A priority queue reads a level at a time; a read of level 1 that only quarantined its
    one entry empties that level, and the queue serves level 0 next."""
    ready = PriorityReady(2)
    ready.recovered(1, 2, 1, priority=0)
    ready.recovered(1, 2, 0, priority=1)
    request = ready.page_in_request(16)
    assert request is not None and request.priority == 1

    assert ready.paged_in([], [quarantined(0, priority=1)]) == (1, 2)

    request = ready.page_in_request(16)
    assert request is not None and request.priority == 0
    ready.paged_in([entry(1)])
    assert pop_all(ready) == [1]
    assert len(ready) == 0
