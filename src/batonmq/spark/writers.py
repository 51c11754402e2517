"""Writing rows to BatonMQ from Spark (`df.write` and `df.writeStream`): each row is published
with a publisher confirm (see `rows.publication_of` for the columns), and a task succeeds only
once every message it published is confirmed; a nacked or unroutable message fails it.

`df.write`: at least once. Spark retries a failed task, whose messages that were confirmed
before the failure are then published again.

`df.writeStream`: into a BatonMQ stream, exactly once per micro-batch: each row carries a
producer and publishing id derived from the query, its partition, the batch id and its position
(`idempotence.py`), so the stream stores nothing twice when Spark replays the batch. Into
anything else, at least once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from batonmq.spark import publisher
from batonmq.spark.idempotence import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY, BatchTask, batch_task
from batonmq.spark.options import WriteOptions
from batonmq.spark.rows import Publication, publication_of


@dataclass
class Published(WriterCommitMessage):
    """What one task published, every message confirmed."""

    count: int


def _publications(options: WriteOptions, rows: Iterator[Row]) -> Iterator[Publication]:
    for row in rows:
        yield publication_of(
            row.asDict(recursive=True),
            exchange=options.exchange,
            routing_key=options.routing_key,
        )


def _numbered(publications: Iterator[Publication], task: BatchTask) -> Iterator[Publication]:
    for position, publication in enumerate(publications):
        yield task.numbered(publication, position)


def _current_batch_task() -> BatchTask:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("a stream writer runs in a Spark task")
    task = batch_task(
        context.getLocalProperty(QUERY_ID_PROPERTY),
        context.getLocalProperty(BATCH_ID_PROPERTY),
        context.partitionId(),
    )
    if task is None:
        raise RuntimeError("Spark gave a streaming write no query id or batch id")
    return task


class ConfirmedWriter(DataSourceWriter):
    """`df.write.format("batonmq")`."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Published:
        publications = _publications(self.options, iterator)
        return Published(publisher.publish_confirmed(self.options.url, publications))


class ConfirmedStreamWriter(DataSourceStreamWriter):
    """`df.writeStream.format("batonmq")`: each micro-batch as `ConfirmedWriter` writes, its
    rows numbered for the stream's deduplication."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Published:
        publications = _numbered(_publications(self.options, iterator), _current_batch_task())
        return Published(publisher.publish_confirmed(self.options.url, publications))
