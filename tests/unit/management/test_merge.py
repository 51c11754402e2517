"""The workers' answers merged into one broker's (`batonmq.management.merge`)."""

from __future__ import annotations

import json

from batonmq.engine.counters import ChannelCounters
from batonmq.engine.snapshots import Overview, StatisticsReading
from batonmq.management.merge import (
    START_TIME,
    broker_process_figures,
    concatenated,
    merged_log,
    summed_overview,
    summed_readings,
)
from batonmq.management.processes import ProcessFigure
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


def _figures(resident: float, cpu: float, fds: float, start: float) -> list[ProcessFigure]:
    resident_memory = "process_resident_memory_bytes"
    return [
        ProcessFigure(resident_memory, "rss", "gauge", resident_memory, resident),
        ProcessFigure("process_start_time_seconds", "start", "gauge", START_TIME, start),
        ProcessFigure("process_cpu_seconds", "cpu", "counter", "process_cpu_seconds_total", cpu),
        ProcessFigure("process_open_fds", "fds", "gauge", "process_open_fds", fds),
    ]


def _by_family(figures: list[ProcessFigure]) -> dict[str, float]:
    return {figure.family: figure.value for figure in figures}


def test_process_figures_are_summed_over_the_processes_but_the_start_time() -> None:
    """The brief of broker-wide process metrics: resident memory, CPU seconds and open fds of
    the supervisor and every worker summed, one series each; the start time the broker's, its
    supervisor's (the earliest: it starts the workers)."""
    supervisor = _figures(10, 0.5, 4, 1000.0)
    workers = [_figures(100, 2.0, 20, 1001.0), _figures(200, 3.0, 30, 1500.0)]
    merged = broker_process_figures([*workers, supervisor])
    assert _by_family(merged) == {
        "process_resident_memory_bytes": 310,
        "process_start_time_seconds": 1000.0,
        "process_cpu_seconds": 5.5,
        "process_open_fds": 54,
    }
    assert [figure.help for figure in merged] == ["rss", "start", "cpu", "fds"]


def test_process_figures_of_one_process_are_its_own() -> None:
    alone = _figures(10, 0.5, 4, 1000.0)
    assert broker_process_figures([alone]) == alone
    assert broker_process_figures([]) == []


def _line(ts: str, msg: str, **fields: object) -> str:
    return json.dumps({"ts": ts, "level": "info", "logger": "batonmq", "msg": msg, **fields})


def test_the_log_is_every_workers_records_in_the_order_they_were_logged() -> None:
    """/api/broker/log with workers: the lines of every worker merged in time order, each
    saying which worker; a record of the same millisecond in worker order."""
    lines = {
        1: [_line("2026-11-26T10:00:00.002Z", "b"), _line("2026-11-26T10:00:00.003Z", "d")],
        0: [_line("2026-11-26T10:00:00.001Z", "a"), _line("2026-11-26T10:00:00.003Z", "c")],
    }
    merged = merged_log(lines, name_workers=True)
    assert [(record["msg"], record["worker"]) for record in merged] == [
        ("a", 0),
        ("b", 1),
        ("c", 0),
        ("d", 1),
    ]


def test_a_record_that_names_its_worker_keeps_it_and_one_process_names_none() -> None:
    lines = {0: [_line("2026-11-26T10:00:00.001Z", "a", worker=0)]}
    assert merged_log(lines, name_workers=True)[0]["worker"] == 0
    assert (
        "worker"
        not in merged_log({0: [_line("2026-11-26T10:00:00.001Z", "a")]}, name_workers=False)[0]
    )
