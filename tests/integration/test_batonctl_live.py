"""`batonctl` against a running broker over its management HTTP API: a real broker with the API
on, real pika clients whose connections, channels, consumers and messages the commands show and
act on, and batonctl's own entry point (`main`, in this process, or the installed `batonctl`
command where a terminal, stdin or a process of its own matters).

The management issue, "batonctl, live": "`batonctl` talks to a running broker over the HTTP API
(`--url`, default `http://localhost:15672`; `--user` / `--password`, default guest / guest, or
`BATONCTL_USER` / `BATONCTL_PASSWORD`, or a file with 0600 permissions): `status`, `list
queues|exchanges|bindings|connections|channels|consumers|users|vhosts` as aligned tables with
headers (and `--json`), `query queue NAME`, `purge queue NAME` (asks for confirmation unless
`-y`), `delete queue`, `pause queue`, `resume queue`, `close connection ID --reason`, `user
add|delete|passwd|tags`, `vhost add|delete`, `log level LEVEL`, `metrics [--interval N]`
printing rates at an interval like `imqcmd metrics`, `definitions export|import FILE`."
"""

from __future__ import annotations

import http.server
import json
import os
import pty
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from batonmq.cli.ctl import main
from tests.brokerproc import RunningBroker, connect, free_port, start_broker, wait_until
from tests.httpapi import call
from tests.tlsca import TestCA

pytestmark = pytest.mark.integration

BATONCTL = Path(sys.executable).with_name("batonctl")
PASSWORD = "s3cret-live"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No BATONMQ or BATONCTL variable of the caller's steers the commands."""
    for name in list(os.environ):
        if name.startswith(("BATONMQ", "BATONCTL")):
            monkeypatch.delenv(name)


@pytest.fixture
def broker(tmp_path: Path, workers_environment: dict[str, str]) -> Iterator[RunningBroker]:
    """A broker of one process, and one of two workers: the API answers for the whole broker."""
    with start_broker(tmp_path, http=True, environment=workers_environment) as running:
        yield running


def url(broker: RunningBroker) -> str:
    return f"http://127.0.0.1:{broker.http_port}"


