"""Threshold alerts (Qpid manual virtualhosts.xml: "Set threshold values for queue monitor
alerting to log": maximumQueueDepth, maximumMessageSize, maximumMessageAge, and Qpid's
maximumMessageCount): a warning line when a queue goes over one, not repeated at every check."""

from __future__ import annotations

import logging

import pytest

from batonmq.config import AlertsConfig
from batonmq.engine.alerts import Alert, AlertKind, AlertRepeats, QueueAlerts, alerts_for
from batonmq.engine.broker import Broker
from batonmq.queues.arrivals import QueueAges
from batonmq.queues.readings import QueueReading
from tests.manualtimers import ManualTimers
from tests.memclient import connect

COUNT = AlertKind.MESSAGE_COUNT_ALERT
DEPTH = AlertKind.QUEUE_DEPTH_ALERT


# --- the decisions --------------------------------------------------------------------------


def test_each_threshold_alerts_when_exceeded_and_zero_is_off() -> None:
    config = AlertsConfig(
        max_queue_depth=4235264,
        max_message_size=2117632,
        max_message_age=600000,
        max_message_count=50,
    )
    at_limits = QueueReading(depth=4235264, count=50, oldest_age_ms=600000, head_size=2117632)
    over = QueueReading(depth=4235265, count=51, oldest_age_ms=600001, head_size=2117633)

    assert alerts_for(at_limits, config) == []
    assert alerts_for(over, config) == [
        Alert(AlertKind.QUEUE_DEPTH_ALERT, 4235265, 4235264),
        Alert(AlertKind.MESSAGE_SIZE_ALERT, 2117633, 2117632),
        Alert(AlertKind.MESSAGE_AGE_ALERT, 600001, 600000),
        Alert(AlertKind.MESSAGE_COUNT_ALERT, 51, 50),
    ]
    assert alerts_for(over, AlertsConfig()) == []


def test_alert_lines_are_qpids_with_unit_and_setting() -> None:
    """Qpid's monitor logs "MESSAGE_COUNT_ALERT On Queue q - 101: Maximum count on queue
    threshold (100) breached."."""
    assert Alert(COUNT, 101, 100).text("q") == (
        "MESSAGE_COUNT_ALERT On Queue q - 101: Maximum count on queue threshold "
        "(100, alerts.max_message_count) breached."
    )
    assert Alert(DEPTH, 5000, 4096).text("q") == (
        "QUEUE_DEPTH_ALERT On Queue q - 5000 bytes: Maximum queue depth threshold "
        "(4096 bytes, alerts.max_queue_depth) breached."
    )


def test_an_alert_is_logged_on_crossing_then_at_most_once_per_repeat_gap() -> None:
    repeats = AlertRepeats(repeat_gap_ms=30_000)
    over = [Alert(COUNT, 101, 100)]

    assert repeats.checked("q", over, now_ms=0) == over  # crossed
    assert repeats.checked("q", over, now_ms=10_000) == []  # still over, within the gap
    assert repeats.checked("q", over, now_ms=30_000) == over  # the gap has passed
    assert repeats.checked("q", over, now_ms=40_000) == []
    assert repeats.checked("q", [], now_ms=41_000) == []  # back under
    assert repeats.checked("q", over, now_ms=42_000) == over  # crossed again
    assert repeats.checked("other", over, now_ms=42_000) == over  # each queue on its own


def test_each_kind_of_alert_repeats_on_its_own() -> None:
    repeats = AlertRepeats(repeat_gap_ms=30_000)
    count, depth = Alert(COUNT, 101, 100), Alert(DEPTH, 5000, 4096)

    assert repeats.checked("q", [count], now_ms=0) == [count]
    assert repeats.checked("q", [count, depth], now_ms=1_000) == [depth]


