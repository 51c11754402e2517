"""The harness's broker-log check (tests.brokerproc.log_problems), on lines written by the
broker's own formatters (batonmq.log), so that a change of the log format cannot blind it.

Hardening, "The test harness": "The helper that starts a real broker for integration tests
fails the test when the broker's log holds a traceback or an unexpected ERROR line, so a crash
that the client never sees cannot pass."
"""

from __future__ import annotations

import io
import logging

import pytest

from batonmq.log import configure_logging
from tests.brokerproc import log_problems

RAW_TRACEBACK = """\
Traceback (most recent call last):
  File "/usr/lib/python3.11/asyncio/events.py", line 80, in _run
    self._context.run(self._callback, *self._args)
KeyError: 'queue'
"""


pytestmark = pytest.mark.usefixtures("restore_logging")


def broker_log(fmt: str, *records: tuple[int, str, bool]) -> str:
    """The log the broker writes in format `fmt` for `records` (level, message, with a
    traceback?)."""
    stream = io.StringIO()
    configure_logging("debug", fmt, stream)
    log = logging.getLogger("batonmq.server.protocol")
    for level, message, with_traceback in records:
        if with_traceback:
            try:
                raise KeyError("queue")
            except KeyError:
                log.log(level, message, exc_info=True, extra={"peer": "127.0.0.1:5"})
        else:
            log.log(level, message, extra={"peer": "127.0.0.1:5"})
    return stream.getvalue()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_clean_log_has_no_problems(fmt: str):
    """Debug, info and warning records without a traceback are no problem."""
    log = broker_log(
        fmt,
        (logging.DEBUG, "connection accepted", False),
        (logging.INFO, "connection lost", False),
        (logging.WARNING, "closing connection: missed heartbeats", False),
    )
    assert log_problems(log) == []


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("level", [logging.ERROR, logging.CRITICAL])
def test_an_error_record_is_a_problem(fmt: str, level: int):
    """ "fails the test when the broker's log holds ... an unexpected ERROR line": error and
    critical records, in both log formats."""
    log = broker_log(fmt, (logging.INFO, "listening", False), (level, "store commit failed", False))
    problems = log_problems(log)
    assert len(problems) == 1
    assert "store commit failed" in problems[0]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_logged_traceback_is_a_problem_at_any_level(fmt: str):
    """ "fails the test when the broker's log holds a traceback": also on a warning record."""
    log = broker_log(
        fmt,
        (logging.INFO, "listening", False),
        (logging.WARNING, "consumer cleanup failed", True),
    )
    problems = log_problems(log)
    assert len(problems) == 1
    assert "consumer cleanup failed" in problems[0]
    assert "KeyError" in problems[0]


def test_a_traceback_python_printed_itself_is_one_problem_with_its_lines():
    """A traceback written to stderr outside logging (an uncaught exception) spans several
    lines; the problem shows them all, up to the next log record."""
    log = (
        broker_log("text", (logging.INFO, "listening", False))
        + RAW_TRACEBACK
        + broker_log("text", (logging.INFO, "shutdown complete", False))
    )
    assert log_problems(log) == [RAW_TRACEBACK.rstrip("\n")]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_expected_error_is_no_problem_and_an_unexpected_one_still_is(fmt: str):
    """A test declares the errors it provokes on purpose (hardening: "unless the test declares
    the lines it expects"); only the lines a declared regular expression matches pass."""
    log = broker_log(
        fmt,
        (logging.ERROR, "store commit failed: disk I/O error", False),
        (logging.ERROR, "internal error; aborting connection", True),
    )
    problems = log_problems(log, [r"store commit failed: disk I/O error"])
    assert len(problems) == 1
    assert "internal error; aborting connection" in problems[0]
    assert log_problems(log, [r"store commit failed", r"internal error"]) == []


def test_an_expected_pattern_covers_a_raw_traceback_by_any_of_its_lines():
    """The declared regular expression is searched in the whole entry, so a test can name the
    exception of a traceback Python printed itself."""
    assert log_problems(RAW_TRACEBACK, [r"KeyError: 'queue'"]) == []
    assert log_problems(RAW_TRACEBACK, [r"ValueError"]) == [RAW_TRACEBACK.rstrip("\n")]
