"""GET /metrics and /metrics/per-object: every statistic of the registry (batonmq.stats) in
Prometheus's text format, written by prometheus-client.

RabbitMQ's Prometheus plugin serves its metrics on a port of its own (15692) without
authentication; BatonMQ serves them on the management listener, without authentication too. One
metric family per declared statistic (its exported name, HELP text and unit from the
declaration). As RabbitMQ's plugin does by default, /metrics aggregates: one sample per
statistic, the sum over its subjects (per-object output at thousands of queues is what makes a
scrape slow). /metrics/per-object has one sample per subject, labelled as
`EngineApi.statistics` names it: `vhost` and `queue` for a queue, `connection` for a
connection, `vhost` and `channel` for a channel, none for the broker's totals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from batonmq.engine.snapshots import StatisticsReading
from batonmq.management.processes import ProcessFigure
from batonmq.stats import REGISTRY, Kind, Scope, Statistic

#: prometheus-client's text exposition format (version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metric_families(readings: Sequence[StatisticsReading]) -> Iterator[Metric]:
    """A family for each declared statistic, with a sample for each reading of its scope."""
    by_scope: defaultdict[Scope, list[StatisticsReading]] = defaultdict(list)
    for reading in readings:
        by_scope[reading.scope].append(reading)
    label_names = {
        scope: sorted({name for reading in of_scope for name in reading.labels})
        for scope, of_scope in by_scope.items()
    }
    label_values = {
        scope: [[reading.labels.get(name, "") for name in label_names[scope]] for reading in of]
        for scope, of in by_scope.items()
    }
    for statistic in REGISTRY.statistics():
        scope = statistic.scope
        family = _family(statistic, label_names.get(scope, []))
        key = statistic.key
        for reading, labels in zip(by_scope[scope], label_values.get(scope, []), strict=True):
            value = reading.values.get(key)
            if value is not None:
                family.add_metric(labels, value)
        yield family


def _family(
    statistic: Statistic, label_names: list[str]
) -> CounterMetricFamily | GaugeMetricFamily:
    # prometheus-client adds "_total" to a counter's name itself.
    name = statistic.exported_name.removesuffix("_total")
    text = f"{statistic.help} ({statistic.unit})"
    if statistic.kind is Kind.COUNTER:
        return CounterMetricFamily(name, text, labels=label_names)
    return GaugeMetricFamily(name, text, labels=label_names)


class _Readings(Collector):
    def __init__(
        self, readings: Sequence[StatisticsReading], processes: Sequence[ProcessFigure]
    ) -> None:
        self._readings = readings
        self._processes = processes

    def collect(self) -> Iterable[Metric]:
        yield from metric_families(self._readings)
        for figure in self._processes:
            family = Metric(figure.family, figure.help, figure.type)
            family.add_sample(figure.sample, {}, figure.value)
            yield family


def exposition(readings: Sequence[StatisticsReading], processes: Sequence[ProcessFigure]) -> bytes:
    """The text of a scrape of `readings`, and the figures of the broker's processes (resident
    memory, CPU seconds, open files: prometheus-client's standard `process_*` metrics, which
    RabbitMQ's plugin serves too; `batonmq.management.processes`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Readings(readings, processes))
    return generate_latest(registry)


def aggregated(readings: Iterable[StatisticsReading]) -> list[StatisticsReading]:
    """One unlabelled reading per scope: each statistic summed over the scope's subjects."""
    sums: defaultdict[Scope, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    for reading in readings:
        scope_sums = sums[reading.scope]
        for key, value in reading.values.items():
            scope_sums[key] += value
    return [StatisticsReading(scope, {}, dict(values)) for scope, values in sums.items()]
