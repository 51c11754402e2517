"""`ExpiryWatch`, a queue's clocks, on a clock moved by hand. RabbitMQ (docs/ttl): "expired
messages ... will never be delivered"; "Queues will expire after a period of time only when
they are not used (e.g. do not have consumers)"."""

from __future__ import annotations

from dataclasses import dataclass, field

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.arguments import QueueArguments
from batonmq.queues.expiry_watch import ExpiryWatch
from batonmq.queues.ready import ReadyEntries
from tests.manualtimers import ManualTimers


def message(expiration: str | None = None) -> Message:
    properties = commands.Basic.Properties(expiration=expiration)
    return Message("", "q", encode_header_payload(properties, 1), b"x")


@dataclass(eq=False)
class Owner:
    """The queue's side of the watch: its options, whether it is deleted or consumed from,
    and its hooks (it records the deletion of an unused queue itself)."""

    options: QueueArguments
    deleted: bool = False
    consumers: list[object] = field(default_factory=list)
    expired_queues: list[Owner] = field(default_factory=list)

    @property
    def hooks(self) -> Owner:
        return self

    def expire_queue(self, queue: Owner) -> None:
        self.expired_queues.append(queue)


class Watched:
    """A watch over real ready entries, recording what it reports."""

    def __init__(self, *, message_ttl: int | None = None, expires: int | None = None) -> None:
        self.timers = ManualTimers()
        self.ready = ReadyEntries()
        self.expired: list[int] = []
        arguments: FieldTable = {}
        if message_ttl is not None:
            arguments["x-message-ttl"] = message_ttl
        if expires is not None:
            arguments["x-expires"] = expires
        self.queue = Owner(QueueArguments.parse(arguments))
        self.watch = ExpiryWatch(
            self.queue,
            self.ready,
            self.timers,
            expired=lambda entry: self.expired.append(entry.sequence),
        )

    def add(self, sequence: int, expiration: str | None = None) -> None:
        msg = message(expiration)
        self.ready.append(QueueEntry(msg, sequence, expires_at=self.watch.expiry_of(msg)))


def test_the_lower_of_queue_and_message_ttl_wins():
    """RabbitMQ: "When both a per-queue and a per-message TTL are specified, the lower value
    between the two will be chosen"."""
    watched = Watched(message_ttl=100)
    now = watched.timers.now
    assert watched.watch.expiry_of(message()) == now + 100
    assert watched.watch.expiry_of(message("30")) == now + 30
    assert watched.watch.expiry_of(message("500")) == now + 100


def test_no_ttl_means_nothing_is_checked_until_a_message_brings_one():
    watched = Watched()
    assert not watched.watch.expiring
    assert watched.watch.expiry_of(message()) is None
    assert watched.watch.expiry_of(message("10")) is not None
    assert watched.watch.expiring


def test_take_passes_expired_entries_to_expired_and_returns_the_next_live_one():
    watched = Watched()
    watched.add(0, "10")
    watched.add(1, "10")
    watched.add(2)
    watched.timers.now += 11
    taken = watched.watch.take()
    assert taken is not None and taken.sequence == 2
    assert watched.expired == [0, 1]


def test_the_sweep_takes_expired_entries_wherever_they_are():
    watched = Watched()
    watched.add(0)
    watched.add(1, "5")
    watched.add(2, "50")
    watched.timers.now += 6
    assert watched.watch.sweep() == 1
    assert watched.expired == [1]
    assert len(watched.ready) == 2


def test_the_head_entry_is_dead_lettered_when_its_timer_fires_with_no_consumer_about():
    """RabbitMQ (docs/ttl): expired messages at the head are removed without waiting for a
    consumer; here the timer set on the head's expiry fires and takes it."""
    watched = Watched(message_ttl=100)
    watched.add(0)
    watched.watch.watch_head()
    watched.timers.advance(50)
    watched.add(1)
    watched.watch.watch_head()
    watched.timers.advance(51)
    assert watched.expired == [0]
    watched.timers.advance(50)
    assert watched.expired == [0, 1]
    assert not watched.ready


def test_an_earlier_head_moves_the_timer_and_a_deleted_queue_takes_nothing():
    watched = Watched(message_ttl=100)
    watched.add(5)
    watched.watch.watch_head()
    watched.ready.put_back(QueueEntry(message("1"), 1, expires_at=watched.timers.now + 1))
    watched.watch.watch_head()
    watched.timers.advance(2)
    assert watched.expired == [1]
    watched.queue.deleted = True
    watched.timers.advance(1000)
    assert watched.expired == [1]


def test_an_unused_queue_is_deleted_after_its_x_expires():
    """RabbitMQ: "Queues will expire after a period of time only when they are not used (e.g.
    do not have consumers)"; a use starts the countdown again."""
    watched = Watched(expires=1000)
    watched.watch.restart_unused()
    watched.timers.advance(900)
    watched.queue.consumers.append("consumer")
    watched.watch.restart_unused()
    watched.timers.advance(5000)
    assert watched.queue.expired_queues == []
    watched.queue.consumers.clear()
    watched.watch.restart_unused()
    watched.timers.advance(999)
    assert watched.queue.expired_queues == []
    watched.timers.advance(1)
    assert watched.queue.expired_queues == [watched.queue]


def test_stop_cancels_both_timers():
    watched = Watched(message_ttl=10, expires=10)
    watched.add(0)
    watched.watch.watch_head()
    watched.watch.restart_unused()
    watched.watch.stop()
    assert watched.timers.pending == 0
