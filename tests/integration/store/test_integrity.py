"""Store integrity as an operator and a client see it (hardening, defect 5): a real broker process,
a real store damaged by the test while the broker is stopped, and a pika consumer.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import asyncpg
import pika
import pytest

from tests.brokerproc import BrokerLife, RunningBroker, failed_start, run_batonctl, start_broker

pytestmark = pytest.mark.integration

QUEUE = "ledger"
PERSISTENT = pika.BasicProperties(delivery_mode=2)
#: The PostgreSQL schema of a broker named "batonmq" (the default), as postgres_schema gives it.
SCHEMA = "batonmq_s_batonmq"


def body_of(number: int) -> bytes:
    return f"message {number:02}".encode()


def connect(broker: RunningBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def damage_bodies(environment: dict[str, str], data_dir: Path, bodies: list[bytes]) -> list[int]:
    """Flip bits of the last byte of each stored message whose body is one of `bodies`, through
    the database itself (sqlite3, or asyncpg for PostgreSQL); the damaged messages' ids."""
    if environment["BATONMQ__PERSIST__STORE"] == "sqlite":
        connection = sqlite3.connect(data_dir / "batonmq.sqlite3")
        try:
            with connection:
                ids = [
                    connection.execute(
                        "SELECT id FROM messages WHERE body = ?", (body,)
                    ).fetchone()[0]
                    for body in bodies
                ]
                connection.executemany(
                    "UPDATE messages SET body = ? WHERE id = ?",
                    [
                        (body[:-1] + bytes([body[-1] ^ 0x40]), id_)
                        for body, id_ in zip(bodies, ids, strict=True)
                    ],
                )
        finally:
            connection.close()
        return ids

    async def damage() -> list[int]:
        connection = await asyncpg.connect(environment["BATONMQ__PERSIST__POSTGRES__DSN"])
        try:
            rows = await connection.fetch(
                f"UPDATE {SCHEMA}.messages SET body = set_byte(body, length(body) - 1,"
                " get_byte(body, length(body) - 1) # 64) WHERE body = ANY($1::bytea[])"
                " RETURNING id",
                bodies,
            )
        finally:
            await connection.close()
        return [row[0] for row in rows]

    return asyncio.run(damage())


@pytest.mark.expected_log_errors(
    r"msg=\"message quarantined", reason="the test damages two stored messages on purpose"
)
def test_a_damaged_message_is_quarantined_and_the_rest_of_its_queue_delivered(
    tmp_path: Path, store_environment: dict[str, str]
) -> None:
    """Hardening, defect 5: "A corrupted message body is delivered as garbage: store a checksum
    with each body, verify it on read, and quarantine a record that fails (logged with its queue
    and id, never delivered)." Two of forty persistent messages are damaged on disk while the
    broker is stopped, one in the first page read at start and one read back later (a window of
    16); after the restart a pika consumer gets the 38 others in order and never the damaged
    ones, the queue counts none of them, the log names the queue and each message id once, and
    `batonctl db stats` counts both in the quarantine."""
    environment = {**store_environment, "BATONMQ__PERSIST__PAGE_WINDOW": "16"}
    life = BrokerLife(tmp_path, environment)
    broker = life.current
    assert broker.data_dir is not None
    with connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(QUEUE, durable=True)
        for number in range(40):
            channel.basic_publish("", QUEUE, body_of(number), PERSISTENT)
    life.stop()
    damaged = damage_bodies(environment, broker.data_dir, [body_of(5), body_of(30)])
    assert len(damaged) == 2

    broker = life.restart(kill=False)
    received = []
    with connect(broker) as connection:
        channel = connection.channel()
        for method, _properties, body in channel.consume(QUEUE, inactivity_timeout=3):
            if method is None:
                break
            received.append(body)
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
        remaining = channel.queue_declare(QUEUE, durable=True, passive=True).method.message_count
    stats = run_batonctl(tmp_path, "db", "stats", "--json", environment=environment)
    life.stop()

    assert received == [body_of(number) for number in range(40) if number not in (5, 30)]
    assert remaining == 0
    assert (stats.returncode, json.loads(stats.stdout)["quarantined"]) == (0, 2)
    lines = [line for line in broker.log().splitlines() if "message quarantined" in line]
    for message_id in damaged:
        naming = [
            line
            for line in lines
            if f"queue={QUEUE} " in line and re.search(rf"message_id={message_id}\b", line)
        ]
        assert len(naming) == 1, lines
    assert len(lines) == 2


def used_sqlite_data_dir(workdir: Path) -> Path:
    """A data directory whose SQLite store has held a persistent message: its database file."""
    with start_broker(workdir) as broker, connect(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(QUEUE, durable=True)
        channel.basic_publish("", QUEUE, body_of(1), PERSISTENT)
    return workdir / "data" / "batonmq.sqlite3"


def test_a_missing_database_file_in_a_used_data_directory_refuses_to_start(
    tmp_path: Path,
) -> None:
    """Hardening, defect 5: "A zero-length or missing SQLite file in a data directory that held a
    store starts silently empty: refuse to start with an error naming the file". The broker
    exits with status 1 and one error naming the file; `batonctl db restore` puts the store
    back, after which the broker starts with its message."""
    path = used_sqlite_data_dir(tmp_path)
    backup = tmp_path / "backup"
    assert run_batonctl(tmp_path, "db", "backup", "--dir", str(backup)).returncode == 0
    path.unlink()

    output = failed_start(tmp_path, {})

    errors = [line for line in output.splitlines() if " error " in line]
    assert len(errors) == 1, output
    assert f"{path} is missing" in errors[0]
    assert not path.exists()
    restored = run_batonctl(tmp_path, "db", "restore", "--dir", str(backup))
    assert restored.returncode == 0, restored
    with start_broker(tmp_path) as broker, connect(broker) as connection:
        method = connection.channel().queue_declare(QUEUE, durable=True, passive=True).method
        assert method.message_count == 1


def test_a_zero_length_database_file_in_a_used_data_directory_refuses_to_start(
    tmp_path: Path,
) -> None:
    """Hardening, defect 5: "A zero-length or missing SQLite file in a data directory that held a
    store starts silently empty: refuse to start with an error naming the file". Then `batonctl
    db create` makes an empty store there on purpose, and the broker starts on it."""
    path = used_sqlite_data_dir(tmp_path)
    path.write_bytes(b"")

    output = failed_start(tmp_path, {})

    errors = [line for line in output.splitlines() if " error " in line]
    assert len(errors) == 1, output
    assert f"{path} is empty (0 bytes)" in errors[0]
    assert path.stat().st_size == 0
    created = run_batonctl(tmp_path, "db", "create")
    assert created.returncode == 0, created
    with start_broker(tmp_path) as broker, connect(broker) as connection:
        method = connection.channel().queue_declare(QUEUE, durable=False, auto_delete=True).method
        assert method.message_count == 0


def test_a_new_empty_data_directory_starts_empty(tmp_path: Path) -> None:
    """Hardening, defect 5: "(a brand-new data directory still starts empty)", and a directory
    the broker has started in once is one that held a store from then on: its file removed,
    the next start is refused."""
    with start_broker(tmp_path) as broker, connect(broker) as connection:
        method = connection.channel().queue_declare(QUEUE, durable=True).method
        assert method.message_count == 0
    (tmp_path / "data" / "batonmq.sqlite3").unlink()

    assert "batonmq.sqlite3 is missing" in failed_start(tmp_path, {})
