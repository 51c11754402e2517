"""Message rates from samples of the broker's totals: RabbitMQ's `*_details.rate`, the growth of
a count per second between the last two samples."""

from __future__ import annotations

from batonmq.engine.counters import ChannelCounters
from batonmq.engine.rates import MessageRates


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_no_rate_before_two_samples_then_the_growth_per_second_between_the_last_two():
    clock = ManualClock()
    rates = MessageRates(clock)
    rates.sample(ChannelCounters(publish=100, ack=10))
    assert rates.rates == {}
    clock.advance(5)
    rates.sample(ChannelCounters(publish=150, ack=20))
    assert (rates.rates["publish"], rates.rates["ack"], rates.rates["deliver"]) == (10, 2, 0)
    clock.advance(2)
    rates.sample(ChannelCounters(publish=150, ack=30))
    assert (rates.rates["publish"], rates.rates["ack"]) == (0, 5)


def test_a_sample_at_the_same_instant_keeps_the_last_rates():
    clock = ManualClock()
    rates = MessageRates(clock)
    rates.sample(ChannelCounters(publish=0))
    clock.advance(1)
    rates.sample(ChannelCounters(publish=4))
    rates.sample(ChannelCounters(publish=9))
    assert rates.rates["publish"] == 4
