"""A classic queue's optional behaviours, with a clock moved by hand: message TTL, queue expiry,
length limits, the delivery limit and priorities (RabbitMQ's documented semantics, quoted in
each test)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.classic import ClassicQueue
from batonmq.queues.deadletter import Reason
from batonmq.queues.protocol import Enqueued
from tests.manualtimers import ManualTimers


@dataclass(eq=False)
class Hooks:
    """The virtual host's side, recorded."""

    dead: list[tuple[str, Reason]] = field(default_factory=list)
    expired_queues: list[str] = field(default_factory=list)

    def dead_letter(self, queue: ClassicQueue, entry: QueueEntry, reason: Reason) -> None:
        self.dead.append((entry.message.body.decode(), reason))

    def expire_queue(self, queue: ClassicQueue) -> None:
        self.expired_queues.append(queue.name)
        queue.deleted = True


@dataclass(eq=False)
class Taker:
    tag: str = "c"
    room: int = 1000
    exclusive: bool = False
    priority: int = 0
    selector: None = None
    received: list[QueueEntry] = field(default_factory=list)

    def has_room(self) -> bool:
        return self.room > 0

    def accepts(self, entry: QueueEntry) -> bool:
        return True

    def deliver(self, queue: ClassicQueue, entry: QueueEntry) -> None:
        self.room -= 1
        self.received.append(entry)
        queue.delivered(entry)


def message(body: str, **properties: object) -> Message:
    header = encode_header_payload(commands.Basic.Properties(**properties), len(body))
    return Message("ex", "key", header, body.encode())


def make_queue(
    timers: ManualTimers, hooks: Hooks, arguments: FieldTable, name: str = "q"
) -> ClassicQueue:
    queue = ClassicQueue(
        name,
        arguments={"x-dead-letter-exchange": "dlx", **arguments},
        timers=timers,
    )
    queue.hooks = hooks
    return queue


def bodies(entries: list[QueueEntry]) -> list[str]:
    return [entry.message.body.decode() for entry in entries]


def drain(queue: ClassicQueue) -> list[str]:
    got = []
    while (entry := queue.get()) is not None:
        got.append(entry.message.body.decode())
    return got


# Message TTL --------------------------------------------------------------------------------


def test_a_message_past_the_queue_ttl_is_dead_lettered_when_its_time_comes() -> None:
    """ "Messages that have been in the queue for longer than the configured TTL are said to be
    dead" and dead-lettered with reason expired — with no consumer about: a timer for the
    head's expiry does it."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-message-ttl": 1000})
    queue.publish(message("old"))
    timers.advance(500)
    queue.publish(message("new"))
    timers.advance(501)
    assert hooks.dead == [("old", Reason.EXPIRED)]
    assert queue.message_count == 1
    timers.advance(500)
    assert hooks.dead == [("old", Reason.EXPIRED), ("new", Reason.EXPIRED)]
    assert queue.message_count == 0
    assert timers.pending == 0


def test_an_expired_message_is_never_delivered() -> None:
    """ "a message that expires ... will not be delivered"; basic.get skips to the next one."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {})
    queue.publish(message("short", expiration="100"))
    queue.publish(message("long", expiration="100000"))
    timers.now += 200  # no timer run: the expired one is found at the head
    assert drain(queue) == ["long"]
    assert hooks.dead == [("short", Reason.EXPIRED)]


def test_the_lower_of_queue_and_message_ttl_applies() -> None:
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-message-ttl": 5000})
    queue.publish(message("m", expiration="100"))
    timers.advance(101)
    assert hooks.dead == [("m", Reason.EXPIRED)]


def test_ttl_zero_still_reaches_a_waiting_consumer() -> None:
    """TTL 0: messages "expire upon reaching a queue unless they can be delivered to a consumer
    immediately"."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-message-ttl": 0})
    taker = Taker()
    queue.add_consumer(taker)
    queue.publish(message("now"))
    assert bodies(taker.received) == ["now"]
    queue.remove_consumer(taker)
    queue.publish(message("nobody"))
    timers.advance(1)
    assert hooks.dead == [("nobody", Reason.EXPIRED)]


def test_the_sweep_removes_expired_messages_behind_the_head() -> None:
    """Per-message TTL: expired messages behind a longer-lived head go in the periodic sweep
    (MQ 3.5 admin guide imq.message.expiration.interval)."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {})
    queue.publish(message("head", expiration="100000"))
    queue.publish(message("short", expiration="10"))
    queue.publish(message("forever"))
    timers.advance(20)
    assert hooks.dead == []
    assert queue.expire() == 1
    assert hooks.dead == [("short", Reason.EXPIRED)]
    assert drain(queue) == ["head", "forever"]


def test_without_a_dead_letter_exchange_expired_messages_are_dropped() -> None:
    timers, hooks = ManualTimers(), Hooks()
    queue = ClassicQueue("q", arguments={"x-message-ttl": 10}, timers=timers)
    queue.hooks = hooks
    queue.publish(message("m"))
    timers.advance(11)
    assert (queue.message_count, hooks.dead) == (0, [])


# Queue expiry (x-expires) ----------------------------------------------------------------


