"""`batonctl metrics`' rates (batonmq.cli.live.rates): the deltas of the overview's
message_stats counters per second, as imqcmd's `metrics bkr` reports "Msgs/sec In, Out" at an
interval (MQ 3.5 admin guide, the metrics generator: "message flow in and out of the
broker")."""

from __future__ import annotations

import pytest

from batonmq.cli.live.rates import RATES, Reading, header, line, rates
from batonmq.management.listing import Json


def reading(at: float, totals: Json = None, **counters: int) -> Reading:
    overview: dict[str, Json] = {"message_stats": dict(counters)}
    if totals is not None:
        overview["queue_totals"] = totals
    return Reading(at, overview)


def test_a_rate_is_the_counters_increase_per_second() -> None:
    before = reading(10.0, publish=100, deliver_get=40, ack=40, confirm=90, redeliver=0)
    after = reading(12.0, publish=150, deliver_get=41, ack=40, confirm=100, redeliver=3)

    assert rates(before, after) == {
        "publish": 25.0,
        "deliver_get": 0.5,
        "ack": 0.0,
        "confirm": 5.0,
        "redeliver": 1.5,
    }


def test_a_missing_counter_counts_as_zero() -> None:
    """RabbitMQ's clients take a figure the API leaves out as 0."""
    assert rates(reading(0.0), reading(1.0, publish=7)) == {name: 0.0 for _, name in RATES} | {
        "publish": 7.0
    }
    assert rates(Reading(0.0, {}), Reading(1.0, {"message_stats": "garbled"}))["publish"] == 0.0


def test_a_counter_that_went_down_started_again_from_zero() -> None:
    """A broker restarted between two readings counts from 0 again: the increase is its new
    total, never a negative rate."""
    assert rates(reading(0.0, publish=1000), reading(2.0, publish=30))["publish"] == 15.0


def test_readings_must_be_in_order() -> None:
    with pytest.raises(ValueError, match="after the first"):
        rates(reading(5.0), reading(5.0))


def test_a_line_lines_up_under_the_header() -> None:
    before = reading(0.0, publish=0)
    after = reading(
        4.0,
        {"messages": 12, "messages_unacknowledged": 2},
        publish=10,
        deliver_get=1234567,
    )

    titles, values = header().split(), line("12:00:01", before, after).split()

    assert titles == [
        "TIME", "IN/S", "OUT/S", "ACK/S", "CONFIRM/S", "REDELIVER/S", "MESSAGES", "UNACKED",
        "CONNECTIONS",
    ]  # fmt: skip
    assert values == ["12:00:01", "2.5", "308641.8", "0.0", "0.0", "0.0", "12", "2", "0"]
    assert len(line("12:00:01", before, after)) == len(header())
    for title in titles:  # each value ends where its title ends
        end = header().index(title) + len(title)
        assert line("12:00:01", before, after)[end - 1] != " "
