"""The broker's word matches its store while PostgreSQL goes away and comes back: a real server
of the test's own, stopped and started for real under a running broker driven by pika.

The rules ("BatonMQ architecture", "The message path"): "State changes follow the store: a durable
change (declare, delete, bind, enqueue, ack) becomes visible to clients only after its commit; a
failed write leaves memory exactly as it was, and a nack means the message is on no queue."
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.brokerproc import BrokerLife, RunningBroker, start_broker
from tests.pgserver import ThrowawayServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.expected_log_errors(
        r"store \w+ failed", reason="every test stops the broker's PostgreSQL under it"
    ),
]

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def outage(postgres_throwaway_server: ThrowawayServer) -> ThrowawayServer:
    """A running PostgreSQL server of this test's own, that it stops and starts."""
    return postgres_throwaway_server


@pytest.fixture
def life(tmp_path: Path, outage: ThrowawayServer) -> Iterator[BrokerLife]:
    environment = {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": outage.admin_dsn,
    }
    broker_life = BrokerLife(tmp_path, environment)
    try:
        yield broker_life
    finally:
        if not outage.running:
            outage.start()
        broker_life.stop()


@contextlib.contextmanager
def connected(broker: RunningBroker) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield connection.channel()
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()


def refused_with(code: int, call: Callable[[], object]) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        call()
    assert closed.value.reply_code == code, closed.value


def exists(channel: BlockingChannel, queue: str) -> bool:
    """Whether a passive declare on a channel of its own finds `queue` (404: not there)."""
    probe = channel.connection.channel()
    try:
        probe.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as closed:
        if closed.reply_code != 404:
            raise
        return False
    probe.close()
    return True


def test_a_durable_declare_whose_write_fails_leaves_nothing_and_a_retry_writes_it(
    life: BrokerLife, outage: ThrowawayServer
):
    """Hardening, defect 1: "a change to durable state becomes visible (in memory, to clients, in
    declare-ok) only after the store has committed it; a failed write leaves memory exactly as
    before, and a retry writes again." Before, the queue stayed in memory, the retry wrote
    nothing, and after a restart the queue and every confirmed message were gone."""
    with connected(life.current) as first:
        first.exchange_declare("kept", "direct", durable=True)
        first.queue_declare("bound", durable=True)
        connection = first.connection
        outage.stop()
        refused_with(406, lambda: first.queue_declare("orders", durable=True))
        second = connection.channel()
        refused_with(406, lambda: second.exchange_declare("ledger", "fanout", durable=True))
        third = connection.channel()
        refused_with(406, lambda: third.queue_bind("bound", "kept", "k"))
        assert not exists(third, "orders")
        fourth = connection.channel()
        refused_with(404, lambda: fourth.exchange_declare("ledger", "fanout", passive=True))
        channel = connection.channel()
        # The binding was not made: nothing routes through it.
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish("kept", "k", b"no route", PERSISTENT, mandatory=True)

        outage.start()
        channel.queue_declare("orders", durable=True)
        channel.exchange_declare("ledger", "fanout", durable=True)
        channel.queue_bind("bound", "kept", "k")
        for number in range(3):
            channel.basic_publish("", "orders", f"order {number}".encode(), PERSISTENT)
        channel.basic_publish("kept", "k", b"routed", PERSISTENT, mandatory=True)

    broker = life.restart(kill=True)
    with connected(broker) as channel:
        assert channel.queue_declare("orders", passive=True).method.message_count == 3
        assert channel.queue_declare("bound", passive=True).method.message_count == 1
        channel.exchange_declare("ledger", "fanout", passive=True)


def test_a_durable_delete_whose_write_fails_keeps_the_queue_and_its_messages(
    life: BrokerLife, outage: ThrowawayServer
):
    """Hardening, defect 1: "A failed delete likewise removes the object from memory while the
    store keeps it." Now the queue, its messages and its consumers stay, in memory and in the
    store, and a retry deletes it."""
    with connected(life.current) as first:
        first.confirm_delivery()
        first.queue_declare("work", durable=True)
        first.basic_publish("", "work", b"job", PERSISTENT)
        outage.stop()
        refused_with(406, lambda: first.queue_delete("work"))
        channel = first.connection.channel()
        assert channel.queue_declare("work", passive=True).method.message_count == 1
        _method, _properties, body = channel.basic_get("work", auto_ack=True)
        assert body == b"job"
        outage.start()
        channel.queue_delete("work")
        assert not exists(channel, "work")
    broker = life.restart(kill=True)
    with connected(broker) as channel:
        assert not exists(channel, "work")


