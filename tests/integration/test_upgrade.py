"""A store written by the previous release is upgraded in place when today's broker first starts
on it, and every queue, exchange, binding and message it held is there (the foundation
requirements: "Stores written by the previous release are upgraded in place on first start
(schema version recorded)").

The fixtures in tests/data/previous_release/ were written by the previous release (commit
76af799, schema version 6), by running that commit's broker (`python -m batonmq`) once on a
fresh data directory (SQLite) and once on a fresh PostgreSQL database (default schema
batonmq_s_batonmq), with pika:

- a topic exchange "orders" bound (order.*) to the durable queue "plain" and (#) to a fanout
  exchange "audit" that feeds the durable queue "audit-log";
- a durable priority queue "urgent" (x-max-priority 5) and a durable queue "short-lived" with
  x-message-ttl 315360000000 (ten years, so that the fixture does not expire);
- ten persistent messages "order 0".."order 9" published to "orders" with key order.created,
  six "urgent N pX" at priorities 0, 2 and 4, four "ttl N" with a ten-year expiration;
- three messages of "plain" got and acknowledged, two more got and left unacknowledged when
  the broker was stopped (SIGTERM, a clean stop) with the connection still open.

Then the SQLite file was copied as it was, and the schema dumped with
`pg_dump --inserts --no-owner --no-privileges --schema=batonmq_s_batonmq`.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import asyncpg
import pika
import pytest

from batonmq.store.base import SCHEMA_VERSION
from tests.brokerproc import start_broker

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent.parent / "data" / "previous_release"
PREVIOUS_SCHEMA_VERSION = 6
#: The permissions the upgrade gives the old store's one user in its one virtual host.
GUEST_EVERYWHERE = ("guest", "/", ".*", ".*", ".*")

#: What each queue held when the previous release stopped: the two unacknowledged messages of
#: "plain" come back first and redelivered; "urgent" in priority order.
EXPECTED = {
    "plain": [(f"order {n}".encode(), n in (3, 4)) for n in range(3, 10)],
    "audit-log": [(f"order {n}".encode(), False) for n in range(10)],
    "urgent": [
        (f"urgent {n} p{n % 3 * 2}".encode(), False)
        for n in sorted(range(6), key=lambda n: (-(n % 3), n))
    ],
    "short-lived": [(f"ttl {n}".encode(), False) for n in range(4)],
}


def _find_everything(url: str) -> dict[str, list[tuple[bytes, bool]]]:
    """Every message of every fixture queue (acknowledged), after checking the exchanges and
    bindings by routing a message through them."""
    found: dict[str, list[tuple[bytes, bool]]] = {}
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.exchange_declare("orders", "topic", durable=True, passive=True)
        channel.exchange_declare("audit", "fanout", durable=True, passive=True)
        channel.queue_declare("urgent", durable=True, arguments={"x-max-priority": 5})
        channel.queue_declare(
            "short-lived", durable=True, arguments={"x-message-ttl": 315_360_000_000}
        )
        for queue, messages in EXPECTED.items():
            declared = channel.queue_declare(queue, passive=True)
            assert declared.method.message_count == len(messages), queue
            found[queue] = []
            while (got := channel.basic_get(queue))[0] is not None:
                method, _properties, body = got
                found[queue].append((body, method.redelivered))
                channel.basic_ack(method.delivery_tag)
        channel.confirm_delivery()
        channel.basic_publish(
            "orders", "order.new", b"routed", pika.BasicProperties(delivery_mode=2)
        )
        for queue in ("plain", "audit-log"):
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            assert (method is not None, body) == (True, b"routed"), queue
    return found


def test_a_sqlite_store_of_the_previous_release_is_upgraded_and_keeps_everything(
    tmp_path: Path,
) -> None:
    """Rule (foundation requirements): a store file written by the previous release (schema
    version 6) is migrated on first start, its version recorded, and every queue and message
    found."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(FIXTURES / "batonmq.sqlite3", data / "batonmq.sqlite3")
    with sqlite3.connect(data / "batonmq.sqlite3") as conn:
        assert _version(conn) == PREVIOUS_SCHEMA_VERSION

    with start_broker(tmp_path) as broker:
        assert _find_everything(broker.url) == EXPECTED

    connection = sqlite3.connect(data / "batonmq.sqlite3")
    try:
        assert _version(connection) == SCHEMA_VERSION
        # No one is locked out by the upgrade (schema 12, RabbitMQ's permissions): every user
        # of the old store may do everything in every virtual host it had.
        assert connection.execute(
            "SELECT username, vhost, configure, write, read FROM permissions"
        ).fetchall() == [GUEST_EVERYWHERE]
    finally:
        connection.close()


def test_a_postgres_schema_of_the_previous_release_is_upgraded_and_keeps_everything(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Rule (foundation requirements): a PostgreSQL schema written by the previous release
    (schema version 6, loaded from its pg_dump) is migrated on first start, its version
    recorded, and every queue and message found."""
    # psql's own commands (\restrict) are no SQL.
    dump = "\n".join(
        line
        for line in (FIXTURES / "postgres.sql").read_text().splitlines()
        if not line.startswith("\\")
    )
    asyncio.run(_execute(postgres_dsn, dump))
    assert asyncio.run(_schema_version(postgres_dsn)) == PREVIOUS_SCHEMA_VERSION
    environment = {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
    }

    with start_broker(tmp_path, environment=environment) as broker:
        assert _find_everything(broker.url) == EXPECTED

    assert asyncio.run(_schema_version(postgres_dsn)) == SCHEMA_VERSION
    assert asyncio.run(_permissions(postgres_dsn)) == [GUEST_EVERYWHERE]


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])


async def _execute(dsn: str, sql: str) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _permissions(dsn: str) -> list[tuple[str, ...]]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT username, vhost, configure, write, read FROM batonmq_s_batonmq.permissions"
        )
    finally:
        await connection.close()
    return [tuple(row) for row in rows]


async def _schema_version(dsn: str) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        value = await connection.fetchval(
            "SELECT value FROM batonmq_s_batonmq.meta WHERE key = 'schema_version'"
        )
    finally:
        await connection.close()
    return int(value)
