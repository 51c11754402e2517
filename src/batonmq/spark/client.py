"""The AMQP 0-9-1 a Spark job reads with, over pika's blocking connection: where a stream ends,
and a range of it read exactly (rows are published by `publisher.py`).

pika, because Spark calls a data source synchronously (an iterator of rows per partition on an
executor, one call at a time on the driver): a blocking client needs no event loop per task,
and pika is pure Python with no dependencies of its own. Every call opens its own connection
and closes it, so that a broker restarted between two calls is simply connected to again (the
URL's `connection_attempts` and `retry_delay` say how patiently).

Only what RabbitMQ's streams also do over AMQP 0-9-1 is used, so the data source reads a
RabbitMQ stream as well:

- Where a stream starts: the `x-stream-offset` of the first delivery to a consumer attached at
  `first` (or `last`).
- Where it ends (the next offset): that first offset plus the stream's message count from a
  passive queue.declare, read in that order: retention that runs in between can only make the
  end seen smaller than the real one, never larger, so a range never asks for an offset that
  does not exist yet. (RabbitMQ refreshes a stream's message count every few seconds: there,
  the end seen may lag that much behind.)
- Where a moment falls (a timestamp position): the `x-stream-offset` of the first delivery
  to a consumer attached at that AMQP timestamp (whole seconds: a moment is rounded down to its
  second, so a few messages written earlier in that second may be read too, never one after
  it missed). AMQP has no "nothing there" answer: a consumer attached after the newest message
  just waits, so when none comes for TIMESTAMP_SETTLE seconds the moment is after everything
  the stream holds and stands for the end the stream had before the consumer attached (what
  RabbitMQ's consumer attached at a later timestamp starts from, too).
- A range [start, end): a consumer attached at `x-stream-offset` = start, which stops at the
  delivery of offset end - 1. Deliveries before `start` are skipped (a stream may be read from
  the start of the chunk that holds the offset asked for); a first offset after `start` means
  that retention removed the messages in between (DataLossError, unless the caller accepts
  the loss).

One thing only BatonMQ sends is read when it is there: when the stream appended a message (the
`x-batonmq-stream-timestamp` header, the `timestamp` column); a RabbitMQ stream's rows have none.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from typing import Final

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]

from batonmq.queues.streams.deliveryheader import TIMESTAMP_HEADER
from batonmq.spark.options import Position
from batonmq.spark.ranges import OffsetRange
from batonmq.spark.rows import OFFSET_HEADER, PROPERTY_FIELDS, Delivery

#: Messages a range reader may have unacknowledged (the stream consumer's prefetch).
READ_PREFETCH: Final = 1000
#: Seconds to wait for the first delivery that tells where a stream starts.
FIRST_DELIVERY_TIMEOUT: Final = 30.0
#: Seconds without a delivery after which a consumer attached at a timestamp is taken to be
#: waiting at the end of the stream.
TIMESTAMP_SETTLE: Final = 3.0


class DataLossError(RuntimeError):
    """Offsets of a range that the stream no longer holds (retention removed them)."""


class NotAStreamError(RuntimeError):
    """The queue delivered a message without an x-stream-offset: it is not a stream."""


@contextlib.contextmanager
def _channel(url: str) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        yield connection.channel()
    finally:
        if connection.is_open:
            connection.close()


#: connection.close's reply code when the broker shuts down (AMQP 0-9-1 constants).
_CONNECTION_FORCED: Final = 320


def resolve(url: str, queue: str, position: Position) -> int:
    """The offset `position` stands for in `queue` now; 0 in a stream that holds nothing.

    A broker that shuts down while it is asked (320 CONNECTION_FORCED: a restart between two
    micro-batches, when Spark asks for the latest offset) is asked again, once, on a new
    connection, which pika opens as the URL says (connection_attempts, retry_delay)."""
    if isinstance(position, int):
        return position
    try:
        return _resolve(url, queue, position)
    except pika.exceptions.ConnectionClosedByBroker as closed:
        if closed.reply_code != _CONNECTION_FORCED:
            raise
        return _resolve(url, queue, position)


def _resolve(url: str, queue: str, position: str | datetime.datetime) -> int:
    with _channel(url) as channel:
        if _message_count(channel, queue) == 0:
            return 0
        if isinstance(position, datetime.datetime):
            end = _first_offset(channel, queue, "first") + _message_count(channel, queue)
            return _first_offset(channel, queue, position, settle=TIMESTAMP_SETTLE, end=end)
        if position == "next":
            first = _first_offset(channel, queue, "first")
            return first + _message_count(channel, queue)
        return _first_offset(channel, queue, position)


def _message_count(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    declared = channel.queue_declare(queue, passive=True)
    count: int = declared.method.message_count
    return count


def _first_offset(
    channel: pika.adapters.blocking_connection.BlockingChannel,
    queue: str,
    spec: str | datetime.datetime,
    *,
    settle: float = FIRST_DELIVERY_TIMEOUT,
    end: int | None = None,
) -> int:
    """The offset of the first message a consumer attached at `spec` is given; `end` if there
    is none for `settle` seconds (TimeoutError when `end` is None)."""
    channel.basic_qos(prefetch_count=1)
    try:
        for method, properties, body in channel.consume(
            queue, arguments={OFFSET_HEADER: spec}, inactivity_timeout=settle
        ):
            if method is None:
                if end is not None:
                    return end
                raise TimeoutError(f"stream {queue!r} delivered nothing from {spec!r}")
            return _delivery(queue, method, properties, body).offset
    finally:
        channel.cancel()
    raise AssertionError("a consumer's generator ended without a delivery or a timeout")


def read_range(
    url: str, queue: str, part: OffsetRange, *, timeout: float, fail_on_data_loss: bool
) -> Iterator[Delivery]:
    """The messages of `queue` at the offsets of `part`, in offset order (see the module
    docstring). DataLossError for offsets the stream no longer holds if `fail_on_data_loss`;
    TimeoutError when no message comes for `timeout` seconds."""
    if not len(part):
        return
    with _channel(url) as channel:
        prefetch = min(READ_PREFETCH, len(part))
        channel.basic_qos(prefetch_count=prefetch)
        expected = part.start
        unacked = 0
        for method, properties, body in channel.consume(
            queue, arguments={OFFSET_HEADER: part.start}, inactivity_timeout=timeout
        ):
            if method is None:
                raise TimeoutError(
                    f"stream {queue!r}: no message for {timeout:g} s while offset {expected} "
                    f"of [{part.start}, {part.end}) was awaited"
                )
            unacked += 1
            if unacked * 2 >= prefetch:  # the credit back, a few acknowledgements at a time
                channel.basic_ack(method.delivery_tag, multiple=True)
                unacked = 0
            delivery = _delivery(queue, method, properties, body)
            if delivery.offset < expected:
                continue
            if delivery.offset > expected and fail_on_data_loss:
                raise DataLossError(
                    f"stream {queue!r} no longer holds offsets {expected} to "
                    f"{min(delivery.offset, part.end) - 1} (removed by retention); set "
                    "failOnDataLoss to false to read what is left"
                )
            if delivery.offset < part.end:
                yield delivery
            if delivery.offset >= part.end - 1:
                break
            expected = delivery.offset + 1
        channel.cancel()


def _delivery(
    queue: str,
    method: pika.spec.Basic.Deliver,
    properties: pika.spec.BasicProperties,
    body: bytes,
) -> Delivery:
    offset = (properties.headers or {}).get(OFFSET_HEADER)
    if not isinstance(offset, int):
        raise NotAStreamError(f"queue {queue!r} is not a stream: its deliveries carry no offset")
    return delivery_of(method, properties, body, offset)


def delivery_of(
    method: pika.spec.Basic.Deliver,
    properties: pika.spec.BasicProperties,
    body: bytes,
    offset: int,
) -> Delivery:
    """A delivered message as the rows want it, at `offset`."""
    headers: dict[str, object] = dict(properties.headers or {})
    appended = headers.get(TIMESTAMP_HEADER)
    return Delivery(
        offset=offset,
        exchange=method.exchange,
        routing_key=method.routing_key,
        body=body,
        headers=headers,
        properties={
            name: value
            for name, _kind in PROPERTY_FIELDS
            if (value := getattr(properties, name)) is not None
        },
        timestamp=properties.timestamp,
        appended=appended if isinstance(appended, int) else None,
    )
