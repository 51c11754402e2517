"""What the workers of one broker answer, merged into the answer of one broker (the HTTP API of a
broker with `broker.workers` above 1, `batonmq.management.workers`).

A broker with workers is one node to the API, as a RabbitMQ node that runs on several cores
(Erlang schedulers) is one node: clients reach every worker through the same port, and a
worker is not addressable on its own. So lists are the workers' lists one after the other (the
API's list parameters sort them after), and figures are summed: the overview's counts, message
totals and rates; each Prometheus series over the workers, so that a scrape has each series
once. An alarm in force in any worker is in force for the broker. The `process_*` figures of the
operating system are those of the broker's processes (supervisor and workers) summed, but for
the start time, which is the broker's: its first process's. The recent log is every worker's
records in the order they were logged.

Pure functions: no IO here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import TypeVar

from batonmq.engine.counters import ChannelCounters
from batonmq.engine.snapshots import Overview, StatisticsReading
from batonmq.management.listing import Item
from batonmq.management.processes import ProcessFigure
from batonmq.stats import Scope

_T = TypeVar("_T")


def concatenated(lists: Iterable[list[_T]]) -> list[_T]:
    """The workers' lists, one after the other."""
    return [item for listed in lists for item in listed]


def summed_overview(overviews: Iterable[Overview]) -> Overview:
    """The broker's overview: every count, message total and rate summed over the workers, and
    the alarms in force in any of them."""
    totals = ChannelCounters()
    rates: dict[str, float] = {}
    alarms: dict[str, str] = {}
    counts = dict.fromkeys(
        (
            "connections",
            "channels",
            "queues",
            "exchanges",
            "consumers",
            "messages_ready",
            "messages_unacknowledged",
        ),
        0,
    )
    for overview in overviews:
        for name in counts:
            counts[name] += getattr(overview, name)
        totals.add(overview.message_totals)
        for name, rate in overview.message_rates.items():
            rates[name] = rates.get(name, 0.0) + rate
        for name, state in overview.alarms.items():
            alarms.setdefault(name, state)
    return Overview(**counts, alarms=alarms, message_totals=totals, message_rates=rates)


def summed_readings(readings: Iterable[StatisticsReading]) -> list[StatisticsReading]:
    """The readings of every worker, those of one subject (scope and labels: the broker's own
    totals in each worker) summed into one, in the order each subject first comes."""
    merged: dict[tuple[Scope, tuple[tuple[str, str], ...]], StatisticsReading] = {}
    for reading in readings:
        key = (reading.scope, tuple(sorted(reading.labels.items())))
        known = merged.get(key)
        if known is None:
            labels, values = dict(reading.labels), dict(reading.values)
            merged[key] = StatisticsReading(reading.scope, labels, values)
            continue
        for name, value in reading.values.items():
            known.values[name] = known.values.get(name, 0.0) + value
    return list(merged.values())


#: The one `process_*` sample that is not summed.
START_TIME = "process_start_time_seconds"


def broker_process_figures(processes: Iterable[list[ProcessFigure]]) -> list[ProcessFigure]:
    """The figures of the broker's processes as one: each sample summed over them (memory, CPU
    seconds, open file descriptors and their limits), but the start time, the earliest (the
    supervisor's, which started the workers), in the order each sample first comes."""
    merged: dict[str, ProcessFigure] = {}
    for figures in processes:
        for figure in figures:
            known = merged.get(figure.sample)
            if known is None:
                merged[figure.sample] = figure
            elif figure.sample == START_TIME:
                merged[figure.sample] = min(known, figure, key=lambda each: each.value)
            else:
                merged[figure.sample] = dataclasses.replace(known, value=known.value + figure.value)
    return list(merged.values())


def merged_log(lines: dict[int, list[str]], *, name_workers: bool) -> list[Item]:
    """The records of every worker's `lines` (json log lines, by worker index), in the order
    they were logged: by their `ts` (to the millisecond; those of the same millisecond in
    worker order, each worker's in its own order); with `name_workers`, each names its worker
    (`worker`, as the workers' own log lines do)."""
    records: list[Item] = []
    for worker, of_worker in sorted(lines.items()):
        for line in of_worker:
            record = json.loads(line)
            if name_workers:
                record.setdefault("worker", worker)
            records.append(record)
    records.sort(key=lambda record: str(record.get("ts", "")))
    return records
