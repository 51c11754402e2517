"""A virtual host spread over the workers (`[broker] workers = 2`, `spread_vhosts = ["/"]`;
README, "Worker processes"; docs/multi-core.md, step 6): every worker serves it, each of its
queues is run by one worker, and its exchanges and bindings are the same on every worker.
Clients cannot tell it from a broker of one process (a consumer of a queue another worker
runs included), except where the README says what is refused until built. On SQLite and on
PostgreSQL.

Each test picks the worker a connection lands on (`connection_on`: a connection to a spread
virtual host stays in the worker that accepted it) and queue names by their owner
(`queue_owner`), so that every check crosses between the workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from batonmq.cli.broker import EXIT_USAGE
from batonmq.server.placement import owner_of, queue_owner
from tests.brokerproc import (
    RunningBroker,
    connection_on,
    http_environment,
    start_broker,
    wait_until,
    worker_pids,
)
from tests.httpapi import call

pytestmark = pytest.mark.integration

WORKERS = 2
#: The home of "/": the worker that sequences and writes its exchanges and bindings.
HOME = owner_of("/", WORKERS)
OTHER = 1 - HOME
#: Requests per management check: enough that both workers answer some.
ATTEMPTS = 6
PERSISTENT = pika.BasicProperties(delivery_mode=2)

NOT_FOUND = 404
ACCESS_REFUSED = 403
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
NO_ROUTE = 312


def owned_by(worker: int, prefix: str = "q") -> str:
    """A queue name of "/" whose owner is `worker`."""
    return next(
        name for n in range(1000) if queue_owner("/", name := f"{prefix}{n}", WORKERS) == worker
    )


@pytest.fixture(params=["sqlite", "postgres"])
def environment(request: pytest.FixtureRequest) -> dict[str, str]:
    """Two workers, "/" spread over them, on a fresh store of either kind."""
    spread = {"BATONMQ__BROKER__WORKERS": str(WORKERS), "BATONMQ__BROKER__SPREAD_VHOSTS": '["/"]'}
    if request.param == "sqlite":
        return {**spread, "BATONMQ__PERSIST__STORE": "sqlite"}
    return {
        **spread,
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": request.getfixturevalue("postgres_dsn"),
    }


@pytest.fixture
def broker(tmp_path: Path, environment: dict[str, str]) -> Iterator[RunningBroker]:
    with start_broker(tmp_path, http=True, environment=environment) as running:
        yield running


def _channel(connection: pika.BlockingConnection) -> BlockingChannel:
    channel = connection.channel()
    channel.confirm_delivery()
    return channel


def _refused(channel: BlockingChannel, declare: Callable[[], object]) -> tuple[int, str]:
    """The reply code and text of the channel exception `declare()` provokes."""
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        declare()
    return closed.value.reply_code, closed.value.reply_text


def _get_all(channel: BlockingChannel, queue: str) -> list[bytes]:
    bodies = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    return bodies


def test_topology_declared_on_one_worker_is_there_on_the_other(broker: RunningBroker) -> None:
    """c1. AMQP 0-9-1 spec, exchange.declare and queue.declare "passive": the server answers
    whether the object exists; RabbitMQ: bindings are in force once bind-ok returns. A
    binding made on the home to a queue the other worker owns routes what the other worker's
    clients publish."""
    queue = owned_by(OTHER)
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.exchange_declare("c1", "direct")
        channel.queue_declare(queue)
        channel.queue_bind(queue, "c1", "k")
    with connection_on(broker, OTHER) as other:
        channel = _channel(other)
        channel.exchange_declare("c1", passive=True)
        assert channel.queue_declare(queue, passive=True).method.message_count == 0
        channel.basic_publish("c1", "k", b"through the binding", mandatory=True)
        assert _get_all(channel, queue) == [b"through the binding"]


def test_a_redeclare_with_other_arguments_is_refused_on_either_worker(
    broker: RunningBroker,
) -> None:
    """c2. Spec, queue.declare: a redeclare "MUST ... be equivalent", else 406
    PRECONDITION_FAILED (RabbitMQ: "inequivalent arg")."""
    queue = owned_by(HOME)
    with connection_on(broker, HOME) as home:
        _channel(home).queue_declare(queue, arguments={"x-max-length": 10})
    with connection_on(broker, OTHER) as other:
        channel = _channel(other)
        code, text = _refused(
            channel, lambda: channel.queue_declare(queue, arguments={"x-max-length": 20})
        )
    assert code == PRECONDITION_FAILED
    assert "inequivalent arg 'x-max-length'" in text


def test_an_exclusive_queue_is_its_connections_wherever_it_runs(broker: RunningBroker) -> None:
    """c3. Spec, queue.declare exclusive: "Exclusive queues may only be accessed by the current
    connection, and are deleted when that connection closes"; another connection's declare is
    405 RESOURCE_LOCKED (RabbitMQ, "Exclusive Queues"). A client-named exclusive queue that the
    other worker runs is still its declaring connection's, and goes with it everywhere."""
    queue = owned_by(OTHER, "exclusive")
    with connection_on(broker, HOME) as owner:
        _channel(owner).queue_declare(queue, exclusive=True)
        with connection_on(broker, OTHER) as intruder:
            channel = _channel(intruder)
            code, _text = _refused(channel, lambda: channel.queue_declare(queue))
        assert code == RESOURCE_LOCKED

    def gone_on(worker: int) -> bool:
        with connection_on(broker, worker) as connection:
            channel = connection.channel()
            try:
                channel.queue_declare(queue, passive=True)
            except pika.exceptions.ChannelClosedByBroker as closed:
                return bool(closed.reply_code == NOT_FOUND)
            return False

    for worker in (HOME, OTHER):
        wait_until(lambda worker=worker: gone_on(worker), f"'{queue}' gone on worker {worker}")


