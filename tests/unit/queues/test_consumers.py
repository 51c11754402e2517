"""`ConsumerSet` with stub consumers: which consumer gets an entry, with consumer priorities
(x-priority), a single active consumer (x-single-active-consumer) and selectors (x-selector)."""

from __future__ import annotations

from dataclasses import dataclass

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.classic import ClassicQueue
from batonmq.queues.consumers import ConsumerSet
from batonmq.selectors import Selector, parse_selector


@dataclass(eq=False)
class StubConsumer:
    tag: str
    room: int = 1000
    priority: int = 0
    selector: Selector | None = None
    exclusive: bool = False

    def has_room(self) -> bool:
        return self.room > 0

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None:
        raise AssertionError("ConsumerSet chooses; it never delivers")


_sequence = iter(range(1_000_000))


def entry(headers: FieldTable | None = None) -> QueueEntry:
    properties = commands.Basic.Properties(headers=headers)
    message = Message("", "q", encode_header_payload(properties, 0), b"")
    return QueueEntry(message, next(_sequence))


def consumer_set(*consumers: StubConsumer, single_active: bool = False) -> ConsumerSet:
    consumers_ = ConsumerSet(single_active=single_active)
    for consumer in consumers:
        consumers_.add(consumer)
    return consumers_


def chosen(consumers: ConsumerSet, count: int, headers: FieldTable | None = None) -> str:
    """The tags of the consumers chosen for `count` entries, each taking one unit of room."""
    tags = []
    for _ in range(count):
        consumer = consumers.choose(entry(headers))
        if consumer is None:
            tags.append("-")
            continue
        assert isinstance(consumer, StubConsumer)
        consumer.room -= 1
        tags.append(consumer.tag)
    return "".join(tags)


# Round-robin --------------------------------------------------------------------------------------


def test_consumers_of_one_priority_are_served_round_robin_within_their_room():
    """AMQP 0-9-1 basic class: the server distributes messages round-robin; basic.qos
    prefetch-count: a consumer without room is skipped, "MUST NOT send more"."""
    a, b, c = StubConsumer("a"), StubConsumer("b", room=1), StubConsumer("c")
    consumers = consumer_set(a, b, c)
    assert chosen(consumers, 6) == "abcaca"
    a.room = c.room = 0
    assert not consumers.any_room()
    assert chosen(consumers, 1) == "-"


def test_one_shared_priority_other_than_0_is_plain_round_robin():
    """RabbitMQ "Consumer Priorities": "messages are delivered round-robin if multiple active
    consumers exist with the same high priority"."""
    consumers = consumer_set(StubConsumer("a", priority=7), StubConsumer("b", priority=7))
    assert chosen(consumers, 4) == "abab"


# Priorities ---------------------------------------------------------------------------------------


def test_the_highest_priority_consumers_get_everything_while_they_have_room():
    """RabbitMQ "Consumer Priorities": "you can expect your highest priority consumers to
    receive all the messages until they become blocked"; "Larger numbers indicate higher
    priority"."""
    low, high = StubConsumer("l", priority=0), StubConsumer("h", priority=10)
    consumers = consumer_set(low, high)
    assert chosen(consumers, 5) == "hhhhh"


def test_equal_high_priorities_share_round_robin_and_lower_ones_wait():
    """RabbitMQ "Consumer Priorities": "messages are delivered round-robin if multiple active
    consumers exist with the same high priority"."""
    consumers = consumer_set(
        StubConsumer("l", priority=1), StubConsumer("a", priority=5), StubConsumer("b", priority=5)
    )
    assert chosen(consumers, 4) == "abab"


def test_lower_priorities_get_messages_only_while_all_higher_ones_are_blocked():
    """RabbitMQ "Consumer Priorities": "messages only going to lower priority consumers when the
    high priority consumers block" (no room: prefetch, flow, a congested socket); "it will not
    wait for a high priority blocked consumer to become unblocked if there is an active lower
    priority consumer ready"."""
    high = StubConsumer("h", priority=2, room=2)
    middle = StubConsumer("m", priority=1, room=1)
    low = StubConsumer("l", priority=0)
    consumers = consumer_set(low, middle, high)
    assert chosen(consumers, 5) == "hhmll"
    high.room = 1
    assert chosen(consumers, 2) == "hl"


def test_negative_priorities_rank_below_the_default():
    """RabbitMQ "Consumer Priorities": "Consumers which do not specify a value have priority 0
    ... both positive and negative numbers can be used"."""
    below, default = StubConsumer("n", priority=-5), StubConsumer("d")
    consumers = consumer_set(below, default)
    assert chosen(consumers, 2) == "dd"
    default.room = 0
    assert chosen(consumers, 1) == "n"


def test_priorities_rank_whatever_the_order_consumers_came_in():
    """Each priority is served before every lower one, in whatever order consumers arrived."""
    rooms = {"5": 1, "m": 1, "x": 1, "0": 1}
    priorities = {"5": 5, "m": -1, "x": 10, "0": 0}
    consumers = consumer_set(
        *(StubConsumer(tag, room=rooms[tag], priority=priorities[tag]) for tag in "5mx0")
    )
    assert chosen(consumers, 5) == "x50m-"


