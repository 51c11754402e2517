"""Durable messaging with a real broker process on each store (SQLite file, PostgreSQL server),
driven by pika: what survives a restart and a SIGKILL, and what does not (AMQP 0-9-1 and
MQ 3.5 admin guide "Reliable Delivery: Persistence")."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.brokerproc import BrokerLife, RunningBroker

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)


def connect(broker: RunningBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


@contextlib.contextmanager
def connection_cut_by_a_kill(broker: RunningBroker) -> Iterator[pika.BlockingConnection]:
    """A connection that the test ends by killing the broker under it."""
    connection = connect(broker)
    try:
        yield connection
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()


def drain(channel: BlockingChannel, queue: str) -> list[tuple[bytes, bool]]:
    """Every message basic.get finds, acknowledged: (body, redelivered)."""
    found = []
    while True:
        method, _properties, body = channel.basic_get(queue)
        if method is None:
            return found
        found.append((body, method.redelivered))
        channel.basic_ack(method.delivery_tag)


def sync_point(channel: BlockingChannel) -> None:
    """A durable declare is answered only once everything recorded before it is committed."""
    channel.queue_declare("sync-point", durable=True)


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_durable_objects_and_persistent_messages_survive_a_restart(
    broker_life: BrokerLife, kill: bool
):
    """Spec (queue.declare durable; basic.properties delivery-mode 2): durable queues and
    exchanges, bindings between durable ends, and persistent messages in durable queues survive
    a restart; confirmed messages survive even SIGKILL (the Durable messaging requirements:
    "Confirms mean durable"). After SIGKILL every one comes back flagged redelivered, as after
    any crash (see test_after_a_crash_every_message_comes_back_redelivered)."""
    with connect(broker_life.current) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("orders", "topic", durable=True)
        channel.queue_declare("eu-orders", durable=True, arguments={"x-note": "eu", "x-count": 7})
        channel.queue_bind("eu-orders", "orders", "eu.#")
        for number in range(3):
            channel.basic_publish("orders", "eu.fr", f"order {number}".encode(), PERSISTENT)
        channel.basic_publish("orders", "eu.de", b"transient", TRANSIENT)
    broker = broker_life.restart(kill=kill)
    with connect(broker) as connection:
        channel = connection.channel()
        declared = channel.queue_declare("eu-orders", passive=True)
        assert declared.method.message_count == 3
        channel.exchange_declare("orders", "topic", passive=True)
        assert drain(channel, "eu-orders") == [
            (b"order 0", kill),
            (b"order 1", kill),
            (b"order 2", kill),
        ]
        # The binding came back: routing through it works.
        channel.basic_publish("orders", "eu.it", b"after restart", PERSISTENT)
        assert drain(channel, "eu-orders") == [(b"after restart", False)]
    assert 'msg="recovered 3 messages in' in broker.log()


def test_transient_things_do_not_survive(broker_life: BrokerLife):
    """Spec: non-durable queues and exchanges, exclusive queues and transient messages are
    gone after a restart ("Durable queues remain active when a server restarts. Non-durable
    queues ... are purged if/when a server restarts")."""
    with connect(broker_life.current) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("scratch", "fanout", durable=False)
        channel.queue_declare("temporary", durable=False)
        channel.queue_declare("kept", durable=True)
        channel.basic_publish("", "temporary", b"a", PERSISTENT)
        channel.basic_publish("", "kept", b"transient", TRANSIENT)
        channel.basic_publish("", "kept", b"persistent", PERSISTENT)
    broker = broker_life.restart(kill=False)
    with connect(broker) as connection:
        channel = connection.channel()
        assert drain(channel, "kept") == [(b"persistent", False)]
        for kind, declare in (
            ("queue", lambda ch: ch.queue_declare("temporary", passive=True)),
            ("exchange", lambda ch: ch.exchange_declare("scratch", "fanout", passive=True)),
        ):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                declare(connection.channel())
            assert closed.value.reply_code == 404, kind


def test_an_expiration_past_what_a_store_holds_is_confirmed_and_never_expires(
    broker_life: BrokerLife,
):
    """RabbitMQ's expiration is "a string of milliseconds", any non-negative integer: one so
    large that its expiry time does not fit the store's 64-bit integer is taken (confirmed,
    not nacked) and stored as never expiring, across a restart."""
    huge = pika.BasicProperties(delivery_mode=2, expiration="1" + "0" * 30)
    with connect(broker_life.current) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("far", durable=True)
        channel.basic_publish("", "far", b"kept", huge, mandatory=True)
    broker = broker_life.restart(kill=True)
    with connect(broker) as connection:
        assert drain(connection.channel(), "far") == [(b"kept", True)]


def test_after_a_crash_every_message_comes_back_redelivered(broker_life: BrokerLife):
    """The Durable messaging requirements: "messages that were delivered but not acknowledged come
    back with redelivered=true", in their order, after a SIGKILL; acknowledged ones do not come
    back. After a crash the broker cannot know which of the others were delivered (a delivery's
    count is written only if the message comes back to its queue), so, as RabbitMQ's classic
    queues do on a dirty recovery
    ("effectively marking all messages as previously delivered"), every one comes back flagged:
    a message without the flag has never been delivered."""
    with connection_cut_by_a_kill(broker_life.current) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("work", durable=True)
        for number in range(5):
            channel.basic_publish("", "work", f"job {number}".encode(), PERSISTENT)
        first, _, _ = channel.basic_get("work")
        channel.basic_ack(first.delivery_tag)
        channel.basic_get("work")
        channel.basic_get("work")
        sync_point(channel)
        broker = broker_life.restart(kill=True)
    with connect(broker) as connection:
        assert drain(connection.channel(), "work") == [
            (b"job 1", True),
            (b"job 2", True),
            (b"job 3", True),
            (b"job 4", True),
        ]


def test_after_a_clean_stop_only_delivered_messages_come_back_redelivered(
    broker_life: BrokerLife,
):
    """A clean stop writes what was delivered before it ends (SIGTERM closes every connection,
    which puts back what its clients held, counted, and commits what is pending), so only the
    messages delivered and not acknowledged come back flagged; the others, never delivered,
    come back without the flag."""
    connection = connect(broker_life.current)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("work", durable=True)
    for number in range(4):
        channel.basic_publish("", "work", f"job {number}".encode(), PERSISTENT)
    channel.basic_get("work")
    broker = broker_life.restart(kill=False)
    with contextlib.suppress(pika.exceptions.AMQPError):
        connection.close()
    with connect(broker) as connection:
        assert drain(connection.channel(), "work") == [
            (b"job 0", True),
            (b"job 1", False),
            (b"job 2", False),
            (b"job 3", False),
        ]


def test_a_transaction_open_at_a_crash_is_rolled_back(broker_life: BrokerLife):
    """The Durable messaging requirements: "open transactions are rolled back at start-up"; a
    committed one is kept (spec tx.commit: the publishes become visible, and durable, together)."""
    with connection_cut_by_a_kill(broker_life.current) as connection:
        channel = connection.channel()
        channel.queue_declare("ledger", durable=True)
        channel.tx_select()
        channel.basic_publish("", "ledger", b"committed", PERSISTENT)
        channel.tx_commit()
        channel.basic_publish("", "ledger", b"never committed", PERSISTENT)
        sync_point(connection.channel())
        broker = broker_life.restart(kill=True)
    with connect(broker) as connection:
        # Flagged: after a crash every message comes back redelivered.
        assert drain(connection.channel(), "ledger") == [(b"committed", True)]


def test_deleted_and_purged_stay_deleted(broker_life: BrokerLife):
    """queue.delete, queue.purge, exchange.delete and queue.unbind of durable things are
    durable too."""
    with connect(broker_life.current) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("audit", "direct", durable=True)
        for name in ("purged", "deleted", "unbound"):
            channel.queue_declare(name, durable=True)
            channel.basic_publish("", name, b"x", PERSISTENT)
        channel.queue_bind("unbound", "audit", "k")
        channel.queue_purge("purged")
        channel.queue_delete("deleted")
        channel.queue_unbind("unbound", "audit", "k")
        channel.exchange_declare("gone", "fanout", durable=True)
        channel.exchange_delete("gone")
    broker = broker_life.restart(kill=True)
    with connect(broker) as connection:
        channel = connection.channel()
        assert channel.queue_declare("purged", passive=True).method.message_count == 0
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish("audit", "k", b"y", PERSISTENT, mandatory=True)
        for declare in (
            lambda ch: ch.queue_declare("deleted", passive=True),
            lambda ch: ch.exchange_declare("gone", "fanout", passive=True),
        ):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                declare(connection.channel())
            assert closed.value.reply_code == 404


def test_a_backlog_beyond_the_page_window_is_paged_and_delivered_in_order(tmp_path):
    """The Durable messaging requirements: "A queue keeps a bounded window of message bodies in
    memory and reads the rest from the store on demand": with a window of 16, a thousand messages
    (persistent and transient, in a durable and a non-durable queue) come back complete and in
    order, through a consumer and through basic.get, and the persistent ones survive a restart."""
    life = BrokerLife(tmp_path, {"BATONMQ__PERSIST__PAGE_WINDOW": "16"})
    try:
        with connect(life.current) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("backlog", durable=True)
            channel.queue_declare("scratch", durable=False)
            for number in range(1000):
                properties = PERSISTENT if number % 3 else TRANSIENT
                channel.basic_publish("", "backlog", str(number).encode(), properties)
                channel.basic_publish("", "scratch", str(number).encode(), properties)
            bodies = []
            for method, _properties, body in channel.consume("scratch", inactivity_timeout=5):
                if method is None:
                    break
                bodies.append(int(body))
                channel.basic_ack(method.delivery_tag)
                if len(bodies) == 1000:
                    break
            channel.cancel()
            assert bodies == list(range(1000))
        broker = life.restart(kill=True)
        with connect(broker) as connection:
            channel = connection.channel()
            assert [int(body) for body, _ in drain(channel, "backlog")] == [
                number for number in range(1000) if number % 3
            ]
    finally:
        life.stop()


@pytest.mark.expected_log_errors(r"cannot open the store: ", reason="the store is in use")
def test_a_second_broker_on_the_same_data_refuses_to_start(broker_life: BrokerLife, tmp_path):
    """The Durable messaging requirements: a clear error for "a store locked by another running
    broker"."""
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    data_dir = broker_life.current.data_dir
    assert data_dir is not None
    from tests.brokerproc import start_broker

    with pytest.raises(RuntimeError, match="exited with 1") as failed:
        start_broker(second_dir, "--data-dir", str(data_dir), environment=broker_life.environment)
    assert "locked" in str(failed.value) or "in use" in str(failed.value)


def test_expired_messages_are_dead_lettered_at_recovery(broker_life: BrokerLife):
    """The Durable messaging requirements, recovery: "expired ones are dropped or dead-lettered";
    the expiry time is kept in the store, so time spent down counts (RabbitMQ: the TTL runs from
    when the message entered the queue)."""
    with connect(broker_life.current) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("expired-here", durable=True)
        channel.queue_declare(
            "short-lived",
            durable=True,
            arguments={
                "x-message-ttl": 1500,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "expired-here",
            },
        )
        channel.queue_declare("per-message", durable=True)
        channel.basic_publish("", "short-lived", b"queue ttl", PERSISTENT)
        short = pika.BasicProperties(delivery_mode=2, expiration="1500")
        channel.basic_publish("", "per-message", b"message ttl", short)
        channel.basic_publish("", "per-message", b"no ttl", PERSISTENT)
        connection.sleep(0.5)
    broker_life.stop()
    time.sleep(1.2)  # expired while the broker was down
    broker = broker_life.restart(kill=False)
    with connect(broker) as connection:
        channel = connection.channel()
        assert drain(channel, "short-lived") == []
        assert drain(channel, "per-message") == [(b"no ttl", False)]
        _method, properties, body = channel.basic_get("expired-here", auto_ack=True)
        assert body == b"queue ttl"
        assert properties.headers["x-death"][0]["reason"] == "expired"


def test_a_priority_queue_comes_back_in_priority_order(broker_life: BrokerLife):
    """The Durable messaging requirements, recovery: "durable objects and their messages come back
    in order and with their priorities" (x-max-priority: higher first, FIFO within a priority)."""
    with connect(broker_life.current) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("by-priority", durable=True, arguments={"x-max-priority": 9})
        for body, priority in [(b"low-1", 1), (b"top", 9), (b"none", None), (b"low-2", 1)]:
            properties = pika.BasicProperties(delivery_mode=2, priority=priority)
            channel.basic_publish("", "by-priority", body, properties)
    broker = broker_life.restart(kill=True)
    with connect(broker) as connection:
        channel = connection.channel()
        assert [body for body, _ in drain(channel, "by-priority")] == [
            b"top",
            b"low-1",
            b"low-2",
            b"none",
        ]


def test_a_priority_backlog_beyond_the_window_comes_back_in_priority_order(
    tmp_path, store_environment
):
    """The Durable messaging requirements: "A queue keeps a bounded window of message bodies in
    memory and reads the rest from the store on demand", and recovery brings messages back "in order
    and with their priorities": a priority queue with a backlog ten times its window (each level
    paged on its own), served in priority order before and after a SIGKILL."""
    life = BrokerLife(tmp_path, {**store_environment, "BATONMQ__PERSIST__PAGE_WINDOW": "64"})
    try:
        with connect(life.current) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("deep", durable=True, arguments={"x-max-priority": 3})
            for number in range(640):
                properties = pika.BasicProperties(delivery_mode=2, priority=number % 4)
                channel.basic_publish("", "deep", str(number).encode(), properties)
            before = []
            for _ in range(200):
                method, _properties, body = channel.basic_get("deep")
                before.append(int(body))
                channel.basic_ack(method.delivery_tag)
            sync_point(channel)
        broker = life.restart(kill=True)
        with connect(broker) as connection:
            after = [int(body) for body, _ in drain(connection.channel(), "deep")]
        expected = sorted(range(640), key=lambda number: (-(number % 4), number))
        assert before + after == expected
    finally:
        life.stop()


@pytest.mark.expected_log_errors(r"ignored: invalid|not restored", reason="it plants refused state")
def test_state_refused_by_newer_rules_does_not_stop_a_restart(tmp_path):
    """A queue argument or a binding's selector that was accepted when declared but is refused
    by the rules of the BatonMQ that restarts (written into the SQLite file here) is logged and
    left out; the broker starts and the queue keeps its messages."""
    life = BrokerLife(tmp_path, {})
    try:
        with connect(life.current) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("kept", durable=True, arguments={"x-message-ttl": 60_000})
            channel.queue_bind(
                "kept", "amq.topic", "a.#", arguments={"x-filter-jms-selector": "size > 1"}
            )
            channel.basic_publish("", "kept", b"still here", PERSISTENT)
        life.current.stop()
        data_dir = life.current.data_dir
        assert data_dir is not None
        with contextlib.closing(sqlite3.connect(data_dir / "batonmq.sqlite3")) as db, db:
            db.execute(
                "UPDATE queues SET arguments = replace(arguments, '60000', '-1') WHERE name = ?",
                ("kept",),
            )
            db.execute(
                "UPDATE bindings SET arguments = replace(arguments, 'size > 1', 'size >')"
                " WHERE destination = ?",
                ("kept",),
            )
        broker = life.restart(kill=False)
        with connect(broker) as connection:
            channel = connection.channel()
            assert drain(channel, "kept") == [(b"still here", False)]
        log = broker.log()
        assert "queue argument ignored: invalid arg 'x-message-ttl'" in log
        assert "binding not restored" in log
    finally:
        life.stop()


@pytest.mark.expected_log_errors(r"ignored: invalid arg 'x-queue-type'", reason="it plants one")
def test_a_stored_queue_of_a_type_this_broker_lacks_comes_back_of_the_default_type(tmp_path):
    """A queue type is checked through the registry at recovery as at declaration (RabbitMQ:
    "unsupported queue type"): a stored queue whose type this BatonMQ does not know (written
    into the SQLite file here) is logged and restored as a classic queue, the default, with
    its messages, instead of stopping the restart."""
    life = BrokerLife(tmp_path, {})
    try:
        with connect(life.current) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("typed", durable=True, arguments={"x-queue-type": "classic"})
            channel.basic_publish("", "typed", b"still here", PERSISTENT)
        life.current.stop()
        data_dir = life.current.data_dir
        assert data_dir is not None
        with contextlib.closing(sqlite3.connect(data_dir / "batonmq.sqlite3")) as db, db:
            db.execute(
                "UPDATE queues SET arguments = replace(arguments, 'classic', 'quorum')"
                " WHERE name = ?",
                ("typed",),
            )
        broker = life.restart(kill=False)
        with connect(broker) as connection:
            assert drain(connection.channel(), "typed") == [(b"still here", False)]
        assert "queue argument ignored: invalid arg 'x-queue-type'" in broker.log()
    finally:
        life.stop()
