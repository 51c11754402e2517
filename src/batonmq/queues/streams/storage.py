"""Where a broker's streams live, and the one thread that does their work.

Each stream's log is kept in a medium (`medium.py`): by default segment files in a directory,
``<root>/<virtual host>/<queue>``, both names %-encoded (`files.py`); when the broker's store is
PostgreSQL, that store's tables (`batonmq.store.streamtables`), so that the streams of an HA
cluster's member are in the shared store with its other persistent state and move with it in a
takeover.

Every call on a log blocks (on the disk or the database), so none runs on the event loop: they
run, in the order they were asked for, on one writer thread per broker (as the SQLite store's
calls do on its thread), and the result comes back to the loop. One thread for all streams also
orders a deleted stream's removal before the opening of a stream declared again under its name.

A broker without a data directory or a store of tables (the engine's in-memory tests) keeps its
streams in a temporary directory of its own.

`held` keeps the thread idle while the event loop works on the logs' media itself (a takeover
appending a failed member's records to a stream, in the store's transaction): every job asked
for before has run, none asked for after runs until the hold ends, and what the hold was given
to run then runs first.

At start, once the streams the store holds were recovered (each asked for its medium here),
`remove_leftovers` removes the directories of streams that are gone (`files.py`): a deletion is
committed in the store first, and a crash can come before its directory is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar
from urllib.parse import quote

from batonmq.queues.streams.files import FileMedium, remove_leftovers
from batonmq.queues.streams.medium import StreamMedium

log = logging.getLogger(__name__)

T = TypeVar("T")


class StreamTables(Protocol):
    """Streams kept in a store's tables: a medium per stream, all of them on the writer thread."""

    def medium(self, vhost: str, queue: str) -> StreamMedium:
        """Called on the event loop; the medium is used on the writer thread only."""
        ...

    def close(self) -> None:
        """On the writer thread, after every other call: release the connection."""
        ...


def stream_directory(root: Path, vhost: str, queue: str) -> Path:
    """The directory of stream `queue` of `vhost` under a broker's streams root."""
    return root / quote(vhost, safe="") / quote(queue, safe="")


class Hold:
    """The writer thread held idle (`StreamStorage.held`), and the jobs it runs once let go."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.started: asyncio.Future[None] = loop.create_future()
        self._released = threading.Event()
        self._then: list[Callable[[], None]] = []

    def then(self, job: Callable[[], T], done: Callable[[T | BaseException], None]) -> None:
        """Run `job` on the writer thread once the hold ends, before any job asked for during
        it; `done` gets its result (or what it raised) on the event loop."""

        def call() -> None:
            result: T | BaseException
            try:
                result = job()
            except Exception as error:  # handed to `done`, as `StreamStorage.run` hands it
                result = error
            self._loop.call_soon_threadsafe(done, result)

        self._then.append(call)

    def release(self) -> None:
        self._released.set()

    def run(self) -> None:
        """On the writer thread."""
        self._loop.call_soon_threadsafe(_resolve, self.started)
        self._released.wait()
        for call in self._then:
            call()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class StreamStorage:
    def __init__(self, root: Path | None = None, tables: StreamTables | None = None) -> None:
        self._root = root
        self._tables = tables
        #: The temporary directory made for a broker without a data directory.
        self._temporary: Path | None = None
        self._executor: ThreadPoolExecutor | None = None
        #: The directories of the streams kept in files here, as their media were asked for.
        self._directories: set[Path] = set()

    def medium(self, vhost: str, queue: str) -> StreamMedium:
        """Where the log of stream `queue` of `vhost` is kept (nothing is opened yet)."""
        if self._tables is not None:
            return self._tables.medium(vhost, queue)
        if self._root is None:
            self._root = self._temporary = Path(tempfile.mkdtemp(prefix="batonmq-streams-"))
        directory = stream_directory(self._root, vhost, queue)
        self._directories.add(directory)
        return FileMedium(directory)

    def remove_leftovers(self) -> None:
        """At start, after the streams the store holds were recovered: remove, on the writer
        thread (after their openings), the directories of streams that are not among them."""
        if self._tables is not None or self._root is None:
            return
        root, kept = self._root, frozenset(self._directories)
        self.run(lambda: remove_leftovers(root, kept), _removed)

    def run(self, job: Callable[[], T], done: Callable[[T | BaseException], None]) -> None:
        """Run `job` on the writer thread, then `done` with its result (or what it raised) on
        the event loop that asked."""
        future = asyncio.get_running_loop().run_in_executor(self._writer(), job)

        def finished(future: asyncio.Future[T]) -> None:
            if future.cancelled():
                return  # the loop is closing
            error = future.exception()
            done(future.result() if error is None else error)

        future.add_done_callback(finished)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Hold]:
        """The writer thread idle for the body (see the module docstring)."""
        hold = Hold(asyncio.get_running_loop())
        ran = asyncio.get_running_loop().run_in_executor(self._writer(), hold.run)
        try:
            await asyncio.shield(hold.started)
            yield hold
        finally:
            hold.release()
            await asyncio.shield(ran)

    def _writer(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streams")
        return self._executor

    def close(self) -> None:
        """Wait for the work asked for so far, then stop the thread (blocks: call it off the
        event loop). A temporary directory goes."""
        if self._tables is not None:
            self._writer().submit(self._tables.close)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._root = self._temporary = None


def _removed(result: list[Path] | BaseException) -> None:
    if isinstance(result, BaseException):
        log.error("stream log could not be removed: %s", result)
    elif result:
        log.info(
            "removed the directories of deleted streams",
            extra={"directories": [str(directory) for directory in result]},
        )