def batonctl(
    capsys: pytest.CaptureFixture[str], broker: RunningBroker | None, *argv: str
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `batonctl --url URL ARGV` run by its main()."""
    capsys.readouterr()
    status = main([*(["--url", url(broker)] if broker is not None else []), *argv])
    out, err = capsys.readouterr()
    return status, out, err


def succeeds(capsys: pytest.CaptureFixture[str], broker: RunningBroker, *argv: str) -> str:
    status, out, err = batonctl(capsys, broker, *argv)
    assert (status, err) == (0, ""), err
    return out


def fails(
    capsys: pytest.CaptureFixture[str], broker: RunningBroker | None, *argv: str, status: int = 1
) -> str:
    """The one line a failed command printed (nothing on stdout, no traceback)."""
    done, out, err = batonctl(capsys, broker, *argv)
    assert (done, out) == (status, ""), err
    [line] = err.splitlines()
    assert line.startswith("batonctl: ")
    return line


def installed(
    *argv: str, stdin: int | str = "", environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed `batonctl` command, in a process of its own, without BATONMQ or BATONCTL
    variables but `environment`'s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BATONMQ", "BATONCTL"))}
    return subprocess.run(
        [str(BATONCTL), *argv],
        stdin=stdin if isinstance(stdin, int) else None,
        input=stdin if isinstance(stdin, str) else None,
        capture_output=True, text=True, env={**env, **(environment or {})}, timeout=60,
        check=False,
    )  # fmt: skip


def publish(broker: RunningBroker, queue: str, count: int) -> None:
    with connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for number in range(count):
            channel.basic_publish("", queue, f"m{number}".encode())


def queue_info(broker: RunningBroker, name: str, vhost: str = "%2F") -> dict[str, object]:
    status, body = call(broker, "GET", f"/api/queues/{vhost}/{name}")
    assert status == 200 and isinstance(body, dict), body
    return body


def header_and_rows(output: str) -> tuple[list[str], list[str]]:
    header, *rows = output.splitlines()
    return header.split(), rows


def cells(output: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is `first` (cells hold no two spaces)."""
    _, rows = header_and_rows(output)
    [row] = [re.split(r"\s{2,}", row.strip()) for row in rows if row.split()[0] == first]
    return row


# --- status and the lists ----------------------------------------------------------------------


def test_status_and_every_list_show_what_clients_opened(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """imqcmd `query bkr` and `list dst`: the broker's totals, and each kind of object as a
    table with a header, one row per object, numbers aligned right."""
    publish(broker, "work", 3)
    with connect(broker) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)
        channel.basic_consume("work", lambda *_: None, consumer_tag="worker-1")
        connection.process_data_events(time_limit=0.5)

        status = succeeds(capsys, broker, "status")
        lists = {
            kind: succeeds(capsys, broker, "list", kind)
            for kind in (
                "queues", "exchanges", "bindings", "connections", "channels", "consumers",
                "users", "vhosts",
            )
        }  # fmt: skip

    labels = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in status.splitlines())
    assert labels["Product"].startswith("BatonMQ ")
    assert (labels["Connections"], labels["Channels"], labels["Queues"]) == ("1", "1", "1")
    assert labels["Consumers"] == "1"
    assert labels["Messages"] == "3 (ready 2, unacknowledged 1)"
    assert f"amqp 127.0.0.1:{broker.port}" in labels["Listeners"]
    # RabbitMQ's overview lists its management listener as protocol "http".
    assert f"http 127.0.0.1:{broker.http_port}" in labels["Listeners"]
    assert labels["Alarms"] == "none"

    header, rows = header_and_rows(lists["queues"])
    assert header == [
        "VHOST", "NAME", "TYPE", "DURABLE", "PAUSED", "MESSAGES", "READY", "UNACKED", "CONSUMERS",
    ]  # fmt: skip
    assert cells(lists["queues"], "/") == ["/", "work", "classic", "yes", "no", "3", "2", "1", "1"]
    title = lists["queues"].splitlines()[0]
    # Numbers right-aligned under their header: the row ends where the header ends.
    assert len(rows[0]) == len(title)

    assert header_and_rows(lists["exchanges"])[0] == [
        "VHOST", "NAME", "TYPE", "DURABLE", "AUTO_DELETE", "INTERNAL",
    ]  # fmt: skip
    exchanges = [row.split() for row in header_and_rows(lists["exchanges"])[1]]
    assert ["/", "direct", "yes", "no", "no"] in exchanges  # the default exchange: no name
    assert ["/", "amq.topic", "topic", "yes", "no", "no"] in exchanges
    assert cells(lists["bindings"], "/") == ["/", "work", "queue", "work", "{}"]

    [connection_row] = header_and_rows(lists["connections"])[1]
    assert "-> 127.0.0.1:" in connection_row
    assert connection_row.split()[3:6] == ["guest", "/", "1"]
    [channel_row] = header_and_rows(lists["channels"])[1]
    assert channel_row.split()[-5:] == ["guest", "/", "1", "1", "1"]
    assert header_and_rows(lists["consumers"])[0] == [
        "VHOST", "QUEUE", "TAG", "CHANNEL", "ACK", "PREFETCH",
    ]  # fmt: skip
    consumer = cells(lists["consumers"], "/")
    assert consumer[:3] == ["/", "work", "worker-1"]
    assert consumer[-2:] == ["yes", "1"]
    assert cells(lists["users"], "guest") == ["guest", "administrator"]
    assert lists["vhosts"].splitlines() == [
        "NAME  MESSAGES  READY  UNACKED",
        "/            3      2        1",
    ]


