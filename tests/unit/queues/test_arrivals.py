"""The oldest message's age from checkpoints of a queue's next sequence (`batonmq.queues.arrivals`),
which Qpid manual §2.11.5.3 needs ("when the oldest message in the associated private queue for
the consumer ages beyond the specified value") without a clock read per published message.

The estimate is a lower bound: an entry is known to be in its queue from the first checkpoint
whose next sequence is above it, so no age is ever overstated."""

from __future__ import annotations

from batonmq.model.message import Message
from batonmq.queues.arrivals import Arrivals, QueueAges
from batonmq.queues.classic import ClassicQueue
from tests.manualtimers import ManualTimers


def message(body: bytes = b"x") -> Message:
    return Message("", "q", b"\x00" * 14, body)


# --- Arrivals: pure checkpoints ------------------------------------------------------------


def test_an_entry_is_as_old_as_the_first_checkpoint_after_it() -> None:
    arrivals = Arrivals()
    arrivals.checkpoint(0, now_ms=1_000)  # nothing published yet
    arrivals.checkpoint(3, now_ms=2_000)  # entries 0, 1, 2 arrived in (1000, 2000]
    arrivals.checkpoint(5, now_ms=3_000)  # entries 3, 4 arrived in (2000, 3000]

    assert arrivals.age_ms(0, now_ms=10_000) == 8_000
    assert arrivals.age_ms(2, now_ms=10_000) == 8_000
    assert arrivals.age_ms(3, now_ms=10_000) == 7_000
    assert arrivals.age_ms(4, now_ms=10_000) == 7_000


def test_an_entry_after_the_newest_checkpoint_counts_as_new() -> None:
    arrivals = Arrivals()
    arrivals.checkpoint(3, now_ms=2_000)

    assert arrivals.age_ms(3, now_ms=10_000) == 0
    assert Arrivals().age_ms(0, now_ms=10_000) == 0


def test_a_checkpoint_without_publishes_keeps_the_earlier_time() -> None:
    """Nothing published between two checkpoints: the entries below were there at the first."""
    arrivals = Arrivals()
    arrivals.checkpoint(2, now_ms=1_000)
    arrivals.checkpoint(2, now_ms=5_000)

    assert len(arrivals) == 1
    assert arrivals.age_ms(1, now_ms=6_000) == 5_000


def test_forgetting_keeps_what_the_head_and_later_entries_need() -> None:
    arrivals = Arrivals()
    for sequence, at in ((0, 0), (3, 1_000), (5, 2_000), (9, 3_000)):
        arrivals.checkpoint(sequence, at)

    arrivals.forget_before(4)  # the head is entry 4 now

    assert len(arrivals) == 2
    assert arrivals.age_ms(4, now_ms=10_000) == 8_000
    assert arrivals.age_ms(8, now_ms=10_000) == 7_000


def test_thinning_keeps_the_bound_true_and_the_list_short() -> None:
    """Over the limit, every other checkpoint goes: each age stays a lower bound of the truth."""
    arrivals = Arrivals(limit=8)
    # Entry n is published at time 100 * n + 50; a checkpoint at each 100 ms.
    for tick in range(1, 40):
        arrivals.checkpoint(tick, now_ms=100 * tick)
    assert len(arrivals) <= 8

    now = 10_000
    for sequence in range(39):
        true_age = now - (100 * sequence + 50)
        assert 0 <= arrivals.age_ms(sequence, now) <= true_age
    assert arrivals.age_ms(0, now) == now - 100  # the oldest checkpoint is kept


# --- QueueAges over real queues -------------------------------------------------------------


def test_age_of_a_queues_head_follows_consumption() -> None:
    timers = ManualTimers()
    ages = QueueAges(timers)
    queue = ClassicQueue("q", timers=timers)
    ages.checkpoint([queue])
    queue.publish(message())  # entry 0
    timers.advance(1_000)
    ages.checkpoint([queue])
    queue.publish(message())  # entry 1
    timers.advance(1_000)
    ages.checkpoint([queue])
    timers.advance(500)

    assert ages.oldest_age_ms(queue) == 1_500
    queue.get()
    assert ages.oldest_age_ms(queue) == 500
    queue.get()
    assert ages.oldest_age_ms(queue) == 0  # empty


def test_a_requeued_entry_is_aged_from_its_first_arrival() -> None:
    """A delivered entry that comes back (its consumer's connection closed) is as old as when it
    first arrived, at least as long as the checkpoint after it is still kept."""
    timers = ManualTimers()
    ages = QueueAges(timers)
    queue = ClassicQueue("q", timers=timers)
    queue.publish(message())
    ages.checkpoint([queue])
    taken = queue.get()
    assert taken is not None
    timers.advance(3_000)
    ages.checkpoint([queue])

    queue.requeue([taken])

    assert ages.oldest_age_ms(queue) == 3_000


def test_queues_no_longer_there_are_forgotten() -> None:
    timers = ManualTimers()
    ages = QueueAges(timers)
    queue = ClassicQueue("q", timers=timers)
    queue.publish(message())
    ages.checkpoint([queue])
    timers.advance(1_000)

    ages.checkpoint([])

    assert ages.oldest_age_ms(queue) == 0


def test_a_paged_out_head_is_bounded_by_the_newest_paged_entry() -> None:
    """The head is in the store (not in memory): an age is still known, from the newest paged
    entry, which is younger than the head."""
    queue = ClassicQueue("q")
    queue.ready.recovered(count=5, body_bytes=5, last_sequence=4)
    queue.next_sequence = 5

    assert queue.ready.peek() is None
    assert queue.oldest_sequence_bound() == 4
    assert ClassicQueue("empty").oldest_sequence_bound() is None
