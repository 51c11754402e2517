"""Repeated log lines coalesced: one line, then a count (hardening: "One failed commit per message
floods the log (39,000 identical lines in one outage): coalesce repeats").

`RepeatCounter` decides and is pure (the clock is injected, BatonMQ style §5); `CoalescingLog`
writes what it decides to a logger. The rules, per key (a line's level, text and fields, unless
the caller names a key):

1. The first occurrence of a key is logged at once.
2. Its repeats within `window_seconds` of the key's last line are counted, not logged.
3. The first occurrence after the window has passed is logged with the number of occurrences
   since the last line, itself included, and the seconds they span: "store write failed: ...
   (xN in the last 10 s)". So a steady flood writes one line per window, and the count says
   how many lines it stands for. A key whose window passed with nothing counted is forgotten:
   its next occurrence is a first one again (rule 1).
4. `flush` logs every count not yet logged, and forgets every key: the caller calls it when the
   condition ends (a commit succeeds again) and at shutdown, so that no count is lost.
5. Memory is bounded: at most `max_keys` keys; a new key beyond that first flushes the key whose
   last line is oldest.

In a broker of several workers, the counts of the session log are the broker's: the other
workers hand its occurrences (`Occurrence`) to the first, which counts and writes them
(`CoalescingLog.elsewhere`, `batonmq.server.brokerwide`), so a flood that reaches every worker
is one line per window, not one per worker.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["CoalescingLog", "Due", "Occurrence", "RepeatCounter"]

#: The record names the code that called `flush`, two frames above `_write`...
_CALLER = 3
#: ...or `log` or `count`, three frames above (through `_count`).
_COUNT_CALLER = _CALLER + 1

_Line = TypeVar("_Line")


@dataclass(frozen=True, slots=True)
class Due(Generic[_Line]):
    """A line to write now: `line` (the latest occurrence's) stands for `occurrences` of its key
    over the last `seconds`; a first occurrence has `occurrences` 1 (rule 1)."""

    line: _Line
    occurrences: int = 1
    seconds: float = 0.0

    @property
    def is_repeat(self) -> bool:
        return self.occurrences > 1


@dataclass(slots=True)
class _Count(Generic[_Line]):
    last_logged: float
    #: Occurrences since the last line, and the latest of them.
    counted: int
    latest: _Line


class RepeatCounter(Generic[_Line]):
    """The decisions of the module's rules; `line` is whatever the caller writes (opaque here)."""

    def __init__(
        self, window_seconds: float, clock: Callable[[], float], *, max_keys: int = 256
    ) -> None:
        if window_seconds <= 0 or max_keys < 1:
            raise ValueError("window_seconds must be positive and max_keys at least 1")
        self.window_seconds = window_seconds
        self.max_keys = max_keys
        self._clock = clock
        # Ordered by last line, oldest first (rule 5).
        self._counts: OrderedDict[Hashable, _Count[_Line]] = OrderedDict()

    def occurred(self, key: Hashable, line: _Line) -> list[Due[_Line]]:
        """`key` occurred, as `line`: the lines to write now, oldest first (none while counting,
        rule 2; a full table's flushed key before this one, rule 5)."""
        now = self._clock()
        count = self._counts.get(key)
        if count is not None and now - count.last_logged < self.window_seconds:
            count.counted += 1
            count.latest = line
            return []
        due: list[Due[_Line]] = []
        if count is None and len(self._counts) >= self.max_keys:
            due += self._flushed(*self._counts.popitem(last=False))
        if count is None or not count.counted:
            due.append(Due(line))  # a first occurrence, or again one after a quiet window
        else:
            due.append(Due(line, count.counted + 1, now - count.last_logged))
        self._counts[key] = _Count(now, 0, line)
        self._counts.move_to_end(key)
        self._forget_quiet(now)
        return due

    def flush(self) -> list[Due[_Line]]:
        """Every count not yet logged (rule 4); every key is forgotten."""
        counts, self._counts = self._counts, OrderedDict()
        return [due for key, count in counts.items() for due in self._flushed(key, count)]

    @property
    def tracked_keys(self) -> int:
        return len(self._counts)

    def _flushed(self, key: Hashable, count: _Count[_Line]) -> list[Due[_Line]]:
        if not count.counted:
            return []
        return [Due(count.latest, count.counted, self._clock() - count.last_logged)]

    def _forget_quiet(self, now: float) -> None:
        """Rule 3's last sentence: drop keys, oldest first, whose window passed empty."""
        while self._counts:
            key, count = next(iter(self._counts.items()))
            if count.counted or now - count.last_logged < self.window_seconds:
                return
            del self._counts[key]


@dataclass(frozen=True, slots=True)
class _LogLine:
    level: int
    text: str
    fields: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence of a line, as it can go to another process to be counted there."""

    key: Hashable
    level: int
    text: str
    fields: Mapping[str, object]


class CoalescingLog:
    """A logger's lines, coalesced by `RepeatCounter`'s rules. A repeat line is the latest
    occurrence's text with "(xN in the last T s)" added and a `repeats` field of N."""

    def __init__(
        self,
        logger: logging.Logger,
        window_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_keys: int = 256,
    ) -> None:
        self.logger = logger
        #: Hands an occurrence to the process that counts it for the broker (None: counted
        #: here); that process `count`s it, or this one if it cannot.
        self.elsewhere: Callable[[Occurrence], None] | None = None
        self._counter: RepeatCounter[_LogLine] = RepeatCounter(
            window_seconds, clock, max_keys=max_keys
        )

    def log(
        self,
        level: int,
        text: str,
        fields: Mapping[str, object],
        *,
        key: Hashable | None = None,
        exc_info: BaseException | None = None,
    ) -> None:
        """Log `text` with `fields` at `level`, or count it as a repeat of `key` (by default its
        level, text and fields). `exc_info`'s traceback goes with a first occurrence only (and
        so an occurrence with one is counted here)."""
        if key is None:
            key = (level, text, tuple(sorted((name, repr(v)) for name, v in fields.items())))
        occurrence = Occurrence(key, level, text, fields)
        if self.elsewhere is not None and exc_info is None:
            self.elsewhere(occurrence)
        else:
            self._count(occurrence, exc_info, _COUNT_CALLER)

    def count(self, occurrence: Occurrence) -> None:
        """Count `occurrence` here, as `log` does (for one logged in another process)."""
        self._count(occurrence, None, _COUNT_CALLER)

    def _count(
        self, occurrence: Occurrence, exc_info: BaseException | None, stacklevel: int
    ) -> None:
        line = _LogLine(occurrence.level, occurrence.text, occurrence.fields)
        for due in self._counter.occurred(occurrence.key, line):
            self._write(due, exc_info if not due.is_repeat else None, stacklevel)

    def flush(self) -> None:
        """Log every count not yet logged (rule 4)."""
        for due in self._counter.flush():
            self._write(due, None, _CALLER)

    def _write(self, due: Due[_LogLine], exc_info: BaseException | None, stacklevel: int) -> None:
        line = due.line
        if not due.is_repeat:
            self.logger.log(
                line.level,
                "%s",
                line.text,
                extra=dict(line.fields),
                exc_info=exc_info,
                stacklevel=stacklevel,
            )
            return
        self.logger.log(
            line.level,
            "%s (x%d in the last %d s)",
            line.text,
            due.occurrences,
            max(1, round(due.seconds)),
            extra={**line.fields, "repeats": due.occurrences},
            stacklevel=stacklevel,
        )
