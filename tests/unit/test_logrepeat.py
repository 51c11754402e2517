"""Repeated log lines coalesced (batonmq.logrepeat), with a fake clock. Hardening: "One failed
commit per message floods the log (39,000 identical lines in one outage): coalesce repeats
("store commit failed: ... (xN in the last 10 s)")." The rules are numbered in the module's
docstring."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from batonmq.log import TextFormatter
from batonmq.logrepeat import CoalescingLog, Due, RepeatCounter


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_the_first_occurrence_is_due_at_once_and_repeats_in_the_window_are_counted(clock):
    """Rules 1 and 2: the first line at once; repeats within the window only counted."""
    counter: RepeatCounter[str] = RepeatCounter(10.0, clock)
    assert counter.occurred("k", "line 1") == [Due("line 1")]
    for second in range(1, 10):
        clock.now += 1
        assert counter.occurred("k", f"line {second + 1}") == []
    assert counter.occurred("other", "other") == [Due("other")], "each key on its own"


def test_a_flood_writes_one_line_per_window_that_counts_the_lines_it_stands_for(clock):
    """Rule 3: "(xN in the last 10 s)": one line per window, N occurrences since the last."""
    counter: RepeatCounter[str] = RepeatCounter(10.0, clock)
    written: list[Due[str]] = []
    for _ in range(1920):  # 64 occurrences a second for 30 s
        written += counter.occurred("commit", "failed")
        clock.now += 1 / 64
    assert [due.occurrences for due in written] == [1, 640, 640]
    assert [due.seconds for due in written] == [0.0, 10.0, 10.0]
    [rest] = counter.flush()
    assert rest.occurrences == 639, "1920 in all"


def test_flush_reports_what_was_counted_and_forgets_every_key(clock):
    """Rule 4: "a final flush when the condition ends or at shutdown": no count is lost."""
    counter: RepeatCounter[str] = RepeatCounter(10.0, clock)
    counter.occurred("a", "a1")
    counter.occurred("b", "b1")
    clock.now += 2
    counter.occurred("a", "a2")
    counter.occurred("a", "a3")
    assert counter.flush() == [Due("a3", 2, 2.0)], "b had no repeat to report"
    assert counter.tracked_keys == 0
    assert counter.occurred("a", "a4") == [Due("a4")], "after a flush, a first line again"


def test_a_key_quiet_for_a_window_starts_afresh(clock):
    """Rule 3: "A key whose window passed with nothing counted is forgotten"."""
    counter: RepeatCounter[str] = RepeatCounter(10.0, clock)
    counter.occurred("a", "a1")
    clock.now += 11
    assert counter.occurred("a", "a2") == [Due("a2")]
    counter.occurred("b", "b1")
    clock.now += 11
    counter.occurred("c", "c1")
    assert counter.tracked_keys == 1, "a and b were quiet for a window: forgotten"


def test_memory_is_bounded_and_a_dropped_key_reports_its_count(clock):
    """Rule 5: at most max_keys keys; the oldest is flushed to make room."""
    counter: RepeatCounter[str] = RepeatCounter(10.0, clock, max_keys=2)
    counter.occurred("a", "a1")
    counter.occurred("a", "a2")
    counter.occurred("b", "b1")
    assert counter.occurred("c", "c1") == [Due("a2", 1, 0.0), Due("c1")]
    assert counter.tracked_keys == 2


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("batonmq.tests.logrepeat")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_coalescing_log_writes_the_repeat_line_with_its_count(clock, captured):
    """Hardening: coalesce repeats as "store commit failed: ... (xN in the last 10 s)"."""
    logger, stream = captured
    store_log = CoalescingLog(logger, 10.0, clock)
    fields = {"store": "/data/batonmq.sqlite3"}
    for _ in range(39_000):  # 2048 a second, for 19 s
        store_log.log(logging.ERROR, "store write failed: disk I/O error", fields)
        clock.now += 1 / 2048
    store_log.flush()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert 'msg="store write failed: disk I/O error"' in lines[0]
    assert 'msg="store write failed: disk I/O error (x20480 in the last 10 s)"' in lines[1]
    assert "repeats=20480" in lines[1] and "store=/data/batonmq.sqlite3" in lines[1]
    assert "(x18519 in the last 9 s)" in lines[2]


def test_a_traceback_goes_with_the_first_line_only(clock, captured):
    """Rule 1: the first occurrence is logged as it is, traceback included; repeats count."""
    logger, stream = captured
    store_log = CoalescingLog(logger, 10.0, clock)
    for _ in range(2):
        try:
            raise KeyError("defect")
        except KeyError as error:
            store_log.log(logging.ERROR, "store write failed: KeyError", {}, exc_info=error)
    store_log.flush()
    first, flushed = stream.getvalue().splitlines()
    assert "exc=" in first and "Traceback" in first
    assert "exc=" not in flushed


def test_a_named_key_coalesces_lines_that_differ_in_a_field(clock, captured):
    """Rule: "per-connection lines under attack" coalesce on what they share (the caller's key),
    the repeat line showing the latest occurrence's fields."""
    logger, stream = captured
    close_log = CoalescingLog(logger, 10.0, clock)
    for port in (1001, 1002, 1003):
        close_log.log(logging.WARNING, "closed", {"peer": f"192.0.2.9:{port}"}, key="192.0.2.9")
    close_log.flush()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert "peer=192.0.2.9:1001" in lines[0]
    assert "(x2 in the last 1 s)" in lines[1] and "peer=192.0.2.9:1003" in lines[1]
