"""A publisher connection: pipelined writes of pre-encoded batches, no await per message.

Without confirms it writes a batch (about 256 KiB), yields to the event loop, and writes again,
waiting only when the transport's buffer is over its high-water mark (the broker reads slower than
we write) or when the shared backlog bound leaves no room for a whole batch. With confirms it keeps
at most `confirm_window` publishes unconfirmed; acks with multiple=true settle many at once. At a
fixed `rate` it writes what is due every millisecond or so (uvloop's timers tick in milliseconds),
each batch stamped with the time it is written.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from pamqp import commands

from benchmarks.loadgen.backlog import Backlog
from benchmarks.loadgen.client import CHANNEL, AmqpClient
from benchmarks.loadgen.frames import PublishBatch, publish_template

#: About this many bytes per write (and per batch).
BATCH_BYTES = 262144
MAX_BATCH = 256
#: Seconds between looks at a full backlog. A publisher writes again once a whole batch fits:
#: woken for less, it paid a loop turn, a timer and a write for a few messages, and cost several
#: times what the broker's second core could spare.
BACKLOG_POLL = 0.005


@dataclass(frozen=True, slots=True)
class PublisherPlan:
    """What one publisher connection sends."""

    #: (exchange, routing key) of successive messages, cycled.
    routes: tuple[tuple[str, str], ...]
    body_size: int
    #: delivery-mode 2 (else 1).
    persistent: bool = False
    #: Publisher confirms with at most this many unconfirmed; 0: no confirms.
    confirm_window: int = 0
    #: Messages per second of this publisher; 0: as fast as the broker takes them.
    rate: float = 0.0
    #: Stop after this many messages; 0: publish until the end of the run.
    count: int = 0


class Publisher:
    def __init__(self, client: AmqpClient, plan: PublisherPlan, backlog: Backlog | None) -> None:
        self.client = client
        self.plan = plan
        self.backlog = backlog
        self.published = 0
        templates = [
            publish_template(
                CHANNEL, exchange, key, plan.body_size, plan.persistent, client.frame_max
            )
            for exchange, key in plan.routes
        ]
        self.batch = PublishBatch(templates)
        message_size = len(templates[0].prefix) + 8 + len(templates[0].suffix)
        self.batch_size = max(1, min(MAX_BATCH, BATCH_BYTES // message_size))
        self._settled: asyncio.Future[None] | None = None

    async def start(self) -> None:
        if self.plan.confirm_window:
            await self.client.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
            self.client.on_data = self._on_data

    def _on_data(self) -> None:
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)

    @property
    def unconfirmed(self) -> int:
        scanner = self.client.scanner
        return self.published - scanner.confirmed - scanner.nacked

    async def _wait_settled(self, until_ns: int) -> None:
        self._settled = asyncio.get_running_loop().create_future()
        timeout = max(0.0, (until_ns - time.monotonic_ns()) / 1e9)
        await asyncio.wait((self._settled,), timeout=min(timeout, 0.1))

    async def run(self, until_ns: int) -> None:
        """Publish until `until_ns` (time.monotonic_ns()) or `plan.count` messages."""
        if self.plan.rate:
            await self._run_paced(until_ns)
        else:
            await self._run_flat_out(until_ns)

    async def _run_flat_out(self, until_ns: int) -> None:
        client, plan, backlog = self.client, self.plan, self.backlog
        transport = client.transport
        assert transport is not None
        render = self.batch.render
        batch_size = self.batch_size
        clock = time.monotonic_ns
        while True:
            now = clock()
            if now >= until_ns:
                return
            if client.error is not None:
                raise client.error
            count = batch_size
            if plan.count:
                count = min(count, plan.count - self.published)
                if count <= 0:
                    return
            if plan.confirm_window:
                room = plan.confirm_window - self.unconfirmed
                if room <= 0:
                    await self._wait_settled(until_ns)
                    continue
                count = min(count, room)
            if backlog is not None and backlog.room() < count:
                await asyncio.sleep(BACKLOG_POLL)
                continue
            transport.write(render(count, now))
            self.published += count
            if backlog is not None:
                backlog.add_published(count)
            await client.writable(until_ns)
            await asyncio.sleep(0)

    async def _run_paced(self, until_ns: int) -> None:
        client, plan = self.client, self.plan
        transport = client.transport
        assert transport is not None
        render = self.batch.render
        clock = time.monotonic_ns
        started = clock()
        nanoseconds_per_message = 1e9 / plan.rate
        while True:
            now = clock()
            if now >= until_ns or (plan.count and self.published >= plan.count):
                return
            if client.error is not None:
                raise client.error
            due = int((now - started) / nanoseconds_per_message) + 1 - self.published
            if due > 0:
                transport.write(render(due, now))
                self.published += due
            next_due = started + self.published * nanoseconds_per_message
            await asyncio.sleep(max(0.0, (next_due - clock()) / 1e9))

    async def wait_confirms(self, timeout: float) -> None:
        """Wait until every publish is confirmed (or nacked), at most `timeout` seconds."""
        deadline = time.monotonic_ns() + int(timeout * 1e9)
        while self.plan.confirm_window and self.unconfirmed > 0:
            if self.client.error is not None:
                raise self.client.error
            if time.monotonic_ns() >= deadline:
                raise TimeoutError(f"{self.unconfirmed} publishes unconfirmed after {timeout} s")
            await self._wait_settled(deadline)