@pytest.mark.parametrize(
    ("resource", "environment"),
    [
        # A free-disk limit no disk meets.
        ("disk", {"BATONMQ__DISK__FREE_LIMIT": str(2**62), "BATONMQ__DISK__CHECK_INTERVAL": "0.1"}),
        # A memory budget of one byte: the broker is in the red state from the start.
        ("memory", {"BATONMQ__MEMORY__BUDGET": "1"}),
    ],
)
def test_status_names_the_alarms_in_force_and_fails_as_check_alarms_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], resource: str, environment: dict[str, str]
) -> None:
    """MQ 3.5 admin guide, memory and disk protection: an operator sees at once why producers
    are blocked. RabbitMQ's `rabbitmq-diagnostics check_alarms` "exits with a non-zero code if
    the target node reports any alarms": 69 (EX_UNAVAILABLE, its exit code for a failed check);
    so does `batonctl status`, with and without --json, naming the alarm on stderr too."""
    with start_broker(tmp_path, environment=environment, http=True) as broker:
        wait_until(lambda: call(broker, "GET", "/api/health/checks/alarms")[0] == 503, "the alarm")
        done, status, err = batonctl(capsys, broker, "status")
        done_json, as_json, err_json = batonctl(capsys, broker, "status", "--json")

    assert (done, done_json) == (69, 69)
    [alarms] = [line for line in status.splitlines() if line.startswith("Alarms")]
    assert alarms.split(None, 1)[1].startswith(f"{resource}: ")
    assert err.startswith(f"batonctl: resource alarms in effect: {resource}: ")
    assert err_json == err
    [raised] = json.loads(as_json)["alarms"]["alarms"]
    assert raised["resource"] == resource