def test_a_queue_deleted_on_one_worker_no_longer_takes_messages_on_the_other(
    broker: RunningBroker,
) -> None:
    """c4. Spec, basic.publish mandatory: a message that cannot be routed is returned with 312
    NO_ROUTE. Once delete-ok came on one worker, the other routes nothing to the queue."""
    queue = owned_by(HOME, "deleted")
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.queue_declare(queue)
        channel.queue_bind(queue, "amq.direct", "c4")
        with connection_on(broker, OTHER) as other:
            _channel(other).queue_delete(queue)
        with pytest.raises(pika.exceptions.UnroutableError) as returned:
            channel.basic_publish("amq.direct", "c4", b"nowhere", mandatory=True)
    [message] = returned.value.messages
    assert message.method.reply_code == NO_ROUTE


def test_a_transient_exchange_and_binding_outlive_their_homes_death(
    broker: RunningBroker,
) -> None:
    """c5. docs/multi-core.md, step 4: "a worker that restarts is not a node that went down": a
    transient exchange and its binding, declared before SIGKILL of the home, are there after it
    is started again (the other worker holds them)."""
    queue = owned_by(OTHER, "kept")
    with connection_on(broker, OTHER) as other:
        channel = _channel(other)
        channel.exchange_declare("c5", "direct", durable=False)
        channel.queue_declare(queue)
        channel.queue_bind(queue, "c5", "k")
        before = worker_pids(broker.log())
        os.kill(before[HOME], signal.SIGKILL)
        wait_until(
            lambda: worker_pids(broker.log()).get(HOME) not in (None, before[HOME]),
            "the home started again",
        )
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.exchange_declare("c5", passive=True)
        channel.basic_publish("c5", "k", b"after the restart", mandatory=True)
    with connection_on(broker, OTHER) as other:
        assert _get_all(_channel(other), queue) == [b"after the restart"]


def test_durable_topology_across_workers_survives_a_restart(
    tmp_path: Path, environment: dict[str, str], broker: RunningBroker
) -> None:
    """c6. Spec, exchange.declare and queue.declare "durable": durable exchanges and queues
    (and the bindings between them) survive a server restart. The queue's row is the other
    worker's, the exchange's and the binding's the home's."""
    queue = owned_by(OTHER, "durable")
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.exchange_declare("c6", "direct", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, "c6", "k")
    broker.stop()

    with start_broker(tmp_path, http=True, environment=environment) as again:
        for worker in (HOME, OTHER):
            with connection_on(again, worker) as connection:
                channel = _channel(connection)
                channel.exchange_declare("c6", passive=True)
                channel.queue_declare(queue, passive=True)
                channel.basic_publish("c6", "k", f"via {worker}".encode(), PERSISTENT, True)
        with connection_on(again, OTHER) as other:
            assert _get_all(_channel(other), queue) == [
                f"via {HOME}".encode(),
                f"via {OTHER}".encode(),
            ]


