"""Writing rows to BatonMQ from Spark (`df.write` and `df.writeStream`): each row is published
with a publisher confirm (see `rows.publication_of` for the columns), and a task succeeds only
once every message it published is confirmed; a nacked or unroutable message fails it.

At least once: Spark retries a failed task and replays a failed micro-batch, whose messages
that were confirmed before the failure are then published again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from batonmq.spark import client
from batonmq.spark.options import WriteOptions
from batonmq.spark.rows import Publication, publication_of


@dataclass
class Published(WriterCommitMessage):
    """What one task published, every message confirmed."""

    count: int


def _publish(options: WriteOptions, rows: Iterator[Row]) -> Published:
    publications: Iterator[Publication] = (
        publication_of(
            row.asDict(recursive=True),
            exchange=options.exchange,
            routing_key=options.routing_key,
        )
        for row in rows
    )
    return Published(client.publish_confirmed(options.url, publications))


class ConfirmedWriter(DataSourceWriter):
    """`df.write.format("batonmq")`."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Published:
        return _publish(self.options, iterator)


class ConfirmedStreamWriter(DataSourceStreamWriter):
    """`df.writeStream.format("batonmq")`: each micro-batch as `ConfirmedWriter` writes."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Published:
        return _publish(self.options, iterator)
