"""The load generator's latency histogram: buckets, percentiles, merging."""

import math
import random
from itertools import pairwise

import pytest
from benchmarks.histogram import (
    SUB_BUCKET_BITS,
    LatencyHistogram,
    bucket_bounds,
    bucket_index,
)

#: The widest a bucket may be, relative to the values in it.
RELATIVE_ERROR = 1 / 2 ** (SUB_BUCKET_BITS - 1)


def nearest_rank(values: list[int], percent: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percent / 100 * len(ordered))) - 1]


def test_small_values_are_exact():
    for value in range(2**SUB_BUCKET_BITS):
        assert bucket_bounds(bucket_index(value)) == (value, value)


@pytest.mark.parametrize("value", [256, 257, 1000, 123_456, 10**9, 2**40 + 12345, 2**62])
def test_a_value_lies_in_its_bucket_and_the_bucket_is_narrow(value):
    low, high = bucket_bounds(bucket_index(value))
    assert low <= value <= high
    assert (high - low + 1) / low <= RELATIVE_ERROR


def test_bucket_indexes_grow_with_values():
    rng = random.Random(7)
    values = sorted(rng.randrange(10**12) for _ in range(5000))
    indexes = [bucket_index(value) for value in values]
    assert indexes == sorted(indexes)


def test_successive_buckets_leave_no_gap_between_their_values():
    used = sorted({bucket_index(value) for value in range(200_000)})
    for index, following in pairwise(used):
        assert bucket_bounds(index)[1] + 1 == bucket_bounds(following)[0]


def test_percentiles_agree_with_a_sorted_sample_within_a_bucket():
    rng = random.Random(1)
    values = [int(rng.lognormvariate(13, 1.5)) for _ in range(20_000)]
    histogram = LatencyHistogram()
    for value in values:
        histogram.record(value)
    assert histogram.total == len(values)
    for percent in (50, 90, 99, 99.9, 100):
        exact = nearest_rank(values, percent)
        estimate = histogram.percentile(percent)
        assert estimate is not None
        assert abs(estimate - exact) <= exact * RELATIVE_ERROR + 1


def test_percentiles_answers_in_the_order_asked():
    histogram = LatencyHistogram()
    for value in range(1, 101):
        histogram.record(value)
    assert histogram.percentiles((99, 50, 1)) == [99, 50, 1]


def test_an_empty_histogram_has_no_percentiles():
    assert LatencyHistogram().percentiles((50, 99)) == [None, None]


def test_a_negative_value_counts_as_zero():
    histogram = LatencyHistogram()
    histogram.record(-5)
    assert histogram.percentile(50) == 0


def test_histograms_merge_through_their_sparse_form():
    first, second, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for value in (5, 500, 5_000_000):
        first.record(value)
        both.record(value)
    for value in (7, 70_000):
        second.record(value)
        both.record(value)
    merged = LatencyHistogram.from_sparse(first.to_sparse())
    merged.merge(second)
    assert merged.counts == both.counts
    assert merged.total == 5
