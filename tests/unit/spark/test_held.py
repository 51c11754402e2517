"""The bookkeeping of a classic-queue read (at least once, as the issue asks: "messages are
acknowledged only after the batch that holds them has been committed"): messages numbered in
the order they were taken, a micro-batch a range of numbers, and one basic.ack with multiple for
a committed batch (AMQP 0-9-1 basic.ack: "up to and including the tag specified")."""

from __future__ import annotations

import pytest

from batonmq.spark.held import Held
from batonmq.spark.rows import Delivery


def delivery(number: int) -> Delivery:
    return Delivery(number, "", "jobs", f"m{number}".encode(), {}, {}, None, None)


def test_a_committed_range_is_acknowledged_by_its_newest_tag_and_forgotten():
    held = Held()
    for number, tag in enumerate([11, 12, 13, 14, 15]):
        held.number(tag, delivery(number))

    assert [d.offset for d in held.between(1, 4)] == [1, 2, 3]
    assert held.settle(3) == 13
    assert held.settle(3) is None
    assert [d.offset for d in held.between(0, 10)] == [3, 4]
    assert (held.next_number, len(held)) == (5, 2)


def test_messages_are_numbered_in_the_order_they_were_taken():
    held = Held(next_number=7)

    with pytest.raises(ValueError, match="numbered 8, expected 7"):
        held.number(1, delivery(8))
    held.number(1, delivery(7))
    assert held.next_number == 8


def test_a_lost_channel_forgets_what_it_held_and_numbering_goes_on_where_asked():
    """Its unacknowledged messages went back to the queue: nothing is left to acknowledge."""
    held = Held()
    held.number(1, delivery(0))
    held.number(2, delivery(1))

    held.forget(40)

    assert held.settle(100) is None
    assert held.next_number == 40