def test_json_is_the_apis_own(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints what the API answers, for scripts that read RabbitMQ's field names."""
    publish(broker, "work", 2)

    listed = json.loads(succeeds(capsys, broker, "list", "queues", "--json"))
    queried = json.loads(succeeds(capsys, broker, "query", "queue", "work", "--json"))
    status = json.loads(succeeds(capsys, broker, "status", "--json"))

    assert listed == call(broker, "GET", "/api/queues")[1]
    assert queried == queue_info(broker, "work")
    assert status["overview"]["queue_totals"]["messages_ready"] == 2
    assert status["alarms"] == {"status": "ok"}


def test_vhost_narrows_a_list(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    succeeds(capsys, broker, "vhost", "add", "prod")
    assert call(broker, "PUT", "/api/queues/prod/orders", {"durable": True})[0] == 201
    publish(broker, "work", 1)

    only_prod = succeeds(capsys, broker, "list", "queues", "--vhost", "prod")
    with connect(broker, vhost="prod"), connect(broker):
        connections = succeeds(capsys, broker, "list", "connections", "--vhost", "prod")

    assert [row.split()[:2] for row in header_and_rows(only_prod)[1]] == [["prod", "orders"]]
    assert len(header_and_rows(connections)[1]) == 1
    assert " prod " in connections.splitlines()[1]
    assert fails(capsys, broker, "list", "queues", "--vhost", "nowhere") == (
        "batonctl: cannot list queues: there is no virtual host 'nowhere'"
    )
    says = fails(capsys, broker, "list", "users", "--vhost", "prod", status=2)
    assert (
        says
        == "batonctl: cannot list users: users are not in a virtual host: --vhost does not apply"
    )


def test_query_queue(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """imqcmd `query dst`: one attribute a line."""
    publish(broker, "work", 4)

    shown = succeeds(capsys, broker, "query", "queue", "work")

    lines = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in shown.splitlines())
    assert lines["Name"] == "work"
    assert lines["Virtual host"] == "/"
    assert (lines["Durable"], lines["Delivery paused"]) == ("yes", "no")
    assert (lines["Messages"], lines["Ready"], lines["Unacknowledged"]) == ("4", "4", "0")
    assert fails(capsys, broker, "query", "queue", "missing") == (
        "batonctl: cannot query queue 'missing' in virtual host '/': not found"
    )
    assert fails(capsys, broker, "query", "queue", "work", "--vhost", "nowhere") == (
        "batonctl: cannot query queue 'work' in virtual host 'nowhere': not found"
    )


# --- purge, delete, pause, resume, close ---------------------------------------------------------


def test_purge_asks_first_and_is_refused_without_a_terminal(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """imqcmd asks "Are you sure you want to purge ...?" before it purges; -y (its -f) does it
    unasked. A script without -y and without a terminal is refused: nothing is purged."""
    publish(broker, "work", 5)

    refused = fails(capsys, broker, "purge", "queue", "work")
    assert refused == (
        "batonctl: cannot purge queue 'work' in virtual host '/': no terminal to ask for "
        "confirmation on: give -y to do it unasked"
    )
    assert queue_info(broker, "work")["messages_ready"] == 5
    done = installed("--url", url(broker), "purge", "queue", "work")  # stdin: a pipe
    assert done.returncode == 1 and "give -y" in done.stderr
    assert queue_info(broker, "work")["messages_ready"] == 5

    assert succeeds(capsys, broker, "purge", "queue", "work", "-y") == (
        "purged queue 'work' in virtual host '/'\n"
    )
    assert queue_info(broker, "work")["messages_ready"] == 0


@pytest.mark.parametrize(("answer", "purged"), [("n\n", False), ("\n", False), ("y\n", True)])
def test_purge_on_a_terminal_does_what_the_answer_says(
    answer: str, purged: bool, broker: RunningBroker
) -> None:
    """The question names the queue and how many messages go; anything but yes keeps them."""
    publish(broker, "work", 3)
    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer.encode())
        done = installed("--url", url(broker), "purge", "queue", "work", stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)

    assert done.stderr.startswith(
        "Purge the 3 ready messages of queue 'work' in virtual host '/'? [y/N] "
    )
    assert queue_info(broker, "work")["messages_ready"] == (0 if purged else 3)
    assert done.returncode == (0 if purged else 1)
    if not purged:
        assert done.stderr.endswith("not confirmed\n")


def test_delete_queue(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """imqcmd `destroy dst`, asking first as purge does; RabbitMQ's if-empty is kept."""
    publish(broker, "work", 1)

    assert "no terminal" in fails(capsys, broker, "delete", "queue", "work")
    refused = fails(capsys, broker, "delete", "queue", "work", "-y", "--if-empty")
    assert refused.startswith("batonctl: cannot delete queue 'work' in virtual host '/': ")
    assert "(400 bad_request)" in refused
    assert succeeds(capsys, broker, "delete", "queue", "work", "-y") == (
        "deleted queue 'work' in virtual host '/'\n"
    )
    assert call(broker, "GET", "/api/queues/%2F/work")[0] == 404


def test_pause_stops_delivery_and_resume_starts_it_again(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """MQ 3.5 admin guide, imqcmd `pause dst` / `resume dst`: a paused queue still takes
    messages but delivers none to its consumers until it is resumed."""
    publish(broker, "work", 0)
    received: list[bytes] = []
    with connect(broker) as connection:
        channel = connection.channel()
        channel.basic_consume("work", lambda _c, _m, _p, body: received.append(body), True)

        assert succeeds(capsys, broker, "pause", "queue", "work") == (
            "paused delivery from queue 'work' in virtual host '/'\n"
        )
        publish(broker, "work", 2)
        connection.process_data_events(time_limit=0.5)
        assert received == []
        assert "Delivery paused  yes" in succeeds(capsys, broker, "query", "queue", "work")

        succeeds(capsys, broker, "resume", "queue", "work")
        deadline = time.monotonic() + 10
        while len(received) < 2 and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)

    assert received == [b"m0", b"m1"]


def test_close_connection_tells_the_client_the_reason(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """RabbitMQ's DELETE /api/connections/NAME with X-Reason: the client gets connection.close
    320 CONNECTION_FORCED with the reason (imqcmd `destroy cxn`); any UTF-8 text goes."""
    connection = connect(broker)
    listed = json.loads(succeeds(capsys, broker, "list", "connections", "--json"))
    [name] = [item["name"] for item in listed]

    assert succeeds(
        capsys, broker, "close", "connection", name, "--reason", "maintenance — back at 10"
    ) == (f"closed connection '{name}'\n")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=5)
    assert closed.value.reply_code == 320
    assert "maintenance — back at 10" in closed.value.reply_text
    assert fails(capsys, broker, "close", "connection", name) == (
        f"batonctl: cannot close connection '{name}': not found"
    )


# --- users, virtual hosts, definitions, log level ---------------------------------------------


def test_users_and_vhosts_change_on_the_running_broker(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --data-dir the user and vhost commands go to the running broker, where they are
    in force at once: no restart (the management issue: "no way to add a user without stopping
    it")."""
    assert succeeds(
        capsys, broker, "user", "add", "bob", "--password", PASSWORD, "--tags", "monitoring"
    ) == ("added user 'bob'\n")
    # RabbitMQ: a new user may use no virtual host until given permissions there.
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(broker, "bob", PASSWORD)
    assert succeeds(capsys, broker, "permissions", "set", "bob", ".*", ".*", ".*") == (
        "set the permissions of user 'bob' in virtual host '/'\n"
    )
    with connect(broker, "bob", PASSWORD):
        pass
    assert fails(capsys, broker, "user", "add", "bob", "--password", "x") == (
        "batonctl: cannot add user 'bob': user 'bob' exists: use `batonctl user passwd`"
    )

    assert succeeds(capsys, broker, "user", "tags", "bob", "management", "monitoring") == (
        "set the tags of user 'bob' to [management, monitoring]\n"
    )
    assert call(broker, "GET", "/api/users/bob")[1] == {
        "name": "bob",
        "tags": ["management", "monitoring"],
        "limits": {},
    }
    done = installed(
        "--url", url(broker), "user", "passwd", "bob", "--password-stdin", stdin="n3w-pass\n"
    )
    assert (done.returncode, done.stdout) == (0, "changed the password of user 'bob'\n")
    assert call(broker, "GET", "/api/users/bob")[1]["tags"] == ["management", "monitoring"]  # type: ignore[index]
    with connect(broker, "bob", "n3w-pass"):
        pass
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(broker, "bob", PASSWORD)

    assert succeeds(capsys, broker, "user", "delete", "bob") == "deleted user 'bob'\n"
    assert fails(capsys, broker, "user", "delete", "bob") == (
        "batonctl: cannot delete user 'bob': there is no user 'bob'"
    )
    assert fails(capsys, broker, "user", "tags", "bob") == (
        "batonctl: cannot set the tags of user 'bob': there is no user 'bob'"
    )
    assert fails(capsys, broker, "user", "add", "a:b", "--password", "x") == (
        "batonctl: cannot add user 'a:b': invalid user name 'a:b'"
    )

    assert succeeds(capsys, broker, "vhost", "add", "prod") == "added virtual host 'prod'\n"
    with connect(broker, vhost="prod"):  # as its creator, guest may do everything there
        pass
    assert fails(capsys, broker, "vhost", "add", "prod") == (
        "batonctl: cannot add virtual host 'prod': virtual host 'prod' exists"
    )
    assert succeeds(capsys, broker, "vhost", "delete", "prod") == (
        "deleted virtual host 'prod' and everything in it\n"
    )
    assert fails(capsys, broker, "vhost", "delete", "prod") == (
        "batonctl: cannot delete virtual host 'prod': there is no virtual host 'prod'"
    )


def test_permissions_are_listed_set_and_cleared_on_the_running_broker(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`batonctl permissions` as `rabbitmqctl set_permissions`, `clear_permissions` and
    `list_permissions`: in force at the next access check of a connected client."""
    assert (
        succeeds(capsys, broker, "user", "add", "pat", "--password", PASSWORD)
        == "added user 'pat'\n"
    )
    succeeds(capsys, broker, "permissions", "set", "pat", "", "^pat-out$", "^pat-in$")
    listed = succeeds(capsys, broker, "permissions", "list", "--vhost", "/").splitlines()
    assert listed[0].split() == ["USER", "VHOST", "CONFIGURE", "WRITE", "READ"]
    assert ["pat", "/", "^pat-out$", "^pat-in$"] in [line.split() for line in listed]
    assert "pat" in succeeds(capsys, broker, "list", "permissions")
    with connect(broker, "pat", PASSWORD) as connection:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("pat-in")
        assert (refused.value.reply_code, refused.value.reply_text) == (
            403,
            "ACCESS_REFUSED - configure access to queue 'pat-in' in vhost '/' refused for user "
            "'pat'",
        )
    assert succeeds(capsys, broker, "permissions", "clear", "pat") == (
        "cleared the permissions of user 'pat' in virtual host '/'\n"
    )
    assert fails(capsys, broker, "permissions", "clear", "pat") == (
        "batonctl: cannot clear the permissions of user 'pat' in virtual host '/': user 'pat' "
        "has no permissions in virtual host '/'"
    )
    assert fails(capsys, broker, "permissions", "set", "pat", "(", "", "") == (
        "batonctl: cannot set the permissions of user 'pat' in virtual host '/': configure "
        "pattern '(': missing ), unterminated subpattern at position 0"
    )
    succeeds(capsys, broker, "user", "delete", "pat")


def test_a_user_without_the_administrator_tag_is_refused_changes(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """RabbitMQ: users, virtual hosts and (BatonMQ's) the log level are for administrators:
    401 "Not administrator user"; monitoring users see every list."""
    succeeds(capsys, broker, "user", "add", "mo", "--password", PASSWORD, "--tags", "monitoring")
    login = ("--user", "mo", "--password", PASSWORD)

    assert fails(capsys, broker, *login, "vhost", "add", "prod") == (
        "batonctl: cannot add virtual host 'prod': Not administrator user (401 not_authorised)"
    )
    assert "Not administrator user" in fails(capsys, broker, *login, "log", "level", "error")
    assert "NAME" in succeeds(capsys, broker, *login, "list", "connections")


def test_definitions_export_and_import(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """RabbitMQ's definitions document, written readable by its owner only (it holds
    password hashes); an import declares what the broker lacks."""
    publish(broker, "work", 1)
    exported = tmp_path / "definitions.json"

    assert succeeds(capsys, broker, "definitions", "export", str(exported)) == (
        f"exported the definitions to {exported}\n"
    )
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    document = json.loads(exported.read_text(encoding="utf-8"))
    assert [queue["name"] for queue in document["queues"]] == ["work"]
    assert json.loads(succeeds(capsys, broker, "definitions", "export", "-")) == document

    succeeds(capsys, broker, "delete", "queue", "work", "-y")
    assert succeeds(capsys, broker, "definitions", "import", str(exported)) == (
        f"imported the definitions of {exported}\n"
    )
    assert queue_info(broker, "work")["durable"] is True

    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    assert "not a JSON document" in fails(
        capsys, broker, "definitions", "import", str(tmp_path / "broken.json")
    )


def test_log_level_shows_and_changes_what_the_broker_logs(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """MQ 3.5 admin guide, Table 2-7: at a level the broker logs that level "and all higher
    categories". The test broker starts at debug; at warning its debug records stop."""
    assert succeeds(capsys, broker, "log", "level") == "debug\n"

    assert succeeds(capsys, broker, "log", "level", "warning") == (
        "the broker logs at level warning until it stops\n"
    )
    assert call(broker, "GET", "/api/broker/log-level")[1] == {"level": "warning"}
    before = len(broker.log())
    with connect(broker):
        pass
    wait_until(lambda: "log level changed" in broker.log(), "the change to be logged")
    assert " debug " not in broker.log()[before:]

    succeeds(capsys, broker, "log", "level", "debug")
    with connect(broker):
        pass
    wait_until(lambda: "connection accepted" in broker.log()[before:], "a debug record")

    assert fails(capsys, broker, "log", "level", "loud", status=2).startswith(
        "batonctl: argument LEVEL: invalid choice: 'loud'"
    )
    assert call(broker, "PUT", "/api/broker/log-level", {"level": "loud"}) == (
        400,
        {"error": "bad_request", "reason": "level must be one of debug, info, warning, error"},
    )
    assert call(broker, "PUT", "/api/broker/log-level", {})[0] == 400


# --- metrics ------------------------------------------------------------------------------------


def test_metrics_prints_the_message_rates_of_each_interval(broker: RunningBroker) -> None:
    """imqcmd `metrics bkr -int N`: a line per interval of messages in and out per second.
    40 messages published and consumed while it runs: each interval's rate times its length
    (at least the interval) adds up to at most 40, and to 40 less the rounding and the time
    the requests took."""
    interval, lines = 1.0, 3
    process = subprocess.Popen(
        [str(BATONCTL), "--url", url(broker), "metrics", "--interval", str(interval),
         "--count", str(lines)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    header = process.stdout.readline()  # printed once the first reading is taken
    with connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("work")
        for number in range(40):
            channel.basic_publish("", "work", f"m{number}".encode())
        for _ in range(40):
            method, _, _ = channel.basic_get("work", auto_ack=True)
            assert method is not None
    out, err = process.communicate(timeout=30)

    assert (process.returncode, err) == (0, "")
    titles = header.split()
    assert titles[:3] == ["TIME", "IN/S", "OUT/S"]
    rows = [dict(zip(titles, row.split(), strict=True)) for row in out.splitlines()]
    assert len(rows) == lines
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", row["TIME"]) for row in rows)
    published = sum(float(row["IN/S"]) for row in rows) * interval
    got = sum(float(row["OUT/S"]) for row in rows) * interval
    assert 30 <= published <= 40 + 0.05 * lines
    assert 30 <= got <= 40 + 0.05 * lines
    assert rows[-1]["MESSAGES"] == "0"


# --- logging in, and no broker --------------------------------------------------------------------


def test_a_wrong_password_is_one_line(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    says = fails(capsys, broker, "--password", "wrong", "status")

    assert says == (
        f"batonctl: cannot read the broker's status: the broker at {url(broker)} refused the "
        "login of user 'guest' (wrong user name or password; see --user, --password-file, "
        "BATONCTL_USER, BATONCTL_PASSWORD)"
    )


def test_the_login_from_the_environment_and_from_a_password_file(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """BATONCTL_USER / BATONCTL_PASSWORD, or a file that only its owner may read (0600): one
    that others may read is refused before anything is sent."""
    succeeds(
        capsys, broker, "user", "add", "ops", "--password", PASSWORD, "--tags", "administrator"
    )
    environment = {"BATONCTL_USER": "ops", "BATONCTL_PASSWORD": PASSWORD}
    done = installed("--url", url(broker), "log", "level", environment=environment)
    assert (done.returncode, done.stdout, done.stderr) == (0, "debug\n", "")

    secret = tmp_path / "password"
    secret.write_text(f"{PASSWORD}\n", encoding="utf-8")
    secret.chmod(0o644)
    says = fails(
        capsys, broker, "--user", "ops", "--password-file", str(secret), "status", status=2
    )
    assert f"--password-file {secret}: others may read it (mode 0644)" in says
    secret.chmod(0o600)
    assert "Broker" in succeeds(
        capsys, broker, "--user", "ops", "--password-file", str(secret), "status"
    )


def test_no_broker_answers(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens at the URL: one line naming it, status 1."""
    address = f"http://127.0.0.1:{free_port()}"

    status, out, err = batonctl(capsys, None, "--url", address, "list", "queues")

    assert (status, out) == (1, "")
    assert err == f"batonctl: cannot list queues: no broker answers at {address}\n"


def test_an_https_api_is_trusted_through_cacert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`[listeners.http] tls = true` serves the API over HTTPS with the amqps listener's
    certificate: batonctl checks it against the system's authorities, or --cacert's; one it
    cannot trust is refused on one line, before any password is sent."""
    ca = TestCA(tmp_path / "ca")
    server = ca.server()
    environment = {
        "BATONMQ__LISTENERS__AMQPS__CERTFILE": str(server.certfile),
        "BATONMQ__LISTENERS__AMQPS__KEYFILE": str(server.keyfile),
        "BATONMQ__LISTENERS__HTTP__TLS": "true",
    }
    with start_broker(tmp_path / "broker", environment=environment, http=True) as broker:
        address = f"https://localhost:{broker.http_port}"

        trusted = batonctl(capsys, None, "--url", address, "--cacert", str(ca.certfile), "status")
        untrusted = fails(capsys, None, "--url", address, "status")

    assert trusted[0] == 0 and "Broker" in trusted[1]
    assert untrusted.startswith(
        f"batonctl: cannot read the broker's status: cannot trust {address}: "
    )
    assert untrusted.endswith("(--cacert names the certificate authority to trust)")
    assert fails(capsys, None, "--cacert", str(tmp_path / "none.pem"), "status", status=2) == (
        f"batonctl: cannot read the broker's status: --cacert {tmp_path / 'none.pem'}: "
        "No such file or directory"
    )


class _NotAnApi(http.server.BaseHTTPRequestHandler):
    """A web server that is not a management API: every page is HTML."""

    def do_GET(self) -> None:
        body = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_url_that_is_not_a_management_api(capsys: pytest.CaptureFixture[str]) -> None:
    """--url at another web server (a wrong port): one line saying so, not a JSON traceback."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _NotAnApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    address = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        says = fails(capsys, None, "--url", address, "list", "queues")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

    assert says == (
        f"batonctl: cannot list queues: {address} does not answer as a management HTTP API "
        "(not JSON)"
    )
