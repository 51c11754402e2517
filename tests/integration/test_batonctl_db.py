"""`batonctl db` as an operator runs it: a real process, on each store (the SQLite file under a
data directory, a PostgreSQL database), next to real brokers driven by pika.

The counterpart of Open MQ's imqdbmgr (MQ 4.1 HA guide Tables 8 and 9: create tbl, upgrade, backup
-dir, restore -dir); the proof the issue asks for is
`test_backup_under_load_restores_every_confirmed_message`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pika
import pytest

from batonmq.store.base import SCHEMA_VERSION
from tests.brokerproc import BrokerLife, RunningBroker, free_port
from tests.pgserver import PostgresServer

pytestmark = pytest.mark.integration

QUEUE = "numbered"


def batonctl(
    environment: dict[str, str], data_dir: Path, *argv: str
) -> subprocess.CompletedProcess[str]:
    """`batonctl --data-dir DATA_DIR ARGV...` with `environment` (and no other BATONMQ
    variables) as configuration."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("BATONMQ")}
    env.update(environment)
    return subprocess.run(
        [sys.executable, "-m", "batonmq.cli.ctl", "--data-dir", str(data_dir), *argv],
        capture_output=True, text=True, env=env, timeout=90, check=False,
    )  # fmt: skip


def succeeds(environment: dict[str, str], data_dir: Path, *argv: str) -> str:
    """The output of a batonctl run that must succeed, with nothing on stderr."""
    result = batonctl(environment, data_dir, *argv)
    assert (result.returncode, result.stderr) == (0, ""), result
    return result.stdout


def fails(environment: dict[str, str], data_dir: Path, *argv: str) -> str:
    """The one line on stderr of a batonctl run that must fail with exit status 1, printing
    nothing else and no traceback."""
    result = batonctl(environment, data_dir, *argv)
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("batonctl: ")
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def stats(environment: dict[str, str], data_dir: Path) -> dict[str, object]:
    found: dict[str, object] = json.loads(succeeds(environment, data_dir, "db", "stats", "--json"))
    return found


def password_of(environment: dict[str, str]) -> str | None:
    dsn = environment.get("BATONMQ__PERSIST__POSTGRES__DSN")
    return urllib.parse.urlsplit(dsn).password if dsn else None