def test_the_management_api_shows_each_queue_once_with_its_owners_figures(
    broker: RunningBroker,
) -> None:
    """c7. RabbitMQ's management API, whichever node takes the request: `GET
    /api/queues/{vhost}/{name}` answers the queue's own figures; `/api/queues`,
    `/api/queues/{vhost}` and `/api/bindings` list each object once; `/api/vhosts/{vhost}`
    counts every queue's messages; importing definitions leaves an existing queue as it is
    (RabbitMQ: "existing objects are not changed"), wherever it runs."""
    queues = {worker: owned_by(worker, "listed") for worker in (HOME, OTHER)}
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        for worker, queue in queues.items():
            channel.queue_declare(queue, durable=True)
            channel.queue_bind(queue, "amq.direct", queue)
            for _ in range(worker + 1):
                channel.basic_publish("amq.direct", queue, b"counted", PERSISTENT)
    for _ in range(ATTEMPTS):
        for worker, queue in queues.items():
            status, body = call(broker, "GET", f"/api/queues/%2F/{urllib.parse.quote(queue)}")
            assert status == 200
            assert isinstance(body, dict)
            assert body["messages"] == worker + 1
        for path in ("/api/queues", "/api/queues/%2F"):
            status, listed = call(broker, "GET", path)
            assert status == 200
            assert isinstance(listed, list)
            assert sorted(item["name"] for item in listed) == sorted(queues.values())
        status, vhost = call(broker, "GET", "/api/vhosts/%2F")
        assert isinstance(vhost, dict)
        assert vhost["messages"] == 3
        status, bindings = call(broker, "GET", "/api/bindings")
        assert isinstance(bindings, list)
        to_queues = [
            (item["source"], item["destination"])
            for item in bindings
            if item["destination"] in queues.values()
        ]
        # The default exchange's and amq.direct's, each once.
        assert sorted(to_queues) == sorted(
            [("", queue) for queue in queues.values()]
            + [("amq.direct", queue) for queue in queues.values()]
        )
    other_arguments = {
        "queues": [
            {"name": queue, "vhost": "/", "durable": True, "auto_delete": False,
             "arguments": {"x-max-length": 5}}
            for queue in queues.values()
        ]
    }  # fmt: skip
    status, _body = call(broker, "POST", "/api/definitions", other_arguments)
    assert status in (201, 204)


def test_spread_virtual_hosts_are_refused_in_an_ha_member(tmp_path: Path) -> None:
    """c8. README, "Worker processes": `spread_vhosts` is refused at start with
    `cluster.ha = true` (a takeover moves virtual hosts whole), in one line, with the status
    of a configuration error."""
    environment = {
        "BATONMQ__BROKER__WORKERS": "2",
        "BATONMQ__BROKER__SPREAD_VHOSTS": '["/"]',
        "BATONMQ__CLUSTER__HA": "true",
        "BATONMQ__CLUSTER__CLUSTERID": "c8",
        "BATONMQ__CLUSTER__BROKERID": "b1",
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": "postgresql://127.0.0.1:1/none",
    }
    finished = subprocess.run(
        [sys.executable, "-m", "batonmq", "--data-dir", str(tmp_path / "data")],
        env={**os.environ, **http_environment(None), **environment},
        capture_output=True,
        timeout=30,
        check=False,
    )
    output = (finished.stdout + finished.stderr).decode(errors="replace")
    assert finished.returncode == EXIT_USAGE, output
    [line] = output.strip().splitlines()
    assert "broker.spread_vhosts" in line
    assert "cluster.ha" in line


def test_a_stream_is_refused_in_a_spread_virtual_host(broker: RunningBroker) -> None:
    """c8. README, "Worker processes": until built, a stream queue (`x-queue-type: stream`) is
    refused at queue.declare in a spread virtual host with 406 PRECONDITION_FAILED."""
    with connection_on(broker, HOME) as home:
        channel = home.channel()
        code, text = _refused(
            channel,
            lambda: channel.queue_declare(
                "stream", durable=True, arguments={"x-queue-type": "stream"}
            ),
        )
    assert code == PRECONDITION_FAILED
    assert "stream" in text


