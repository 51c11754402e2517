"""`ReadyEntries`: the ready messages of a queue in sequence order, where an entry put back
(reject, nack, recover, a closed channel) returns to its original place (RabbitMQ: requeued
messages are "placed back in their original position in the queue, if possible"; spec 4.7: the
server preserves order "unless the redelivered field is set")."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.ready import ReadyEntries


def entry(sequence: int, body: bytes = b"") -> QueueEntry:
    return QueueEntry(Message("", "q", b"\x00" * 14, body or f"m{sequence}".encode()), sequence)


def pop_all(ready: ReadyEntries) -> list[int]:
    popped = []
    while (next_entry := ready.pop()) is not None:
        popped.append(next_entry.sequence)
    return popped


def test_entries_come_out_in_sequence_order():
    """Spec 4.7: messages come out in the order they went in."""
    ready = ReadyEntries()
    for sequence in range(4):
        ready.append(entry(sequence))
    assert len(ready) == 4
    assert ready
    assert pop_all(ready) == [0, 1, 2, 3]
    assert not ready
    assert ready.pop() is None


def test_put_back_returns_an_entry_to_its_sequence_position():
    """RabbitMQ: a requeued message goes back to its original position."""
    ready = ReadyEntries()
    entries = [entry(sequence) for sequence in range(5)]
    for each in entries:
        ready.append(each)
    taken = [ready.pop() for _ in range(3)]  # 0, 1, 2 out; 3, 4 ready
    assert [t.sequence for t in taken if t is not None] == [0, 1, 2]
    ready.put_back(entries[2])
    ready.put_back(entries[0])
    assert pop_all(ready) == [0, 2, 3, 4]


def test_put_back_behind_newer_appends_still_goes_first():
    """An entry put back after newer ones arrived still goes before them."""
    ready = ReadyEntries()
    old = entry(0)
    ready.append(old)
    assert ready.pop() is old
    ready.append(entry(1))
    ready.put_back(old)
    assert pop_all(ready) == [0, 1]


def test_bytes_counts_the_bodies_ready():
    """The ready byte count follows appends, pops, put-backs and clear."""
    ready = ReadyEntries()
    first, second = entry(0, b"abc"), entry(1, b"defgh")
    ready.append(first)
    ready.append(second)
    assert ready.bytes == 8
    assert ready.pop() is first
    assert ready.bytes == 5
    ready.put_back(first)
    assert ready.bytes == 8
    assert ready.clear() == 2
    assert (ready.bytes, len(ready)) == (0, 0)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int]]:
    """append / pop / put_back(k-th of the entries out) in any order."""
    return draw(
        st.lists(
            st.one_of(
                st.just(("append", 0)),
                st.just(("pop", 0)),
                st.tuples(st.just("put_back"), st.integers(0, 50)),
            ),
            max_size=80,
        )
    )


@settings(max_examples=500, deadline=None)
@given(ops=operations())
def test_ready_entries_behave_like_a_sorted_list(ops):
    """Against the plainest reference: a list of ready sequence numbers kept sorted, from which
    pop takes the smallest."""
    ready = ReadyEntries()
    reference: list[int] = []
    taken: list[QueueEntry] = []
    next_sequence = 0
    for operation, index in ops:
        if operation == "append":
            ready.append(entry(next_sequence))
            reference.append(next_sequence)
            next_sequence += 1
        elif operation == "pop":
            popped = ready.pop()
            if reference:
                assert popped is not None
                assert popped.sequence == reference.pop(0)
                taken.append(popped)
            else:
                assert popped is None
        elif taken:
            back = taken.pop(index % len(taken))
            ready.put_back(back)
            reference.append(back.sequence)
            reference.sort()
        assert len(ready) == len(reference)
        assert bool(ready) == bool(reference)
        assert ready.bytes == sum(len(f"m{sequence}") for sequence in reference)
    assert pop_all(ready) == reference