def connect(broker: RunningBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


@pytest.fixture
async def second_store_environment(
    request: pytest.FixtureRequest, store_environment: dict[str, str]
) -> AsyncIterator[dict[str, str]]:
    """A second, empty store of the same kind and the same broker (broker.name, which a restore
    checks): for SQLite the same settings (the test gives it a fresh data directory), for
    PostgreSQL another fresh database on the same server, dropped afterwards."""
    if store_environment["BATONMQ__PERSIST__STORE"] != "postgres":
        yield dict(store_environment)
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    database = f"batonmq_restored_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(server.admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{database}"')
    finally:
        await admin.close()
    try:
        yield {**store_environment, "BATONMQ__PERSIST__POSTGRES__DSN": server.dsn_for(database)}
    finally:
        admin = await asyncpg.connect(server.admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await admin.close()


# --- create, upgrade, stats on a fresh store -------------------------------------------------


def test_create_then_stats_and_upgrade_on_a_fresh_store(
    store_environment: dict[str, str], tmp_path: Path
) -> None:
    """imqdbmgr "create tbl: Create persistent store schema for existing database" (MQ 4.1 HA guide
    Table 8), on a fresh data directory or database; an existing current schema is reported,
    not an error; `upgrade` says the schema is current; stats shows zero counts; the DSN's
    password is never printed."""
    data_dir = tmp_path / "data"
    kind = store_environment["BATONMQ__PERSIST__STORE"]

    created = succeeds(store_environment, data_dir, "db", "create")
    again = succeeds(store_environment, data_dir, "db", "create")
    upgraded = succeeds(store_environment, data_dir, "db", "upgrade")
    found = stats(store_environment, data_dir)
    text = succeeds(store_environment, data_dir, "db", "stats")

    assert created.startswith(f"created schema version {SCHEMA_VERSION} in ")
    assert again.endswith(f"already holds schema version {SCHEMA_VERSION}: nothing to do\n")
    assert upgraded == f"schema is current ({SCHEMA_VERSION})\n"
    location = found.pop("location")
    assert found == {
        "kind": kind,
        "schema_version": SCHEMA_VERSION,
        "broker_id": "batonmq",
        "exchanges": 0,
        "queues": 0,
        "bindings": 0,
        "messages": 0,
        "entries": 0,
        "message_bytes": 0,
        "quarantined": 0,
    }
    if kind == "sqlite":
        assert location == str(data_dir / "batonmq.sqlite3")
    assert f"location:       {location}\n" in text
    assert f"schema_version: {SCHEMA_VERSION}\n" in text
    password = password_of(store_environment)
    if password:
        assert password not in created + again + text + json.dumps(location)


def test_backup_refuses_a_non_empty_directory_and_restore_another_brokers_backup(
    store_environment: dict[str, str], tmp_path: Path
) -> None:
    """`backup --dir` needs an empty (or new) directory; a restore replaces the store of the
    broker the backup was taken from, not another one's (the backup names its broker)."""
    data_dir = tmp_path / "data"
    succeeds(store_environment, data_dir, "db", "create")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    backup = tmp_path / "backup"

    refused = fails(store_environment, data_dir, "db", "backup", "--dir", str(occupied))
    succeeds(store_environment, data_dir, "db", "backup", "--dir", str(backup))
    other = {**store_environment, "BATONMQ__BROKER__NAME": "other"}
    foreign = fails(other, tmp_path / "other", "db", "restore", "--dir", str(backup))

    assert refused == (
        f"batonctl: backup failed: {occupied} is not an empty directory: a backup needs an "
        "empty or new one\n"
    )
    assert (occupied / "keep.txt").read_text() == "mine"
    assert foreign.startswith("batonctl: restore failed: the backup in ")
    assert "batonmq" in foreign
    assert "other" in foreign


# --- next to a running broker ----------------------------------------------------------------


def test_stats_while_a_broker_runs(broker_life: BrokerLife) -> None:
    """stats opens the store without the lock, so it works while the broker holds it, and sees
    every confirmed persistent message (AMQP confirms: a confirmed message is in the store)."""
    broker = broker_life.current
    assert broker.data_dir is not None
    with connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("fan", "fanout", durable=True)
        for name in ("left", "right"):
            channel.queue_declare(name, durable=True)
            channel.queue_bind(name, "fan")
        for number in range(25):
            body = f"message {number:02}".encode()
            channel.basic_publish("fan", "", body, pika.BasicProperties(delivery_mode=2))

        found = stats(broker_life.environment, broker.data_dir)
        text = succeeds(broker_life.environment, broker.data_dir, "db", "stats")

        # The broker is undisturbed.
        assert channel.queue_declare("left", passive=True).method.message_count == 25
    assert found["schema_version"] == SCHEMA_VERSION
    assert (found["queues"], found["bindings"]) == (2, 2)
    assert isinstance(found["exchanges"], int) and found["exchanges"] >= 1
    assert (found["messages"], found["entries"]) == (25, 50)
    assert found["message_bytes"] == 25 * len(b"message 00")
    assert "messages:       25\n" in text
    assert "entries:        50\n" in text


def test_commands_that_take_the_lock_are_refused_while_a_broker_runs(
    broker_life: BrokerLife, tmp_path: Path
) -> None:
    """imqdbmgr: "The broker must not be running" for what changes the store. restore (and
    create, upgrade) take the broker's lock: refused with exit status 1 and text naming the
    running broker; the broker's data is untouched."""
    broker = broker_life.current
    assert broker.data_dir is not None
    environment = broker_life.environment
    with connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("kept", durable=True)
        channel.basic_publish("", "kept", b"precious", pika.BasicProperties(delivery_mode=2))
    backup = tmp_path / "backup"
    succeeds(environment, broker.data_dir, "db", "backup", "--dir", str(backup))

    restore = fails(environment, broker.data_dir, "db", "restore", "--dir", str(backup))
    create = fails(environment, broker.data_dir, "db", "create")
    upgrade = fails(environment, broker.data_dir, "db", "upgrade")

    for what, err in (
        ("restore failed", restore),
        ("cannot create the schema", create),
        ("cannot upgrade the schema", upgrade),
    ):
        assert err.startswith(f"batonctl: {what}: ")
        assert "another running broker" in err
        assert err.endswith("; stop the broker first\n")
    assert stats(environment, broker.data_dir)["messages"] == 1
    with connect(broker) as connection:
        _method, _properties, body = connection.channel().basic_get("kept", auto_ack=True)
        assert body == b"precious"


# --- the proof ------------------------------------------------------------------------


def body_of(number: int) -> bytes:
    """Message `number`'s body: binary, of varied sizes, some larger than a frame."""
    size = 150_000 if number % 97 == 0 else (number * 37) % 3000
    seed = hashlib.sha256(number.to_bytes(4, "big")).digest()
    return number.to_bytes(4, "big") + (seed * (size // 32 + 1))[:size]


def properties_of(number: int) -> pika.BasicProperties:
    return pika.BasicProperties(
        content_type="application/octet-stream",
        content_encoding="identity",
        headers={
            "number": number,
            "text": f"n-{number}",
            "raw": bytes([number % 256, 0, 255]),
            "flag": number % 2 == 0,
            "nested": {"list": [number, "x"], "big": 1 << 40},
        },
        delivery_mode=2,
        priority=number % 10,
        correlation_id=f"correlation-{number}",
        reply_to="replies",
        message_id=f"message-{number}",
        timestamp=1_700_000_000 + number,
        type="numbered",
        app_id="test_batonctl_db",
    )


class Publisher(threading.Thread):
    """Publishes messages 0, 1, 2... to QUEUE in confirm mode, one at a time, until stopped:
    `confirmed` is the count of messages the broker has confirmed (each one is published only
    after the one before it is confirmed)."""

    def __init__(self, broker: RunningBroker) -> None:
        super().__init__(name="publisher", daemon=True)
        self.broker = broker
        self.confirmed = 0
        self.stop_requested = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connect(self.broker) as connection:
                channel = connection.channel()
                channel.confirm_delivery()
                while not self.stop_requested.is_set():
                    number = self.confirmed
                    channel.basic_publish("", QUEUE, body_of(number), properties_of(number))
                    self.confirmed = number + 1
        except BaseException as error:
            self.error = error

    def wait_for(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.confirmed < count:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"only {self.confirmed} confirmed in {timeout}s"
            time.sleep(0.01)

    def finish(self) -> int:
        self.stop_requested.set()
        self.join(30)
        assert not self.is_alive()
        assert self.error is None, self.error
        return self.confirmed


def test_backup_under_load_restores_every_confirmed_message(
    store_environment: dict[str, str],
    second_store_environment: dict[str, str],
    tmp_path: Path,
) -> None:
    """The issue: "Backup taken under load, restored into a fresh data directory, and compared
    message by message." A publisher in confirm mode keeps publishing persistent numbered
    messages while `batonctl db backup --dir` runs; the backup is restored with `batonctl db
    restore --dir` into a fresh data directory (SQLite) or a fresh database (PostgreSQL), and a
    broker started on it gives back:

    - every message confirmed before the backup began;
    - each once, in publish order, bodies and properties byte for byte as published;
    - as one consistent snapshot: since each message is published after the one before it is
      confirmed, a snapshot holding message n holds every message before n, so what comes back
      is exactly messages 0..k-1, with k no more than were published in all;
    - and what the backup's manifest and `batonctl db stats` of the restored store count.
    """
    life = BrokerLife(tmp_path / "original", store_environment)
    publisher = Publisher(life.current)
    try:
        with connect(life.current) as connection:
            connection.channel().queue_declare(QUEUE, durable=True)
        original_data = life.current.data_dir
        assert original_data is not None
        publisher.start()
        publisher.wait_for(300)

        confirmed_before_backup = publisher.confirmed
        backup = tmp_path / "backup"
        report = succeeds(store_environment, original_data, "db", "backup", "--dir", str(backup))
        # Messages published after the backup returned cannot be in it.
        publisher.wait_for(publisher.confirmed + 5)
        published = publisher.finish()
    finally:
        publisher.stop_requested.set()
        life.stop()

    manifest = json.loads((backup / "manifest.json").read_text())
    in_backup = manifest["messages"]
    assert manifest["entries"] == in_backup
    summary = f"{in_backup} messages, {in_backup} queue entries"
    assert report.endswith(f": {summary} (schema version {SCHEMA_VERSION})\n")
    assert confirmed_before_backup <= in_backup <= published
    # Under load: publishing went on past the snapshot (and did not end with it).
    assert in_backup < published

    restored_data = tmp_path / "restored" / "data"
    restored = succeeds(
        second_store_environment, restored_data, "db", "restore", "--dir", str(backup)
    )
    assert restored.endswith(f": {in_backup} messages, {in_backup} queue entries\n")
    restored_stats = stats(second_store_environment, restored_data)
    assert (restored_stats["queues"], restored_stats["messages"], restored_stats["entries"]) == (
        1,
        in_backup,
        in_backup,
    )
    assert restored_stats["message_bytes"] == sum(map(len, map(body_of, range(in_backup))))

    life = BrokerLife(tmp_path / "restored", second_store_environment)
    try:
        numbers = consume_and_compare(life.current, in_backup)
    finally:
        life.stop()
    assert numbers == list(range(in_backup))


def consume_and_compare(broker: RunningBroker, count: int) -> list[int]:
    """The numbers of the messages in QUEUE, in the order they come, each checked against what
    was published: body and properties, decoded and encoded again, byte for byte."""
    numbers: list[int] = []
    with connect(broker) as connection:
        channel = connection.channel()
        declared = channel.queue_declare(QUEUE, durable=True, passive=True)
        assert declared.method.message_count == count
        while True:
            method, properties, body = channel.basic_get(QUEUE, auto_ack=True)
            if method is None:
                return numbers
            number = int.from_bytes(body[:4], "big")
            numbers.append(number)
            assert not method.redelivered
            assert body == body_of(number), number
            expected = properties_of(number)
            assert vars(properties) == vars(expected), number
            assert b"".join(properties.encode()) == b"".join(expected.encode()), number


# --- errors ----------------------------------------------------------------------------------

SQLITE = {"BATONMQ__PERSIST__STORE": "sqlite"}


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"garbage, not a database\n" * 400, id="garbage"),
        pytest.param(None, id="foreign-sqlite-database"),
    ],
)
def test_a_corrupt_sqlite_file_is_reported_without_a_traceback(
    content: bytes | None, tmp_path: Path
) -> None:
    """Issue: a clear error for "a corrupt file" (StoreCorrupt), exit status 1, one line."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = data_dir / "batonmq.sqlite3"
    if content is None:
        connection = sqlite3.connect(path)
        try:
            connection.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
            connection.commit()
        finally:
            connection.close()
    else:
        path.write_bytes(content)
    original = path.read_bytes()
    backup = tmp_path / "backup"

    for argv in (
        ["stats"],
        ["create"],
        ["upgrade"],
        ["backup", "--dir", str(backup)],
    ):
        err = fails(SQLITE, data_dir, "db", *argv)
        assert "not a BatonMQ store" in err, err
        assert str(path) in err
    if content is not None:
        assert path.read_bytes() == original
    else:
        # Nothing added (the store does switch a foreign database to WAL mode, before it looks
        # at the tables, when it opens it with the lock).
        connection = sqlite3.connect(path)
        try:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        finally:
            connection.close()
        assert tables == {"accounts"}


@pytest.fixture
def set_schema_version(store_environment: dict[str, str]) -> Callable[[Path, int], None]:
    """Writes a schema version into the store's meta table, as a newer BatonMQ would have."""

    def set_version(data_dir: Path, version: int) -> None:
        if store_environment["BATONMQ__PERSIST__STORE"] == "sqlite":
            connection = sqlite3.connect(data_dir / "batonmq.sqlite3")
            try:
                with connection:
                    connection.execute(
                        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),)
                    )
            finally:
                connection.close()
            return

        async def update() -> None:
            dsn = store_environment["BATONMQ__PERSIST__POSTGRES__DSN"]
            connection = await asyncpg.connect(dsn)
            try:
                await connection.execute(
                    "UPDATE batonmq_s_batonmq.meta SET value = $1 WHERE key = 'schema_version'",
                    str(version),
                )
            finally:
                await connection.close()

        asyncio.run(update())

    return set_version