def test_ten_thousand_confirmed_messages_cross_to_their_queues_owner(
    broker: RunningBroker,
) -> None:
    """d1. RabbitMQ, "Publisher Confirms": a persistent message is confirmed once written;
    AMQP 0-9-1 §4.7: messages published on one channel to one queue are delivered in the order
    published. Published on one worker, run by the other: every one acked, consumed once, in
    order."""
    queue = owned_by(OTHER, "demo")
    count = 10_000
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.queue_declare(queue, durable=True)
        for number in range(count):
            channel.basic_publish("", queue, str(number).encode(), PERSISTENT)
    with connection_on(broker, OTHER) as other:
        channel = other.channel()
        channel.basic_qos(prefetch_count=500)
        received: list[bytes] = []
        for _method, _properties, body in channel.consume(queue, auto_ack=True):
            received.append(body)
            if len(received) == count:
                break
        channel.cancel()
    assert received == [str(number).encode() for number in range(count)]


def test_a_full_reject_publish_queue_elsewhere_nacks(broker: RunningBroker) -> None:
    """d4. RabbitMQ, "Queue Length Limit": with `x-overflow: reject-publish` a publish to a full
    queue is nacked to a confirming publisher, also when another worker runs the queue."""
    queue = owned_by(OTHER, "full")
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.queue_declare(queue, arguments={"x-overflow": "reject-publish", "x-max-length": 1})
        channel.basic_publish("", queue, b"first")
        with pytest.raises(pika.exceptions.NackError):
            channel.basic_publish("", queue, b"second")
    with connection_on(broker, OTHER) as other:
        assert _get_all(_channel(other), queue) == [b"first"]


def test_an_alternate_exchange_delivers_across(broker: RunningBroker) -> None:
    """d5. RabbitMQ, "Alternate Exchanges": a message its exchange cannot route goes to the
    alternate exchange, whose queue another worker may run; a basic.get on the worker that
    published (not the queue's owner) takes it."""
    queue = owned_by(OTHER, "alternate")
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.exchange_declare("d5-ae", "fanout")
        channel.exchange_declare("d5", "direct", arguments={"alternate-exchange": "d5-ae"})
        channel.queue_declare(queue)
        channel.queue_bind(queue, "d5-ae")
        channel.basic_publish("d5", "unbound", b"to the alternate", mandatory=True)
        assert _get_all(home.channel(), queue) == [b"to the alternate"]


def test_a_consumer_on_the_worker_that_does_not_own_the_queue_gets_every_message(
    broker: RunningBroker,
) -> None:
    """e1. RabbitMQ: a client cannot tell where the queue runs. A consumer connected to the
    worker that does not run the queue, with a prefetch of 100 (RabbitMQ "Consumer Prefetch")
    and acks every 50 messages (multiple=true), gets 10,000 confirmed persistent messages in
    the order they were published (AMQP 0-9-1 §4.7), each once; then the owner holds none."""
    queue = owned_by(OTHER, "consumed")
    count = 10_000
    with connection_on(broker, OTHER) as owner:
        channel = _channel(owner)
        channel.queue_declare(queue, durable=True)
        for number in range(count):
            channel.basic_publish("", queue, str(number).encode(), PERSISTENT)
    with connection_on(broker, HOME) as home:
        channel = home.channel()
        channel.basic_qos(prefetch_count=100)
        received: list[bytes] = []
        for method, _properties, body in channel.consume(queue):
            received.append(body)
            if len(received) % 50 == 0:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if len(received) == count:
                break
        channel.cancel()
    assert received == [str(number).encode() for number in range(count)]
    with connection_on(broker, OTHER) as owner:
        declared = owner.channel().queue_declare(queue, passive=True)
        assert (declared.method.message_count, declared.method.consumer_count) == (0, 0)


