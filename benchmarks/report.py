"""Text reports of a run: the per-row table with BatonMQ/RabbitMQ ratios, comparison tables in
the format of Qpid manual Table 1.6 (each configuration's % difference from a baseline column),
and the issue's headline goals.

`comparison_table` knows nothing about brokers: rows x configurations and a baseline column, so
that the HA work can use it for HA vs non-HA as the seed does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from benchmarks.results import Measurement, metric_value, ratio
from benchmarks.workloads import HTTP_SUFFIX, PAIRS, Kind, Workload, size_label

MISSING = "n/a"


def percent_difference(value: float | None, baseline: float | None) -> float | None:
    """(value - baseline) / baseline in %, None when it cannot be computed."""
    relative = ratio(value, baseline)
    return None if relative is None else (relative - 1.0) * 100.0


def format_percent(percent: float | None) -> str:
    if percent is None:
        return MISSING
    if round(percent, 1) == 0:
        return "0.0%"
    return f"{percent:+.1f}%"


def comparison_table(
    rows: Sequence[str],
    configurations: Sequence[str],
    values: Mapping[tuple[str, str], float | None],
    baseline: str,
    *,
    corner: str = "Test/Broker",
    value_format: Callable[[float], str] | None = None,
) -> str:
    """A table in the format of Qpid manual Table 1.6: one line per row, one column per
    configuration, each cell the configuration's % difference from the `baseline`
    configuration's value in the same row (so the baseline column reads 0.0%). With
    `value_format`, each cell also shows the value itself: "12,345 (-3.2%)". A value missing
    from `values` (or None) shows as n/a."""
    if baseline not in configurations:
        raise ValueError(f"the baseline {baseline!r} is not one of the configurations")
    header = [corner, *configurations]
    lines = [header]
    for row in rows:
        base = values.get((row, baseline))
        cells = [row]
        for configuration in configurations:
            value = values.get((row, configuration))
            cell = format_percent(percent_difference(value, base))
            if value_format is not None and value is not None:
                cell = f"{value_format(value)} ({cell})"
            cells.append(cell)
        lines.append(cells)
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    rendered = []
    for number, line in enumerate(lines):
        left = line[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=False)]
        rendered.append("  ".join([left, *rest]).rstrip())
        if number == 0:
            rendered.append("  ".join("-" * width for width in widths))
    return "\n".join(rendered)


# The per-row table.

_COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("msgs/s", "deliver_rate", lambda value: f"{value:,.0f}"),
    ("pub/s", "publish_rate", lambda value: f"{value:,.0f}"),
    ("p50 ms", "p50_ms", lambda value: f"{value:.2f}"),
    ("p99 ms", "p99_ms", lambda value: f"{value:.2f}"),
    ("p99.9 ms", "p999_ms", lambda value: f"{value:.2f}"),
    ("CPU s", "cpu_seconds", lambda value: f"{value:.2f}"),
    ("CPU us/msg", "cpu_us_per_message", lambda value: f"{value:.1f}"),
    ("of it DB us/msg", "store_cpu_us_per_message", lambda value: f"{value:.1f}"),
    ("gen CPU s", "client_cpu_seconds", lambda value: f"{value:.2f}"),
    ("other CPU s", "other_cpu_seconds", lambda value: f"{value:.2f}"),
    ("peak RSS MiB", "peak_rss_bytes", lambda value: f"{value / 2**20:,.0f}"),
    ("B/msg", "bytes_per_message", lambda value: f"{value:,.0f}"),
    ("B/idle conn", "bytes_per_connection", lambda value: f"{value:,.0f}"),
)


def first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _cell(value: float | None, formatter: Callable[[float], str]) -> str:
    return "-" if value is None else formatter(value)


def results_table(
    workloads: Sequence[Workload],
    measurements: Mapping[tuple[str, str], Measurement],
    labels: Mapping[str, str],
) -> str:
    """One line per broker per row, then one line per BatonMQ store with the ratio of each
    column to RabbitMQ's. Headline rows are marked with *."""
    header = ["row", "broker", *(title for title, _, _ in _COLUMNS)]
    lines: list[list[str]] = [header]
    notes: list[str] = []
    for workload in workloads:
        first = True
        for target in workload.targets:
            measurement = measurements.get((workload.name, target))
            if measurement is None:
                continue
            mark = "* " if workload.headline else "  "
            name = mark + workload.name if first else ""
            first = False
            if measurement.error:
                lines.append(
                    [name, labels.get(target, target), f"[{first_line(measurement.error)}]"]
                )
                continue
            lines.append(
                [
                    name,
                    labels.get(target, target),
                    *(
                        _cell(metric_value(measurement, key), formatter)
                        for _, key, formatter in _COLUMNS
                    ),
                ]
            )
            notes += [f"{workload.name} on {target}: {note}" for note in measurement.notes]
        baseline = measurements.get((workload.name, "rabbitmq"))
        for target in workload.targets:
            if target in ("rabbitmq", "sink"):
                continue
            measurement = measurements.get((workload.name, target))
            if measurement is None or measurement.error or baseline is None or baseline.error:
                continue
            cells = []
            for _, key, _ in _COLUMNS:
                if key in ("client_cpu_seconds", "other_cpu_seconds"):  # not the broker's
                    cells.append("")
                    continue
                relative = ratio(metric_value(measurement, key), metric_value(baseline, key))
                cells.append("-" if relative is None else f"{relative:.2f}")
            lines.append(["", f"ratio {target}/rabbitmq", *cells])
    text = _render(lines)
    if notes:
        text += "\n" + "\n".join(f"  note: {note}" for note in notes)
    return text


