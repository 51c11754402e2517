"""Store integrity as an operator and a client see it (issue 17, defect 5): a real broker process,
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

from tests.brokerproc import BrokerLife, RunningBroker, run_batonctl

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


@pytest.mark.expected_log_errors(r"msg=\"message quarantined")
def test_a_damaged_message_is_quarantined_and_the_rest_of_its_queue_delivered(
    tmp_path: Path, store_environment: dict[str, str]
) -> None:
    """Issue 17, defect 5: "A corrupted message body is delivered as garbage: store a checksum
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