def test_the_owner_killed_while_a_consumer_elsewhere_consumes_loses_nothing_confirmed(
    broker: RunningBroker,
) -> None:
    """e2. RabbitMQ "Consumer Cancel Notification": a consumer whose queue's worker fails gets
    basic.cancel; "Publisher Confirms": a confirmed persistent message survives the failure
    (the supervisor starts the worker again, which recovers its queue). Consuming again after
    it, every confirmed message arrives (some twice: acks on their way may be lost, at least
    once)."""
    queue = owned_by(OTHER, "killed")
    count = 2_000
    sent = {str(number).encode() for number in range(count)}
    with connection_on(broker, HOME) as home:
        channel = _channel(home)
        channel.queue_declare(queue, durable=True)
        for body in sorted(sent):
            channel.basic_publish("", queue, body, PERSISTENT)
        consuming = home.channel()
        consuming.basic_qos(prefetch_count=50)
        received: list[bytes] = []
        cancelled: list[object] = []

        def take(
            channel: BlockingChannel,
            method: pika.spec.Basic.Deliver,
            _properties: pika.BasicProperties,
            body: bytes,
        ) -> None:
            received.append(body)
            channel.basic_ack(method.delivery_tag)

        consuming.add_on_cancel_callback(cancelled.append)
        consuming.basic_consume(queue, take)
        while len(received) < count // 4:
            home.process_data_events(0.05)
        before = worker_pids(broker.log())
        os.kill(before[OTHER], signal.SIGKILL)
        while not cancelled:
            home.process_data_events(0.05)
        wait_until(
            lambda: worker_pids(broker.log()).get(OTHER) not in (None, before[OTHER]),
            "the owner started again",
        )
        refusals: list[int] = []

        def consumed_again() -> bool:
            again = home.channel()
            again.basic_qos(prefetch_count=50)
            try:
                again.basic_consume(queue, take)
            except pika.exceptions.ChannelClosedByBroker as closed:
                refusals.append(closed.reply_code)  # until the new owner's link is up
                return False
            return True

        wait_until(consumed_again, "a consumer again")
        assert set(refusals) <= {NOT_FOUND}
        wait_until(
            lambda: home.process_data_events(0.05) or set(received) >= sent,
            "every confirmed message",
        )
    assert set(received) == sent


def test_the_management_api_lists_a_consumer_across_once_and_counts_it_on_the_queue(
    broker: RunningBroker,
) -> None:
    """e3. RabbitMQ's management API: `GET /api/consumers` lists each consumer once, with its
    queue and channel, and `GET /api/queues/{vhost}/{name}` counts the queue's `consumers`,
    whichever worker runs the queue and whichever serves the consumer's connection."""
    queue = owned_by(OTHER, "watched")
    with connection_on(broker, HOME) as home:
        channel = home.channel()
        channel.queue_declare(queue)
        channel.basic_consume(queue, lambda *_delivery: None, consumer_tag="watcher")
        for _ in range(ATTEMPTS):
            status, listed = call(broker, "GET", "/api/consumers")
            assert status == 200
            assert isinstance(listed, list)
            mine = [item for item in listed if item["queue"]["name"] == queue]
            assert [item["consumer_tag"] for item in mine] == ["watcher"]
            status, body = call(broker, "GET", f"/api/queues/%2F/{urllib.parse.quote(queue)}")
            assert isinstance(body, dict)
            assert body["consumers"] == 1


def test_an_exclusive_queue_run_elsewhere_is_consumed_by_its_connection_alone(
    broker: RunningBroker,
) -> None:
    """e4. Spec, queue.declare exclusive: "Exclusive queues may only be accessed by the current
    connection". Its declaring connection gets from it and consumes it although the other
    worker runs it; another connection's basic.consume is 405 RESOURCE_LOCKED."""
    queue = owned_by(OTHER, "private")
    with connection_on(broker, HOME) as owner:
        channel = _channel(owner)
        channel.queue_declare(queue, exclusive=True)
        channel.basic_publish("", queue, b"got")
        assert _get_all(channel, queue) == [b"got"]
        channel.basic_publish("", queue, b"consumed")
        for _method, _properties, body in channel.consume(queue, auto_ack=True):
            assert body == b"consumed"
            break
        channel.cancel()
        with connection_on(broker, OTHER) as intruder:
            refused = intruder.channel()
            code, _text = _refused(
                refused, lambda: refused.basic_consume(queue, lambda *_delivery: None)
            )
        assert code == RESOURCE_LOCKED