#: The management issue's bound on what the HTTP listener's statistics may cost a row.
HTTP_COST_LIMIT = 3.0


def http_cost_table(
    workloads: Sequence[Workload], measurements: Mapping[tuple[str, str], Measurement]
) -> str:
    """Each row with the HTTP listener on against off, per store: the row's figure and CPU per
    message, on / off, and how much worse the figure is with it on ("slower" past
    HTTP_COST_LIMIT %, the management issue's bound)."""
    lines = [["row", "broker", "figure", "off", "on", "on/off", "CPU us/msg on/off", "worse"]]
    for workload in workloads:
        for target in workload.targets:
            if not target.endswith(HTTP_SUFFIX):
                continue
            on = measurements.get((workload.name, target))
            off = measurements.get((workload.name, target.removesuffix(HTTP_SUFFIX)))
            if on is None or off is None or on.error or off.error:
                continue
            metric, higher_is_better = workload.primary_metric
            value_on, value_off = metric_value(on, metric), metric_value(off, metric)
            relative = ratio(value_on, value_off)
            worse = None
            if relative is not None:
                worse = (1 - relative if higher_is_better else relative - 1) * 100
            cpu = ratio(on.cpu_us_per_message, off.cpu_us_per_message)
            verdict = format_percent(worse)
            if worse is not None and worse > HTTP_COST_LIMIT:
                verdict += " slower"
            lines.append(
                [
                    workload.name,
                    target.removesuffix(HTTP_SUFFIX),
                    metric,
                    _cell(value_off, _figure),
                    _cell(value_on, _figure),
                    _cell(relative, lambda value: f"{value:.3f}"),
                    _cell(cpu, lambda value: f"{value:.3f}"),
                    verdict,
                ]
            )
    if len(lines) == 1:
        return "HTTP listener on/off: no row measured both"
    return "HTTP listener on/off (the statistics' cost):\n" + _render(lines)


