"""Which of a queue's consumers gets the next entry.

A classic queue serves its consumers round-robin, each within its own room (AMQP 0-9-1 basic
class: "the server SHOULD ... distribute messages ... in a round-robin fashion"), with three
refinements, each free when unused:

- Consumer priorities (basic.consume argument x-priority, RabbitMQ's "Consumer Priorities"):
  "messages only going to lower priority consumers when the high priority consumers block", and
  "round-robin if multiple active consumers exist with the same high priority".
- Single active consumer (queue argument x-single-active-consumer): only the first consumer
  registered gets entries; the others are backups, in registration order, and the first of them
  takes over when it goes (MQ 3.5 admin guide, "Queue Delivery to Multiple Consumers": "If an active
  consumer fails, then the first backup consumer is made active"). Priorities play no part:
  RabbitMQ's "Single Active Consumer" gives "no guarantee on the selected active consumer, it is
  picked up randomly, even if consumer priorities are in use".
- Active and backup consumers (queue arguments x-max-active-consumers, MQ 3.5 admin guide
  maxNumActiveConsumers): only the first N consumers registered get entries, round-robin; the
  others are backups, and the first of them becomes active when an active one goes.
- Selectors (basic.consume argument x-selector): a consumer takes only the entries whose message
  its JMS selector selects; an entry no consumer with room takes keeps its place.

A hand-out asks each consumer without room once, not once per entry: nothing a hand-out does gives
a consumer room (deliveries only use it up, and what the client's socket drains is counted after
the loop turn), so a consumer found full sits out the rest of it and then goes to the back of the
round-robin, as a consumer passed over always does. With one consumer of many acking, an ack's
worth of entries then costs one question per entry, as with one consumer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from batonmq.model.message import QueueEntry
from batonmq.queues.priority import PriorityReady
from batonmq.queues.protocol import Queue, QueueConsumer
from batonmq.queues.ready import ReadyEntries
from batonmq.selectors import jms_values


def _takes(consumer: QueueConsumer, entry: QueueEntry | None) -> bool:
    """Whether `consumer`'s selector selects `entry` (which a set with selectors always names)."""
    assert entry is not None
    selector = consumer.selector
    return selector is None or selector.matches(jms_values(entry.message.properties))


