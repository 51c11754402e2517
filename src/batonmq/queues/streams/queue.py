"""The stream queue (`x-queue-type: stream`), RabbitMQ's streams over AMQP 0-9-1: an append-only
log (`log.py`) that consumers read by offset, each from its own position, without removing
anything; retention (x-max-age, x-max-length-bytes) removes whole old segments.

Publishing: each message becomes a record of the log, appended in groups (`appends.py`: one
fsync per chunk, never one per message); a publisher confirm is sent once the chunk holding its
message is on the disk (`when_written`). Consumers see a message only once it is written, so
nothing is delivered that a crash could take back.

Consuming: a consumer starts where its x-stream-offset says (`offsets.py`), is sent what it has
credit for (its prefetch: RabbitMQ requires one) in batches read off the event loop, the next
batch read while the last is being sent, and waits at the end of the log for what is appended
next. Each delivery carries its offset in the `x-stream-offset` header, and when it was
appended in `x-batonmq-stream-timestamp` (`deliveryheader.py`). An ack only gives the credit
back; a nack or reject does the same (a stream requeues nothing and dead-letters nothing).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from pamqp.common import FieldTable

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.model.message import ENTRY_COST, FLAG_HEADERS, Message, QueueEntry
from batonmq.model.topology import ConnectionRef
from batonmq.queues.arguments import InvalidArgument, QueueArguments
from batonmq.queues.counters import QueueCounters
from batonmq.queues.paging import Paging
from batonmq.queues.protocol import BrowsedMessage, Enqueued, QueueConsumer, QueueHooks
from batonmq.queues.streams.appends import Appends, Span
from batonmq.queues.streams.arguments import (
    StreamArguments,
    parse_consumer_arguments,
    refused_property,
)
from batonmq.queues.streams.chunk import FILTER_VALUE_MAX, Record
from batonmq.queues.streams.deliveryheader import delivery_header
from batonmq.queues.streams.log import Entry, Filter, StreamLog
from batonmq.queues.streams.offsets import OffsetSpec, start
from batonmq.store.base import PagedEntry, QueueBacklog
from batonmq.store.members import StreamTail
from batonmq.timers import Timers

log = logging.getLogger(__name__)

#: Records read for a consumer at a time.
READ_BATCH = 256
#: A consumer's next batch is read while it still has fewer than this many read for it, so the
#: disk (and the decoding, on the writer thread) works while the event loop delivers: reading
#: only once everything read was sent left the socket idle during each read, and the disk idle
#: during each delivery.
READ_AHEAD_BELOW = READ_BATCH // 2
FILTER_VALUE_HEADER = "x-stream-filter-value"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True, eq=False)
class _Cursor:
    """One consumer's position: `offset` is None until its x-stream-offset is resolved."""

    consumer: QueueConsumer
    spec: OffsetSpec
    only: Filter | None
    offset: int | None = None
    read: deque[Entry] = field(default_factory=deque)
    reading: bool = False


class _StreamConsumers:
    """The `Consumers` of a stream: no single active consumer, nobody to hand over to."""

    single_active = False
    hands_over = False

    def __init__(self) -> None:
        self.cursors: dict[QueueConsumer, _Cursor] = {}

    def __len__(self) -> int:
        return len(self.cursors)

    def __bool__(self) -> bool:
        return bool(self.cursors)

    def __iter__(self) -> Iterator[QueueConsumer]:
        return iter(list(self.cursors))

    def clear(self) -> None:
        self.cursors.clear()


