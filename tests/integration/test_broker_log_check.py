"""The harness's broker-log check, end to end: a pytest run of its own whose tests start a real
broker and make it log an error record, with and without declaring it.

Hardening, "The test harness": "The helper that starts a real broker for integration tests
fails the test when the broker's log holds a traceback or an unexpected ERROR line, so a crash
that the client never sees cannot pass."
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPOSITORY = Path(__file__).resolve().parents[2]

# An error record as the broker writes it: a refused ACL reload (SIGHUP with a broken file).
TESTS = """
import signal

import pytest

from tests.brokerproc import start_broker, wait_until

ACL = "ACL ALLOW bob ACCESS VIRTUALHOST\\n"


def broken_reload(tmp_path):
    acl = tmp_path / "broker.acl"
    acl.write_text(ACL)
    broker = start_broker(tmp_path, environment={"BATONMQ__ACL__FILE": str(acl)})
    acl.write_text(ACL + "ACL ALLOW bob CREATE QUEUE name=\\n")
    broker.signal(signal.SIGHUP)
    wait_until(lambda: "ACL reload failed" in broker.log(), "the refused reload")


def test_undeclared(tmp_path):
    broken_reload(tmp_path)


@pytest.mark.expected_log_errors(r"ACL reload failed", reason="a broken file on purpose")
def test_declared(tmp_path):
    broken_reload(tmp_path)


@pytest.mark.expected_log_errors(r"ACL reload failed")
def test_declared_without_reason(tmp_path):
    broken_reload(tmp_path)
"""


def test_an_undeclared_error_record_fails_the_test_and_a_declared_one_does_not(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    """A test whose broker logged an error record it did not declare fails at teardown, with
    the line in the report; declared with a reason, the same record passes; a declaration
    without a reason fails."""
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    pytester.makepyfile(test_provoked=TESTS)
    result = pytester.runpytest_subprocess("-p", "tests.conftest", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_undeclared*",
            "*the broker log holds tracebacks or error records this test did not expect*",
            '* error batonmq.server.app msg="ACL reload failed*',
            "*ERROR at teardown of test_declared_without_reason*",
            "*expected_log_errors needs reason=*",
        ]
    )
