"""One load-generator process: many connections (publishers, consumers or both) as tasks of one
event loop (uvloop when installed), started by the harness with multiprocessing's spawn.

The conversation with the harness, over a Pipe: the worker connects everything and sends
("ready", None) (or ("error", text)); the harness sends a `Go` with the times, on the
machine-wide monotonic clock, of the start, the start of the measured window and its end; the
worker runs and sends ("report", WorkerReport). Counts and latencies are kept for the window only,
so that the warm-up is not measured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from benchmarks.histogram import LatencyHistogram
from benchmarks.loadgen.backlog import Backlog, Counters
from benchmarks.loadgen.client import AmqpClient, Endpoint, connect
from benchmarks.loadgen.consumer import Consumer
from benchmarks.loadgen.frames import FRAME_HEARTBEAT, InboundScanner, encode_frame
from benchmarks.loadgen.publisher import Publisher, PublisherPlan


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    endpoint: Endpoint
    #: This worker's slot in the shared published/delivered counters.
    slot: int
    publishers: tuple[PublisherPlan, ...] = ()
    #: One consumer connection per entry, consuming from that queue.
    consumer_queues: tuple[str, ...] = ()
    prefetch: int = 1000
    #: Bound on messages in flight (see backlog.py); 0: none.
    backlog_limit: int = 0
    #: The slots (this one among them) whose messages count against that bound; (): all.
    backlog_peers: tuple[int, ...] = ()
    deliveries_per_publish: int = 1
    #: Connections to open and keep idle, exchanging heartbeats only.
    idle: int = 0
    #: The consumers read stream queues from this `x-stream-offset` ("": classic queues).
    stream_offset: str = ""
    #: Run until the consumers have this many deliveries (or the window ends), and measure
    #: from the start to the last of them (the stream-replay rows); 0: a fixed window.
    expected_deliveries: int = 0


@dataclass(frozen=True, slots=True)
class Go:
    start_ns: int
    window_start_ns: int
    window_end_ns: int


@dataclass(slots=True)
class WorkerReport:
    #: Published and delivered within the window, and the window's length as measured here.
    published: int = 0
    delivered: int = 0
    window_seconds: float = 0.0
    published_total: int = 0
    delivered_total: int = 0
    confirmed: int = 0
    nacked: int = 0
    #: This process's CPU time in the window: is the load generator near its limit?
    cpu_seconds: float = 0.0
    #: From the start until every publisher finished (and, with confirms, was confirmed).
    publish_seconds: float = 0.0
    latency: dict[int, int] = field(default_factory=dict)
    error: str | None = None


def worker_main(
    spec: WorkerSpec, published: Counters, delivered: Counters, pipe: Connection
) -> None:
    """The process's entry point."""
    try:
        import uvloop

        runner: Callable[..., object] = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(_work(spec, published, delivered, pipe))
    except BaseException as error:
        pipe.send(("error", f"{type(error).__name__}: {error}"))
        raise
    finally:
        pipe.close()


#: Idle connections' heartbeat, in seconds: clients commonly ask for 10 to 60 (RabbitMQ proposes
#: 60); the shorter end shows what heartbeats cost.
IDLE_HEARTBEAT = 10
#: Idle connections opened at a time.
_IDLE_OPENING = 50
_HEARTBEAT_FRAME = encode_frame(FRAME_HEARTBEAT, 0, b"")


async def _sleep_until(when_ns: int) -> None:
    await asyncio.sleep(max(0.0, (when_ns - time.monotonic_ns()) / 1e9))


