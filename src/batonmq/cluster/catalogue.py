"""A member keeps its copy of the catalogue (users, virtual hosts, permissions) in line with the
store the members share, while it runs: what an operator changes on one member is in force on
every other at its next login or access check, not only once they restart.

The store's watch (`batonmq.store.postgres_catalogue`) tells the catalogue's version: from
PostgreSQL's notification of each commit that changes it, and from reading it every round.
The version this member's copy is in line with is `synced`. A version it has not applied makes
it read the catalogue and apply what differs (`batonmq.engine.catalogue`), one reading at a time;
changes that come meanwhile make one more. Its own commits it need not read back: the engine's
API applies them once written, so its own next version only moves `synced` on.

A snapshot is read once what the journal holds is written (a change the broker applied to
memory before writing it, as the default virtual host at start, is then in it), and applied
only if no change of the catalogue was handed to the store while it was read: the engine's API
may have applied such a change to memory already, and an older snapshot would undo it. It is
read again instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from batonmq.engine.apibase import ApiError
from batonmq.engine.broker import Broker
from batonmq.engine.catalogue import apply_catalogue, catalogue_changes
from batonmq.store.base import StoreError
from batonmq.store.members import CatalogueSource

log = logging.getLogger(__name__)


class CatalogueSync:
    def __init__(self, broker: Broker, store: CatalogueSource, interval: float) -> None:
        """`interval`: seconds between two readings of the version."""
        self.broker = broker
        self.store = store
        self.interval = interval
        #: The catalogue version the copy in memory is in line with (-1: not known yet: the
        #: copy is what the broker read at start).
        self.synced = -1
        self._wanted = asyncio.Event()
        self._reloading = False
        #: Readings done (or failed) so far, and who waits for which (`caught_up`).
        self._rounds = 0
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._wanted.set()  # learn the version of the copy read at start
        loop = asyncio.get_running_loop()
        watch = self.store.watch_catalogue(self._changed, self.interval)
        self._tasks = [
            loop.create_task(watch(), name="catalogue watch"),
            loop.create_task(self._keep_in_line(), name="catalogue sync"),
        ]

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _changed(self, version: int, writer: str | None) -> None:
        if version == self.synced:
            return
        if (
            writer == self.store.broker_id
            and version == self.synced + 1
            and not (self._wanted.is_set() or self._reloading)
        ):
            self.synced = version
            return
        self._wanted.set()

    async def _keep_in_line(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            self._reloading = True
            try:
                await self.reload()
            except StoreError as error:
                # The next reading of the version, once the store is back, tries again.
                log.warning("catalogue not read from the shared store: %s", error)
            except ApiError as error:
                log.warning("catalogue change not applied: %s", error.text)
            finally:
                self._reloading = False
                self._rounds += 1
                self._wake_caught_up()

    async def caught_up(self) -> None:
        """Return once a reading of the catalogue that started after this call is over: what
        the store held when it was called is in memory, unless the store could not be read.
        (Another worker of the broker waits for this before it answers a change of the
        catalogue, so that the next request finds it whichever worker it reaches.)"""
        # A reading under way may have read the store before the change this waits for.
        round_wanted = self._rounds + (2 if self._reloading else 1)
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((round_wanted, done))
        self._wanted.set()
        await done

    def _wake_caught_up(self) -> None:
        still = []
        for round_wanted, done in self._waiting:
            if round_wanted > self._rounds:
                still.append((round_wanted, done))
            elif not done.done():
                done.set_result(None)
        self._waiting = still

    async def reload(self) -> None:
        """Read the catalogue and apply what differs from the copy in memory."""
        store = self.store
        while True:
            # What this broker recorded before (at start: the default virtual host, which is in
            # memory before it is written) is in the snapshot.
            await self.broker.journal.durable()
            handed = store.catalogue_writes
            catalogue = await store.catalogue()
            if store.catalogue_writes == handed:
                break
        await apply_catalogue(self.broker, catalogue_changes(self.broker, catalogue))
        self.synced = catalogue.version
