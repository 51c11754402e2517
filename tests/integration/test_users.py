"""Users and virtual hosts with a real broker on each store, managed with `batonctl user` and
`batonctl vhost` and used by real clients (the Security requirements: "Users with salted, slow
password hashes ... kept in the broker's store, managed with `batonctl user add | passwd | delete |
list`"; "Virtual hosts. Created and deleted with `batonctl vhost add | delete | list`; each has its
own exchanges, queues and ACL")."""

from __future__ import annotations

import contextlib
import re
import socket
import sqlite3
import time
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pamqp import commands

from tests.brokerproc import RunningBroker, connect, run_batonctl, start_broker
from tests.httpapi import call
from tests.rawclient import RawClient
from tests.wire import plain_response

pytestmark = pytest.mark.integration

#: auth.lockout of the two-worker lockout test, seconds: longer than its refusals take on a busy
#: machine.
LOCKOUT = 8


def batonctl(workdir: Path, environment: dict[str, str], *args: str, stdin: str = "") -> str:
    """Run batonctl on the broker's data (as an operator would, with the broker stopped)."""
    done = run_batonctl(workdir, *args, environment=environment, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def grant(workdir: Path, environment: dict[str, str], user: str, vhost: str = "/") -> None:
    """RabbitMQ: a user added has no permissions until given some (`rabbitmqctl
    set_permissions`)."""
    batonctl(workdir, environment, "permissions", "set", user, ".*", ".*", ".*", "--vhost", vhost)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    return tmp_path


def test_a_user_added_with_batonctl_logs_in_and_a_wrong_password_is_refused_and_logged(
    workdir: Path, store_environment: dict[str, str]
):
    """The Security requirements: "A failed login gets connection.close 403, is logged with the
    source address"; the store holds a salted scrypt hash, never the password."""
    batonctl(
        workdir, store_environment, "user", "add", "alice", "--password-stdin", stdin="s3cret\n"
    )
    assert "alice\tscrypt" in batonctl(workdir, store_environment, "user", "list")
    grant(workdir, store_environment, "alice")
    broker = start_broker(workdir, environment=store_environment)
    try:
        with connect(broker, "alice", "s3cret") as connection:
            connection.channel().queue_declare("alice-was-here")
        # `permissions set` made the default virtual host before the broker's first start, with
        # the default user's permissions there, as the broker makes it.
        with connect(broker, "guest", "guest") as connection:
            connection.channel().queue_declare("guest-was-here")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
            connect(broker, "alice", "wrong")
        assert "403" in str(refused.value) or "ACCESS_REFUSED" in str(refused.value)
        [line] = [line for line in broker.log().splitlines() if "login refused" in line]
        assert "peer=127.0.0.1:" in line and "user=alice" in line
    finally:
        broker.stop()
    if store_environment["BATONMQ__PERSIST__STORE"] == "sqlite":
        with sqlite3.connect(workdir / "data" / "batonmq.sqlite3") as db:
            [(stored,)] = db.execute("SELECT credential FROM users WHERE name = 'alice'")
        assert stored.startswith("scrypt$") and "s3cret" not in stored


def test_guest_can_be_deleted_and_a_changed_password_applies_at_the_next_start(
    workdir: Path, store_environment: dict[str, str]
):
    """The Security requirements: "guest/guest is loopback-only by default and can be disabled"."""
    batonctl(workdir, store_environment, "user", "add", "admin", "--password", "one")
    batonctl(workdir, store_environment, "user", "passwd", "admin", "--password", "two")
    batonctl(workdir, store_environment, "user", "delete", "guest")
    grant(workdir, store_environment, "admin")
    broker = start_broker(workdir, environment=store_environment)
    try:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect(broker, "guest", "guest")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect(broker, "admin", "one")
        connect(broker, "admin", "two").close()
    finally:
        broker.stop()


def test_a_qpid_base64md5_password_file_is_imported_and_upgraded_at_login(
    workdir: Path, store_environment: dict[str, str]
):
    """Qpid manual §2.1.1: "The password field contains the MD5 Hash of the users password encoded
    in Base64"; MD5 is weak, so the first login replaces it with scrypt."""
    passwords = workdir / "passwd"
    # "password" and "guest", MD5 then Base64, as Qpid's tooling writes them.
    passwords.write_text("# Qpid users\nqpid:X03MO1qnZdYdgyfeuILPmQ==\n")
    environment = {**store_environment}
    done = run_batonctl(
        workdir, "user", "import", str(passwords), "--format", "base64md5", environment=environment
    )
    assert done.returncode == 0, done.stderr
    assert "MD5 password hashes are weak" in done.stderr
    assert "qpid\tmd5" in batonctl(workdir, environment, "user", "list")
    grant(workdir, environment, "qpid")
    broker = start_broker(workdir, environment=environment)
    try:
        connect(broker, "qpid", "password").close()
    finally:
        broker.stop()
    assert "qpid\tscrypt" in batonctl(workdir, environment, "user", "list")


def test_a_lockout_refuses_the_failing_user_from_that_address_and_no_one_else(
    workdir: Path, store_environment: dict[str, str]
):
    """Hardening, defect 7: "Five failed logins from one address lock that *address* out for
    300 s: every user behind it, with correct credentials, is refused" no more. "Count failures
    per user and address, ... never refuse correct credentials because someone else failed, and
    log each lockout once with user, peer and duration. Keep the protection against password
    guessing": the locked pair is refused even with the right password."""
    batonctl(workdir, store_environment, "user", "add", "alice", "--password", "s3cret")
    environment = {**store_environment, "BATONMQ__AUTH__LOCKOUT": "600"}
    broker = start_broker(workdir, environment=environment)
    try:
        for _ in range(5):  # auth.max_failures by default
            with pytest.raises(pika.exceptions.ProbableAuthenticationError):
                connect(broker, "alice", "wrong")
        with connect(broker, "guest", "guest") as connection:  # same address, another user
            connection.channel().queue_declare("", exclusive=True)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as locked:
            connect(broker, "alice", "s3cret")
        assert "too many failed logins for user 'alice' from 127.0.0.1" in str(locked.value)
        log = broker.log().splitlines()
        [lockout] = [line for line in log if "login locked out" in line]
        assert "user=alice peer=127.0.0.1 duration=600.0" in lockout
        delayed = [line for line in log if 'msg="login delayed' in line]
        assert len(delayed) == 4 and all("user=alice" in line for line in delayed), (
            "guest was answered at once, with no delay: only alice's attempts waited"
        )
    finally:
        broker.stop()


def _refused_from(broker: RunningBroker, address: str, password: str) -> str:
    """A login of alice from the local `address` with `password`, refused: the reply text."""
    client = RawClient(
        socket.create_connection((broker.host, broker.port), 10, source_address=(address, 0))
    )
    try:
        client.start()
        client.start_ok("PLAIN", plain_response("alice", password))
        return str(client.expect_connection_close(403).reply_text)
    finally:
        client.close()


def _workers_that_delayed(broker: RunningBroker, address: str) -> set[str]:
    """The workers that logged a delayed login of alice from `address`."""
    return {
        match.group(1)
        for line in broker.log().splitlines()
        if 'msg="login delayed' in line
        and f"peer={address} " in line
        and (match := re.search(r"\bworker=(\d+)", line))
    }


def test_with_two_workers_the_lockout_is_the_brokers_whichever_worker_a_login_reaches(
    workdir: Path,
):
    """Hardening, defect 7: failures are counted "per user and address", and five lock the pair
    out. With `[broker] workers = 2` a client reaches either worker, so the five are the
    broker's, wherever each landed: the pair is refused on every worker once they are reached,
    and let in again on every worker when the lockout has passed."""
    environment = {
        "BATONMQ__PERSIST__STORE": "sqlite",
        "BATONMQ__BROKER__WORKERS": "2",
        "BATONMQ__AUTH__LOCKOUT": str(LOCKOUT),
    }
    batonctl(workdir, environment, "user", "add", "alice", "--password", "s3cret")
    grant(workdir, environment, "alice")
    broker = start_broker(workdir, environment=environment)
    try:
        # Each address is a pair of its own; the kernel decides which worker takes each
        # connection, so go on until the failures of one pair were answered by both workers.
        for host in range(2, 10):
            address = f"127.0.0.{host}"
            for _ in range(5):  # auth.max_failures by default
                assert "Login was refused" in _refused_from(broker, address, "wrong")
            locked_at = time.monotonic()  # the fifth failure was counted before its refusal
            if _workers_that_delayed(broker, address) == {"0", "1"}:
                break
        else:  # each pair's five land on one worker with a chance of 1 in 16: never 8 times
            pytest.fail("the kernel gave every attempt of each pair to one worker")
        for _ in range(6):
            locked = _refused_from(broker, address, "s3cret")
            assert f"too many failed logins for user 'alice' from {address}" in locked
        log = broker.log()
        assert log.count('msg="login locked out') == host - 1, "each pair's lockout logged once"
        assert time.monotonic() - locked_at < LOCKOUT, "refused while locked out, not after"
        time.sleep(max(0.0, locked_at + LOCKOUT + 0.5 - time.monotonic()))
        for _ in range(4):
            with connect(broker, "alice", "s3cret"):  # from 127.0.0.1: another pair
                pass
            client = RawClient(
                socket.create_connection(
                    (broker.host, broker.port), 10, source_address=(address, 0)
                )
            )
            with contextlib.closing(client.sock):
                client.start()
                client.start_ok("PLAIN", plain_response("alice", "s3cret"))
                client.expect(commands.Connection.Tune)
    finally:
        broker.stop()


def test_virtual_hosts_are_added_isolated_and_deleted_with_everything_in_them(
    workdir: Path, store_environment: dict[str, str]
):
    """The Security requirements: each virtual host "has its own exchanges, queues"; AMQP
    connection.open of a virtual host that does not exist is refused."""
    batonctl(workdir, store_environment, "vhost", "add", "prod")
    assert batonctl(workdir, store_environment, "vhost", "list").split() == ["/", "prod"]
    grant(workdir, store_environment, "guest", "prod")
    broker = start_broker(workdir, environment=store_environment)
    try:
        with connect(broker, "guest", "guest", "prod") as connection:
            channel = connection.channel()
            channel.queue_declare("orders", durable=True)
            channel.basic_publish(
                "", "orders", b"prod order", pika.BasicProperties(delivery_mode=2)
            )
            channel.queue_declare("sync", durable=True)
        with connect(broker, "guest", "guest", "/") as connection:
            channel = connection.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
                channel.queue_declare("orders", passive=True)
            assert missing.value.reply_code == 404
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(broker, "guest", "guest", "staging")
    finally:
        broker.stop()

    batonctl(workdir, store_environment, "vhost", "delete", "prod")
    assert batonctl(workdir, store_environment, "vhost", "list").split() == ["/"]
    stats = batonctl(workdir, store_environment, "db", "stats")
    assert "messages: 0" in " ".join(stats.split())
    broker = start_broker(workdir, environment=store_environment)
    try:
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(broker, "guest", "guest", "prod")
    finally:
        broker.stop()


def test_tags_given_with_batonctl_decide_what_the_user_may_do_over_http(
    workdir: Path, store_environment: dict[str, str]
):
    """RabbitMQ's user tags: `batonctl user add --tags`, `user tags` and `user passwd` (which
    keeps them); a user without a tag may not use the HTTP API ("Not management user")."""
    batonctl(
        workdir, store_environment, "user", "add", "mona", "--password", "pw", "--tags",
        "monitoring",
    )  # fmt: skip
    batonctl(workdir, store_environment, "user", "add", "amqp-only", "--password", "pw")
    batonctl(workdir, store_environment, "user", "tags", "amqp-only", "management")
    batonctl(workdir, store_environment, "user", "tags", "amqp-only")
    batonctl(workdir, store_environment, "user", "passwd", "mona", "--password", "pw2")
    grant(workdir, store_environment, "amqp-only")
    listed = batonctl(workdir, store_environment, "user", "list")
    assert "mona\tscrypt\t[monitoring]" in listed
    assert "amqp-only\tscrypt\t[]" in listed
    assert "guest\tscrypt\t[administrator]" in listed
    broker = start_broker(workdir, environment=store_environment, http=True)
    try:
        assert call(broker, "GET", "/api/whoami", auth=("mona", "pw2")) == (
            200,
            {"name": "mona", "tags": ["monitoring"]},
        )
        assert call(broker, "GET", "/api/overview", auth=("amqp-only", "pw")) == (
            401,
            {"error": "not_authorised", "reason": "Not management user"},
        )
        with connect(broker, "amqp-only", "pw") as connection:
            connection.channel().queue_declare("", exclusive=True)
    finally:
        broker.stop()


def test_permissions_set_on_the_data_are_in_force_when_the_broker_starts(
    workdir: Path, store_environment: dict[str, str]
):
    """RabbitMQ's `set_permissions`, `clear_permissions` and `list_permissions` on a stopped
    broker's store: a user added has none (connection.open refused, 530, with the command that
    grants access); the ones given are in force at the next start; errors are one line."""
    batonctl(workdir, store_environment, "user", "add", "eve", "--password", "pw")
    broker = start_broker(workdir, environment=store_environment)
    try:
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
            connect(broker, "eve", "pw")
        assert (
            "access to vhost '/' refused for user 'eve': it has no permissions there (batonctl "
            "permissions set eve '.*' '.*' '.*' --vhost /)"
        ) in str(refused.value)
    finally:
        broker.stop()
    batonctl(workdir, store_environment, "permissions", "set", "eve", "", "^eve$", "^eve$")
    listed = batonctl(workdir, store_environment, "permissions", "list").splitlines()
    assert [line.split() for line in listed] == [
        ["USER", "VHOST", "CONFIGURE", "WRITE", "READ"],
        ["eve", "/", "^eve$", "^eve$"],
        ["guest", "/", ".*", ".*", ".*"],
    ]
    for argv, error in (
        (("set", "nobody", "", "", ""), "there is no user 'nobody'"),
        (("set", "eve", "", "", "", "--vhost", "nowhere"), "there is no virtual host 'nowhere'"),
        (("set", "eve", "*", "", ""), "configure pattern '*': nothing to repeat at position 0"),
        (("clear", "eve", "--vhost", "nowhere"), "user 'eve' has no permissions in"),
    ):
        done = run_batonctl(workdir, "permissions", *argv, environment=store_environment)
        assert done.returncode == 1 and error in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1
    broker = start_broker(workdir, environment=store_environment)
    try:
        with connect(broker, "eve", "pw") as connection:
            channel = connection.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as denied:
                channel.queue_declare("eve")
            assert denied.value.reply_text == (
                "ACCESS_REFUSED - configure access to queue 'eve' in vhost '/' refused for user "
                "'eve'"
            )
        with connect(broker, "guest", "guest") as connection:
            connection.channel().queue_declare("eve")
    finally:
        broker.stop()
    batonctl(workdir, store_environment, "permissions", "clear", "eve")
    assert "eve" not in batonctl(workdir, store_environment, "permissions", "list")