class ConsumerSet:
    """A queue's consumers, and the choice of which one gets an entry."""

    def __init__(self, *, single_active: bool = False, max_active: int | None = None) -> None:
        #: x-single-active-consumer: one consumer at a time gets entries, the rest wait.
        self.single_active = single_active
        #: x-max-active-consumers: consumers beyond it wait in `_backups`, in registration order.
        self.max_active = max_active
        self._backups: deque[QueueConsumer] = deque()
        #: Every consumer, in round-robin order; with a single active consumer, in registration
        #: order, the active one first.
        self._consumers: deque[QueueConsumer] = deque()
        #: The consumers by priority, highest first, each group served round-robin: only while
        #: priorities differ, and never with a single active consumer.
        self._by_priority: list[tuple[int, deque[QueueConsumer]]] | None = None
        #: How many consumers have a selector: while none has, no message is looked at.
        self._selective = 0
        #: The last hand-out ended because no consumer had room: a new entry need not look
        #: again (see `offer`); whatever may make room calls `hand_out`, which clears it.
        self.saturated = False
        #: The consumers the hand-out under way found without room, each with the round-robin
        #: it sits out of, in the order found: back at that round-robin's end when it ends.
        self._sitting_out: list[tuple[deque[QueueConsumer], QueueConsumer]] = []

    @property
    def hands_over(self) -> bool:
        """Whether a consumer that goes hands its work to a backup (single active consumer, or
        a limit on active consumers)."""
        return self.single_active or self.max_active is not None

    def add(self, consumer: QueueConsumer) -> None:
        self.saturated = False
        if self._sitting_out:  # added by a delivery of a hand-out under way: all back first
            self._rejoin()
        if self.max_active is not None and len(self._consumers) >= self.max_active:
            self._backups.append(consumer)
            return
        consumers = self._consumers
        consumers.append(consumer)
        if consumer.selector is not None:
            self._selective += 1
        if self.single_active:
            return
        if self._by_priority is not None:
            self._join_priority_group(consumer)
        elif consumer.priority != consumers[0].priority:
            self._by_priority = []
            for member in consumers:
                self._join_priority_group(member)

    def _join_priority_group(self, consumer: QueueConsumer) -> None:
        groups = self._by_priority
        assert groups is not None
        for index, (priority, group) in enumerate(groups):
            if priority == consumer.priority:
                group.append(consumer)
                return
            if priority < consumer.priority:
                groups.insert(index, (consumer.priority, deque([consumer])))
                return
        groups.append((consumer.priority, deque([consumer])))

    def remove(self, consumer: QueueConsumer) -> None:
        self.saturated = False
        if self._sitting_out:  # as in `add`
            self._rejoin()
        if consumer in self._backups:
            self._backups.remove(consumer)
            return
        self._remove_active(consumer)
        if self._backups:
            self.add(self._backups.popleft())

    def _remove_active(self, consumer: QueueConsumer) -> None:
        self._consumers.remove(consumer)
        if consumer.selector is not None:
            self._selective -= 1
        groups = self._by_priority
        if groups is None:
            return
        for index, (priority, group) in enumerate(groups):
            if priority == consumer.priority:
                group.remove(consumer)
                if not group:
                    del groups[index]
                break
        if len(groups) == 1:
            # One priority left: back to a single round-robin, which goes on where that
            # group's was.
            self._consumers = groups[0][1]
            self._by_priority = None

    def clear(self) -> None:
        self.saturated = False
        self._sitting_out.clear()
        self._consumers = deque()
        self._backups = deque()
        self._by_priority = None
        self._selective = 0

    def __len__(self) -> int:
        return len(self._consumers) + len(self._backups)

    def __bool__(self) -> bool:
        return bool(self._consumers or self._backups)

    def __iter__(self) -> Iterator[QueueConsumer]:
        return iter([*self._consumers, *self._backups])

    def has_exclusive(self) -> bool:
        return any(consumer.exclusive for consumer in self)

    def any_room(self) -> bool:
        """Some consumer could take an entry now (with a single active consumer: that one)."""
        consumers = self._consumers
        if self.single_active:
            return bool(consumers) and consumers[0].has_room()
        # A loop, not any() over a generator: this runs for every entry dispatched, and the
        # generator costs three times as much.
        for consumer in consumers:  # noqa: SIM110
            if consumer.has_room():
                return True
        return False

    def hand_out(
        self,
        queue: Queue,
        ready: ReadyEntries | PriorityReady,
        take: Callable[[], QueueEntry | None],
    ) -> None:
        """Hand `queue`'s ready entries (`take` gives the next one out) to consumers with room
        until either runs out. An entry no consumer with room will take (a selector) is passed
        over and keeps its place. Ending for want of room marks the set `saturated`."""
        self.saturated = False
        try:
            if self._selective:
                self._hand_out_selected(queue, ready, take)
                return
            # No selector: the consumer is chosen before the entry is taken, in one walk.
            while ready:
                consumer = self._choose(None)
                if consumer is None:
                    self.saturated = True
                    return
                entry = take()
                if entry is None:
                    return  # the next entries are in the store
                try:
                    consumer.deliver(queue, entry)
                except BaseException:
                    ready.put_back(entry)  # never lose a message to a failed hand-over
                    raise
        finally:
            if self._sitting_out:
                self._rejoin()

    def _hand_out_selected(
        self,
        queue: Queue,
        ready: ReadyEntries | PriorityReady,
        take: Callable[[], QueueEntry | None],
    ) -> None:
        passed_over: list[QueueEntry] = []
        try:
            while ready:
                if not self.any_room():
                    self.saturated = True
                    return
                entry = take()
                if entry is None:
                    return  # the next entries are in the store
                consumer = self._choose(entry)
                if consumer is None:
                    passed_over.append(entry)
                    continue
                try:
                    consumer.deliver(queue, entry)
                except BaseException:
                    ready.put_back(entry)  # never lose a message to a failed hand-over
                    raise
        finally:
            for entry in passed_over:
                ready.put_back(entry)

    def choose(self, entry: QueueEntry | None) -> QueueConsumer | None:
        """The consumer to hand `entry` to, moving the round-robin on; None when no consumer
        that has room will take it. Without selectors `entry` is not looked at (None: the
        next consumer with room)."""
        try:
            return self._choose(entry)
        finally:
            if self._sitting_out:
                self._rejoin()

    def _choose(self, entry: QueueEntry | None) -> QueueConsumer | None:
        """`choose`, within a hand-out: consumers found without room sit it out."""
        if self.single_active:
            return self._choose_active(entry)
        groups = self._by_priority
        if groups is None:
            return self._next_taker(self._consumers, entry)
        for _, group in groups:
            consumer = self._next_taker(group, entry)
            if consumer is not None:
                return consumer
        return None

    def _next_taker(
        self, consumers: deque[QueueConsumer], entry: QueueEntry | None
    ) -> QueueConsumer | None:
        """The next consumer of `consumers` in round-robin order that has room and takes
        `entry`; one that takes nothing goes to the back, one without room sits out the
        hand-out."""
        selective = self._selective
        for _ in range(len(consumers)):
            consumer = consumers[0]
            if not consumer.has_room():
                self._sitting_out.append((consumers, consumers.popleft()))
                continue
            consumers.rotate(-1)
            if not selective or _takes(consumer, entry):
                return consumer
        return None

    def _rejoin(self) -> None:
        for consumers, consumer in self._sitting_out:
            consumers.append(consumer)
        self._sitting_out.clear()

    def _choose_active(self, entry: QueueEntry | None) -> QueueConsumer | None:
        if not self._consumers:
            return None
        active = self._consumers[0]
        if active.has_room() and (not self._selective or _takes(active, entry)):
            return active
        return None
