"""The operating system's figures of the broker's processes, for /metrics: prometheus-client's
standard `process_*` metrics (resident and virtual memory, CPU seconds, open and most file
descriptors, start time), which RabbitMQ's Prometheus plugin serves too, read from /proc for
one process. A broker with workers sums those of the supervisor and of every worker
(`batonmq.management.merge.broker_process_figures`)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import ProcessCollector


@dataclass(frozen=True, slots=True)
class ProcessFigure:
    """One sample of a `process_*` family, as prometheus-client's process collector names it."""

    family: str
    help: str
    type: str
    sample: str
    value: float


def process_figures(pid: int | None = None) -> list[ProcessFigure]:
    """The figures of process `pid` (this process when None); none where /proc cannot be read
    (another system, or a process that ended)."""
    collector = ProcessCollector(
        pid=(lambda: "self") if pid is None else (lambda: pid), registry=None
    )
    return [
        ProcessFigure(family.name, family.documentation, family.type, sample.name, sample.value)
        for family in collector.collect()
        for sample in family.samples
    ]