def test_an_unused_queue_expires() -> None:
    """x-expires: "how long a queue can be unused for before it is automatically deleted.
    Unused means the queue has no consumers, the queue has not been redeclared, and basic.get
    has not been invoked"."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-expires": 1000})
    timers.advance(900)
    queue.touched()  # a redeclaration
    timers.advance(900)
    queue.get()
    timers.advance(900)
    taker = Taker()
    queue.add_consumer(taker)
    timers.advance(5000)
    assert hooks.expired_queues == []
    queue.remove_consumer(taker)
    timers.advance(999)
    assert hooks.expired_queues == []
    timers.advance(1)
    assert hooks.expired_queues == ["q"]


def test_publishing_does_not_keep_a_queue_alive() -> None:
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-expires": 100})
    for _ in range(5):
        queue.publish(message("m"))
        timers.advance(30)
    assert hooks.expired_queues == ["q"]


# Length limits ------------------------------------------------------------------------------


def test_drop_head_dead_letters_the_oldest() -> None:
    """x-max-length, overflow drop-head (the default): "the oldest messages in the queue will be
    dropped or dead-lettered" (reason maxlen)."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-max-length": 2})
    for body in "abcd":
        assert queue.publish(message(body)) is Enqueued.KEPT
    assert hooks.dead == [("a", Reason.MAXLEN), ("b", Reason.MAXLEN)]
    assert drain(queue) == ["c", "d"]


def test_a_byte_limit_counts_bodies() -> None:
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-max-length-bytes": 10})
    for body in ("aaaa", "bbbb", "cccc"):
        queue.publish(message(body))
    assert hooks.dead == [("aaaa", Reason.MAXLEN)]
    assert queue.message_count == 2


def test_reject_publish_refuses_new_messages() -> None:
    """overflow reject-publish: "the most recently published messages will be discarded" and
    "if publisher confirms are enabled, the publisher will be informed of the reject via a
    basic.nack"; reject-publish-dlx dead-letters the rejected message too."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-max-length": 1, "x-overflow": "reject-publish"})
    assert queue.publish(message("a")) is Enqueued.KEPT
    assert queue.publish(message("b")) is Enqueued.REFUSED
    assert hooks.dead == []
    dlx = make_queue(timers, hooks, {"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    dlx.publish(message("a"))
    assert dlx.publish(message("b")) is Enqueued.REFUSED
    assert hooks.dead == [("b", Reason.MAXLEN)]
    assert drain(queue) == ["a"] and drain(dlx) == ["a"]


def test_the_limit_counts_ready_messages_only() -> None:
    """RabbitMQ: the limit applies to ready messages; unacknowledged ones do not count."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-max-length": 1})
    taker = Taker(room=2)
    queue.add_consumer(taker)
    for body in "abc":
        queue.publish(message(body))
    assert bodies(taker.received) == ["a", "b"]
    assert (queue.message_count, hooks.dead) == (1, [])


# Delivery limit -----------------------------------------------------------------------------


def test_past_the_delivery_limit_a_message_is_dead_lettered() -> None:
    """x-delivery-limit: "the number of allowed unsuccessful delivery attempts. Once a message
    has been delivered unsuccessfully more than this many times it will be dropped or
    dead-lettered"; redeliveries carry the x-delivery-count header."""
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {"x-delivery-limit": 2})
    queue.publish(message("poison"))
    counts = []
    for _ in range(3):
        entry = queue.get()
        assert entry is not None
        queue.delivered(entry)
        counts.append((entry.message.properties.headers or {}).get("x-delivery-count"))
        queue.requeue([entry])
    assert counts == [None, 1, 2]
    assert hooks.dead == [("poison", Reason.DELIVERY_LIMIT)]
    assert queue.message_count == 0


def test_rejection_dead_letters() -> None:
    timers, hooks = ManualTimers(), Hooks()
    queue = make_queue(timers, hooks, {})
    queue.publish(message("no"))
    entry = queue.get()
    assert entry is not None
    queue.rejected(entry)
    assert hooks.dead == [("no", Reason.REJECTED)]


# Priorities ---------------------------------------------------------------------------------


def test_higher_priority_first_fifo_within_a_priority() -> None:
    """x-max-priority: messages with a higher priority are delivered first; a priority above
    the maximum counts as the maximum, none counts as 0."""
    queue = ClassicQueue("q", arguments={"x-max-priority": 5})
    for body, priority in [("p0a", None), ("p9", 9), ("p1", 1), ("p0b", 0), ("p5", 5)]:
        queue.publish(message(body, priority=priority))
    assert drain(queue) == ["p9", "p5", "p1", "p0a", "p0b"]


def test_priority_is_honoured_at_dispatch_within_the_prefetch() -> None:
    """Qpid manual 2.10.3.1: with a prefetch of 1 "message priority will be honoured by the ...
    broker as it dispatches messages"; a requeued message returns to its place in its
    priority."""
    queue = ClassicQueue("q", arguments={"x-max-priority": 10})
    taker = Taker(room=1)
    queue.add_consumer(taker)
    for body, priority in [("low1", 1), ("low2", 1), ("high", 8)]:
        queue.publish(message(body, priority=priority))
    assert bodies(taker.received) == ["low1"]
    queue.requeue([taker.received.pop()])
    taker.room = 3
    queue.dispatch()
    assert bodies(taker.received) == ["high", "low1", "low2"]