def test_a_schema_newer_than_the_code_says_to_upgrade_batonmq(
    store_environment: dict[str, str],
    set_schema_version: Callable[[Path, int], None],
    tmp_path: Path,
) -> None:
    """Issue: a clear error for "a schema newer than the code" (SchemaTooNew): exit status 1,
    and the remedy is a newer BatonMQ, not `batonctl db upgrade`."""
    data_dir = tmp_path / "data"
    succeeds(store_environment, data_dir, "db", "create")
    set_schema_version(data_dir, 999)

    for argv in (["stats"], ["create"], ["upgrade"], ["backup", "--dir", str(tmp_path / "b")]):
        err = fails(store_environment, data_dir, "db", *argv)
        assert "999" in err
        assert err.endswith("; upgrade BatonMQ to use this store\n"), err


CLOSED_PORT_PASSWORD = "Sup3r-Secret-pw"


@pytest.mark.parametrize(
    "how",
    ["uri-in-environment", "uri-flag", "keywords-in-environment"],
)
@pytest.mark.parametrize("command", ["stats", "create", "upgrade", "backup", "restore"])
def test_an_unreachable_database_is_reported_without_its_password(
    how: str, command: str, tmp_path: Path
) -> None:
    """Issue: a clear error for "a database that cannot be reached" (StoreUnavailable), exit
    status 1, and "the DSN's password must never be printed"."""
    port = free_port()  # closed again: nothing listens there
    uri = f"postgresql://batonmq:{CLOSED_PORT_PASSWORD}@127.0.0.1:{port}/batonmq"
    keywords = f"host=127.0.0.1 port={port} user=batonmq password={CLOSED_PORT_PASSWORD}"
    environment = {"BATONMQ__PERSIST__STORE": "postgres"}
    flags: list[str] = []
    if how == "uri-flag":
        flags = ["--dsn", uri]
    else:
        environment["BATONMQ__PERSIST__POSTGRES__DSN"] = uri if how.startswith("uri") else keywords
    restore_dir = tmp_path / "r"
    restore_dir.mkdir()
    (restore_dir / "manifest.json").write_text("{}")
    directory = {"backup": ["--dir", str(tmp_path / "b")], "restore": ["--dir", str(restore_dir)]}

    result = batonctl(
        environment, tmp_path / "data", *flags, "db", command, *directory.get(command, [])
    )

    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert "cannot connect to PostgreSQL at " in result.stderr
    assert f"127.0.0.1:{port}" in result.stderr or f"port={port}" in result.stderr
    assert CLOSED_PORT_PASSWORD not in result.stdout + result.stderr
    assert result.stderr.count("\n") == 1


def test_a_wrong_password_is_reported_without_it(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """The server's refusal is reported (exit status 1); the password tried is not printed."""
    parts = urllib.parse.urlsplit(postgres_server.admin_dsn)
    user = parts.username or "postgres"
    wrong = "Wr0ng-" + secrets.token_hex(8)
    netloc = f"{user}:{wrong}@{parts.hostname}:{parts.port}"
    dsn = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    environment = {"BATONMQ__PERSIST__STORE": "postgres", "BATONMQ__PERSIST__POSTGRES__DSN": dsn}

    result = batonctl(environment, tmp_path, "db", "stats")

    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert "password authentication failed" in result.stderr
    assert wrong not in result.stdout + result.stderr
