"""The Qpid manual Table 1.6 formatter and the percent differences it shows."""

from dataclasses import replace

import pytest
from benchmarks.report import (
    comparison_table,
    format_percent,
    http_cost_table,
    percent_difference,
    sweep_tables,
)
from benchmarks.results import Measurement
from benchmarks.workloads import select


def test_percent_difference_from_the_baseline():
    assert percent_difference(38.6, 100.0) == pytest.approx(-61.4)
    assert percent_difference(217.0, 100.0) == pytest.approx(117.0)
    assert percent_difference(5.0, None) is None
    assert percent_difference(None, 5.0) is None
    assert percent_difference(5.0, 0.0) is None


def test_percentages_read_as_in_the_seed():
    assert format_percent(-61.4) == "-61.4%"
    assert format_percent(117.0) == "+117.0%"
    assert format_percent(0.0) == "0.0%"
    assert format_percent(-0.01) == "0.0%"
    assert format_percent(None) == "n/a"


def test_a_comparison_table_shows_each_configuration_against_the_baseline_column():
    values = {
        ("1 (1/1)", "No HA"): 1000.0,
        ("1 (1/1)", "SYNC"): 386.0,
        ("1 (1/1)", "WRITE_NO_SYNC"): 2170.0,
        ("2 (2/2)", "No HA"): 2000.0,
        ("2 (2/2)", "SYNC"): 491.4,
    }
    table = comparison_table(
        ["1 (1/1)", "2 (2/2)"], ["No HA", "SYNC", "WRITE_NO_SYNC"], values, "No HA"
    )
    lines = table.splitlines()
    assert lines[0].split() == ["Test/Broker", "No", "HA", "SYNC", "WRITE_NO_SYNC"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].split() == ["1", "(1/1)", "0.0%", "-61.4%", "+117.0%"]
    assert lines[3].split() == ["2", "(2/2)", "0.0%", "-75.4%", "n/a"]


def test_a_comparison_table_can_show_the_values_too():
    table = comparison_table(
        ["row"],
        ["base", "other"],
        {("row", "base"): 2000.0, ("row", "other"): 1500.0},
        "base",
        value_format=lambda value: f"{value:,.0f}",
    )
    assert table.splitlines()[2].split() == ["row", "2,000", "(0.0%)", "1,500", "(-25.0%)"]


def test_without_a_baseline_value_a_row_reads_n_a():
    table = comparison_table(["row"], ["base", "other"], {("row", "other"): 1.0}, "base")
    assert table.splitlines()[2].split() == ["row", "n/a", "n/a"]


def test_the_baseline_must_be_a_configuration():
    with pytest.raises(ValueError, match="baseline"):
        comparison_table(["row"], ["a", "b"], {}, "c")


def test_a_sweep_holds_only_rows_that_differ_in_their_producers_and_consumers():
    """Qpid manual Table 1.6 varies one thing, the producers and consumers. A row whose clients
    each have a process of their own, or that spreads over two queues, is not one more column
    of the shared-process sweep (it used to replace the transient 4/4 1 KiB figure)."""
    rows = select(["transient-*-1KiB", "clients-*-1KiB", "clients-4x4-1KiB-2q"], quick=False)
    rates = {
        "transient-4x4-1KiB": 1000.0,
        "clients-4x4-1KiB": 2000.0,
        "clients-4x4-1KiB-2q": 3000.0,
    }
    measurements = {
        (row.name, target): Measurement(row.name, target, deliver_rate=rates.get(row.name, 1.0))
        for row in rows
        for target in row.targets
    }

    shared, own = sweep_tables(rows, measurements, {"rabbitmq": "RabbitMQ"})

    assert shared.startswith("Table 1.6 format: msgs/s, transient, 1KiB,")
    assert _line("3 (4/4)", shared).split()[2:] == ["1,000", "(0.0%)", "1,000", "(0.0%)"]
    assert own.startswith("Table 1.6 format: msgs/s, transient, each client its own process, 1KiB")
    assert _line("3 (4/4)", own).split()[2:] == ["2,000", "(0.0%)", "2,000", "(0.0%)"]
    assert "3,000" not in shared + own


def _line(start: str, table: str) -> str:
    (line,) = [line for line in table.splitlines() if line.startswith(start)]
    return line


def test_the_http_cost_table_compares_each_row_with_the_listener_on_and_off():
    """The management issue's statistics-cost row: "headline rows with the HTTP listener on and
    off, no row slower by more than 3 %"; slower means a lower rate, or a higher latency."""
    throughput, latency = (
        replace(row, http=True) for row in select(["transient-1x1-128B", "latency-1000"], False)
    )
    measurements = {
        (throughput.name, "batonmq"): Measurement(
            throughput.name, "batonmq", delivered=1000, deliver_rate=1000.0, cpu_seconds=1.0
        ),
        (throughput.name, "batonmq+http"): Measurement(
            throughput.name, "batonmq+http", delivered=1000, deliver_rate=990.0, cpu_seconds=1.02
        ),
        (latency.name, "batonmq"): Measurement(latency.name, "batonmq", p99_ms=2.0),
        (latency.name, "batonmq+http"): Measurement(latency.name, "batonmq+http", p99_ms=2.5),
    }

    lines = http_cost_table([throughput, latency], measurements).splitlines()

    assert lines[0].startswith("HTTP listener on/off")
    assert lines[3].split() == [
        throughput.name, "batonmq", "deliver_rate", "1,000", "990", "0.990", "1.020", "+1.0%",
    ]  # fmt: skip
    assert lines[4].split() == [
        latency.name, "batonmq", "p99_ms", "2.00", "2.50", "1.250", "-", "+25.0%", "slower",
    ]  # fmt: skip
    assert http_cost_table([throughput], {}) == "HTTP listener on/off: no row measured both"
