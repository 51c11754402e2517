"""Browsing a classic queue's ready messages without consuming them, and removing chosen ones
(what management's browse, move, copy and delete of messages stand on). The order is the order
of delivery: AMQP 0-9-1 queues are FIFO, requeued messages go back "in their original position"
(RabbitMQ), and with x-max-priority the higher priority goes first."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message
from batonmq.queues.classic import ClassicQueue
from batonmq.queues.holdings import Holdings
from batonmq.queues.paging import Paging


def message(body: str, priority: int | None = None) -> Message:
    properties = commands.Basic.Properties(priority=priority)
    return Message("", "q", encode_header_payload(properties, len(body)), body.encode())


def browsed(queue: ClassicQueue, start: int = 0, count: int | None = None) -> list[str]:
    return [seen.message.body.decode() for seen in queue.browse(start, count)]


def test_browse_shows_ready_messages_in_delivery_order_and_consumes_nothing():
    queue = ClassicQueue("q")
    for body in "abc":
        queue.publish(message(body))
    [first] = queue.browse(0, 1)
    assert (first.position, first.redelivered) == (0, False)
    assert first.message_id == first.message.id
    assert browsed(queue) == ["a", "b", "c"]
    assert queue.message_count == 3


def test_a_requeued_message_is_browsed_in_its_old_place_marked_redelivered():
    """RabbitMQ: requeued messages "will be placed back in their original position"."""
    queue = ClassicQueue("q")
    for body in "abc":
        queue.publish(message(body))
    taken = queue.get()
    assert taken is not None
    queue.delivered(taken)  # to a client that must settle it
    queue.requeue([taken])
    seen = queue.browse()
    assert [(one.position, one.message.body, one.redelivered) for one in seen] == [
        (0, b"a", True),
        (1, b"b", False),
        (2, b"c", False),
    ]


def test_start_and_count_page_through_the_queue():
    queue = ClassicQueue("q")
    for body in "abcde":
        queue.publish(message(body))
    assert browsed(queue, 1, 2) == ["b", "c"]
    assert [one.position for one in queue.browse(3)] == [3, 4]
    assert browsed(queue, 9) == []


def test_a_priority_queue_is_browsed_highest_priority_first():
    """RabbitMQ (docs/priority): messages of higher priority are delivered first; FIFO within
    a priority."""
    queue = ClassicQueue("q", arguments={"x-max-priority": 5})
    queue.publish(message("low"))
    queue.publish(message("high", priority=5))
    queue.publish(message("mid", priority=2))
    queue.publish(message("high2", priority=9))  # capped at the queue's maximum
    assert browsed(queue) == ["high", "high2", "mid", "low"]


def test_browsing_stops_where_the_next_messages_are_in_the_store():
    """Paged-out messages are not in memory: browsing ends before them, never skips them."""
    queue = ClassicQueue("q")
    queue.ready.recovered(count=3, body_bytes=3, last_sequence=2)
    queue.next_sequence = 3
    queue.publish(message("after"))
    assert queue.browse() == []


def test_remove_takes_the_chosen_messages_out_for_good():
    """Removed messages leave as purged ones do: off the queue and out of the broker's
    holdings (MQ 3.5 admin guide, Table 2-4: the system-wide count)."""
    holdings = Holdings()
    queue = ClassicQueue("q", paging=Paging(holdings=holdings))
    for body in "abcd":
        queue.publish(message(body))
    ids = [seen.message_id for seen in queue.browse() if seen.message.body in (b"b", b"d")]
    assert queue.remove([*ids, 123456789]) == 2
    assert browsed(queue) == ["a", "c"]
    assert queue.message_count == 2
    assert (holdings.messages, holdings.bytes) == (2, 2)
    assert queue.remove(ids) == 0