def routes(channel: BlockingChannel, exchange: str, routing_key: str) -> bool:
    """Whether a mandatory persistent publish to `exchange` with `routing_key` reaches a queue
    (on a channel of its own, with confirms: a basic.return is unroutable)."""
    probe = channel.connection.channel()
    probe.confirm_delivery()
    try:
        probe.basic_publish(exchange, routing_key, b"probe", PERSISTENT, mandatory=True)
    except pika.exceptions.UnroutableError:
        return False
    finally:
        probe.close()
    return True


def test_a_failed_exchange_delete_or_unbind_changes_nothing_and_a_retry_writes_it(
    life: BrokerLife, outage: ThrowawayServer
):
    """Hardening, defect 1: "A failed delete likewise removes the object from memory while the
    store keeps it." For exchange.delete, queue.unbind and exchange.unbind of durable objects:
    the client gets 406, the exchange and both bindings stay in memory and still route, a retry
    once the store is back writes each, and a restart shows them gone."""
    with connected(life.current) as channel:
        channel.exchange_declare("doomed", "fanout", durable=True)
        channel.exchange_declare("source", "direct", durable=True)
        channel.exchange_declare("fan", "fanout", durable=True)
        channel.queue_declare("direct-q", durable=True)
        channel.queue_declare("fan-q", durable=True)
        channel.queue_bind("direct-q", "source", "k")
        channel.exchange_bind("fan", "source", "e")
        channel.queue_bind("fan-q", "fan")
        connection = channel.connection
        outage.stop()
        refused_with(406, lambda: channel.exchange_delete("doomed"))
        second = connection.channel()
        refused_with(406, lambda: second.queue_unbind("direct-q", "source", "k"))
        third = connection.channel()
        refused_with(406, lambda: third.exchange_unbind("fan", "source", "e"))
        probe = connection.channel()
        probe.exchange_declare("doomed", "fanout", passive=True)

        outage.start()
        # Memory is as it was: the failed unbinds left both routes (the probes need the store).
        assert routes(probe, "source", "k") and routes(probe, "source", "e")
        assert probe.queue_declare("direct-q", passive=True).method.message_count == 1
        assert probe.queue_declare("fan-q", passive=True).method.message_count == 1
        probe.exchange_delete("doomed")
        probe.queue_unbind("direct-q", "source", "k")
        probe.exchange_unbind("fan", "source", "e")
        assert not routes(probe, "source", "k") and not routes(probe, "source", "e")

    broker = life.restart(kill=True)
    with connected(broker) as channel:
        assert not routes(channel, "source", "k") and not routes(channel, "source", "e")
        channel.queue_bind("fan-q", "fan")  # the exchange and the queue themselves are kept
        refused_with(404, lambda: channel.exchange_declare("doomed", "fanout", passive=True))


def test_a_nacked_publish_is_on_no_queue_and_a_failed_commit_shows_nothing(
    life: BrokerLife, outage: ThrowawayServer
):
    """Hardening, defect 2: "nack means the broker did not take the message: it is on no queue.
    Same for a failed tx.commit: nothing of the transaction is visible." Before, a nacked message
    was delivered to consumers, and a publisher retrying on nack made duplicates."""
    with connected(life.current) as consumer, connected(life.current) as publisher:
        consumer.queue_declare("events", durable=True)
        consumer.queue_declare("copies", durable=False)
        consumer.queue_bind("events", "amq.fanout")
        consumer.queue_bind("copies", "amq.fanout")
        received: list[bytes] = []
        consumer.basic_consume("events", lambda ch, m, p, body: received.append(body))
        consumer.basic_consume("copies", lambda ch, m, p, body: received.append(body))
        publisher.confirm_delivery()
        outage.stop()
        with pytest.raises(pika.exceptions.NackError):
            publisher.basic_publish("amq.fanout", "", b"not taken", PERSISTENT)
        transacted = publisher.connection.channel()
        transacted.tx_select()
        transacted.basic_publish("amq.fanout", "", b"not committed", PERSISTENT)
        transacted.basic_publish("", "copies", b"not committed either")
        refused_with(406, transacted.tx_commit)
        consumer.connection.process_data_events(time_limit=0.5)
        assert received == []
        probe = publisher.connection.channel()
        assert probe.queue_declare("events", passive=True).method.message_count == 0
        assert probe.queue_declare("copies", passive=True).method.message_count == 0

        outage.start()
        publisher.basic_publish("amq.fanout", "", b"taken", PERSISTENT)
        while len(received) < 2:
            consumer.connection.process_data_events(time_limit=1)
        assert received == [b"taken", b"taken"]


