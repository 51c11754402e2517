"""`batonctl` administering an HA cluster over a member's management HTTP API: two real broker
processes sharing one PostgreSQL store, batonctl's `main` in this process, and the installed
command on a terminal where the confirmation matters.

MQ 4.1 HA guide, Table 7 (imqcmd's subcommands for HA): `list bkr`, `query bkr`, `takeover bkr
-n brokerID [-f]` ("If the specified broker appears to be running, a confirmation message (Do
you want to take over for this broker?) will be displayed. The -f option suppresses this message
and initiates the takeover unconditionally."), `quiesce bkr`, `unquiesce bkr`, `shutdown bkr
[-nofailover]`.
"""

from __future__ import annotations

import datetime
import os
import pty
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.brokerproc import RunningBroker
from tests.integration.test_batonctl_live import batonctl, fails, installed, succeeds, url
from tests.members import start_member

pytestmark = pytest.mark.integration

StartMember = Callable[[str], RunningBroker]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No BATONMQ or BATONCTL variable of the caller's steers the commands."""
    for name in list(os.environ):
        if name.startswith(("BATONMQ", "BATONCTL")):
            monkeypatch.delenv(name)


@pytest.fixture
def members(tmp_path: Path, postgres_dsn: str) -> Iterator[dict[str, RunningBroker]]:
    """Members A and B, each with its management API; stopped before the database goes."""
    started = {name: start_member(tmp_path, postgres_dsn, name, http=True) for name in "AB"}
    try:
        yield started
    finally:
        for broker in started.values():
            broker.stop()


def test_list_and_query_bkr_show_example_1s_columns(
    members: dict[str, RunningBroker], capsys: pytest.CaptureFixture[str]
) -> None:
    """`list bkr`: a table with the broker id, address, state, messages in the store and who
    took a member over (Example 1); `query bkr` the broker asked, or -n ID."""
    out = succeeds(capsys, members["A"], "list", "bkr")
    header, *rows = out.splitlines()
    assert header.split()[:5] == ["BROKER_ID", "ADDRESS", "STATE", "MSGS_IN_STORE", "TAKEN_OVER_BY"]
    assert [row.split()[:3] for row in rows] == [
        ["A", f"127.0.0.1:{members['A'].port}", "OPERATING"],
        ["B", f"127.0.0.1:{members['B'].port}", "OPERATING"],
    ]
    own = succeeds(capsys, members["A"], "query", "bkr")
    assert "Broker ID" in own and "This broker" in own
    assert own.splitlines()[0].split()[-1] == "A"
    other = succeeds(capsys, members["A"], "query", "bkr", "-n", "B")
    assert other.splitlines()[0].split()[-1] == "B"
    missing = fails(capsys, members["A"], "query", "bkr", "-n", "Z")
    assert missing == "batonctl: cannot query the broker: there is no broker 'Z' in the cluster"


@pytest.mark.parametrize(("answer", "taken"), [("n\n", False), ("y\n", True)])
@pytest.mark.expected_log_errors(
    r"no longer owns its store",
    r"store write failed",
    reason="B, still running, is taken over once the question is answered yes: it is fenced",
)
def test_takeover_of_a_running_member_asks_the_guides_question(
    members: dict[str, RunningBroker], answer: str, taken: bool
) -> None:
    """B still runs (its lease is live): the guide's confirmation, and yes forces the takeover."""
    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer.encode())
        done = installed("--url", url(members["A"]), "takeover", "bkr", "-n", "B", stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)

    assert done.stderr.startswith("The broker associated with B last accessed the database ")
    assert "seconds ago. Do you want to take over for this broker? [y/N] " in done.stderr
    assert done.returncode == (0 if taken else 1), done.stderr
    if taken:
        assert done.stdout.startswith("took broker 'B' over: 0 messages")
    else:
        assert done.stderr.endswith("not confirmed\n")