def test_removing_the_higher_priority_consumers_leaves_round_robin_among_the_rest():
    """When the high-priority consumers go, the remaining consumers share messages round-robin
    again (AMQP 0-9-1 basic class)."""
    a, b, high = StubConsumer("a"), StubConsumer("b"), StubConsumer("h", priority=3)
    consumers = consumer_set(a, high, b)
    assert chosen(consumers, 2) == "hh"
    consumers.remove(high)
    assert chosen(consumers, 4) == "abab"
    assert len(consumers) == 2
    consumers.add(StubConsumer("h2", priority=3))
    assert chosen(consumers, 1) == "h2"
    assert [consumer.tag for consumer in consumers] == ["a", "b", "h2"]


# Single active consumer ---------------------------------------------------------------------------


def test_only_the_first_registered_consumer_is_served_with_a_single_active_consumer():
    """RabbitMQ "Single Active Consumer": "The very first registered consumer become the single
    active consumer: messages are dispatched to it and the other consumers are ignored"; a
    priority does not make another one active (there is "no guarantee on the selected active
    consumer ... even if consumer priorities are in use")."""
    first, second = StubConsumer("1"), StubConsumer("2", priority=10)
    consumers = consumer_set(first, second, single_active=True)
    assert chosen(consumers, 3) == "111"


def test_a_busy_active_consumer_is_waited_for_not_bypassed():
    """RabbitMQ "Single Active Consumer": "Messages are always delivered to the active consumer,
    even if it is too busy ... In this case, the other consumers are ignored and messages are
    enqueued"."""
    active, backup = StubConsumer("a", room=1), StubConsumer("b")
    consumers = consumer_set(active, backup, single_active=True)
    assert chosen(consumers, 1) == "a"
    assert not consumers.any_room()
    assert consumers.choose(entry()) is None


def test_the_first_backup_takes_over_when_the_active_consumer_goes():
    """MQ 3.5 admin guide ("Queue Delivery to Multiple Consumers"): "If an active consumer fails,
    then the first backup consumer is made active"; backups rank by registration, not priority."""
    active, first, second = (
        StubConsumer("a"),
        StubConsumer("1"),
        StubConsumer("2", priority=5),
    )
    consumers = consumer_set(active, first, second, single_active=True)
    consumers.remove(active)
    assert chosen(consumers, 2) == "11"
    consumers.remove(first)
    assert chosen(consumers, 1) == "2"
    consumers.remove(second)
    assert not consumers.any_room()
    assert consumers.choose(entry()) is None


def test_a_backup_going_leaves_the_active_consumer_in_place():
    """Only the active consumer's going changes which consumer is served (MQ 3.5 admin guide)."""
    active, backup, later = StubConsumer("a"), StubConsumer("b"), StubConsumer("c")
    consumers = consumer_set(active, backup, later, single_active=True)
    consumers.remove(backup)
    assert chosen(consumers, 2) == "aa"
    consumers.remove(active)
    assert chosen(consumers, 1) == "c"


# Selectors ----------------------------------------------------------------------------------------


def test_a_consumer_with_a_selector_gets_only_the_messages_it_selects():
    """JMS 1.1 (javax.jms.Message, "Message Selectors"): "A message selector allows a client to
    specify, by header field references and property references, the messages it is interested
    in"; the others go to consumers without one."""
    red = StubConsumer("r", selector=parse_selector("colour = 'red'"))
    anything = StubConsumer("a")
    consumers = consumer_set(red, anything)
    assert chosen(consumers, 2, {"colour": "blue"}) == "aa"
    assert chosen(consumers, 2, {"colour": "red"}) == "ra"
    assert chosen(consumers, 1) == "a", "an absent property is NULL: the selector is UNKNOWN"


def test_an_entry_no_consumer_with_room_selects_is_left_for_later():
    """JMS 1.1: "Only messages whose header and property values match the selector are
    delivered"; with no taker, choose says so (the queue keeps the entry in its place)."""
    red = StubConsumer("r", selector=parse_selector("colour = 'red'"))
    consumers = consumer_set(red)
    assert consumers.any_room()
    assert consumers.choose(entry({"colour": "blue"})) is None
    assert consumers.choose(entry({"colour": "red"})) is red


def test_a_higher_priority_consumer_that_does_not_select_an_entry_leaves_it_to_lower_ones():
    """Priorities order the consumers that would take an entry (RabbitMQ "Consumer
    Priorities"); a selector that does not select it takes that consumer out of the choice."""
    high = StubConsumer("h", priority=9, selector=parse_selector("urgent"))
    low = StubConsumer("l")
    consumers = consumer_set(low, high)
    assert chosen(consumers, 1, {"urgent": True}) == "h"
    assert chosen(consumers, 1, {"urgent": False}) == "l"


def test_a_single_active_consumer_with_a_selector_is_not_bypassed_for_what_it_does_not_select():
    """With a single active consumer "the other consumers are ignored" (RabbitMQ), for the
    messages its selector does not select too."""
    active = StubConsumer("a", selector=parse_selector("n > 1"))
    consumers = consumer_set(active, StubConsumer("b"), single_active=True)
    assert chosen(consumers, 2, {"n": 1}) == "--"
    assert chosen(consumers, 1, {"n": 2}) == "a"


def test_removing_and_clearing_keep_the_bookkeeping():
    """len, iteration, exclusivity and clear reflect the consumers added and removed."""
    selective = StubConsumer("s", selector=parse_selector("a = 1"), exclusive=True)
    plain = StubConsumer("p", priority=2)
    consumers = consumer_set(selective, plain)
    assert (len(consumers), consumers.has_exclusive()) == (2, True)
    consumers.remove(selective)
    assert [consumer.tag for consumer in consumers] == ["p"]
    assert not consumers.has_exclusive()
    consumers.clear()
    assert not consumers
    assert consumers.choose(entry()) is None
