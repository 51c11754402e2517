"""The run's chart: BatonMQ/RabbitMQ ratios per row, as a PNG (matplotlib, the `bench` extra).

Left: throughput (msgs/s) ratios, more is better, with the issue's lines at 0.7 and 1.0. Right:
p99 latency ratios of every row, and the memory row's bytes-per-message ratio, less is better.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.results import Measurement, metric_value, ratio
from benchmarks.workloads import Kind, Workload

_COLOURS = {"batonmq": "tab:blue", "batonmq-pg": "tab:orange"}


def _ratios(
    workloads: Sequence[Workload],
    measurements: Mapping[tuple[str, str], Measurement],
    target: str,
    metric_for: Mapping[Kind, str],
) -> list[float]:
    values = []
    for workload in workloads:
        baseline = measurements.get((workload.name, "rabbitmq"))
        ours = measurements.get((workload.name, target))
        metric = metric_for.get(workload.kind)
        relative = None
        if metric and baseline and ours and not baseline.error and not ours.error:
            relative = ratio(metric_value(ours, metric), metric_value(baseline, metric))
        values.append(float("nan") if relative is None else relative)
    return values


def draw_chart(
    path: Path,
    workloads: Sequence[Workload],
    measurements: Mapping[tuple[str, str], Measurement],
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [workload for workload in workloads if "rabbitmq" in workload.targets]
    if not rows:
        return
    names = [("* " if workload.headline else "") + workload.name for workload in rows]
    measured = {target for _, target in measurements}
    targets = [
        target
        for target in dict.fromkeys(target for workload in rows for target in workload.targets)
        if target != "rabbitmq" and target in measured
    ]
    # Builds multiply the bars; past 100 inches they get thinner, not the figure taller.
    height = min(100.0, max(3.0, 0.32 * len(rows) * max(1, len(targets)) + 1.5))
    figure, (left, right) = plt.subplots(1, 2, figsize=(14, height), sharey=True)
    bar = 0.8 / max(1, len(targets))
    positions = list(range(len(rows)))
    panels = (
        (left, {Kind.THROUGHPUT: "deliver_rate"}, "msgs/s ratio (more is better)", (0.7, 1.0)),
        (
            right,
            {Kind.THROUGHPUT: "p99_ms", Kind.LATENCY: "p99_ms", Kind.MEMORY: "bytes_per_message"},
            "p99 latency ratio; memory row: B/msg ratio (less is better)",
            (1.0,),
        ),
    )
    for axes, metric_for, label, lines in panels:
        for number, target in enumerate(targets):
            values = _ratios(rows, measurements, target, metric_for)
            offsets = [position + (number - (len(targets) - 1) / 2) * bar for position in positions]
            axes.barh(offsets, values, height=bar, color=_COLOURS.get(target), label=target)
            for offset, value in zip(offsets, values, strict=True):
                if not math.isnan(value):
                    axes.text(value, offset, f" {value:.2f}", va="center", fontsize=7)
        for line in lines:
            axes.axvline(line, color="grey", linestyle="--", linewidth=0.8)
        axes.set_xlabel(label)
        axes.grid(axis="x", alpha=0.3)
    left.set_yticks(positions, names, fontsize=8)
    left.invert_yaxis()
    if targets:
        left.legend(loc="lower right", fontsize=8)
    figure.suptitle(title + "  (BatonMQ / RabbitMQ, * = headline row)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
