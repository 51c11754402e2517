"""The workers' answers merged into one broker's (`batonmq.management.merge`)."""

from __future__ import annotations

from batonmq.engine.counters import ChannelCounters
from batonmq.engine.snapshots import Overview, StatisticsReading
from batonmq.management.merge import concatenated, summed_overview, summed_readings
from batonmq.stats import Scope


def _overview(n: int, alarms: dict[str, str] | None = None) -> Overview:
    return Overview(
        connections=n,
        channels=2 * n,
        queues=3 * n,
        exchanges=4 * n,
        consumers=5 * n,
        messages_ready=6 * n,
        messages_unacknowledged=7 * n,
        alarms=alarms or {},
        message_totals=ChannelCounters(publish=10 * n, deliver=n),
        message_rates={"publish": 1.5 * n},
    )


def test_lists_are_concatenated_in_worker_order() -> None:
    assert concatenated([[1, 2], [], [3]]) == [1, 2, 3]


def test_the_overview_sums_every_count_total_and_rate() -> None:
    """RabbitMQ's overview of a cluster: object_totals and queue_totals over all its nodes."""
    merged = summed_overview([_overview(1), _overview(2)])
    assert merged == _overview(3)


def test_an_alarm_in_any_worker_is_the_brokers() -> None:
    merged = summed_overview([_overview(1), _overview(1, {"memory": "red"})])
    assert merged.alarms == {"memory": "red"}


def test_the_overview_of_no_worker_is_zero() -> None:
    assert summed_overview([]) == Overview(0, 0, 0, 0, 0, 0, 0, {})


def test_each_series_is_summed_once_over_the_workers() -> None:
    """Prometheus: a scrape has each series (name and labels) once; the broker's own totals
    come from every worker and are summed, a queue's come from its owner only."""
    readings = summed_readings(
        [
            StatisticsReading(Scope.BROKER, {}, {"connections_opened": 2.0}),
            StatisticsReading(Scope.QUEUE, {"vhost": "a", "queue": "q"}, {"messages": 5.0}),
            StatisticsReading(Scope.BROKER, {}, {"connections_opened": 3.0, "other": 1.0}),
            StatisticsReading(Scope.QUEUE, {"vhost": "b", "queue": "q"}, {"messages": 1.0}),
        ]
    )
    assert readings == [
        StatisticsReading(Scope.BROKER, {}, {"connections_opened": 5.0, "other": 1.0}),
        StatisticsReading(Scope.QUEUE, {"vhost": "a", "queue": "q"}, {"messages": 5.0}),
        StatisticsReading(Scope.QUEUE, {"vhost": "b", "queue": "q"}, {"messages": 1.0}),
    ]


def test_summing_leaves_the_readings_it_was_given_unchanged() -> None:
    first = StatisticsReading(Scope.BROKER, {}, {"n": 1.0})
    summed_readings([first, StatisticsReading(Scope.BROKER, {}, {"n": 2.0})])
    assert first.values == {"n": 1.0}
