"""Where a stream consumer starts, and how old a stream's messages may grow: the x-stream-offset
consume argument and the x-max-age queue argument, as RabbitMQ reads them.

RabbitMQ's streams over AMQP 0-9-1: x-stream-offset is "first", "last" (the start of the last
chunk), "next" (the default: only what is published from now on), an offset (a number), a
timestamp (an AMQP timestamp, seconds since the epoch: the consumer starts at the chunk written
then, clamped to the start or the end of the stream), or an interval string such as "1h" or
"7D" (that long before now). x-max-age is such an interval; its units are Y, M, D, h, m, s.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Final

from batonmq.queues.arguments import InvalidArgument
from batonmq.queues.streams.log import StreamLog

OFFSET_ARGUMENT: Final = "x-stream-offset"
MAX_AGE_ARGUMENT: Final = "x-max-age"

#: Milliseconds in each unit of an interval (RabbitMQ counts a month as 30 days, a year 365).
_UNITS: Final = {
    "Y": 365 * 86_400_000,
    "M": 30 * 86_400_000,
    "D": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1_000,
}
_INTERVAL: Final = re.compile(r"([0-9]+)([YMDhms])")


@dataclass(frozen=True, slots=True)
class First:
    pass


@dataclass(frozen=True, slots=True)
class Last:
    pass


@dataclass(frozen=True, slots=True)
class Next:
    pass


@dataclass(frozen=True, slots=True)
class At:
    offset: int


@dataclass(frozen=True, slots=True)
class Since:
    #: Milliseconds since the epoch.
    timestamp: int


OffsetSpec = First | Last | Next | At | Since
_NAMED: Final[dict[str, OffsetSpec]] = {"first": First(), "last": Last(), "next": Next()}


def parse_offset(value: object, now: int) -> OffsetSpec:
    """The x-stream-offset argument's `value` (None: not given, "next"); `now` in ms.
    InvalidArgument for anything else."""
    if value is None:
        return Next()
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, bool):
        raise InvalidArgument(OFFSET_ARGUMENT, f"{value!r} is not an offset")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgument(OFFSET_ARGUMENT, f"offset {value} is negative")
        return At(value)
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return Since(int(moment.timestamp() * 1000))
    if isinstance(value, str):
        named = _NAMED.get(value)
        if named is not None:
            return named
        try:
            return Since(now - interval(value))
        except ValueError:
            pass
    raise InvalidArgument(
        OFFSET_ARGUMENT,
        f"{value!r}: expected first, last, next, an offset, a timestamp or an interval like 1h",
    )


def parse_max_age(value: object) -> int:
    """The x-max-age argument (like "7D") in milliseconds; InvalidArgument if it is not one."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            return interval(value)
        except ValueError:
            pass
    raise InvalidArgument(
        MAX_AGE_ARGUMENT, f"{value!r}: expected a number and a unit of Y, M, D, h, m or s"
    )


def interval(text: str) -> int:
    """ "12h" in milliseconds; ValueError if `text` is not a positive number and one unit."""
    match = _INTERVAL.fullmatch(text)
    if match is None or int(match[1]) == 0:
        raise ValueError(text)
    return int(match[1]) * _UNITS[match[2]]


def start(spec: OffsetSpec, log: StreamLog) -> int:
    """The first offset a consumer attaching at `spec` is given, clamped to what `log` holds."""
    if isinstance(spec, First):
        return log.first_offset
    if isinstance(spec, Last):
        return log.last_chunk_offset
    if isinstance(spec, Next):
        return log.next_offset
    if isinstance(spec, At):
        return min(max(spec.offset, log.first_offset), log.next_offset)
    return log.offset_at(spec.timestamp)
