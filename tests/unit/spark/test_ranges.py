"""Offset ranges of the Spark source: where a micro-batch ends and how a range is split. Spark's
"DataSourceStreamReader": `latestOffset(start, limit)` "must always respect the given limit" and
may "return the `start` parameter as it is, if there is no data to process"; a replayed batch must
read the same rows, so the split depends on nothing but the range."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batonmq.spark.ranges import OffsetRange, batch_end, split


def test_a_batch_ends_at_the_stream_end_without_a_limit():
    assert batch_end(10, 25, None) == 25


def test_a_batch_holds_at_most_the_limit():
    """Spark: "The source must always respect the given readLimit" (ReadMaxRows)."""
    assert batch_end(10, 25, 4) == 14
    assert batch_end(10, 12, 4) == 12


def test_a_stream_end_seen_below_the_start_is_no_new_data():
    """A count read while retention ran can show an end lower than the query's position: the
    batch is empty (end == start), never a step back."""
    assert batch_end(10, 7, None) == 10
    assert batch_end(10, 7, 4) == 10


def test_an_offset_range_refuses_an_end_before_its_start():
    with pytest.raises(ValueError, match="not an offset range"):
        OffsetRange(5, 4)


def test_a_range_splits_into_near_equal_parts_in_offset_order():
    assert split(OffsetRange(10, 20), 4) == [
        OffsetRange(10, 14),
        OffsetRange(14, 17),
        OffsetRange(17, 20),
    ]


def test_an_empty_range_has_no_partition():
    """Spark: partitions(start, end) "may be called with an empty offset range when start ==
    end, in that case the method should return an empty sequence"."""
    assert split(OffsetRange(7, 7), 100) == []


def test_a_partition_size_must_be_positive():
    with pytest.raises(ValueError, match="not positive"):
        split(OffsetRange(0, 1), 0)


@given(
    start=st.integers(0, 10**12),
    length=st.integers(0, 10_000),
    size=st.integers(1, 2_000),
)
def test_the_parts_cover_the_range_exactly_once_and_are_the_same_every_time(start, length, size):
    """Exactly once across a replay: the parts are contiguous, cover [start, end) with no
    overlap, hold at most `size` offsets each, and a second split gives the same parts."""
    whole = OffsetRange(start, start + length)

    parts = split(whole, size)

    assert parts == split(whole, size)
    assert [offset for part in parts for offset in range(part.start, part.end)] == list(
        range(whole.start, whole.end)
    )
    assert all(1 <= len(part) <= size for part in parts)
    assert len(parts) == -(-length // size)