class StreamQueue:
    """A stream (see the module docstring); implements `batonmq.queues.protocol.Queue`."""

    @staticmethod
    def parse_arguments(arguments: FieldTable) -> QueueArguments:
        StreamArguments.parse(arguments)
        return QueueArguments()

    @staticmethod
    def refused_property(*, durable: bool, exclusive: bool, auto_delete: bool) -> str | None:
        return refused_property(durable=durable, exclusive=exclusive, auto_delete=auto_delete)

    writes_itself = True

    def __init__(
        self,
        name: str,
        *,
        durable: bool = True,
        exclusive_owner: ConnectionRef | None = None,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
        paging: Paging | None = None,
        timers: Timers | None = None,
        options: QueueArguments | None = None,
    ) -> None:
        """`timers` and `options` (a policy's classic limits) do not apply to a stream."""
        del timers, options
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: FieldTable = arguments or {}
        self.options = QueueArguments()
        self.stream_options = StreamArguments.parse(self.arguments)
        self.hooks: QueueHooks | None = None
        self.counters = QueueCounters()
        self.unacked = 0
        self.producers: set[object] = set()
        paging = paging or Paging()
        #: How RabbitMQ names it in errors (rabbit_misc:rs).
        self._where = f"queue '{name}' in vhost '{paging.vhost}'"
        self.persists = durable and paging.journal.enabled
        self.ever_stored = self.persists
        self.deleted = False
        self.consumers = _StreamConsumers()
        self._storage = paging.streams
        #: Where its log is kept (segment files, or the store's tables).
        self._medium = self._storage.medium(paging.vhost, name)
        #: Set on the writer thread: only the jobs that run there touch it.
        self._log: StreamLog | None = None
        #: The log is being opened: what reads the queue's state waits (`holds_back`).
        self._opening = True
        #: The log is open (set on the event loop): consumers can be served.
        self._readable = False
        self._span = Span(0, 0, 0)
        self._appends = Appends(self._storage, self._append, self._appended, queue=name)
        self._released_waiters: list[Callable[[], None]] = []
        self._storage.run(self._open, self._opened)

    # The log, on the writer thread --------------------------------------------------------

    def _open(self) -> Span:
        self._log = StreamLog(self._medium, max_segment_bytes=self.stream_options.max_segment_bytes)
        return Span.of(self._log)

    def _opened(self, result: Span | BaseException) -> None:
        self._opening = False
        if isinstance(result, BaseException):
            log.error(
                "stream cannot be opened: %s",
                result,
                extra={"queue": self.name},
            )
        else:
            self._span = result
            self._readable = True
        if not self.holds_back:
            self._call_released()
        self.dispatch()

    def _stream_log(self) -> StreamLog:
        if self._log is None:
            raise OSError(f"stream '{self.name}' could not be opened")
        return self._log

    def _append(self, records: list[Record]) -> Span:
        stream_log = self._stream_log()
        now = _now_ms()
        stream_log.append(records, now)
        options = self.stream_options
        if options.max_age is not None or options.max_length_bytes is not None:
            stream_log.retain(max_age=options.max_age, max_bytes=options.max_length_bytes, now=now)
        return Span.of(stream_log)

    def _read(self, cursor: _Cursor) -> tuple[int, list[Entry]]:
        """From `cursor`'s position: where it is (its start resolved) and what it is to be
        sent. A filtered read scans to the end of the log or to a whole batch of matches, so
        that a batch short of matches means everything up to the end was seen."""
        stream_log = self._stream_log()
        offset = start(cursor.spec, stream_log) if cursor.offset is None else cursor.offset
        only = cursor.only
        if only is None:
            entries = stream_log.read(offset, max_records=READ_BATCH)
        else:
            entries = stream_log.read(offset, max_records=READ_BATCH, max_bytes=1 << 62, only=only)
        full = only is None or len(entries) == READ_BATCH
        after = entries[-1].offset + 1 if entries and full else stream_log.next_offset
        return max(offset, after), entries

    def _remove_log(self) -> None:
        self._medium.destroy()

    # A takeover that merges a failed member's stream of this name into this one -----------

    def stream_tail(self) -> StreamTail | None:
        """Where its log ends and the producers' ids it holds, read while the writer thread is
        held (`StreamStorage.held`); None while its log is not open."""
        stream_log = self._log
        if stream_log is None:
            return None
        return StreamTail(stream_log.next_offset, stream_log.producers.snapshot())

    def reopen_log(
        self, run: Callable[[Callable[[], Span], Callable[[Span | BaseException], None]], None]
    ) -> None:
        """Open the log again from its medium, where a takeover appended records, through
        `run` (the hold's `then`, so that it runs before anything asked for meanwhile)."""
        run(self._open, self._opened)

    # Statistics ---------------------------------------------------------------------------

    @property
    def exclusive(self) -> bool:
        return False

    @property
    def message_count(self) -> int:
        """RabbitMQ's count for a stream: the span of offsets it holds."""
        return self._span.next - self._span.first

    @property
    def message_bytes(self) -> int:
        return self._span.size_bytes

    @property
    def memory(self) -> int:
        """Its messages are in its log: what it holds in memory are the batches read ahead for
        its consumers."""
        return sum(
            ENTRY_COST + len(entry.record.body)
            for cursor in self.consumers.cursors.values()
            for entry in cursor.read
        )

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    @property
    def head_size(self) -> int | None:
        return None

    @property
    def next_sequence(self) -> int:
        return self._span.next

    @property
    def overfull(self) -> bool:
        return False

    def oldest_sequence_bound(self) -> int | None:
        return None  # nothing waits in a stream to be taken: no message grows old there

    # Publishing ---------------------------------------------------------------------------

    def publish(self, message: Message, *, until_batch: int | None = None) -> Enqueued:
        """Kept: the stream writes it itself; `when_written` tells when it is on the disk."""
        record = Record(
            message.exchange,
            message.routing_key,
            message.header_payload,
            message.body,
            _filter_value(message),
        )
        self._appends.add(record, until_batch)
        return Enqueued.KEPT

    def when_written(self, callback: Callable[[bool], None]) -> None:
        self._appends.when_written(callback)

    def release_held(self, batch: int, committed: bool) -> None:
        self._appends.release_held(batch, committed)
        if not self.holds_back:
            self._call_released()

    @property
    def holds_back(self) -> bool:
        """Also while its log is being opened: its message count is not known yet."""
        return self._opening or self._appends.holding

    def when_released(self, callback: Callable[[], None]) -> None:
        if self.holds_back:
            self._released_waiters.append(callback)
        else:
            callback()

    def _call_released(self) -> None:
        waiters, self._released_waiters = self._released_waiters, []
        for callback in waiters:
            callback()

    def when_underfull(self, callback: Callable[[], None]) -> None:
        callback()  # a stream is never full: retention makes room

    def _appended(self, span: Span) -> None:
        self._span = span
        self.dispatch()  # tail readers wake up

    # Consuming ----------------------------------------------------------------------------

    def check_consume(
        self, *, no_ack: bool, prefetch_count: int, global_prefetch: int, arguments: FieldTable
    ) -> None:
        """RabbitMQ's rules (rabbit_stream_queue:consume): a prefetch is required, automatic
        acknowledgement and global QoS are refused; then the consumer arguments."""
        where = self._where
        if not prefetch_count:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"consumer prefetch count is not set for stream {where}",
            )
        if no_ack:
            raise amqp_error(
                ReplyCode.NOT_IMPLEMENTED,
                f"automatic acknowledgement not supported by stream {where}",
            )
        if global_prefetch:
            raise amqp_error(ReplyCode.NOT_IMPLEMENTED, f"{where} does not support global qos")
        try:
            parse_consumer_arguments(arguments, _now_ms())
        except InvalidArgument as error:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid arg '{error.name}' for {where}: {error.problem}",
            ) from error

    def add_consumer(self, consumer: QueueConsumer) -> None:
        """Its arguments were checked by `check_consume`."""
        parsed = parse_consumer_arguments(consumer.arguments, _now_ms())
        self.consumers.cursors[consumer] = _Cursor(consumer, parsed.start, parsed.only)

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.cursors.pop(consumer, None)

    def has_exclusive_consumer(self) -> bool:
        return any(consumer.exclusive for consumer in self.consumers.cursors)

    def dispatch(self) -> None:
        if not self._readable or self.deleted:
            return  # still opening: `_opened` dispatches
        for cursor in list(self.consumers.cursors.values()):
            self._serve(cursor)

    def _serve(self, cursor: _Cursor) -> None:
        consumer = cursor.consumer
        read = cursor.read
        while read and consumer.has_room():
            self._deliver(consumer, read.popleft())
        if (
            len(read) < READ_AHEAD_BELOW
            and not cursor.reading
            and (cursor.offset is None or cursor.offset < self._span.next)
        ):
            cursor.reading = True
            self._storage.run(
                lambda: self._read(cursor), lambda result: self._was_read(cursor, result)
            )

    def _was_read(self, cursor: _Cursor, result: tuple[int, list[Entry]] | BaseException) -> None:
        cursor.reading = False
        if self.consumers.cursors.get(cursor.consumer) is not cursor or self.deleted:
            return  # cancelled meanwhile
        if isinstance(result, BaseException):
            log.error(
                "stream read failed: %s",
                result,
                extra={"queue": self.name, "consumer": cursor.consumer.tag},
            )
            return
        cursor.offset, entries = result
        cursor.read.extend(entries)
        self._serve(cursor)

    def _deliver(self, consumer: QueueConsumer, entry: Entry) -> None:
        record = entry.record
        header = delivery_header(record.header, entry.offset, entry.timestamp)
        message = Message(record.exchange, record.routing_key, header, record.body)
        consumer.deliver(self, QueueEntry(message, entry.offset))

    def get(self) -> QueueEntry | None:
        raise amqp_error(
            ReplyCode.NOT_IMPLEMENTED,
            f"basic.get not supported by stream queues {self._where}",
        )

    @property
    def waiting_for_page_in(self) -> bool:
        return False

    def when_paged_in(self, callback: Callable[[], None]) -> None:
        callback()

    def delivered(self, entry: QueueEntry) -> None:
        entry.delivery_count += 1

    def settled(self, entry: QueueEntry) -> None:
        """Nothing leaves a stream when it is acknowledged: the credit came back to the
        consumer, and the channel dispatches."""

    def rejected(self, entry: QueueEntry) -> None:
        """As settled: a stream dead-letters nothing."""

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
        """Nothing goes back: each consumer has its own position."""

    # Managing -----------------------------------------------------------------------------

    def touched(self) -> None:
        pass

    def purge(self) -> int:
        raise amqp_error(
            ReplyCode.NOT_IMPLEMENTED,
            f"queue.purge not supported by stream queues {self._where}",
        )

    def browse(self, start: int = 0, count: int | None = None) -> list[BrowsedMessage]:
        return []  # a stream is read by consuming from an offset

    def remove(self, message_ids: Iterable[int]) -> int:
        return 0

    def delete(self) -> int:
        """Publishers still waiting are nacked; the log goes from its medium (on the writer
        thread, after whatever was asked of it before)."""
        count = self.message_count
        self.deleted = True
        self.consumers.clear()
        self._appends.close()
        self._opening = False
        self._call_released()
        self._storage.run(self._remove_log, _ignore)
        return count

    def expire(self) -> int:
        return 0

    def page_out(self) -> None:
        pass

    def recover(self, backlogs: list[QueueBacklog]) -> None:
        """A stream's messages are in its log, opened when it was created: the store holds
        none of them."""

    def adopt(self, entries: list[PagedEntry]) -> None:
        """Nothing to take: the store holds no queue entries of a stream. A takeover moves a
        stream kept in the store's tables with the failed broker's other rows, and the stream
        declared from them opens its log there; one of a name this broker has is appended to
        its log (`reopen_log`)."""

    def stop_timers(self) -> None:
        pass


def _filter_value(message: Message) -> str | None:
    """The x-stream-filter-value header, if the message has one that is a string."""
    if not message.has_property(FLAG_HEADERS):
        return None
    value = (message.properties.headers or {}).get(FILTER_VALUE_HEADER)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        return None
    # The log keeps at most FILTER_VALUE_MAX bytes of it.
    return value.encode("utf-8")[:FILTER_VALUE_MAX].decode("utf-8", errors="ignore")


def _ignore(result: object) -> None:
    if isinstance(result, BaseException):
        log.error("stream log could not be removed: %s", result)
