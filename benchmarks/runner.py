"""Run one row on one broker: declare its queues fresh, start the load-generator processes, let
them warm up, measure a fixed window (the broker's CPU before and after it; its RSS sampled
throughout), collect, delete the queues.

Client processes: publishers share `publisher_processes` processes and consumers share
`consumer_processes` (one each by default), every connection a task of the process's event loop.
The machine has 2 cores; more client processes would take CPU from the broker being measured.
The many-clients rows give every client a process of its own, as deployments do, and open their
idle connections in one more process.
The same processes, connections and settings are used against every broker.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from typing import TypeVar

from benchmarks.brokers.base import Broker
from benchmarks.histogram import LatencyHistogram
from benchmarks.loadgen.backlog import Counters
from benchmarks.loadgen.client import Endpoint, connect
from benchmarks.loadgen.publisher import PublisherPlan
from benchmarks.loadgen.worker import Go, WorkerReport, WorkerSpec, worker_main
from benchmarks.procstats import RssSampler, cpu_seconds, machine_busy_seconds, steady_rss
from benchmarks.results import Measurement
from benchmarks.topology import Topology, declare, delete, message_count
from benchmarks.workloads import Kind, Workload

_SPAWN = multiprocessing.get_context("spawn")
_T = TypeVar("_T")


#: Why a row has no CPU or RSS for a broker (one running elsewhere, or not the harness user's).
UNMEASURED = "CPU and RSS not measured: the broker's processes were not found on this machine"


@dataclass(frozen=True, slots=True)
class RunSettings:
    duration: float = 10.0
    warmup: float = 2.0
    prefetch: int = 1000
    confirm_window: int = 1000
    #: The backlog bound (loadgen/backlog.py), in messages; 0: enough for every consumer's
    #: prefetch twice over, and at least 10,000. Never more than `backlog_bytes` of bodies.
    backlog_messages: int = 0
    backlog_bytes: int = 256 * 2**20
    publisher_processes: int = 1
    consumer_processes: int = 1
    #: Seconds the memory row waits for the queue to hold every message.
    memory_timeout: float = 300.0

    def backlog_limit(self, body_size: int, consumers: int) -> int:
        messages = self.backlog_messages or max(10_000, 2 * consumers * self.prefetch)
        return max(1, min(messages, self.backlog_bytes // body_size))


class RowFailed(RuntimeError):
    pass


def _split(items: Sequence[_T], parts: int) -> list[tuple[_T, ...]]:
    """`items` dealt round-robin into at most `parts` non-empty groups."""
    groups: list[list[_T]] = [[] for _ in range(max(1, parts))]
    for index, item in enumerate(items):
        groups[index % len(groups)].append(item)
    return [tuple(group) for group in groups if group]


class _Workers:
    """The load-generator processes of one run, and their pipes."""

    def __init__(self, specs: list[WorkerSpec]) -> None:
        self.published: Counters = _SPAWN.RawArray("q", max(1, len(specs)))
        self.delivered: Counters = _SPAWN.RawArray("q", max(1, len(specs)))
        self.processes: list[SpawnProcess] = []
        self.pipes: list[Connection] = []
        for spec in specs:
            ours, theirs = _SPAWN.Pipe()
            process = _SPAWN.Process(
                target=worker_main,
                args=(spec, self.published, self.delivered, theirs),
                name=f"loadgen-{spec.slot}",
                daemon=True,
            )
            process.start()
            theirs.close()
            self.processes.append(process)
            self.pipes.append(ours)

    def _receive(self, pipe: Connection, timeout: float) -> tuple[str, object]:
        if not pipe.poll(timeout):
            raise RowFailed(f"a load-generator process did not answer within {timeout:.0f} s")
        try:
            message: tuple[str, object] = pipe.recv()
        except EOFError:
            raise RowFailed("a load-generator process exited") from None
        return message

    def wait_ready(self, timeout: float = 120.0) -> None:
        for pipe in self.pipes:
            kind, detail = self._receive(pipe, timeout)
            if kind != "ready":
                raise RowFailed(f"load generator: {detail}")

    def go(self, go: Go) -> None:
        for pipe in self.pipes:
            pipe.send(go)

    def reports(self, timeout: float) -> list[WorkerReport]:
        reports = []
        for pipe in self.pipes:
            kind, detail = self._receive(pipe, timeout)
            if kind != "report":
                raise RowFailed(f"load generator: {detail}")
            assert isinstance(detail, WorkerReport)
            reports.append(detail)
        return reports

    def finish(self) -> None:
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join(5)
        for pipe in self.pipes:
            pipe.close()


def worker_specs(
    workload: Workload, topology: Topology, broker: Broker, settings: RunSettings
) -> list[WorkerSpec]:
    plans = workload.publisher_plans(topology, settings.confirm_window)
    queues = workload.consumer_queues(topology)
    if workload.kind is Kind.SINK_PUBLISH:
        queues = []
    if workload.kind is Kind.SINK_CONSUME:
        plans = []
    own = workload.process_per_client
    groups: list[tuple[tuple[str, ...], tuple[PublisherPlan, ...]]] = [
        (group, ()) for group in _split(queues, len(queues) if own else settings.consumer_processes)
    ]
    groups += [
        ((), group) for group in _split(plans, len(plans) if own else settings.publisher_processes)
    ]
    # Rate-limited and counted publishers need no backlog bound; nor do the sinks.
    bounded = workload.kind is Kind.THROUGHPUT
    limit = settings.backlog_limit(workload.body_size, workload.consumers) if bounded else 0
    peers = backlog_peers([_queues_of(queues, plans) for queues, plans in groups])
    specs = [
        WorkerSpec(
            endpoint=_endpoint(broker, consumer_queues, publishers),
            slot=slot,
            publishers=publishers,
            consumer_queues=consumer_queues,
            prefetch=settings.prefetch,
            # Each group of clients that share queues is bounded apart, by its share of the
            # consumers: one slow queue must not hold back the publishers of another.
            backlog_limit=max(1, limit * _consumers(groups, peers[slot]) // workload.consumers)
            if limit
            else 0,
            backlog_peers=peers[slot],
            deliveries_per_publish=workload.deliveries_per_publish,
        )
        for slot, (consumer_queues, publishers) in enumerate(groups)
    ]
    if workload.idle_connections:
        specs.append(
            WorkerSpec(endpoint=broker.endpoint, slot=len(specs), idle=workload.idle_connections)
        )
    return specs


def _queues_of(
    consumer_queues: Sequence[str], publishers: Sequence[PublisherPlan]
) -> frozenset[str] | None:
    """The queues one load-generator process's clients touch; None when it publishes through
    an exchange, whose queues may be any."""
    if any(exchange for plan in publishers for exchange, _ in plan.routes):
        return None
    return frozenset(consumer_queues).union(key for plan in publishers for _, key in plan.routes)


def backlog_peers(touched: Sequence[frozenset[str] | None]) -> list[tuple[int, ...]]:
    """For each process (by slot), the slots whose messages count against its backlog bound:
    the processes connected to it through the queues they share (every process, when one
    publishes through an exchange). Two queues with their own publishers and consumers are two
    groups, each bounded by its own backlog."""
    if any(queues is None for queues in touched):
        return [tuple(range(len(touched)))] * len(touched)
    groups: list[tuple[set[str], list[int]]] = []
    for slot, queues in enumerate(touched):
        assert queues is not None
        joined = [group for group in groups if group[0] & queues]
        merged: tuple[set[str], list[int]] = (set(queues), [slot])
        for group in joined:
            merged[0].update(group[0])
            merged[1].extend(group[1])
            groups.remove(group)
        groups.append(merged)
    peers = [()] * len(touched)
    for _, slots in groups:
        for slot in slots:
            peers[slot] = tuple(sorted(slots))
    return peers


def _consumers(
    groups: Sequence[tuple[tuple[str, ...], tuple[PublisherPlan, ...]]], slots: Sequence[int]
) -> int:
    return sum(len(groups[slot][0]) for slot in slots)


def _endpoint(
    broker: Broker, consumer_queues: Sequence[str], publishers: Sequence[PublisherPlan]
) -> Endpoint:
    """Where one load-generator process connects: the broker's process that owns the queues its
    clients consume from and publish to (through the default exchange)."""
    queues = {*consumer_queues}
    queues.update(key for plan in publishers for exchange, key in plan.routes if not exchange)
    endpoints = {broker.endpoint_for(queue) for queue in queues} or {broker.endpoint}
    if len(endpoints) > 1:
        raise RowFailed(
            f"the clients of one load-generator process use {len(endpoints)} brokers "
            "(or virtual hosts)"
        )
    (endpoint,) = endpoints
    return endpoint


async def _with_admin(endpoint: Endpoint, topology: Topology, action: str) -> int:
    client = await connect(endpoint)
    try:
        if action == "declare":
            await declare(client, topology)
        elif action == "delete":
            await delete(client, topology)
        else:
            return await message_count(client, topology.queues[0])
        return 0
    finally:
        await client.close()


@contextmanager
def _topology(broker: Broker, workload: Workload, prefix: str) -> Iterator[Topology]:
    topology = workload.topology(broker.queue_prefix(prefix, workload.queue_names))
    if broker.name == "sink":
        yield topology
        return
    parts = broker.place(topology)
    for endpoint, part in parts:
        asyncio.run(_with_admin(endpoint, part, "declare"))
    try:
        yield topology
    finally:
        if broker.alive():
            for endpoint, part in parts:
                asyncio.run(_with_admin(endpoint, part, "delete"))


def _sleep_until(when_ns: int) -> None:
    time.sleep(max(0.0, (when_ns - time.monotonic_ns()) / 1e9))


def run_row(workload: Workload, broker: Broker, settings: RunSettings, prefix: str) -> Measurement:
    measurement = Measurement(workload.name, broker.name)
    try:
        with _topology(broker, workload, prefix) as topology:
            if workload.kind is Kind.MEMORY:
                _run_memory(workload, broker, settings, topology, measurement)
            elif workload.kind is Kind.STREAM_REPLAY:
                _run_replay(workload, broker, settings, topology, measurement)
            else:
                _run_window(workload, broker, settings, topology, measurement)
    except Exception as error:  # a row that fails is reported, and the run goes on
        measurement.error = f"{type(error).__name__}: {error}"
    if not broker.alive():
        measurement.error = (measurement.error or "") + " (the broker is no longer running)"
    return measurement


def _run_window(
    workload: Workload,
    broker: Broker,
    settings: RunSettings,
    topology: Topology,
    measurement: Measurement,
) -> None:
    idle = workload.idle_connections
    rss_before = steady_rss(broker.measured_pids) if idle and broker.measured_pids() else None
    workers = _Workers(worker_specs(workload, topology, broker, settings))
    try:
        workers.wait_ready()
        pids, store_pids = broker.measured_pids(), broker.store_pids()
        if rss_before is not None:
            rss_with_idle = steady_rss(broker.measured_pids)
            measurement.bytes_per_connection = (rss_with_idle - rss_before) / idle
        start = time.monotonic_ns() + 200_000_000
        window_start = start + int(settings.warmup * 1e9)
        window_end = window_start + int(settings.duration * 1e9)
        with RssSampler(broker.measured_pids) as sampler:
            workers.go(Go(start, window_start, window_end))
            _sleep_until(window_start)
            cpu_before, machine_before = cpu_seconds(pids), machine_busy_seconds()
            store_before = cpu_seconds(store_pids)
            _sleep_until(window_end)
            cpu_after, machine_after = cpu_seconds(pids), machine_busy_seconds()
            store_after = cpu_seconds(store_pids)
            reports = workers.reports(timeout=60.0)
    finally:
        workers.finish()
    _record(
        measurement,
        reports,
        measured=bool(pids),
        cpu=cpu_after - cpu_before,
        machine=machine_after - machine_before,
        peak_rss=sampler.peak,
        store_cpu=store_after - store_before if store_pids else None,
    )


def _record(
    measurement: Measurement,
    reports: list[WorkerReport],
    *,
    measured: bool,
    cpu: float,
    machine: float,
    peak_rss: int,
    store_cpu: float | None = None,
) -> None:
    """The workers' reports, and (`measured`: the broker's processes were known) the broker's
    CPU seconds and peak RSS over the measured time, in which the machine was busy `machine`
    CPU seconds in all (`store_cpu` of the broker's: its database server's)."""
    _summarise(reports, measurement)
    if not measured:
        measurement.notes.append(UNMEASURED)
        return
    measurement.cpu_seconds = cpu
    measurement.store_cpu_seconds = store_cpu
    measurement.peak_rss_bytes = peak_rss
    # What the rest of the machine took meanwhile: the noise in this measurement.
    measurement.other_cpu_seconds = max(
        0.0, machine - measurement.cpu_seconds - measurement.client_cpu_seconds
    )


def _summarise(reports: list[WorkerReport], measurement: Measurement) -> None:
    histogram = LatencyHistogram()
    seconds = [report.window_seconds for report in reports if report.window_seconds]
    measurement.seconds = max(seconds) if seconds else 0.0
    for report in reports:
        histogram.add_sparse(report.latency)
        measurement.published += report.published
        measurement.delivered += report.delivered
        measurement.nacked += report.nacked
        measurement.client_cpu_seconds += report.cpu_seconds
        if report.error:
            measurement.error = report.error
    if measurement.seconds:
        measurement.publish_rate = measurement.published / measurement.seconds
        measurement.deliver_rate = measurement.delivered / measurement.seconds
    p50, p99, p999 = histogram.percentiles((50, 99, 99.9))
    measurement.p50_ms = None if p50 is None else p50 / 1e6
    measurement.p99_ms = None if p99 is None else p99 / 1e6
    measurement.p999_ms = None if p999 is None else p999 / 1e6
    measurement.latency_samples = histogram.total
    if measurement.nacked:
        measurement.notes.append(f"{measurement.nacked} publishes nacked")


def _run_memory(
    workload: Workload,
    broker: Broker,
    settings: RunSettings,
    topology: Topology,
    measurement: Measurement,
) -> None:
    """RSS before and after `workload.messages` messages are queued, per message."""
    if not broker.measured_pids():
        raise RuntimeError(f"a memory row needs the broker's processes: {UNMEASURED}")
    time.sleep(1.0)
    rss_before = steady_rss(broker.measured_pids)
    disk_before = broker.disk_bytes()
    workers = _Workers(worker_specs(workload, topology, broker, settings))
    try:
        workers.wait_ready()
        pids = broker.measured_pids()
        start = time.monotonic_ns() + 200_000_000
        deadline = start + int(settings.memory_timeout * 1e9)
        with RssSampler(broker.measured_pids) as sampler:
            cpu_before = cpu_seconds(pids)
            workers.go(Go(start, start, deadline))
            reports = workers.reports(timeout=settings.memory_timeout + 30)
            queued = 0
            while queued < workload.messages and time.monotonic_ns() < deadline:
                queued = asyncio.run(
                    _with_admin(broker.endpoint_for(topology.queues[0]), topology, "count")
                )
                if queued < workload.messages:
                    time.sleep(0.5)
            settled = time.monotonic_ns()
            cpu_after = cpu_seconds(pids)
            time.sleep(2.0)  # let allocators and the garbage collector settle
            rss_after = steady_rss(broker.measured_pids)
            disk_after = broker.disk_bytes()
    finally:
        workers.finish()
    for report in reports:
        if report.error:
            measurement.error = report.error
    published = sum(report.published_total for report in reports)
    measurement.published = published
    measurement.seconds = (settled - start) / 1e9
    measurement.publish_rate = published / measurement.seconds if measurement.seconds else None
    measurement.cpu_seconds = cpu_after - cpu_before
    measurement.peak_rss_bytes = sampler.peak
    if queued < workload.messages:
        measurement.error = f"only {queued:,} of {workload.messages:,} messages were queued"
        return
    measurement.bytes_per_message = (rss_after - rss_before) / queued - workload.body_size
    measurement.disk_growth_bytes = disk_after - disk_before
    measurement.notes.append(
        f"RSS {rss_before / 2**20:.0f} MiB before, {rss_after / 2**20:.0f} MiB with "
        f"{queued:,} queued; data on disk grew {measurement.disk_growth_bytes / 2**20:,.1f} MiB "
        f"({measurement.disk_growth_bytes / queued:,.0f} B/msg)"
    )


def _run_replay(
    workload: Workload,
    broker: Broker,
    settings: RunSettings,
    topology: Topology,
    measurement: Measurement,
) -> None:
    """Fill the stream with `workload.messages` (not measured), then replay all of it."""
    (queue,) = topology.queues
    plans = workload.publisher_plans(topology, settings.confirm_window)
    filled = fill_stream(broker, queue, plans, settings)
    replay_stream(broker, queue, workload.messages, settings, measurement)
    measurement.published = filled.published_total
    measurement.publish_rate = filled.published_total / filled.publish_seconds
    measurement.notes.append(
        f"filled with {filled.published_total:,} messages in {filled.publish_seconds:.1f} s "
        "(not measured)"
    )


def fill_stream(
    broker: Broker, queue: str, plans: Sequence[PublisherPlan], settings: RunSettings
) -> WorkerReport:
    """Publish what `plans` count (with confirms) into the stream `queue`; the publishers'
    report. RowFailed unless every message was confirmed."""
    fill = _Workers([WorkerSpec(endpoint=broker.endpoint_for(queue), slot=0, publishers=(*plans,))])
    try:
        fill.wait_ready()
        start = time.monotonic_ns() + 200_000_000
        fill.go(Go(start, start, start + int(settings.memory_timeout * 1e9)))
        (filled,) = fill.reports(timeout=settings.memory_timeout + 30)
    finally:
        fill.finish()
    if filled.error:
        raise RowFailed(f"filling the stream: {filled.error}")
    wanted = sum(plan.count for plan in plans)
    if filled.confirmed < wanted:
        raise RowFailed(f"only {filled.confirmed:,} of {wanted:,} publishes confirmed")
    return filled


def replay_stream(
    broker: Broker, queue: str, messages: int, settings: RunSettings, measurement: Measurement
) -> None:
    """Time one consumer reading the stream `queue` of `messages` from `first`: from its
    basic.consume to the last delivery, with the broker's CPU over the same time."""
    replay = WorkerSpec(
        endpoint=broker.endpoint_for(queue),
        slot=0,
        consumer_queues=(queue,),
        prefetch=settings.prefetch,
        stream_offset="first",
        expected_deliveries=messages,
    )
    workers = _Workers([replay])
    try:
        workers.wait_ready()
        pids = broker.measured_pids()
        start = time.monotonic_ns() + 200_000_000
        deadline = start + int(settings.memory_timeout * 1e9)
        with RssSampler(broker.measured_pids) as sampler:
            workers.go(Go(start, start, deadline))
            _sleep_until(start)
            cpu_before, machine_before = cpu_seconds(pids), machine_busy_seconds()
            reports = workers.reports(timeout=settings.memory_timeout + 30)
            cpu_after, machine_after = cpu_seconds(pids), machine_busy_seconds()
    finally:
        workers.finish()
    _record(
        measurement,
        reports,
        measured=bool(pids),
        cpu=cpu_after - cpu_before,
        machine=machine_after - machine_before,
        peak_rss=sampler.peak,
    )
