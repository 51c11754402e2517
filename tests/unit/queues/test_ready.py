"""`ReadyEntries`: the ready messages of a queue in sequence order, where an entry put back
(reject, nack, recover, a closed channel) returns to its original place (RabbitMQ: requeued
messages are "placed back in their original position in the queue, if possible"; spec 4.7: the
server preserves order "unless the redelivered field is set")."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.ready import ReadyEntries
from tests.unit.queues.pagingmodel import PagingModel


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
    assert ready.clear()[0] == 2
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


# Paging ----------------------------------------------------------------------------------------


def test_a_backlog_beyond_the_window_leaves_memory_and_comes_back_in_order():
    """The Durable messaging requirements: "A queue keeps a bounded window of message bodies in
    memory and reads the rest from the store on demand"."""
    model = PagingModel(ReadyEntries(), window=10)
    for _ in range(100):
        model.append()
    assert len(model.ready) == 100
    assert model.ready.in_memory <= 10
    assert model.ready.paged_count >= 90
    assert [model.pop().sequence for _ in range(100)] == list(range(100))  # type: ignore[union-attr]
    assert not model.ready


def test_a_failed_spill_keeps_the_entries_in_memory():
    """Nothing leaves memory unless the store has committed it."""
    ready = ReadyEntries()
    for sequence in range(20):
        ready.append(entry(sequence))
    spilling = ready.to_spill(10, 1 << 30)
    assert spilling
    ready.spilled(spilling, committed=False)
    assert (ready.in_memory, ready.paged_count) == (20, 0)
    assert pop_all(ready) == list(range(20))


def test_clear_drops_a_page_in_that_was_under_way():
    """A purge while entries are being read back: what the read returns is stale."""
    model = PagingModel(ReadyEntries(), window=4)
    for _ in range(20):
        model.append()
    request = model.ready.page_in_request(4)
    assert request is not None
    count, _in_memory = model.ready.clear()
    assert count == 20
    model.ready.paged_in([entry(sequence) for sequence in range(request.after + 1, 25)])
    assert not model.ready
    assert model.ready.pop() is None


def test_what_memory_holds_below_the_paged_entries_is_not_paged_again():
    """Paged entries have sequences after every entry in memory but the tail's. Entries read
    back from the store, and requeued ones, are older than the paged ones: when they alone put
    memory over the window, none of them is written out again. (One was: it landed below the
    paged range, where no read looks, and stayed in the store until a restart.) Hypothesis
    found this interleaving."""
    model = PagingModel(ReadyEntries(), window=3)
    for _ in range(6):
        model.append()
    taken = [model.pop()]
    model.append()
    model.append()
    taken += [model.pop() for _ in range(4)]
    for back in taken[:2]:
        assert back is not None
        model.ready.put_back(back)
    model.append()
    drained = []
    while (popped := model.pop()) is not None:
        drained.append(popped.sequence)
    assert drained == [0, 1, 5, 6, 7, 8]
    assert not model.ready
    assert model.store == {}


@settings(max_examples=300, deadline=None)
@given(
    window=st.integers(2, 8),
    ops=st.lists(
        st.one_of(
            st.just(("append", 0)),
            st.just(("pop", 0)),
            st.tuples(st.just("put_back"), st.integers(0, 50)),
        ),
        max_size=120,
    ),
)
def test_paging_loses_and_duplicates_nothing(window, ops):
    """Whatever the interleaving of publishes, deliveries, requeues and paging, every entry is
    delivered exactly once per time it is ready; with no requeues, in sequence order."""
    model = PagingModel(ReadyEntries(), window)
    ready_set: set[int] = set()
    taken: list[QueueEntry] = []
    popped_order: list[int] = []
    any_put_back = False
    for operation, index in ops:
        if operation == "append":
            ready_set.add(model.append())
        elif operation == "pop":
            popped = model.pop()
            if ready_set:
                assert popped is not None
                assert popped.sequence in ready_set
                ready_set.remove(popped.sequence)
                taken.append(popped)
                popped_order.append(popped.sequence)
            else:
                assert popped is None
        elif taken:
            back = taken.pop(index % len(taken))
            model.ready.put_back(back)
            ready_set.add(back.sequence)
            any_put_back = True
        assert len(model.ready) == len(ready_set)
        assert model.ready.in_memory <= window + 2 + len(taken) + 50
    while (popped := model.pop()) is not None:
        ready_set.remove(popped.sequence)
        popped_order.append(popped.sequence)
    assert not ready_set
    if not any_put_back:
        assert popped_order == sorted(popped_order)
