"""`batonctl metrics`' figures: message rates per second between two readings of the broker's
overview (the deltas of its `message_stats` counters over the time between them), and the
queue totals at the second, one line per interval as imqcmd's `metrics bkr -int` prints them.
Pure functions, no IO."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from batonmq.cli.live.tables import GAP
from batonmq.management.listing import Json

#: The rate columns: header, and the overview's message_stats counter each is the rate of
#: (RabbitMQ's names: publish in, deliver_get out).
RATES: Final = (
    ("IN/S", "publish"),
    ("OUT/S", "deliver_get"),
    ("ACK/S", "ack"),
    ("CONFIRM/S", "confirm"),
    ("REDELIVER/S", "redeliver"),
)
#: The columns of figures as they are at the second reading: header, section, field.
GAUGES: Final = (
    ("MESSAGES", "queue_totals", "messages"),
    ("UNACKED", "queue_totals", "messages_unacknowledged"),
    ("CONNECTIONS", "object_totals", "connections"),
)
#: The least width of a column: the time of day, a rate up to 999999.9.
_WIDTH: Final = len("00:00:00")
_TIME: Final = "TIME"


@dataclass(frozen=True, slots=True)
class Reading:
    """The overview at one moment: `at` in seconds of a monotonic clock."""

    at: float
    overview: Mapping[str, Json]

    def counter(self, name: str) -> int:
        stats = self.overview.get("message_stats")
        value = stats.get(name) if isinstance(stats, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def gauge(self, section: str, name: str) -> int:
        totals = self.overview.get(section)
        value = totals.get(name) if isinstance(totals, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else 0


def rates(before: Reading, after: Reading) -> dict[str, float]:
    """Each RATES counter's increase per second from `before` to `after`. A counter that went
    down was started again from 0 (the broker restarted in between): its increase is then
    its whole value at `after`. A missing counter counts as 0 (as RabbitMQ's clients take it)."""
    elapsed = after.at - before.at
    if elapsed <= 0:
        raise ValueError("the second reading must come after the first")
    result: dict[str, float] = {}
    for _, name in RATES:
        old, new = before.counter(name), after.counter(name)
        result[name] = (new - old if new >= old else new) / elapsed
    return result


def header() -> str:
    titles = [_TIME, *(title for title, _ in RATES), *(title for title, _, _ in GAUGES)]
    return GAP.join(title.rjust(_width(title)) for title in titles)


def line(clock: str, before: Reading, after: Reading) -> str:
    """One interval's line under `header()`: `clock` (the time of day), the rates between
    the readings, the gauges at `after`."""
    per_second = rates(before, after)
    cells = [clock.rjust(_width(_TIME))]
    cells += [f"{per_second[name]:.1f}".rjust(_width(title)) for title, name in RATES]
    cells += [
        str(after.gauge(section, name)).rjust(_width(title)) for title, section, name in GAUGES
    ]
    return GAP.join(cells)


def _width(title: str) -> int:
    return max(_WIDTH, len(title))
