"""A queue's ready entries whose spills and page-ins go to a dict standing in for the store's
table of entries (the real stores are tested against the same contract in
tests/integration/store): each stored entry keeps its priority level, and a read returns the
entries of the level asked for, as `Store.read_entries` does."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.priority import PriorityReady
from batonmq.queues.ready import ReadyEntries


def entry(sequence: int, priority: int | None = None) -> QueueEntry:
    body = f"m{sequence}".encode()
    header = encode_header_payload(commands.Basic.Properties(priority=priority), len(body))
    return QueueEntry(Message("", "q", header, body), sequence)


class PagingModel:
    def __init__(self, ready: ReadyEntries | PriorityReady, window: int) -> None:
        self.ready = ready
        self.window = window
        #: sequence -> (priority level, the priority property)
        self.store: dict[int, tuple[int, int | None]] = {}
        self.next_sequence = 0

    def append(self, priority: int | None = None) -> int:
        new = entry(self.next_sequence, priority)
        self.next_sequence += 1
        self.ready.append(new)
        while spilling := self.ready.to_spill(self.window, 1 << 30):
            for spilled in spilling:
                self.store[spilled.sequence] = (self.ready.level_of(spilled), priority_of(spilled))
            self.ready.spilled(spilling, committed=True)
        return new.sequence

    def page_in(self) -> None:
        request = self.ready.page_in_request(self.window)
        if request is not None:
            found = sorted(
                sequence
                for sequence, (level, _) in self.store.items()
                if sequence > request.after and request.priority in (None, level)
            )[: request.limit]
            self.ready.paged_in([entry(sequence, self.store[sequence][1]) for sequence in found])

    def pop(self) -> QueueEntry | None:
        popped = self.ready.pop()
        if popped is None and self.ready.waiting_for_page_in:
            self.page_in()
            popped = self.ready.pop()
        if popped is not None:
            self.store.pop(popped.sequence, None)  # settled: the store forgets it
        return popped


def priority_of(queue_entry: QueueEntry) -> int | None:
    return queue_entry.message.priority if queue_entry.message.priority else None