@pytest.mark.expected_log_errors(
    r"no longer owns its store",
    r"store write failed",
    reason="B, still running, is taken over by force: it is fenced",
)
def test_takeover_f_asks_nothing_and_an_unknown_broker_is_named(
    members: dict[str, RunningBroker], capsys: pytest.CaptureFixture[str]
) -> None:
    """-f "suppresses this message and initiates the takeover unconditionally"; without a
    terminal, a question is refused rather than answered for the operator."""
    a = members["A"]
    line = fails(capsys, a, "takeover", "bkr", "-n", "B")
    assert line.endswith("no terminal to ask for confirmation on: give -y to do it unasked")
    assert fails(capsys, a, "takeover", "bkr", "-n", "Z") == (
        "batonctl: cannot take broker 'Z' over: there is no broker 'Z' in the cluster"
    )
    out = succeeds(capsys, a, "takeover", "bkr", "-n", "B", "-f")
    assert out.startswith("took broker 'B' over: ")
    listed = succeeds(capsys, a, "list", "bkr").splitlines()
    assert listed[2].split()[:1] == ["B"] and "A" in listed[2].split()[3:]


def test_quiesce_unquiesce_and_shutdown_nofailover(
    members: dict[str, RunningBroker], capsys: pytest.CaptureFixture[str]
) -> None:
    """quiesce bkr refuses new clients, unquiesce bkr accepts them again; shutdown bkr
    --nofailover -y stops the broker, and its record says no failover."""
    a, b = members["A"], members["B"]
    assert succeeds(capsys, a, "quiesce", "bkr") == "quiesced broker 'A' (QUIESCE_COMPLETE)\n"
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.URLParameters(a.url + "?connection_attempts=1"))
    assert succeeds(capsys, a, "unquiesce", "bkr") == "unquiesced broker 'A' (OPERATING)\n"
    pika.BlockingConnection(pika.URLParameters(a.url)).close()

    out = succeeds(capsys, b, "shutdown", "bkr", "--nofailover", "-y")
    assert out == "broker 'B' is shutting down; no other broker will take it over\n"
    assert b.wait(15) == 0
    status, listed, _err = batonctl(capsys, a, "list", "bkr")
    row = listed.splitlines()[2].split()
    assert (status, row[0], row[2], row[-1]) == (0, "B", "BROKER_DOWN", "yes")


def test_shutdown_time_waits_the_seconds_given_and_says_when(
    members: dict[str, RunningBroker], capsys: pytest.CaptureFixture[str]
) -> None:
    """Table 7: "[-time nSeconds] ... The new -time option specifies the interval, in seconds, to
    wait before shutting down the broker." `shutdown bkr --time 3 --nofailover -y` says when the
    broker stops; until then it serves new clients and its record says nothing of no failover
    (failing meanwhile, it would be taken over); then it stops, with no failover."""
    b = members["B"]
    asked = time.monotonic()
    out = succeeds(capsys, b, "shutdown", "bkr", "--time", "3", "--nofailover", "-y")

    prefix = "broker 'B' will shut down in 3 s, at "
    assert out.startswith(prefix), out
    at, _, rest = out.removeprefix(prefix).partition(";")
    assert rest == " no other broker will take it over\n"
    when = datetime.datetime.fromisoformat(at)
    assert abs((when - datetime.datetime.now(datetime.UTC)).total_seconds() - 3) < 2
    pika.BlockingConnection(pika.URLParameters(b.url)).close()
    row = succeeds(capsys, members["A"], "list", "bkr").splitlines()[2].split()
    assert (row[0], row[2], row[-1]) == ("B", "OPERATING", "no")
    assert "shutdown in 3 s" in b.log()

    assert b.wait(15) == 0

    assert time.monotonic() - asked >= 3
    row = succeeds(capsys, members["A"], "list", "bkr").splitlines()[2].split()
    assert (row[0], row[2], row[-1]) == ("B", "BROKER_DOWN", "yes")
    refused = fails(capsys, members["A"], "shutdown", "bkr", "--time", "soon", "-y", status=2)
    assert "not a whole number of seconds: 'soon'" in refused
