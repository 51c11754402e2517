"""Reading a classic queue from Spark (`queueType` `classic`): at least once.

A classic queue forgets what is acknowledged, so it cannot be replayed: the driver takes the
messages itself, on one consumer that lives as long as the query, and acknowledges them only
once the micro-batch that holds them is committed. Spark says so late: `commit(end)` of a batch
comes when the next one is planned, never for the last one before the query stops. But Spark
runs one micro-batch at a time and asks `latestOffset(start)` only once the batch that ends at
`start` is in its checkpoint's commit log, so that call acknowledges what lies before `start`
(and under Trigger.AvailableNow, Spark asks it once more after the last batch). The query's
offsets number the messages in the order they were taken (`held.py`); a micro-batch carries its
messages to the executors in its partitions.

If the driver dies, or its connection does, the messages it had not acknowledged go back to the
queue (AMQP 0-9-1: unacknowledged messages are requeued when their channel closes) and are taken
again: a batch that was written but not committed is written again with what the queue gives
then. Every message reaches the sink at least once; some may reach it twice.

A micro-batch is held in the driver's memory: maxRecordsPerBatch (default
DEFAULT_CLASSIC_BATCH) bounds it. The driver talks to the broker only when Spark calls it, so a
micro-batch that runs longer than the connection's heartbeat timeout loses its connection (the
URL's `heartbeat` sets it; its messages are taken again, as above).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Final

import pika  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from batonmq.spark import client
from batonmq.spark.held import Held
from batonmq.spark.options import ReadOptions
from batonmq.spark.ranges import OffsetRange, split
from batonmq.spark.readers import OFFSET_KEY
from batonmq.spark.rows import Delivery, Row, row_of

#: At most this many messages a micro-batch, unless maxRecordsPerBatch says otherwise.
DEFAULT_CLASSIC_BATCH: Final = 10_000

_Arrived = tuple[pika.spec.Basic.Deliver, pika.spec.BasicProperties, bytes]


class HeldPartition(InputPartition):
    """Messages of a micro-batch, carried to the executor that turns them into rows."""

    def __init__(self, deliveries: list[Delivery]) -> None:
        super().__init__(len(deliveries))
        self.deliveries = deliveries


class ClassicQueueReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.batch = options.max_records_per_batch or DEFAULT_CLASSIC_BATCH
        self.held = Held()
        #: Delivered to the consumer and not numbered yet.
        self._arrived: deque[_Arrived] = deque()
        self._connection: pika.BlockingConnection | None = None
        self._channel: pika.adapters.blocking_connection.BlockingChannel | None = None
        #: Trigger.AvailableNow: how many messages the queue had ready when the query started;
        #: then the offset the query ends at.
        self._available_now: int | None = None
        self._target: int | None = None

    def initialOffset(self) -> dict[str, int]:
        return {OFFSET_KEY: 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._available()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        first = start[OFFSET_KEY]
        self._acknowledge(first)  # the batch that ends at `first` is committed
        if self.held.next_number < first:  # a new driver on an old checkpoint
            self.held.forget(first)
        if self._available_now is not None and self._target is None:
            self._target = first + self._available_now
        want = limit.max_rows if isinstance(limit, ReadMaxRows) else self.batch
        if self._target is not None:
            want = min(want, self._target - self.held.next_number)
        self._take(max(want, 0))
        return {OFFSET_KEY: self.held.next_number}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        whole = OffsetRange(start[OFFSET_KEY], end[OFFSET_KEY])
        deliveries = self.held.between(whole.start, whole.end)
        if len(whole) and not deliveries:
            # Planned by a driver that died (or on a connection that broke): its messages went
            # back to the queue; what the queue gives now takes their place.
            self.held.forget(whole.start)
            self._take(len(whole))
            deliveries = self.held.between(whole.start, whole.end)
        parts = split(whole, self.options.records_per_partition) or [whole]
        return [
            HeldPartition([d for d in deliveries if part.start <= d.offset < part.end])
            for part in parts
        ]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        assert isinstance(partition, HeldPartition)
        for delivery in partition.deliveries:
            yield row_of(delivery, self.options.queue)

    def commit(self, end: dict[str, int]) -> None:
        """The batch up to `end` is in Spark's checkpoint: its messages are acknowledged."""
        self._acknowledge(end[OFFSET_KEY])

    def _acknowledge(self, end: int) -> None:
        tag = self.held.settle(end)
        if tag is None or self._channel is None:
            return
        try:
            self._channel.basic_ack(tag, multiple=True)
        except pika.exceptions.AMQPError:
            self._disconnect()  # they go back to the queue and are taken again

    def stop(self) -> None:
        self._disconnect()

    # The consumer -------------------------------------------------------------------------

    def _take(self, want: int) -> None:
        """Number up to `want` messages: those delivered already, and those the queue has
        ready, waited for up to readTimeout seconds. A connection that broke (a broker
        restarted) is opened again once (the URL's connection_attempts and retry_delay say
        how patiently); what it held went back to the queue and is taken again."""
        try:
            want = self._await(want)
        except pika.exceptions.AMQPError:
            self._disconnect()
            try:
                want = self._await(want)
            except pika.exceptions.AMQPError:
                self._disconnect()
                raise
        while self._arrived and want > 0:
            method, properties, body = self._arrived.popleft()
            number = self.held.next_number
            self.held.number(
                method.delivery_tag, client.delivery_of(method, properties, body, number)
            )
            want -= 1

    def _await(self, want: int) -> int:
        """How many of `want` messages can be had; once they are delivered, or readTimeout
        seconds passed."""
        want = min(want, self._available())
        deadline = time.monotonic() + self.options.read_timeout
        while len(self._arrived) < want and time.monotonic() < deadline:
            assert self._connection is not None
            self._connection.process_data_events(time_limit=0.05)
        return want

    def _available(self) -> int:
        """The messages delivered to this consumer and not numbered yet, and those ready in
        the queue; connects if need be."""
        channel = self._consuming()
        ready: int = channel.queue_declare(self.options.queue, passive=True).method.message_count
        # Deliveries sent before the answer are not in its count: hand them to `_delivered`.
        assert self._connection is not None
        self._connection.process_data_events(time_limit=0)
        return len(self._arrived) + ready

    def _consuming(self) -> pika.adapters.blocking_connection.BlockingChannel:
        if self._channel is not None and self._channel.is_open:
            return self._channel
        self._disconnect()
        self._connection = pika.BlockingConnection(pika.URLParameters(self.options.url))
        channel = self._connection.channel()
        # Room for the batch being committed and the next one.
        channel.basic_qos(prefetch_count=2 * self.batch)
        channel.basic_consume(self.options.queue, self._delivered)
        self._channel = channel
        return channel

    def _delivered(
        self,
        channel: pika.adapters.blocking_connection.BlockingChannel,
        method: pika.spec.Basic.Deliver,
        properties: pika.spec.BasicProperties,
        body: bytes,
    ) -> None:
        self._arrived.append((method, properties, body))

    def _disconnect(self) -> None:
        """Drop the connection: whatever it had not acknowledged goes back to the queue."""
        connection, self._connection, self._channel = self._connection, None, None
        self._arrived.clear()
        self.held.forget(self.held.next_number)
        if connection is not None and connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                connection.close()
