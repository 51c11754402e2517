"""Offset ranges of a stream, as the Spark source plans them: where a micro-batch ends under a
read limit, and how a range is split into partitions.

A range is [start, end): the offsets of the messages it holds, `end` excluded (the stream offset
Spark checkpoints is the next one to read). Splitting is a pure function of the range and the
partition size, so a micro-batch replayed after a failure is split, and read, exactly as the
first time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """The messages at offsets start, start + 1, ..., end - 1 of one stream."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"not an offset range: [{self.start}, {self.end})")

    def __len__(self) -> int:
        return self.end - self.start


def batch_end(start: int, available: int, max_records: int | None) -> int:
    """Where a micro-batch from `start` ends when the stream ends at `available` (its next
    offset, as last seen) and at most `max_records` may be read (None: no limit).

    Never before `start`: a stream end seen lower than where the query already is (a count
    read while retention ran) means no new data, never a step back."""
    end = max(start, available)
    if max_records is not None:
        end = min(end, start + max_records)
    return end


def split(whole: OffsetRange, records_per_partition: int) -> list[OffsetRange]:
    """`whole` cut into the fewest partitions of at most `records_per_partition` offsets, of
    sizes that differ by one at most, in offset order; none for an empty range."""
    if records_per_partition < 1:
        raise ValueError(f"records_per_partition {records_per_partition} is not positive")
    count = -(-len(whole) // records_per_partition)
    if count == 0:
        return []
    size, larger = divmod(len(whole), count)
    parts: list[OffsetRange] = []
    start = whole.start
    for index in range(count):
        end = start + size + (1 if index < larger else 0)
        parts.append(OffsetRange(start, end))
        start = end
    return parts
