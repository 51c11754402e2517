"""Message rates: the broker's message totals sampled at an interval, and how fast each grew
between the last two samples, per second. RabbitMQ's management API shows them as
`message_stats.publish_details.rate` and so on, from samples taken every
collect_statistics_interval (5 s by default)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Final

from batonmq.engine.counters import ChannelCounters

#: Seconds between samples (RabbitMQ's collect_statistics_interval, 5,000 ms).
SAMPLE_INTERVAL: Final = 5.0

_KEYS: Final = tuple(item.name for item in dataclasses.fields(ChannelCounters))


class MessageRates:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._latest: tuple[float, dict[str, int]] | None = None
        #: Per second, by counter name; empty until two samples were taken.
        self.rates: Mapping[str, float] = {}

    def sample(self, totals: ChannelCounters) -> None:
        now = self._clock()
        counts = {key: getattr(totals, key) for key in _KEYS}
        if self._latest is not None:
            then, before = self._latest
            elapsed = now - then
            if elapsed > 0:
                self.rates = {key: (counts[key] - before[key]) / elapsed for key in _KEYS}
        self._latest = (now, counts)
