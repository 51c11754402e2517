"""Message rates from samples of the broker's totals and of each queue's counters: RabbitMQ's
`*_details.rate`, the growth of a count per second between the last two samples."""

from __future__ import annotations

from batonmq.engine.counters import ChannelCounters
from batonmq.engine.rates import MessageRates, QueueRates
from batonmq.queues.classic import ClassicQueue


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_the_first_rate_counts_from_zero_then_the_growth_per_second_between_the_last_two():
    """Counters start at 0 with the broker: what was counted before the first sample shows in
    its rate rather than vanishing into a baseline."""
    clock = ManualClock()
    rates = MessageRates(clock)
    assert rates.rates == {}
    clock.advance(10)
    rates.sample(ChannelCounters(publish=100, ack=10))
    assert (rates.rates["publish"], rates.rates["ack"]) == (10, 1)
    clock.advance(5)
    rates.sample(ChannelCounters(publish=150, ack=20))
    assert (rates.rates["publish"], rates.rates["ack"], rates.rates["deliver"]) == (10, 2, 0)
    clock.advance(2)
    rates.sample(ChannelCounters(publish=150, ack=30))
    assert (rates.rates["publish"], rates.rates["ack"]) == (0, 5)


def test_a_sample_at_the_same_instant_keeps_the_last_rates():
    clock = ManualClock()
    rates = MessageRates(clock)
    clock.advance(1)
    rates.sample(ChannelCounters(publish=4))
    rates.sample(ChannelCounters(publish=9))
    assert rates.rates["publish"] == 4


def test_each_queue_has_its_own_rates_and_a_deleted_queue_is_forgotten():
    """RabbitMQ's queue message_stats: each queue's `publish_details.rate` and so on, from the
    same samples as the broker's."""
    clock = ManualClock()
    rates = QueueRates(clock)
    busy, idle = ClassicQueue("busy"), ClassicQueue("idle")
    assert rates.of(busy) == {}
    busy.counters.publish = 10
    clock.advance(5)
    rates.sample([busy, idle])
    assert (rates.of(busy)["publish"], rates.of(idle)["publish"]) == (2, 0)
    busy.counters.publish, busy.counters.deliver_no_ack = 60, 20
    clock.advance(5)
    rates.sample([busy, idle])
    assert (rates.of(busy)["publish"], rates.of(busy)["deliver_no_ack"]) == (10, 4)

    fresh = ClassicQueue("busy")  # busy was deleted, and a queue of its name declared
    fresh.counters.publish = 5
    clock.advance(5)
    rates.sample([idle, fresh])
    assert rates.of(busy) == {}
    # Created since the last round, with nothing counted then: 5 in the 5 s since.
    assert rates.of(fresh)["publish"] == 1