def test_message_events_are_logged_at_most_once_per_repeat_gap() -> None:
    repeats = AlertRepeats(repeat_gap_ms=30_000)
    large = Alert(AlertKind.MESSAGE_SIZE_ALERT, 3000, 2048)

    assert repeats.event("q", large, now_ms=0)
    assert not repeats.event("q", large, now_ms=29_999)
    assert repeats.event("q", large, now_ms=30_000)


# --- the monitor over real queues -----------------------------------------------------------


def alert_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "batonmq.engine.alerts" and record.levelno == logging.WARNING
    ]


def test_the_monitor_logs_a_warning_per_alert(caplog: pytest.LogCaptureFixture) -> None:
    broker = Broker()
    client, _ = connect(broker)
    client.declare_queue(1, "deep")
    client.declare_queue(1, "shallow")
    for _ in range(3):
        client.publish(1, b"x" * 1000, routing_key="deep")
    client.publish(1, b"x", routing_key="shallow")
    timers = ManualTimers()
    monitor = QueueAlerts(
        broker.vhosts,
        AlertsConfig(max_queue_depth=2500, max_message_count=2, max_message_size=999),
        None,
        timers,
    )
    caplog.set_level(logging.WARNING, logger="batonmq.engine.alerts")

    monitor.check()
    timers.advance(1_000)
    monitor.check()  # still over: not repeated

    assert alert_lines(caplog) == [
        "QUEUE_DEPTH_ALERT On Queue deep - 3000 bytes: Maximum queue depth threshold "
        "(2500 bytes, alerts.max_queue_depth) breached.",
        "MESSAGE_SIZE_ALERT On Queue deep - 1000 bytes: Maximum message size threshold "
        "(999 bytes, alerts.max_message_size) breached.",
        "MESSAGE_COUNT_ALERT On Queue deep - 3: Maximum count on queue threshold "
        "(2, alerts.max_message_count) breached.",
    ]
    [depth] = [r for r in caplog.records if r.__dict__.get("alert") == "QUEUE_DEPTH_ALERT"]
    assert depth.__dict__["vhost"] == "/"
    assert depth.__dict__["queue"] == "deep"


def test_the_age_alert_reads_the_oldest_message(caplog: pytest.LogCaptureFixture) -> None:
    """maximumMessageAge: "600000 <!-- 10 mins -->", in milliseconds."""
    broker = Broker()
    client, _ = connect(broker)
    client.declare_queue(1, "q")
    timers = ManualTimers()
    ages = QueueAges(timers)
    queues = broker.vhosts["/"].queues
    client.publish(1, b"x", routing_key="q")
    ages.checkpoint(queues.values())
    monitor = QueueAlerts(broker.vhosts, AlertsConfig(max_message_age=600000), ages, timers)
    caplog.set_level(logging.WARNING, logger="batonmq.engine.alerts")

    timers.advance(600000)
    monitor.check()
    assert alert_lines(caplog) == []
    timers.advance(1)
    monitor.check()

    assert alert_lines(caplog) == [
        "MESSAGE_AGE_ALERT On Queue q - 600001 ms: Maximum age on queue threshold "
        "(600000 ms, alerts.max_message_age) breached."
    ]


def test_a_large_message_alerts_on_arrival(caplog: pytest.LogCaptureFixture) -> None:
    broker = Broker()
    client, _ = connect(broker)
    client.declare_queue(1, "q")
    queue = broker.vhosts["/"].queues["q"]
    monitor = QueueAlerts(broker.vhosts, AlertsConfig(max_message_size=10), None, ManualTimers())
    caplog.set_level(logging.WARNING, logger="batonmq.engine.alerts")

    monitor.message_arrived("/", queue, 10)
    monitor.message_arrived("/", queue, 11)
    monitor.message_arrived("/", queue, 12)  # within the repeat gap

    assert alert_lines(caplog) == [
        "MESSAGE_SIZE_ALERT On Queue q - 11 bytes: Maximum message size threshold "
        "(10 bytes, alerts.max_message_size) breached."
    ]
