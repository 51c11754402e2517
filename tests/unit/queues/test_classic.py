"""`ClassicQueue` with stub consumers: round-robin within each consumer's room (AMQP 0-9-1 basic
class: the server distributes messages among a queue's consumers), FIFO by publish order, and
requeued entries back in place, flagged redelivered."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from batonmq.model.message import ENTRY_COST, Message, QueueEntry
from batonmq.queues.classic import ClassicQueue
from batonmq.selectors import Selector
from batonmq.store.base import PagedEntry, StoredMessage


@dataclass(eq=False)
class StubConsumer:
    tag: str
    room: int = 1000
    exclusive: bool = False
    priority: int = 0
    selector: Selector | None = None
    received: list[QueueEntry] = field(default_factory=list)

    def has_room(self) -> bool:
        return self.room > 0

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None:
        self.room -= 1
        self.received.append(entry)


def message(body: str) -> Message:
    return Message("", "q", b"\x00" * 14, body.encode())


def bodies(consumer: StubConsumer) -> list[str]:
    return [entry.message.body.decode() for entry in consumer.received]


def publish(queue: ClassicQueue, *bodies_: str) -> None:
    for body in bodies_:
        queue.publish(message(body))


def test_messages_wait_in_publish_order_without_consumers():
    """Spec 3.1.4 / 4.7: a queue holds messages in FIFO order."""
    queue = ClassicQueue("q")
    publish(queue, "a", "b", "c")
    assert queue.message_count == 3
    got = [queue.get() for _ in range(3)]
    assert [g.message.body for g in got if g is not None] == [b"a", b"b", b"c"]
    assert queue.get() is None


def test_consumers_are_served_round_robin():
    """AMQP 0-9-1 basic class: messages are distributed among a queue's consumers; a classic queue
    goes round-robin."""
    queue = ClassicQueue("q")
    a, b, c = StubConsumer("a"), StubConsumer("b"), StubConsumer("c")
    for consumer in (a, b, c):
        queue.add_consumer(consumer)
    publish(queue, *"0123456")
    assert (bodies(a), bodies(b), bodies(c)) == (["0", "3", "6"], ["1", "4"], ["2", "5"])
    assert queue.message_count == 0


def test_dispatch_hands_out_what_waited_round_robin():
    """Messages that waited for consumers are distributed round-robin too."""
    queue = ClassicQueue("q")
    publish(queue, *"0123")
    a, b = StubConsumer("a"), StubConsumer("b")
    queue.add_consumer(a)
    queue.add_consumer(b)
    queue.dispatch()
    assert (bodies(a), bodies(b)) == (["0", "2"], ["1", "3"])


def test_a_consumer_without_room_is_skipped_and_served_when_it_has_room():
    """basic.qos, prefetch-count: the server "MUST NOT send more" than a consumer's window; a full
    consumer is skipped, not blocked on."""
    queue = ClassicQueue("q")
    full, free = StubConsumer("full", room=0), StubConsumer("free", room=2)
    queue.add_consumer(full)
    queue.add_consumer(free)
    publish(queue, *"0123")
    assert (bodies(full), bodies(free)) == ([], ["0", "1"])
    assert queue.message_count == 2, "no consumer has room: the rest waits"
    full.room = 5
    queue.dispatch()
    assert bodies(full) == ["2", "3"]


def test_requeued_entries_go_back_in_place_and_are_redelivered_first():
    """RabbitMQ: requeued messages go back to their original position; spec 4.7: order may change
    only for messages flagged redelivered."""
    queue = ClassicQueue("q")
    publish(queue, *"01234")
    taken = [queue.get() for _ in range(3)]
    entries = [t for t in taken if t is not None]
    for entry in entries:
        queue.delivered(entry)  # to a client that must settle it
    queue.requeue([entries[2], entries[0]])
    consumer = StubConsumer("c")
    queue.add_consumer(consumer)
    queue.dispatch()
    assert bodies(consumer) == ["0", "2", "3", "4"]
    assert [entry.redelivered for entry in consumer.received] == [True, True, False, False]


def test_requeue_to_a_deleted_queue_drops_the_entries():
    """A deleted queue takes nothing back (RabbitMQ: deliveries of a deleted queue are not
    requeued)."""
    queue = ClassicQueue("q")
    publish(queue, "a")
    taken = queue.get()
    assert taken is not None
    queue.deleted = True
    queue.requeue([taken])
    assert queue.message_count == 0


def test_purge_drops_ready_messages_and_counts_them():
    """queue.purge-ok, message-count: "Reports the number of messages purged"."""
    queue = ClassicQueue("q")
    publish(queue, "a", "b")
    assert queue.purge() == 2
    assert queue.message_count == 0


def test_consumer_bookkeeping():
    """basic.consume, exclusive: "Request exclusive consumer access, meaning only this consumer can
    access the queue"; the queue knows whether it has one."""
    queue = ClassicQueue("q", exclusive_owner=object(), auto_delete=True)
    assert queue.exclusive
    assert queue.consumer_count == 0
    consumer = StubConsumer("x", exclusive=True)
    queue.add_consumer(consumer)
    assert queue.consumer_count == 1
    assert queue.has_exclusive_consumer()
    queue.remove_consumer(consumer)
    assert queue.consumer_count == 0
    assert not queue.has_exclusive_consumer()


