"""`ExpiryWatch`, a queue's clocks, on a clock moved by hand. RabbitMQ (docs/ttl): "expired
messages ... will never be delivered"; "Queues will expire after a period of time only when
they are not used (e.g. do not have consumers)"."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.expiry_watch import ExpiryWatch
from batonmq.queues.ready import ReadyEntries
from tests.manualtimers import ManualTimers


def message(expiration: str | None = None) -> Message:
    properties = commands.Basic.Properties(expiration=expiration)
    return Message("", "q", encode_header_payload(properties, 1), b"x")


class Watched:
    """A watch over real ready entries, recording what it reports."""

    def __init__(self, *, message_ttl: int | None = None, expires: int | None = None) -> None:
        self.timers = ManualTimers()
        self.ready = ReadyEntries()
        self.expired: list[int] = []
        self.head_fired = 0
        self.unused_fired = 0
        self.watch = ExpiryWatch(
            self.timers,
            self.ready,
            message_ttl=message_ttl,
            expires=expires,
            expired=lambda entry: self.expired.append(entry.sequence),
            head_expired=self._head,
            unused_expired=self._unused,
        )

    def _head(self) -> None:
        self.head_fired += 1

    def _unused(self) -> None:
        self.unused_fired += 1

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


def test_the_head_timer_fires_when_the_head_expires_and_an_earlier_head_moves_it():
    watched = Watched(message_ttl=100)
    watched.add(5)
    watched.watch.watch_head()
    watched.timers.advance(50)
    watched.ready.put_back(QueueEntry(message("1"), 1, expires_at=watched.timers.now + 1))
    watched.watch.watch_head()
    watched.timers.advance(2)
    assert watched.head_fired == 1
    watched.watch.watch_head()
    watched.timers.advance(100)
    assert watched.head_fired == 2


def test_the_unused_countdown_restarts_and_stops_while_in_use():
    watched = Watched(expires=1000)
    watched.watch.restart_unused(in_use=False)
    watched.timers.advance(900)
    watched.watch.restart_unused(in_use=True)
    watched.timers.advance(5000)
    assert watched.unused_fired == 0
    watched.watch.restart_unused(in_use=False)
    watched.timers.advance(1000)
    assert watched.unused_fired == 1


def test_stop_cancels_both_timers():
    watched = Watched(message_ttl=10, expires=10)
    watched.add(0)
    watched.watch.watch_head()
    watched.watch.restart_unused(in_use=False)
    watched.watch.stop()
    assert watched.timers.pending == 0
