"""The way into a stream's log: messages held back for the journal batch they wait for, then
appended in groups, and who waits for them to be on the disk.

Group commit: the records published in one loop turn, or while the last append is on the disk,
go together as the next chunk (one fsync for all of them, never one per message). A message that
a durable classic queue got too waits for that queue's journal batch (`release_held`), so that a
failed commit leaves it in neither; what is published behind it waits with it, in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.log import StreamLog
from batonmq.queues.streams.storage import StreamStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Span:
    """What a log holds, as the writer thread last saw it."""

    first: int
    next: int
    size_bytes: int

    @classmethod
    def of(cls, stream_log: StreamLog) -> Span:
        return cls(stream_log.first_offset, stream_log.next_offset, stream_log.size_bytes)


@dataclass(slots=True)
class _Write:
    """A message on its way into the log, and who waits for it to be on the disk."""

    record: Record
    #: The journal batch it waits for, else None.
    batch: int | None
    failed: bool = False
    outcome: bool | None = None
    waiting: list[Callable[[bool], None]] = field(default_factory=list)

    def finish(self, ok: bool) -> None:
        self.outcome = ok
        for callback in self.waiting:
            callback(ok)
        self.waiting.clear()


class Appends:
    """`append` runs on the writer thread (`storage`) and returns the log's new span;
    `appended` gets each span on the event loop."""

    def __init__(
        self,
        storage: StreamStorage,
        append: Callable[[list[Record]], Span],
        appended: Callable[[Span], None],
        *,
        queue: str,
    ) -> None:
        self._storage = storage
        self._append = append
        self._on_appended = appended
        self._queue_name = queue
        self._held: deque[_Write] = deque()
        self._pending: list[_Write] = []
        #: An append is on the writer thread, or one is to start at the end of this loop turn.
        self._appending = False
        self._last: _Write | None = None
        self.closed = False

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def add(self, record: Record, until_batch: int | None) -> None:
        write = _Write(record, until_batch)
        self._last = write
        if until_batch is not None or self._held:
            self._held.append(write)
        else:
            self._queue(write)

    def when_written(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(ok)` once the last record added is on the disk (ok) or will never
        be (its append failed, the journal batch it waited for failed, the stream went)."""
        write = self._last
        if write is None or write.outcome is not None:
            callback(write is None or write.outcome is True)
        else:
            write.waiting.append(callback)

    def release_held(self, batch: int, committed: bool) -> None:
        held = self._held
        for write in held:
            if write.batch == batch:
                write.batch = None
                write.failed = not committed
        while held and held[0].batch is None:
            write = held.popleft()
            if write.failed:
                write.finish(False)
            else:
                self._queue(write)

    def close(self) -> None:
        """The stream is deleted: what was not appended yet never will be."""
        self.closed = True
        for write in [*self._held, *self._pending]:
            write.finish(False)
        self._held.clear()
        self._pending.clear()

    def _queue(self, write: _Write) -> None:
        self._pending.append(write)
        if not self._appending:
            self._appending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        if self.closed:
            return
        writes, self._pending = self._pending, []
        records = [write.record for write in writes]
        self._storage.run(
            lambda: self._append(records), lambda result: self._appended(writes, result)
        )

    def _appended(self, writes: list[_Write], result: Span | BaseException) -> None:
        ok = not isinstance(result, BaseException)
        if isinstance(result, BaseException):
            log.error(
                "stream append failed: %s; its publishers are nacked",
                result,
                extra={"queue": self._queue_name, "messages": len(writes)},
            )
        for write in writes:
            write.finish(ok)
        if self.closed:
            return
        if self._pending:
            self._flush()  # still appending
        else:
            self._appending = False
        if not isinstance(result, BaseException):
            self._on_appended(result)