@dataclass(eq=False)
class CountingConsumer(StubConsumer):
    asked: int = 0

    def has_room(self) -> bool:
        self.asked += 1
        return super().has_room()


def test_messages_published_while_every_consumer_is_full_do_not_ask_them_again():
    """The cost of a publish does not grow with the consumers when none has room: the queue
    remembers that the last hand-out found none, and only what gives a consumer room (an ack, flow,
    a drained socket, a new consumer: each calls dispatch) looks again."""
    queue = ClassicQueue("q")
    consumers = [CountingConsumer(str(n), room=1) for n in range(16)]
    for consumer in consumers:
        queue.add_consumer(consumer)
    publish(queue, *(str(n) for n in range(16)))  # one each: all full now
    publish(queue, "first waiting")
    asked = sum(consumer.asked for consumer in consumers)

    publish(queue, *(f"waiting {n}" for n in range(100)))

    assert sum(consumer.asked for consumer in consumers) == asked
    assert queue.message_count == 101
    consumers[5].room = 2
    queue.dispatch()  # as an ack of consumer 5 would
    assert bodies(consumers[5]) == ["5", "first waiting", "waiting 0"]
    assert queue.message_count == 99


def test_a_new_consumer_is_served_though_the_others_were_full():
    queue = ClassicQueue("q")
    full = StubConsumer("full", room=0)
    queue.add_consumer(full)
    publish(queue, "a", "b")
    late = StubConsumer("late")
    queue.add_consumer(late)
    publish(queue, "c")
    assert bodies(late) == ["a", "b", "c"]


def test_a_hand_out_asks_each_consumer_at_most_once_per_message():
    """Without selectors, the consumer is chosen before the entry is taken, in one round-robin
    walk (not a walk to see whether any has room, then another to choose)."""
    queue = ClassicQueue("q")
    consumers = [CountingConsumer(str(n), room=0) for n in range(8)]
    consumers[7].room = 1
    for consumer in consumers:
        queue.add_consumer(consumer)

    publish(queue, "only")

    assert bodies(consumers[7]) == ["only"]
    # One walk found consumer 7 (8 asks); the hand-out then stopped at the empty queue.
    assert sum(consumer.asked for consumer in consumers) == 8


def test_a_hand_out_asks_a_full_consumer_once_not_once_per_message():
    """When one of many consumers gets room back (its ack), the entries it takes cost one question
    each, not a walk past every full consumer per entry: a consumer found full in a hand-out is
    not asked again in it, since nothing a hand-out does gives a consumer room. The round-robin
    (AMQP 0-9-1 basic class) is kept: the full ones go to its back."""
    queue = ClassicQueue("q")
    consumers = [CountingConsumer(str(n), room=0) for n in range(16)]
    for consumer in consumers:
        queue.add_consumer(consumer)
    publish(queue, *(str(n) for n in range(100)))
    assert sum(consumer.asked for consumer in consumers) == 16  # all full: saturated
    for consumer in consumers:
        consumer.asked = 0
    consumers[3].room = 100

    queue.dispatch()  # as an ack of consumer 3 would

    assert len(consumers[3].received) == 100
    # Each of the 15 full consumers once, consumer 3 once per entry (then the queue was empty).
    assert sum(consumer.asked for consumer in consumers) == 15 + 100
    consumers[3].room = 1
    consumers[9].room = 1
    publish(queue, "a", "b")
    assert (bodies(consumers[3])[-1], bodies(consumers[9])) == ("a", ["b"])


@dataclass(eq=False)
class FailingConsumer(StubConsumer):
    """A consumer whose hand-over fails (as a channel's write could)."""

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None:
        raise RuntimeError("hand-over failed")


def test_consumers_that_sat_out_a_failed_hand_out_are_still_the_queues():
    """A hand-out that ends in an error keeps every consumer: the ones it found full sit out only
    while it runs, so the failure neither loses the entry (it keeps its place) nor drops a
    consumer from the round-robin."""
    queue = ClassicQueue("q")
    full = [StubConsumer(f"full {n}", room=0) for n in range(3)]
    failing = FailingConsumer("failing")
    for consumer in (*full, failing):
        queue.add_consumer(consumer)

    with pytest.raises(RuntimeError):
        publish(queue, "kept")

    assert queue.message_count == 1
    assert {consumer.tag for consumer in queue.consumers} == {
        "full 0",
        "full 1",
        "full 2",
        "failing",
    }
    queue.remove_consumer(failing)
    full[1].room = 1
    queue.dispatch()
    assert bodies(full[1]) == ["kept"]


@dataclass(eq=False)
class CancellingConsumer(StubConsumer):
    """A consumer whose hand-over cancels another consumer of the queue."""

    victim: StubConsumer | None = None

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None:
        super().deliver(queue, entry)
        if self.victim is not None:
            queue.remove_consumer(self.victim)
            self.victim = None


