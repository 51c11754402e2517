"""A latency histogram with log-linear buckets, as HdrHistogram: constant-time `record`, bounded
relative error, and mergeable, so that each load-generator process keeps its own and the harness
adds them up.

Values below 2**SUB_BUCKET_BITS are counted exactly. Above, each power of two is split into
2**(SUB_BUCKET_BITS - 1) equal buckets, so a bucket is at most 1/2**(SUB_BUCKET_BITS - 1) of its
values wide: 0.8 % with 8 bits. Percentiles use the nearest-rank definition and report the middle
of the bucket the rank falls in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

SUB_BUCKET_BITS = 8
_LINEAR_LIMIT = 1 << SUB_BUCKET_BITS
#: Enough buckets for any value below 2**63 (nanoseconds: 292 years).
_BUCKETS = (64 - SUB_BUCKET_BITS + 1) << SUB_BUCKET_BITS
#: 1, 2, 4, ... 2**62: how many of them a value reaches is its bit length.
_POWERS = np.left_shift(np.int64(1), np.arange(63, dtype=np.int64))


def bucket_index(value: int) -> int:
    """The bucket `value` (a non-negative integer) is counted in; indexes grow with values."""
    if value < _LINEAR_LIMIT:
        return value
    shift = value.bit_length() - SUB_BUCKET_BITS
    return (shift << SUB_BUCKET_BITS) + (value >> shift)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The smallest and largest value counted in bucket `index`."""
    shift = index >> SUB_BUCKET_BITS
    if shift == 0:
        return index, index
    mantissa = index - (shift << SUB_BUCKET_BITS)
    return mantissa << shift, ((mantissa + 1) << shift) - 1


class LatencyHistogram:
    """Counts of non-negative integer values (the harness records nanoseconds)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.total = 0

    def record(self, value: int) -> None:
        # bucket_index inlined: this runs once per delivered message in the load generator.
        if value < _LINEAR_LIMIT:
            self.counts[value if value > 0 else 0] += 1
        else:
            shift = value.bit_length() - SUB_BUCKET_BITS
            self.counts[(shift << SUB_BUCKET_BITS) + (value >> shift)] += 1
        self.total += 1

    def record_many(self, values: npt.NDArray[np.int64]) -> None:
        """`record` each of `values`, in a few array operations rather than a step each: the
        load generator records a whole run of deliveries at once (loadgen/shape.py)."""
        values = np.maximum(values, 0)
        bit_lengths = np.searchsorted(_POWERS, values, side="right")
        shifts = np.maximum(bit_lengths - SUB_BUCKET_BITS, 0)
        counts = np.bincount((shifts << SUB_BUCKET_BITS) + (values >> shifts))
        for index in np.flatnonzero(counts).tolist():
            self.counts[index] += int(counts[index])
        self.total += len(values)

    def to_sparse(self) -> dict[int, int]:
        """The non-empty buckets, to send to another process (`from_sparse` reads it back)."""
        return {index: count for index, count in enumerate(self.counts) if count}

    @classmethod
    def from_sparse(cls, sparse: Mapping[int, int]) -> LatencyHistogram:
        histogram = cls()
        histogram.add_sparse(sparse)
        return histogram

    def add_sparse(self, sparse: Mapping[int, int]) -> None:
        for index, count in sparse.items():
            self.counts[index] += count
            self.total += count

    def merge(self, other: LatencyHistogram) -> None:
        self.add_sparse(other.to_sparse())

    def percentile(self, percent: float) -> float | None:
        """The value at `percent` (0 < percent <= 100), nearest rank; None when empty."""
        return self.percentiles((percent,))[0]

    def percentiles(self, percents: Iterable[float]) -> list[float | None]:
        wanted = list(percents)
        if self.total == 0:
            return [None] * len(wanted)
        ranks = [max(1, math.ceil(percent / 100 * self.total)) for percent in wanted]
        answers: list[float | None] = [None] * len(wanted)
        pending = sorted(range(len(wanted)), key=ranks.__getitem__)
        seen = 0
        for index, count in enumerate(self.counts):
            if not count:
                continue
            seen += count
            while pending and ranks[pending[0]] <= seen:
                low, high = bucket_bounds(index)
                answers[pending.pop(0)] = (low + high) / 2
            if not pending:
                break
        return answers
