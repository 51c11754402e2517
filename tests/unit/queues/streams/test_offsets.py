"""x-stream-offset and x-max-age as RabbitMQ reads them (its streams documentation, "Consuming":
first, last, next, an offset, a timestamp, or an interval; "x-max-age ... valid units: Y, M, D,
h, m, s")."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from batonmq.queues.arguments import InvalidArgument
from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.files import FileMedium
from batonmq.queues.streams.log import StreamLog
from batonmq.queues.streams.offsets import (
    At,
    First,
    Last,
    Next,
    Since,
    parse_max_age,
    parse_offset,
    start,
)

NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("value", "spec"),
    [
        (None, Next()),
        ("first", First()),
        ("last", Last()),
        ("next", Next()),
        (b"first", First()),
        (0, At(0)),
        (12345, At(12345)),
        (datetime.datetime(2023, 11, 14, 22, 13, 20), Since(NOW)),
        ("1h", Since(NOW - 3_600_000)),
        ("7D", Since(NOW - 7 * 86_400_000)),
        ("30s", Since(NOW - 30_000)),
    ],
)
def test_offset_specs(value: object, spec: object) -> None:
    assert parse_offset(value, now=NOW) == spec


@pytest.mark.parametrize("value", ["", "middle", "1x", "0h", "-1h", -1, True, 1.5, [1]])
def test_other_offsets_are_refused_naming_the_argument(value: object) -> None:
    with pytest.raises(InvalidArgument, match="x-stream-offset"):
        parse_offset(value, now=NOW)


@pytest.mark.parametrize(
    ("value", "milliseconds"),
    [
        ("7D", 604_800_000),
        ("12h", 43_200_000),
        ("1Y", 31_536_000_000),
        ("2M", 5_184_000_000),
        ("07D", 604_800_000),
    ],
)
def test_max_age(value: str, milliseconds: int) -> None:
    assert parse_max_age(value) == milliseconds


@pytest.mark.parametrize("value", ["7d", "7", "D", "1.5h", "0D", 7, None])
def test_a_bad_max_age_is_refused_naming_the_argument(value: object) -> None:
    with pytest.raises(InvalidArgument, match="x-max-age"):
        parse_max_age(value)


def test_where_each_spec_starts(tmp_path: Path) -> None:
    log = StreamLog(FileMedium(tmp_path / "s"), max_segment_bytes=200)
    try:
        for n in range(6):
            log.append([Record("", "q", b"", b"x" * 40)] * 2, timestamp=n * 1000)
        log.retain(max_age=None, max_bytes=400, now=0)
        first = log.first_offset
        assert first > 0

        assert start(First(), log) == first
        assert start(Last(), log) == 10
        assert start(Next(), log) == 12
        assert start(At(0), log) == first  # retained away: the oldest held
        assert start(At(11), log) == 11
        assert start(At(99), log) == 12  # past the end: what comes next
        assert start(Since(4000), log) == 8
        assert start(Since(99_000), log) == 12
    finally:
        log.close()