def test_a_consumer_that_sits_out_a_hand_out_can_be_cancelled_during_it():
    """A consumer found full sits out the rest of the hand-out; if a delivery cancels it
    meanwhile, it is gone for good and every other consumer stays."""
    queue = ClassicQueue("q")
    victim, other = StubConsumer("victim", room=0), StubConsumer("other", room=0)
    cancelling = CancellingConsumer("cancelling", room=2, victim=victim)
    for consumer in (victim, other, cancelling):
        queue.add_consumer(consumer)

    publish(queue, "a")

    assert bodies(cancelling) == ["a"]
    assert [consumer.tag for consumer in queue.consumers] == ["cancelling", "other"]
    other.room = 1
    publish(queue, "b", "c")
    assert (bodies(cancelling), bodies(other)) == (["a", "b"], ["c"])


@dataclass(eq=False)
class ConsumingConsumer(StubConsumer):
    """A consumer whose hand-over adds another consumer to the queue."""

    newcomer: StubConsumer | None = None

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None:
        super().deliver(queue, entry)
        if self.newcomer is not None:
            queue.add_consumer(self.newcomer)
            self.newcomer = None


def test_a_consumer_added_during_a_hand_out_leaves_the_full_ones_in_their_places():
    """A consumer added while others sit out a hand-out (here with a new priority, which
    splits the consumers into priority groups) finds every consumer there: the full one is
    served once it has room."""
    queue = ClassicQueue("q")
    full, high = StubConsumer("full", room=0), StubConsumer("high", priority=5)
    adding = ConsumingConsumer("adding", room=1, newcomer=high)
    for consumer in (full, adding):
        queue.add_consumer(consumer)

    publish(queue, "a")

    assert {consumer.tag for consumer in queue.consumers} == {"full", "adding", "high"}
    queue.remove_consumer(high)
    full.room = 1
    publish(queue, "b")
    assert (bodies(adding), bodies(full)) == (["a"], ["b"])


def test_full_consumers_of_a_higher_priority_sit_out_and_come_back_first():
    """RabbitMQ's "Consumer Priorities": "messages only going to lower priority consumers when
    the high priority consumers block"; once they have room again they come first."""
    queue = ClassicQueue("q")
    high = [CountingConsumer(f"high {n}", room=0, priority=5) for n in range(2)]
    low = CountingConsumer("low", room=3)
    for consumer in (*high, low):
        queue.add_consumer(consumer)

    publish(queue, "a", "b", "c")

    assert bodies(low) == ["a", "b", "c"]
    # Each full high-priority consumer was asked once per hand-out (one per publish), not
    # once per entry on top.
    assert [consumer.asked for consumer in high] == [3, 3]
    high[1].room = 1
    publish(queue, "d")
    assert bodies(high[1]) == ["d"]


def _taken_over(sequence: int, body: str, delivery_count: int = 1) -> PagedEntry:
    stored = StoredMessage(0, "", "q", b"\x00" * 14, body.encode())
    return PagedEntry(sequence, delivery_count, stored)


def test_entries_taken_over_follow_the_queues_own_and_what_comes_after_follows_them():
    """MQ 4.1 HA guide: the takeover broker serves the failed broker's messages; a queue both
    brokers had (destinations are cluster-wide) serves its own first, then those taken over in
    their order, each flagged redelivered (AMQP 0-9-1: "previously delivered to this or another
    client"), then what is published after."""
    queue = ClassicQueue("q")
    publish(queue, "own0", "own1")
    consumer = StubConsumer("c", room=1)
    queue.add_consumer(consumer)

    queue.adopt([_taken_over(1 << 32, "x0"), _taken_over((1 << 32) + 1, "x1", delivery_count=0)])
    publish(queue, "after")

    assert queue.next_sequence == (1 << 32) + 3
    assert queue.message_count == 4
    consumer.room = 10
    queue.dispatch()
    assert bodies(consumer) == ["own0", "own1", "x0", "x1", "after"]
    assert [entry.redelivered for entry in consumer.received] == [False, False, True, False, False]
    assert all(entry.stored for entry in consumer.received[2:4])


def test_memory_is_what_the_ready_messages_in_memory_take_and_not_those_in_the_store():
    """The management API's queue `memory`, an estimate: each ready message held in memory costs
    its body and ENTRY_COST; a backlog left in the store (paged) costs nothing; a message that
    went to a consumer is no longer the queue's."""
    for arguments in ({}, {"x-max-priority": 3}):
        queue = ClassicQueue("q", arguments=arguments)
        queue.ready.recovered(count=5, body_bytes=500, last_sequence=4)  # left in the store
        queue.next_sequence = 5
        assert (queue.message_count, queue.memory) == (5, 0)
        publish(queue, "abcd", "efghij")
        assert queue.memory == 2 * ENTRY_COST + 10

    queue = ClassicQueue("q")
    publish(queue, "abcd", "efghij")
    assert queue.get() is not None
    assert queue.memory == ENTRY_COST + 6
