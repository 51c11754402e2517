"""`PriorityReady`: the ready entries of a priority queue, each level paged on its own.

RabbitMQ (https://www.rabbitmq.com/docs/priority): "messages with a higher priority are
delivered first"; within a priority, FIFO; a requeued message returns to its place. The Durable
messaging requirements: "A queue keeps a bounded window of message bodies in memory and reads the
rest from the store on demand, so a backlog larger than memory works" — a priority queue too."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from batonmq.model.message import QueueEntry
from batonmq.queues.priority import MIN_LEVEL_WINDOW, PriorityReady
from batonmq.queues.ready import PageRequest
from tests.unit.queues.pagingmodel import PagingModel, entry


def drain(model: PagingModel) -> list[tuple[int, int]]:
    """(priority, sequence) of every entry, in the order they come out."""
    out = []
    while (popped := model.pop()) is not None:
        out.append((popped.message.priority, popped.sequence))
    return out


def test_a_backlog_of_every_level_leaves_memory_and_comes_back_in_priority_order():
    model = PagingModel(PriorityReady(max_priority=2), window=3 * MIN_LEVEL_WINDOW)
    published = [(sequence % 3, model.append(sequence % 3)) for sequence in range(600)]
    assert len(model.ready) == 600
    assert model.ready.in_memory <= 3 * MIN_LEVEL_WINDOW
    assert model.ready.paged_count >= 600 - 3 * MIN_LEVEL_WINDOW
    assert drain(model) == sorted(published, key=lambda item: (-item[0], item[1]))
    assert not model.ready


def test_a_priority_above_the_maximum_is_paged_at_the_maximum():
    """RabbitMQ: a priority above x-max-priority counts as the maximum."""
    ready = PriorityReady(max_priority=2)
    assert ready.level_of(entry(0, priority=9)) == 2
    assert ready.level_of(entry(1)) == 0


def test_only_the_level_being_served_is_read_back():
    """A lower level waits in the store until it is the highest with anything ready, so that
    reading it never delays the level being served."""
    ready = PriorityReady(max_priority=1)
    ready.recovered(5, 50, 9, priority=0)
    ready.recovered(5, 50, 8, priority=1)
    assert len(ready) == 10
    assert ready.pop() is None
    assert ready.waiting_for_page_in
    assert ready.page_in_request(100) == PageRequest(-1, 5, priority=1)
    ready.paged_in([entry(sequence, priority=1) for sequence in (0, 2, 4, 6, 8)])
    assert not ready.waiting_for_page_in
    assert [ready.pop().sequence for _ in range(5)] == [0, 2, 4, 6, 8]  # type: ignore[union-attr]
    assert ready.pop() is None
    assert ready.page_in_request(100) == PageRequest(-1, 5, priority=0)


def test_a_new_high_priority_entry_is_served_before_a_paged_low_level():
    ready = PriorityReady(max_priority=1)
    ready.recovered(3, 30, 2, priority=0)
    ready.append(entry(3, priority=1))
    assert ready.pop().sequence == 3  # type: ignore[union-attr]
    assert ready.pop() is None
    assert ready.waiting_for_page_in


def test_each_paged_level_is_a_range_of_its_own():
    """A purge deletes each level's paged entries by range and level, never another level's
    entries (which may be delivered and unacknowledged) with sequences in between."""
    model = PagingModel(PriorityReady(max_priority=1), window=2 * MIN_LEVEL_WINDOW)
    for sequence in range(200):
        model.append(sequence % 2)
    ranges = model.ready.paged_ranges()
    assert {paged.priority for paged in ranges} == {0, 1}
    for paged in ranges:
        stored = [s for s, (level, _) in model.store.items() if level == paged.priority]
        assert all(paged.first <= s <= paged.last for s in stored)
    count, in_memory = model.ready.clear()
    assert count == 200
    assert len(in_memory) == 200 - sum(
        1 for s, (level, _) in model.store.items() if level in (0, 1)
    )
    assert not model.ready


@settings(max_examples=300, deadline=None)
@given(
    window=st.integers(2, 3 * MIN_LEVEL_WINDOW),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.sampled_from([None, 0, 1, 2, 7])),
            st.just(("pop", 0)),
            st.tuples(st.just("put_back"), st.integers(0, 50)),
        ),
        max_size=300,
    ),
)
def test_paging_keeps_priority_order_and_loses_nothing(window, ops):
    """Whatever the interleaving of publishes, deliveries, requeues and paging, every pop is the
    oldest entry of the highest level that has any ready, and each entry comes out exactly once
    per time it is ready."""
    model = PagingModel(PriorityReady(max_priority=2), window)
    ready: dict[int, int] = {}  # sequence -> level
    taken: list[QueueEntry] = []
    for operation, argument in ops:
        if operation == "append":
            sequence = model.append(argument)
            ready[sequence] = min(argument or 0, 2)
        elif operation == "pop":
            popped = model.pop()
            if not ready:
                assert popped is None
                continue
            top = max(ready.values())
            assert popped is not None
            assert popped.sequence == min(s for s, level in ready.items() if level == top)
            del ready[popped.sequence]
            taken.append(popped)
        elif taken:
            back = taken.pop(argument % len(taken))
            model.ready.put_back(back)
            ready[back.sequence] = model.ready.level_of(back)
        assert len(model.ready) == len(ready)
    assert sorted(sequence for _, sequence in drain(model)) == sorted(ready)
