"""/metrics: every statistic of the registry in Prometheus's text format, one family each,
labelled by subject; read back with prometheus-client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from batonmq.engine.snapshots import StatisticsReading
from batonmq.management.metrics import aggregated, exposition
from batonmq.management.processes import process_figures
from batonmq.stats import REGISTRY, Scope


def scrape(readings: list[StatisticsReading]) -> dict:
    text = exposition(readings, process_figures()).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_every_declared_statistic_is_a_family_with_its_help_and_type():
    families = scrape([])
    for statistic in REGISTRY.statistics():
        name = statistic.exported_name.removesuffix("_total")
        assert families[name].type == statistic.kind.value
        assert statistic.help in families[name].documentation


def test_samples_carry_their_subjects_labels():
    families = scrape(
        [
            StatisticsReading(Scope.BROKER, {}, {"connections": 2, "connections_opened": 5}),
            StatisticsReading(Scope.QUEUE, {"vhost": "/", "queue": "a"}, {"messages_ready": 3}),
            StatisticsReading(Scope.QUEUE, {"vhost": "v", "queue": "b"}, {"messages_ready": 1}),
        ]
    )
    [opened] = families["batonmq_broker_connections_opened"].samples
    assert (opened.name, opened.labels, opened.value) == (
        "batonmq_broker_connections_opened_total",
        {},
        5,
    )
    ready = {
        (sample.labels["vhost"], sample.labels["queue"]): sample.value
        for sample in families["batonmq_queue_messages_ready"].samples
    }
    assert ready == {("/", "a"): 3, ("v", "b"): 1}


def test_the_aggregated_scrape_sums_each_statistic_over_its_subjects():
    """RabbitMQ's Prometheus plugin, by default: metrics aggregated over objects, no labels."""
    families = scrape(
        aggregated(
            [
                StatisticsReading(Scope.BROKER, {}, {"connections": 2}),
                StatisticsReading(Scope.QUEUE, {"vhost": "/", "queue": "a"}, {"messages_ready": 3}),
                StatisticsReading(Scope.QUEUE, {"vhost": "v", "queue": "b"}, {"messages_ready": 1}),
            ]
        )
    )
    [ready] = families["batonmq_queue_messages_ready"].samples
    assert (ready.labels, ready.value) == ({}, 4)
    [connections] = families["batonmq_connections"].samples
    assert (connections.labels, connections.value) == ({}, 2)


def test_the_broker_process_memory_is_served_beside_the_statistics():
    """The management issue: /metrics has "process memory"; prometheus-client's standard
    process collector names it process_resident_memory_bytes (as RabbitMQ's plugin does)."""
    families = scrape([])
    [resident] = families["process_resident_memory_bytes"].samples
    assert resident.value > 0
    assert families["process_cpu_seconds"].samples[0].value > 0
