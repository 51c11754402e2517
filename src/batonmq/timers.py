"""The clock and the timers of the engine (message and queue expiry), behind a protocol so that
unit tests can move time by hand.

Times are wall-clock milliseconds: an expiry time written to the store still means the same after
a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Timer(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer: ...


class LoopTimers:
    """Timers on the running asyncio loop (the broker's). `owner` names whose timers they are
    (e.g. "queue 'q' in vhost '/'") in the log.

    A callback that raises is logged with its owner and goes no further (hardening: "a fault
    inside one queue's work is contained to that queue and logged, never delays others"): the
    loop's own handler would log it with no owner, and a test's would fail on it."""

    def __init__(self, owner: str = "the engine") -> None:
        self.owner = owner

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, self._run, callback)

    def _run(self, callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.exception(
                "timer %s of %s failed", getattr(callback, "__qualname__", callback), self.owner
            )
