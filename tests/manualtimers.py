"""Timers whose clock the test moves (`batonmq.timers.Timers`), for expiry without sleeping."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class ManualTimer:
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class ManualTimers:
    now: int = 1_700_000_000_000
    _due: list[tuple[int, int, ManualTimer]] = field(default_factory=list)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> ManualTimer:
        timer = ManualTimer(callback)
        heapq.heappush(self._due, (self.now + max(delay_ms, 0), next(self._order), timer))
        return timer

    def advance(self, ms: int) -> None:
        """Move the clock on by `ms`, firing the timers that fall due, in order."""
        until = self.now + ms
        while self._due and self._due[0][0] <= until:
            at, _, timer = heapq.heappop(self._due)
            self.now = max(self.now, at)
            if not timer.cancelled:
                timer.callback()
        self.now = until

    @property
    def pending(self) -> int:
        return sum(not timer.cancelled for *_, timer in self._due)
