"""Reading a stream queue from Spark: a batch reader of one offset range, and a streaming reader
whose offsets are the stream's.

Exactly once: a micro-batch is an offset range [start, end) that Spark writes to its checkpoint
before it runs; its partitions are a pure function of the range (`ranges.split`), and each
partition reads exactly its offsets from the stream (`client.read_range`). A batch replayed
after a failure or a restart therefore reads the same rows, so a sink that Spark's checkpoint
makes idempotent (a file sink, foreachBatch keyed by batch id) holds each message once.

`commit(end)` does nothing: a stream keeps its messages for every reader until retention
(x-max-age, x-max-length-bytes) removes them; a range that retention removed before it was read
fails the query unless failOnDataLoss is false.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from batonmq.spark import client
from batonmq.spark.options import ReadOptions
from batonmq.spark.ranges import OffsetRange, batch_end, split
from batonmq.spark.rows import Row, row_of

#: The key of the stream offset in Spark's offset objects: {"offset": next offset to read}.
OFFSET_KEY: Final = "offset"


class RangePartition(InputPartition):
    """One partition of a read: the offsets it holds."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.offsets = offsets


def _partitions(options: ReadOptions, whole: OffsetRange) -> list[RangePartition]:
    """An empty range still has one (empty) partition: given none, Spark reads one partition
    that is not a RangePartition."""
    parts = split(whole, options.records_per_partition) or [whole]
    return [RangePartition(part) for part in parts]


def _rows(options: ReadOptions, partition: InputPartition) -> Iterator[Row]:
    assert isinstance(partition, RangePartition)
    for delivery in client.read_range(
        options.url,
        options.queue,
        partition.offsets,
        timeout=options.read_timeout,
        fail_on_data_loss=options.fail_on_data_loss,
    ):
        yield row_of(delivery, options.queue)


class StreamRangeReader(DataSourceReader):
    """`spark.read`: the range from startingOffset to endingOffset, resolved when the query is
    planned."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        start = client.resolve(options.url, options.queue, options.starting)
        end = client.resolve(options.url, options.queue, options.ending)
        return _partitions(options, OffsetRange(start, max(start, end)))

    def read(self, partition: InputPartition) -> Iterator[Row]:
        return _rows(self.options, partition)


class StreamOffsetReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream`: micro-batches of stream offsets, up to maxRecordsPerBatch each; with
    Trigger.AvailableNow, up to the end the stream had when the query started."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        #: Trigger.AvailableNow: the end of the stream when the query started.
        self.target: int | None = None

    def initialOffset(self) -> dict[str, int]:
        options = self.options
        return {OFFSET_KEY: client.resolve(options.url, options.queue, options.starting)}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_batch
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._stream_end()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        available = self._stream_end() if self.target is None else self.target
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return {OFFSET_KEY: batch_end(start[OFFSET_KEY], available, max_records)}

    def _stream_end(self) -> int:
        return client.resolve(self.options.url, self.options.queue, "next")

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return _partitions(self.options, OffsetRange(start[OFFSET_KEY], end[OFFSET_KEY]))

    def read(self, partition: InputPartition) -> Iterator[Row]:
        return _rows(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: see the module docstring."""