def publish_jobs(channel: BlockingChannel, count: int) -> None:
    """A durable queue "jobs" with `count` confirmed persistent messages "job 0", "job 1", ..."""
    channel.confirm_delivery()
    channel.queue_declare("jobs", durable=True)
    for number in range(count):
        channel.basic_publish("", "jobs", f"job {number}".encode(), PERSISTENT)


def drain_jobs(broker: RunningBroker) -> list[tuple[bytes, bool]]:
    """Every message left on "jobs", in order, with its redelivered flag."""
    found = []
    with connected(broker) as channel:
        while True:
            method, _properties, body = channel.basic_get("jobs", auto_ack=True)
            if method is None:
                return found
            found.append((body, method.redelivered))


@pytest.mark.parametrize(
    ("kill", "expected"),
    [
        # SIGKILL ends the run: every message left comes back flagged, since the broker cannot
        # know which were delivered before a crash (job 2 and job 3 never were).
        (True, [(b"job 1", True), (b"job 2", True), (b"job 3", True)]),
        # A clean stop (SIGTERM, store up), without a crash's blanket flag: the one never
        # delivered comes back unflagged.
        (False, [(b"job 1", True), (b"job 2", False), (b"job 3", False)]),
    ],
    ids=["killed", "stopped"],
)
def test_acknowledgements_and_deliveries_in_an_outage_are_written_when_the_store_returns(
    life: BrokerLife, outage: ThrowawayServer, kill: bool, expected: list[tuple[bytes, bool]]
):
    """Hardening, defect 4: "An ack that could not be persisted must not be reported as done:
    after a restart the message comes back with the redelivered flag set." The broker keeps
    the acknowledgements and delivery counts its store refused and writes them once it is back:
    the acknowledged message does not come back, the one delivered and not acknowledged comes
    back redelivered. Before, both were forgotten: the acknowledged message came back, and
    neither was marked redelivered."""
    with connected(life.current) as channel:
        publish_jobs(channel, 3)
        outage.stop()
        first, _properties, _body = channel.basic_get("jobs")
        channel.basic_ack(first.delivery_tag)
        _second, _properties, body = channel.basic_get("jobs")
        assert body == b"job 1"
        # A consumer-side process_data_events lets the failed commit happen while the store is
        # down; the broker retries it later by itself.
        channel.connection.process_data_events(time_limit=1.5)
        outage.start()
        channel.basic_publish("", "jobs", b"job 3", PERSISTENT)  # confirmed: all is written
    assert drain_jobs(life.restart(kill=kill)) == expected


def test_an_acknowledgement_unwritten_at_a_clean_stop_comes_back_redelivered(
    life: BrokerLife, outage: ThrowawayServer
):
    """Hardening, defect 4: "An ack that could not be persisted must not be reported as done:
    after a restart the message comes back with the redelivered flag set." The broker is stopped
    cleanly (SIGTERM) while PostgreSQL is still down, so the acknowledgement was never written
    (the shutdown says so); with the store back, a new broker delivers that message again,
    flagged redelivered. That stop could not be recorded either, so the new broker recovers as
    after a crash ("unclean_stop") and flags the never-delivered message too: the spec's
    redelivered is a hint that a message "may have been previously delivered"."""
    with connected(life.current) as channel:
        publish_jobs(channel, 2)
        outage.stop()
        method, _properties, body = channel.basic_get("jobs")
        assert body == b"job 0"
        channel.basic_ack(method.delivery_tag)
        channel.connection.process_data_events(time_limit=1.0)
    life.current.stop()
    assert "store write failed at shutdown" in life.current.log()

    outage.start()
    life.current = start_broker(life.workdir, environment=life.environment)
    assert drain_jobs(life.current) == [(b"job 0", True), (b"job 1", True)]
    [recovered] = [
        line for line in life.current.log().splitlines() if "recovered 2 messages" in line
    ]
    assert "unclean_stop=true" in recovered.lower(), recovered
