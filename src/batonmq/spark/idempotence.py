"""Idempotent micro-batches into a stream: each row a streaming query publishes is numbered so
that the stream's deduplication (RabbitMQ's: a named producer, a publishing id that only grows)
stores it once however often Spark replays its batch.

Spark replays a micro-batch whose commit it did not record (a killed driver, a failed task)
with the same batch id and the same input; the producer is the query and the task's partition,
the publishing id the batch id and the row's position in that partition:

    producer = "spark/<query id>/<partition>"      sequence = batch id * 2**32 + position

The query id is the one Spark keeps in the checkpoint (the same across restarts), so a replayed
batch repeats the ids it sent before and the stream drops every row it already holds, while the
next batch's ids are above all of them. This holds when a replayed batch has the same rows in
the same partitions in the same order, as Spark's replay of a deterministic source (a BatonMQ
stream, files) gives.

Over AMQP 0-9-1 the ids are the headers `x-batonmq-producer` and `x-batonmq-sequence`; a queue
that is not a BatonMQ stream keeps them as ordinary headers (at least once there).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from batonmq.spark.rows import Publication

PRODUCER_HEADER: Final = "x-batonmq-producer"
SEQUENCE_HEADER: Final = "x-batonmq-sequence"
#: The local properties Spark gives the tasks of a micro-batch (its StreamExecution's
#: QUERY_ID_KEY and BATCH_ID_KEY; the latter is what `foreach` reads as the epoch id).
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
#: Positions a partition of one batch may number; batch ids take the bits above them.
POSITIONS: Final = 1 << 32
#: Batch ids that keep a sequence within AMQP's signed 64-bit integer.
BATCH_IDS: Final = 1 << 31


@dataclass(frozen=True, slots=True)
class BatchTask:
    """One partition of one micro-batch of one query."""

    query_id: str
    batch_id: int
    partition: int

    def __post_init__(self) -> None:
        if not 0 <= self.batch_id < BATCH_IDS:
            raise ValueError(f"batch id {self.batch_id} is outside [0, 2**31)")

    @property
    def producer(self) -> str:
        return f"spark/{self.query_id}/{self.partition}"

    def sequence(self, position: int) -> int:
        if not 0 <= position < POSITIONS:
            raise ValueError(f"a partition of a batch holds at most 2**32 rows, not {position + 1}")
        return self.batch_id * POSITIONS + position

    def numbered(self, publication: Publication, position: int) -> Publication:
        """`publication` with this task's producer and the id of the row at `position`
        (replacing any the row's own headers had)."""
        headers: dict[str, str | int] = dict(publication.headers or {})
        headers[PRODUCER_HEADER] = self.producer
        headers[SEQUENCE_HEADER] = self.sequence(position)
        return dataclasses.replace(publication, headers=headers)


def batch_task(query_id: str | None, batch_id: str | None, partition: int) -> BatchTask | None:
    """The task that Spark's local properties describe; None outside a streaming query."""
    if not query_id or not batch_id:
        return None
    return BatchTask(query_id, int(batch_id), partition)