class _Connections:
    """The worker's connections, and the counts at the start and end of the window."""

    def __init__(self) -> None:
        self.histogram = LatencyHistogram()
        self.clients: list[AmqpClient] = []
        self.consumers: list[Consumer] = []
        self.publishers: list[Publisher] = []
        self.idle: list[AmqpClient] = []
        self.marks: dict[str, tuple[int, int, int, float]] = {}

    async def open(self, spec: WorkerSpec, backlog: Backlog) -> None:
        for queue in spec.consumer_queues:
            client = await connect(spec.endpoint, InboundScanner(self.histogram))
            self.clients.append(client)
            consumer = Consumer(client, queue, spec.prefetch, backlog, spec.stream_offset)
            # A replay's consumers start consuming when the run starts: the first delivery of
            # the stream is part of what is measured.
            await consumer.start(consume=not spec.expected_deliveries)
            self.consumers.append(consumer)
        for plan in spec.publishers:
            client = await connect(spec.endpoint)
            self.clients.append(client)
            publisher = Publisher(client, plan, backlog if spec.backlog_limit else None)
            await publisher.start()
            self.publishers.append(publisher)
        for first in range(0, spec.idle, _IDLE_OPENING):
            opening = min(_IDLE_OPENING, spec.idle - first)
            self.idle += await asyncio.gather(
                *(connect(spec.endpoint, heartbeat=IDLE_HEARTBEAT) for _ in range(opening))
            )
        self.clients += self.idle

    async def keep_idle_alive(self) -> None:
        """Send each idle connection a heartbeat every half interval, as clients do (spec 4.2.7:
        a peer that hears nothing for two intervals closes the connection)."""
        while True:
            await asyncio.sleep(IDLE_HEARTBEAT / 2)
            for client in self.idle:
                assert client.transport is not None
                client.transport.write(_HEARTBEAT_FRAME)

    def mark(self, name: str, recording: bool) -> None:
        for consumer in self.consumers:
            consumer.client.scanner.recording = recording
        self.marks[name] = (
            time.monotonic_ns(),
            sum(publisher.published for publisher in self.publishers),
            sum(consumer.deliveries for consumer in self.consumers),
            time.process_time(),
        )

    async def mark_at(self, when_ns: int, name: str, recording: bool) -> None:
        await _sleep_until(when_ns)
        self.mark(name, recording)

    async def run_until_delivered(self, go: Go, expected: int, report: WorkerReport) -> None:
        """Consume from `go.start_ns` until `expected` deliveries (or `go.window_end_ns`): the
        window is the time they took."""
        try:
            await _sleep_until(go.start_ns)
            self.mark("start", False)
            await asyncio.gather(*(consumer.consume() for consumer in self.consumers))
            while time.monotonic_ns() < go.window_end_ns:
                if sum(consumer.deliveries for consumer in self.consumers) >= expected:
                    break
                for client in self.clients:
                    if client.error is not None:
                        raise client.error
                await asyncio.sleep(0.001)
            self.mark("end", False)
            delivered = self.marks["end"][2]
            if delivered < expected:
                raise TimeoutError(f"{delivered:,} of {expected:,} messages delivered in time")
        except Exception as error:
            report.error = f"{type(error).__name__}: {error}"

    async def run(self, go: Go, report: WorkerReport) -> None:
        window = [
            asyncio.ensure_future(self.mark_at(go.window_start_ns, "start", True)),
            asyncio.ensure_future(self.mark_at(go.window_end_ns, "end", False)),
        ]
        heartbeats = asyncio.ensure_future(self.keep_idle_alive()) if self.idle else None
        try:
            await _sleep_until(go.start_ns)
            publishers = self.publishers
            await asyncio.gather(*(publisher.run(go.window_end_ns) for publisher in publishers))
            if any(publisher.plan.count for publisher in publishers):
                # A fixed number of messages (the memory row): done when all are confirmed.
                for publisher in publishers:
                    await publisher.wait_confirms(60.0)
                report.publish_seconds = (time.monotonic_ns() - go.start_ns) / 1e9
            else:
                report.publish_seconds = (time.monotonic_ns() - go.start_ns) / 1e9
                await asyncio.gather(*window)
            for client in self.clients:
                if client.error is not None:
                    raise client.error
        except Exception as error:
            report.error = f"{type(error).__name__}: {error}"
        finally:
            for task in window:
                task.cancel()
            if heartbeats is not None:
                heartbeats.cancel()

    def fill(self, report: WorkerReport) -> None:
        if "start" in self.marks and "end" in self.marks:
            (started, published_before, delivered_before, cpu_before) = self.marks["start"]
            (ended, published_after, delivered_after, cpu_after) = self.marks["end"]
            report.window_seconds = (ended - started) / 1e9
            report.cpu_seconds = cpu_after - cpu_before
            report.published = published_after - published_before
            report.delivered = delivered_after - delivered_before
        publishers = self.publishers
        report.published_total = sum(publisher.published for publisher in publishers)
        report.delivered_total = sum(consumer.deliveries for consumer in self.consumers)
        report.confirmed = sum(publisher.client.scanner.confirmed for publisher in publishers)
        report.nacked = sum(publisher.client.scanner.nacked for publisher in publishers)
        report.latency = self.histogram.to_sparse()

    async def close(self) -> None:
        await asyncio.gather(*(client.close() for client in self.clients), return_exceptions=True)


async def _work(
    spec: WorkerSpec, published: Counters, delivered: Counters, pipe: Connection
) -> None:
    backlog = Backlog(
        published,
        delivered,
        spec.slot,
        spec.deliveries_per_publish,
        spec.backlog_limit,
        spec.backlog_peers,
    )
    connections = _Connections()
    try:
        await connections.open(spec, backlog)
    except Exception as error:
        pipe.send(("error", f"setting up: {type(error).__name__}: {error}"))
        await connections.close()
        return
    pipe.send(("ready", None))
    go: Go = await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
    report = WorkerReport()
    if spec.expected_deliveries:
        await connections.run_until_delivered(go, spec.expected_deliveries, report)
    else:
        await connections.run(go, report)
    connections.fill(report)
    await connections.close()
    pipe.send(("report", report))
