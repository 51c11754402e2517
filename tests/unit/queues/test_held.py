"""`HeldBack`: entries published to a queue wait for the journal batch that writes them ("How
BatonMQ code reads" 13: "A durable change is written first and applied to memory only when the
write succeeded"), in publish order."""

from __future__ import annotations

import struct

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.held import HeldBack


def entry(sequence: int, body: bytes = b"x") -> QueueEntry:
    header = struct.pack(">HHQH", 60, 0, len(body), 0)
    return QueueEntry(Message("", "q", header, body), sequence)


def released(held: HeldBack, batch: int) -> list[tuple[int, bool]]:
    out = []
    while (next_one := held.next_released(batch)) is not None:
        out.append((next_one[0].sequence, next_one[1]))
    return out


def test_entries_wait_for_their_batch_and_what_came_after_waits_behind_them():
    """ARCHITECTURE, the message path: "State changes follow the store"; the queue keeps
    publish order, so a transient entry behind a held one waits too (batch None)."""
    held = HeldBack()
    held.hold(entry(0, b"abc"), 7)
    held.hold(entry(1), None)
    held.hold(entry(2), 8)
    assert (len(held), held.bytes) == (3, 5)

    assert released(held, 6) == []
    assert released(held, 7) == [(0, True), (1, False)]
    assert (len(held), held.bytes) == (1, 1)
    assert released(held, 8) == [(2, True)]
    assert not held.entries and held.bytes == 0


def test_waiters_are_called_once_nothing_is_held():
    held = HeldBack()
    calls: list[str] = []
    held.hold(entry(0), 1)
    held.when_released(lambda: calls.append("released"))
    held.call_if_released()
    assert calls == []
    released(held, 1)
    held.call_if_released()
    held.call_if_released()
    assert calls == ["released"]


def test_dropping_all_releases_the_waiters():
    """A deleted queue releases the publishers it held back."""
    held = HeldBack()
    calls: list[str] = []
    held.hold(entry(0), 1)
    held.when_released(lambda: calls.append("released"))
    held.drop_all()
    assert (len(held), held.bytes, calls) == (0, 0, ["released"])
