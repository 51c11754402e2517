"""Where a broker's streams live on disk, and the one thread that does their disk work.

Each stream's log is a directory, ``<root>/<virtual host>/<queue>``, both names %-encoded. Every
call on a log blocks on the disk, so none runs on the event loop: they run, in the order they were
asked for, on one writer thread per broker (as the SQLite store's calls do on its thread), and the
result comes back to the loop. One thread for all streams also orders a deleted stream's removal
before the opening of a stream declared again under its name.

A broker without a data directory (the engine's in-memory tests) keeps its streams in a temporary
directory of its own.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

T = TypeVar("T")


class StreamStorage:
    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        #: The temporary directory made for a broker without a data directory.
        self._temporary: Path | None = None
        self._executor: ThreadPoolExecutor | None = None

    def directory(self, vhost: str, queue: str) -> Path:
        if self._root is None:
            self._root = self._temporary = Path(tempfile.mkdtemp(prefix="batonmq-streams-"))
        return self._root / quote(vhost, safe="") / quote(queue, safe="")

    def run(self, job: Callable[[], T], done: Callable[[T | BaseException], None]) -> None:
        """Run `job` on the writer thread, then `done` with its result (or what it raised) on
        the event loop that asked."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streams")
        future = asyncio.get_running_loop().run_in_executor(self._executor, job)

        def finished(future: asyncio.Future[T]) -> None:
            if future.cancelled():
                return  # the loop is closing
            error = future.exception()
            done(future.result() if error is None else error)

        future.add_done_callback(finished)

    def close(self) -> None:
        """Wait for the work asked for so far, then stop the thread (blocks: call it off the
        event loop). A temporary directory goes."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._root = self._temporary = None
