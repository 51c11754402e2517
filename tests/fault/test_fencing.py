"""A store that several brokers can share and only one can own: a lease with a fencing epoch on
the database's clock, checked inside every write transaction, with real broker processes on a
real PostgreSQL server that the test restarts.

The foundation requirements: "a broker holds a lease row (holder, epoch, expiry) renewed on its
own connection; every write transaction checks, inside the same transaction, that the broker's
epoch is still current, and a broker whose epoch was superseded stops writing at once, logs why,
and exits non-zero (`StoreFenced`). This replaces today's advisory lock, which is silently lost
when PostgreSQL restarts ... In standalone mode a second broker on the same store is refused with
an error naming the owner and when its lease expires."
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pika
import pika.exceptions
import pytest

from batonmq.server.app import EXIT_FENCED
from tests.brokerproc import (
    RunningBroker,
    confirming_channel,
    failed_start,
    start_broker,
    wait_until,
)
from tests.pgserver import ThrowawayServer

pytestmark = pytest.mark.integration

SCHEMA = "batonmq_s_batonmq"  # the default broker name's standalone schema
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _stored_entries(server: ThrowawayServer) -> object:
    """The entries of queue orders the store holds: in its tables, and in the broker's append
    log, a row per batch (each publish of this test, confirmed before the next, is one)."""
    return server.query(
        f"SELECT (SELECT count(*) FROM {SCHEMA}.entries WHERE queue = 'orders')"
        f" + (SELECT count(*) FROM {SCHEMA}.appends)"
    )


def _names_a_process_of(broker: RunningBroker, refusal: str) -> bool:
    """Whether `refusal` names the process that holds the store's lease as one of `broker`'s:
    its `batonmq` process, or with workers the worker whose lease it met."""
    return any(f"pid {pid} " in refusal for pid in broker.pids())


@pytest.mark.expected_log_errors(
    r"no longer owns its store",
    r"was fenced off its store",
    r"store write failed",
    r"store \w+ failed",
    reason="the test takes the store over from under the broker, and restarts PostgreSQL",
)
def test_one_broker_owns_a_postgres_store_and_a_superseded_one_stops_writing_and_exits(
    tmp_path: Path, postgres_throwaway_server: ThrowawayServer
):
    server = postgres_throwaway_server
    environment = {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": server.admin_dsn,
    }
    first = start_broker(tmp_path / "first", environment=environment)
    with confirming_channel(first) as channel:
        channel.queue_declare("orders", durable=True)
        channel.basic_publish("", "orders", b"before", PERSISTENT)

    # A second broker on the same store is refused, naming the owner and its lease.
    refused = failed_start(tmp_path / "second", environment)
    assert _names_a_process_of(first, refused), refused
    assert "lease expires at" in refused, refused

    # PostgreSQL restarts (which ended the advisory lock of old): still one owner.
    server.stop()
    server.start()
    refused = failed_start(tmp_path / "second", environment)
    assert _names_a_process_of(first, refused), refused
    with confirming_channel(first) as channel:
        channel.basic_publish("", "orders", b"after the restart", PERSISTENT)
        assert channel.queue_declare("orders", passive=True).method.message_count == 2
    assert _stored_entries(server) == 2

    # A takeover bumps the epoch from outside: the first broker's next write fails, nothing it
    # meant to write gets in, and it logs why and exits non-zero.
    server.query(f"UPDATE {SCHEMA}.brokers SET epoch = epoch + 1")
    with confirming_channel(first) as channel, contextlib.suppress(pika.exceptions.AMQPError):
        channel.basic_publish("", "orders", b"fenced", PERSISTENT)
        pytest.fail("a publish after the takeover was confirmed")
    assert first.wait(timeout=30) == EXIT_FENCED
    assert "no longer owns its store" in first.log()
    assert _stored_entries(server) == 2


@pytest.mark.expected_log_errors(
    r"no longer owns its store",
    r"was fenced off its store",
    reason="the test takes the store over from under the idle broker",
)
def test_an_idle_broker_finds_out_from_its_lease_renewal_that_it_was_taken_over(
    tmp_path: Path, postgres_throwaway_server: ThrowawayServer
):
    """The lease is renewed on a connection of its own: a broker that writes nothing learns
    of the takeover there, within a renewal period, and stops serving."""
    server = postgres_throwaway_server
    broker = start_broker(
        tmp_path,
        environment={
            "BATONMQ__PERSIST__STORE": "postgres",
            "BATONMQ__PERSIST__POSTGRES__DSN": server.admin_dsn,
        },
    )
    server.query(f"UPDATE {SCHEMA}.brokers SET epoch = epoch + 1")
    assert broker.wait(timeout=30) == EXIT_FENCED
    wait_until(lambda: "lease could not be renewed" in broker.log(), "the fencing logged")


def test_a_broker_restarted_after_a_crash_takes_its_store_back_at_once(
    tmp_path: Path, postgres_throwaway_server: ThrowawayServer
):
    """A lease whose holder is a process of this host that no longer runs is not waited out
    (a supervisor restarts a crashed broker at once); the messages it confirmed are there."""
    environment = {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": postgres_throwaway_server.admin_dsn,
    }
    broker = start_broker(tmp_path, environment=environment)
    with confirming_channel(broker) as channel:
        channel.queue_declare("orders", durable=True)
        channel.basic_publish("", "orders", b"kept", PERSISTENT)
    broker.kill()
    again = start_broker(tmp_path, environment=environment)
    with confirming_channel(again) as channel:
        assert channel.queue_declare("orders", passive=True).method.message_count == 1