def _figure(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _render(lines: list[list[str]]) -> str:
    widths = [0] * max(len(line) for line in lines)
    for line in lines:
        if len(line) == 3 and line[2].startswith("["):  # an error spans the columns
            continue
        for column, cell in enumerate(line):
            widths[column] = max(widths[column], len(cell))
    rendered = []
    for number, line in enumerate(lines):
        cells = [line[0].ljust(widths[0]), line[1].ljust(widths[1])]
        cells += [cell.rjust(width) for cell, width in zip(line[2:], widths[2:], strict=False)]
        if len(line) == 3 and line[2].startswith("["):
            cells[2] = line[2]
        rendered.append("  ".join(cells).rstrip())
        if number == 0:
            rendered.append("-" * len(rendered[0]))
    return "\n".join(rendered)


def sweep_tables(
    workloads: Sequence[Workload],
    measurements: Mapping[tuple[str, str], Measurement],
    labels: Mapping[str, str],
) -> list[str]:
    """Table 1.6 for each producers/consumers sweep (one queue, same body, same persistence, and
    clients in shared or in their own processes) in the run: msgs/s and % difference from
    RabbitMQ. Rows that differ in more than their producers and consumers are in no sweep."""
    tables = []
    for persistent in (False, True):
        for body in sorted({workload.body_size for workload in workloads}):
            for own_processes in (False, True):
                sweep = [
                    workload
                    for workload in workloads
                    if workload.kind is Kind.THROUGHPUT
                    and not workload.exchange_type
                    and workload.queues == 1
                    and workload.persistent == persistent
                    and workload.body_size == body
                    and workload.process_per_client == own_processes
                ]
                if len(sweep) < 2:
                    continue
                targets = sweep[0].targets
                row_names = {
                    workload.name: (
                        f"{PAIRS.index(workload.producers) + 1} "
                        f"({workload.producers}/{workload.consumers})"
                    )
                    for workload in sweep
                }
                values = {
                    (row_names[workload.name], labels.get(target, target)): _rate(
                        measurements.get((workload.name, target))
                    )
                    for workload in sweep
                    for target in targets
                }
                kind = "persistent with confirms" if persistent else "transient"
                if own_processes:
                    kind += ", each client its own process"
                tables.append(
                    f"Table 1.6 format: msgs/s, {kind}, {size_label(body)}, "
                    f"% difference from {labels.get('rabbitmq', 'rabbitmq')}\n"
                    + comparison_table(
                        list(row_names.values()),
                        [labels.get(target, target) for target in targets],
                        values,
                        labels.get("rabbitmq", "rabbitmq"),
                        value_format=lambda value: f"{value:,.0f}",
                    )
                )
    return tables


def _rate(measurement: Measurement | None) -> float | None:
    if measurement is None or measurement.error:
        return None
    return measurement.deliver_rate


def headline_summary(
    workloads: Sequence[Workload], measurements: Mapping[tuple[str, str], Measurement]
) -> str:
    lines = ["Headline rows (the Benchmarks requirements' goals; ratio = BatonMQ / RabbitMQ):"]
    for workload in workloads:
        headline = workload.headline
        if headline is None:
            continue
        metric, _ = workload.primary_metric
        ours = measurements.get((workload.name, headline.target))
        theirs = measurements.get((workload.name, "rabbitmq"))
        ours_value = None if ours is None or ours.error else metric_value(ours, metric)
        theirs_value = None if theirs is None or theirs.error else metric_value(theirs, metric)
        if workload.kind is Kind.MEMORY:
            shown = (
                f"BatonMQ {_maybe(ours_value, '{:,.0f}')} B/msg beyond the body, RabbitMQ "
                f"{_maybe(theirs_value, '{:,.0f}')} B/msg"
            )
            met = ours_value is not None and ours_value <= 1024
        else:
            relative = ratio(ours_value, theirs_value)
            shown = f"{metric} ratio {_maybe(relative, '{:.2f}')}"
            if relative is None:
                met = False
            elif workload.kind is Kind.LATENCY:
                met = relative <= 1.0
            else:
                met = relative >= 1.0
        verdict = "met" if met else "NOT met"
        lines.append(f"  {headline.label:<40} {shown:<56} goal {headline.goal}: {verdict}")
    return "\n".join(lines)


def _maybe(value: float | None, template: str) -> str:
    return MISSING if value is None else template.format(value)
