"""Message rates: counters sampled at an interval, and how fast each grew between the last two
samples, per second. RabbitMQ's management API shows them as `message_stats.publish_details.rate`
and so on, from samples taken every collect_statistics_interval (5 s by default): the broker's
message totals, and each queue's counters."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from batonmq.engine.counters import ChannelCounters
from batonmq.queues.counters import QueueCounters
from batonmq.queues.protocol import Queue

#: Seconds between samples (RabbitMQ's collect_statistics_interval, 5,000 ms).
SAMPLE_INTERVAL: Final = 5.0

_CHANNEL_KEYS: Final = tuple(item.name for item in dataclasses.fields(ChannelCounters))
_QUEUE_KEYS: Final = tuple(item.name for item in dataclasses.fields(QueueCounters))


class MessageRates:
    """The rates of one set of counters (by default the broker's message totals), which were
    all 0 at `since` (by default now: counters start at 0 with what they count), so that the
    first sample has a rate too: what was counted before it is not lost to the baseline."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        keys: tuple[str, ...] = _CHANNEL_KEYS,
        since: float | None = None,
    ) -> None:
        self._clock = clock
        self._keys = keys
        self._latest = (clock() if since is None else since, (0,) * len(keys))
        #: Per second, by counter name; empty until the first sample.
        self.rates: Mapping[str, float] = {}

    def sample(self, counters: object, now: float | None = None) -> None:
        """Sample `counters` (a counters dataclass with these keys), at `now` if given."""
        now = self._clock() if now is None else now
        counts = tuple(getattr(counters, key) for key in self._keys)
        then, before = self._latest
        elapsed = now - then
        if elapsed > 0:
            self.rates = {
                key: (count - earlier) / elapsed
                for key, count, earlier in zip(self._keys, counts, before, strict=True)
            }
        self._latest = (now, counts)


class QueueRates:
    """Each queue's rates, sampled together; a queue no longer sampled (deleted) is forgotten.
    A queue first sampled was created since the last round (or the broker started since), with
    its counters at 0: its rates start from there."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last_round = clock()
        self._by_queue: dict[Queue, MessageRates] = {}

    def sample(self, queues: Iterable[Queue]) -> None:
        now = self._clock()
        known = self._by_queue
        sampled: dict[Queue, MessageRates] = {}
        for queue in queues:
            rates = known.get(queue) or MessageRates(self._clock, _QUEUE_KEYS, self._last_round)
            rates.sample(queue.counters, now)
            sampled[queue] = rates
        self._by_queue = sampled
        self._last_round = now

    def of(self, queue: Queue) -> Mapping[str, float]:
        """`queue`'s rates per second by counter name; empty before its first sample."""
        rates = self._by_queue.get(queue)
        return rates.rates if rates is not None else {}
