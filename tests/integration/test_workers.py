"""A broker with `[broker] workers = 2` (README, "Worker processes"): real worker processes under
the supervisor, on one store (each test on SQLite and on PostgreSQL where both apply), driven by
pika, aio-pika and kombu.

Every connection to a virtual host is served by the worker that owns it, whichever worker
accepted it: shown by behaviour that only one process can give (an exclusive queue is locked
for every other connection to its virtual host, a queue declared once is seen by every
connection), and by the log, where each line names its worker."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import signal
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import aio_pika
import aiormq.exceptions
import pika
import pika.credentials
import pika.exceptions
import pytest
from kombu import Connection, Queue

from batonmq.engine import memory
from batonmq.server.placement import owner_of
from tests.brokerproc import (
    RunningBroker,
    confirming_channel,
    connect,
    failed_start,
    process_gone,
    run_batonctl,
    start_broker,
    wait_until,
    worker_pids,
)
from tests.tlsca import KeyPair, TestCA

WORKERS = 2
#: Two virtual hosts owned by each worker.
VHOSTS = {
    owner: [
        name for name in ["/", *(f"tenant{n}" for n in range(20))] if owner_of(name, 2) == owner
    ][:2]
    for owner in range(WORKERS)
}
ALL_VHOSTS = [vhost for owned in VHOSTS.values() for vhost in owned]
#: Connections per virtual host and check: enough that both workers accept some.
ATTEMPTS = 4


@dataclass
class Workers:
    broker: RunningBroker
    environment: dict[str, str]

    def with_vhost(self, vhost: str) -> RunningBroker:
        return RunningBroker(
            self.broker.host, self.broker.port, vhost=vhost, process=self.broker.process
        )

    def pids(self) -> dict[int, int]:
        """The latest pid of each worker, from its "worker started" line."""
        return worker_pids(self.broker.log())


@pytest.fixture(params=["sqlite", "postgres"])
def store_environment(request: pytest.FixtureRequest) -> dict[str, str]:
    """The configuration of a fresh store of either kind: SQLite in the data directory, or a
    PostgreSQL database of the test's own."""
    if request.param == "sqlite":
        return {"BATONMQ__PERSIST__STORE": "sqlite"}
    return {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": request.getfixturevalue("postgres_dsn"),
    }


def _start_workers(
    workdir: Path, store_environment: dict[str, str], tls: dict[str, str] | None = None
) -> Workers:
    """Two workers on a fresh store with the virtual hosts of VHOSTS, where guest may do
    anything (added on the store before the broker starts); with `tls`, an amqps listener
    too, with those settings."""
    environment = dict(store_environment)
    (workdir / "data").mkdir()
    for vhost in ALL_VHOSTS:
        if vhost == "/":
            continue
        for command in (
            ("vhost", "add", vhost),
            ("permissions", "set", "guest", ".*", ".*", ".*", "--vhost", vhost),
        ):
            done = run_batonctl(workdir, *command, environment=environment)
            assert done.returncode == 0, done.stderr
    environment["BATONMQ__BROKER__WORKERS"] = str(WORKERS)
    environment.update(tls or {})
    broker = start_broker(workdir, environment=environment, amqps=tls is not None)
    wait_until(lambda: 'msg="broker started"' in broker.log(), "both workers to serve")
    return Workers(broker, environment)


@pytest.fixture
def workers(tmp_path: Path, store_environment: dict[str, str]) -> Iterator[Workers]:
    started = _start_workers(tmp_path, store_environment)
    try:
        yield started
    finally:
        started.broker.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCA, KeyPair, KeyPair]:
    """A CA made by the test, the broker's certificate, and a client's for CN=guest."""
    ca = TestCA(tmp_path_factory.mktemp("pki") / "ca")
    return ca, ca.server(), ca.client("guest")


@pytest.fixture
def tls_workers(
    tmp_path: Path, store_environment: dict[str, str], pki: tuple[TestCA, KeyPair, KeyPair]
) -> Iterator[Workers]:
    """`workers` with an amqps listener that asks for client certificates and offers EXTERNAL."""
    ca, server, _guest = pki
    tls = {
        "BATONMQ__LISTENERS__AMQPS__CERTFILE": str(server.certfile),
        "BATONMQ__LISTENERS__AMQPS__KEYFILE": str(server.keyfile),
        "BATONMQ__LISTENERS__AMQPS__CAFILE": str(ca.certfile),
        "BATONMQ__LISTENERS__AMQPS__VERIFY": "required",
        "BATONMQ__LISTENERS__AMQPS__MECHANISMS": "PLAIN EXTERNAL",
    }
    started = _start_workers(tmp_path, store_environment, tls)
    try:
        yield started
    finally:
        started.broker.stop()


def _tls_parameters(
    broker: RunningBroker, vhost: str, pki: tuple[TestCA, KeyPair, KeyPair]
) -> pika.ConnectionParameters:
    """pika over amqps to `vhost`, logging in with EXTERNAL as the certificate's CN."""
    ca, _server, guest = pki
    context = ssl.create_default_context(cafile=ca.certfile)
    context.load_cert_chain(guest.certfile, guest.keyfile)
    return pika.ConnectionParameters(
        "127.0.0.1",
        broker.amqps_port,
        vhost,
        pika.credentials.ExternalCredentials(),
        ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
    )


def _field(line: str, name: str) -> str:
    found = re.search(rf"\b{name}=(\S+)", line)
    assert found is not None, line
    return found.group(1).strip('"')


def _opened_by_worker(log: str) -> list[tuple[str, int]]:
    """(virtual host, worker) of every "connection opened" line."""
    return [
        (_field(line, "vhost"), int(_field(line, "worker")))
        for line in log.splitlines()
        if 'msg="connection opened"' in line
    ]


def test_every_connection_to_a_virtual_host_meets_the_others_in_its_owner(
    workers: Workers,
) -> None:
    """RabbitMQ's rule for exclusive queues ("used by only one connection": another connection
    that declares it gets 405 RESOURCE_LOCKED) and a queue declared once being there for every
    connection to its virtual host hold as with one process: only one process can give them."""
    opened = 0
    for vhost in ALL_VHOSTS:
        with connect(workers.broker, vhost=vhost) as holder:
            opened += 1
            channel = holder.channel()
            channel.queue_declare("mine", exclusive=True)
            channel.queue_declare("shared", durable=True)
            for _ in range(ATTEMPTS):
                with connect(workers.broker, vhost=vhost) as other:
                    opened += 1
                    other_channel = other.channel()
                    other_channel.queue_declare("shared", passive=True)
                    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
                        other_channel.queue_declare("mine", exclusive=True)
                    assert locked.value.reply_code == 405

    log = workers.broker.log()
    assert sorted(set(_opened_by_worker(log))) == sorted(
        (vhost, owner) for owner, owned in VHOSTS.items() for vhost in owned
    )
    # Each connection was accepted once, and once more by its owner when handed over.
    accepted = [line for line in log.splitlines() if 'msg="connection accepted"' in line]
    assert {int(_field(line, "worker")) for line in accepted} == {0, 1}
    assert len(accepted) > opened


async def test_aio_pika_clients_on_each_worker(workers: Workers) -> None:
    """aio-pika's robust connections on a virtual host of each worker: an exclusive queue is
    RESOURCE_LOCKED for a second connection, and a message goes from one connection to the
    other."""
    for owned in VHOSTS.values():
        url = _url(workers.broker, owned[0])
        first = await aio_pika.connect_robust(url)
        second = await aio_pika.connect_robust(url)
        try:
            mine = await (await first.channel()).declare_queue(exclusive=True)
            other = await second.channel()
            with pytest.raises(aiormq.exceptions.ChannelLockedResource):
                await other.declare_queue(mine.name, exclusive=True)
            publisher = await first.channel(publisher_confirms=True)
            queue = await publisher.declare_queue("aio", durable=True)
            await publisher.default_exchange.publish(aio_pika.Message(b"hi"), "aio")
            consumer = await (await second.channel()).declare_queue("aio", passive=True)
            message = await consumer.get(timeout=5)
            assert message.body == b"hi"
            await message.ack()
            await queue.delete()
        finally:
            await first.close()
            await second.close()


def test_kombu_publishes_and_consumes_across_connections(workers: Workers) -> None:
    """kombu (Celery's transport) with confirms, one connection publishing and another
    consuming, on a virtual host of each worker."""
    for owned in VHOSTS.values():
        vhost = owned[1]
        name = f"kombu.{uuid.uuid4().hex[:8]}"
        with Connection(
            _url(workers.broker, vhost, "pyamqp"), transport_options={"confirm_publish": True}
        ) as producing:
            producing.Producer().publish(
                {"n": 1}, routing_key=name, declare=[Queue(name, durable=True)], serializer="json"
            )
        with Connection(_url(workers.broker, vhost, "pyamqp")) as consuming:
            message = consuming.SimpleQueue(name).get(timeout=5)
            assert message.payload == {"n": 1}
            message.ack()


def test_refused_logins_and_virtual_hosts_are_refused_as_by_one_process(
    workers: Workers,
) -> None:
    """Spec 2.2.4 and RabbitMQ: a bad password is refused before connection.open (pika:
    ProbableAuthenticationError), a virtual host that does not exist at connection.open
    (ProbableAccessDeniedError); whichever worker accepted the connection."""
    for _ in range(ATTEMPTS):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect(workers.broker, password="wrong")
        for owner in range(WORKERS):
            missing = next(
                name for n in range(100) if owner_of(name := f"missing{n}", WORKERS) == owner
            )
            with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
                connect(workers.broker, vhost=missing)


@pytest.mark.parametrize("store_environment", ["postgres"], indirect=True)
def test_a_user_added_on_the_store_can_log_in_on_every_worker(workers: Workers) -> None:
    """Users and permissions are the store's, shared by the workers; each keeps its copy in
    line as the members of an HA cluster do (GlassFish MQ Technical Overview, Table 4-1: the
    configuration is in the shared store, which every broker sees). A user added while the
    workers run logs in on a virtual host of each, without a restart."""
    workdir = workers.broker.data_dir.parent
    environment = {key: value for key, value in workers.environment.items() if "WORKERS" not in key}
    done = run_batonctl(
        workdir, "user", "add", "alice", "--password", "pw", environment=environment
    )
    assert done.returncode == 0, done.stderr
    for owned in VHOSTS.values():
        done = run_batonctl(
            workdir,
            "permissions",
            "set",
            "alice",
            ".*",
            ".*",
            ".*",
            "--vhost",
            owned[0],
            environment=environment,
        )
        assert done.returncode == 0, done.stderr

    def logs_in(vhost: str) -> bool:
        try:
            connect(workers.broker, "alice", "pw", vhost).close()
        except pika.exceptions.AMQPConnectionError:
            return False
        return True

    for vhost in (owned[0] for owned in VHOSTS.values()):
        wait_until(
            functools.partial(lambda name: all(logs_in(name) for _ in range(ATTEMPTS)), vhost),
            "alice on " + vhost,
        )


def test_a_killed_worker_comes_back_and_its_siblings_clients_never_notice(
    workers: Workers,
) -> None:
    """SIGKILL of one worker: the supervisor starts it again (BMQ-1021), every persistent
    message it confirmed in a durable queue is there after, and a client of the other worker
    keeps its connection through it all."""
    survivor_vhost, victim_vhost = VHOSTS[0][0], VHOSTS[1][0]
    victim_broker = workers.with_vhost(victim_vhost)
    with confirming_channel(victim_broker) as channel:
        channel.queue_declare("kept", durable=True)
        for n in range(50):
            channel.basic_publish(
                "", "kept", str(n).encode(), pika.BasicProperties(delivery_mode=2)
            )
    with connect(workers.broker, vhost=survivor_vhost) as survivor:
        survivor_channel = survivor.channel()
        survivor_channel.queue_declare("alive")
        before = workers.pids()
        os.kill(before[1], signal.SIGKILL)
        wait_until(lambda: workers.pids().get(1) not in (None, before[1]), "worker 1 again")
        assert 'msg="worker died; restarting"' in workers.broker.log()
        assert workers.pids()[0] == before[0]

        # The survivor's connection was never closed: it goes on publishing and getting.
        survivor_channel.basic_publish("", "alive", b"still here")
        survivor.process_data_events(0.2)
        _method, _properties, body = survivor_channel.basic_get("alive", auto_ack=True)
        assert body == b"still here"

    with connect(workers.broker, vhost=victim_vhost) as again:
        channel = again.channel()
        bodies = []
        while (got := channel.basic_get("kept", auto_ack=True))[0] is not None:
            bodies.append(got[2])
        assert bodies == [str(n).encode() for n in range(50)]


@pytest.mark.parametrize("store_environment", ["sqlite"], indirect=True)
def test_a_worker_killed_again_and_again_waits_longer_each_time(workers: Workers) -> None:
    """README, "Worker processes": the `batonmq` process starts again a worker that died "after
    1 s, doubled for each death in a row within 60 s of its start": SIGKILL of worker 1 three
    times as soon as it serves logs delays of 1, 2 and 4 s, and its next process is forked no
    sooner (nor much later). Its sibling is never restarted."""
    supervisor, sibling = workers.broker.pids()[0], workers.pids()[0]
    for expected in (1.0, 2.0, 4.0):
        victim = workers.pids()[1]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        # The supervisor's children (a killed one stays a zombie until it is reaped), polled
        # more often than wait_until does, to time the fork.
        while set(workers.broker.pids()[1:]) <= {sibling, victim}:
            assert time.monotonic() < killed_at + expected + 10, "worker 1 never forked again"
            time.sleep(0.01)
        forked_after = time.monotonic() - killed_at
        wait_until(
            functools.partial(lambda gone: workers.pids().get(1) not in (None, gone), victim),
            "worker 1 to serve",
        )
        delays = [
            float(_field(line, "delay"))
            for line in workers.broker.log().splitlines()
            if 'msg="worker died; restarting"' in line
        ]
        assert delays[-1] == expected, delays
        assert expected <= forked_after < expected + 1.5, forked_after
    assert workers.broker.pids()[0] == supervisor and workers.pids()[0] == sibling


def test_tls_clients_are_relayed_to_the_worker_that_owns_their_virtual_host(
    tls_workers: Workers, pki: tuple[TestCA, KeyPair, KeyPair]
) -> None:
    """README, "Worker processes": a TLS session cannot move to another process, so the
    accepting worker relays the client's plaintext to the owner. Over amqps, with EXTERNAL
    (the certificate's CN; guest logs in from loopback only, so the owner must see the
    client's own address), on a virtual host of each worker: an exclusive queue declared over
    TLS is locked for a plain connection to the same virtual host (RabbitMQ: 405
    RESOURCE_LOCKED), which only one process can give, and a 1 MiB message goes through the
    relay both ways intact."""
    body = os.urandom(1 << 20)
    for vhost in ALL_VHOSTS:
        for _ in range(ATTEMPTS):
            with pika.BlockingConnection(_tls_parameters(tls_workers.broker, vhost, pki)) as tls:
                channel = tls.channel()
                channel.queue_declare("mine", exclusive=True)
                channel.basic_publish("", "mine", body)
                with connect(tls_workers.broker, vhost=vhost) as plain:
                    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
                        plain.channel().queue_declare("mine", exclusive=True)
                    assert locked.value.reply_code == 405
                _method, _properties, received = channel.basic_get("mine", auto_ack=True)
                assert received == body

    # Every connection, TLS or plain, was opened in its virtual host's owner.
    assert sorted(set(_opened_by_worker(tls_workers.broker.log()))) == sorted(
        (vhost, owner) for owner, owned in VHOSTS.items() for vhost in owned
    )


def test_sigterm_closes_relayed_tls_connections_with_connection_forced(
    tls_workers: Workers, pki: tuple[TestCA, KeyPair, KeyPair]
) -> None:
    """A shutdown closes every connection with 320 CONNECTION_FORCED (AMQP 0-9-1 reply code
    "connection-forced": "An operator intervened to close the connection"), relayed ones too:
    the accepting worker waits for the owner's close to pass through before it stops."""
    clients = [
        pika.BlockingConnection(_tls_parameters(tls_workers.broker, vhost, pki))
        for vhost in ALL_VHOSTS
        for _ in range(ATTEMPTS)
    ]
    tls_workers.broker.signal(signal.SIGTERM)
    for client in clients:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            client.sleep(10)
        assert closed.value.reply_code == 320
    assert tls_workers.broker.wait(30) == 0


def test_sigterm_stops_every_worker_and_removes_the_pid_file(workers: Workers) -> None:
    """SIGTERM to the `batonmq` process: every worker shuts down cleanly, then the supervisor,
    with status 0, and the pid file is gone."""
    broker = workers.broker
    pid_file = broker.data_dir / "batonmq.pid"
    assert pid_file.read_text().strip() == str(broker.process.pid if broker.process else 0)
    pids = workers.pids()

    broker.signal(signal.SIGTERM)

    assert broker.wait(30) == 0
    assert not pid_file.exists()
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    log = broker.log()
    assert log.count('msg="shutdown complete"') == WORKERS + 1


def _url(broker: RunningBroker, vhost: str, scheme: str = "amqp") -> str:
    return f"{scheme}://guest:guest@{broker.host}:{broker.port}/{quote(vhost, safe='')}"


def test_a_worker_that_cannot_start_stops_the_broker(tmp_path: Path) -> None:
    """As a broker of one process that cannot start (the Security requirements: "A file that
    does not parse names the file, line and column: the broker refuses to start with it"; the
    workers load the ACL file): exit status 1, with the reason in the log, and no worker left
    behind."""
    acl_path = tmp_path / "broker.acl"
    acl_path.write_text("ACL ALLOW bob PUBLSH\n", encoding="utf-8")
    output = failed_start(
        tmp_path, {"BATONMQ__BROKER__WORKERS": "2", "BATONMQ__ACL__FILE": str(acl_path)}
    )
    assert f"{acl_path}:1:15: unknown action 'PUBLSH'" in output
    assert "cannot start: worker" in output
    assert not (tmp_path / "data" / "batonmq.pid").exists()


def test_a_store_that_cannot_be_opened_is_refused_before_any_worker_starts(
    tmp_path: Path,
) -> None:
    """As a broker of one process whose store cannot be opened: exit status 1 with the reason
    ("cannot open the store"), here from the `batonmq` process itself, which opens the store
    before it binds a port or starts a worker."""
    output = failed_start(
        tmp_path,
        {
            "BATONMQ__BROKER__WORKERS": "2",
            "BATONMQ__PERSIST__STORE": "postgres",
            "BATONMQ__PERSIST__POSTGRES__DSN": "postgresql://nobody@127.0.0.1:1/none",
        },
    )
    assert "cannot open the store" in output
    assert "worker=" not in output
    assert not (tmp_path / "data" / "batonmq.pid").exists()


# -- SQLite: one file the workers share, with the number of workers changing between runs ------

SQLITE = {"BATONMQ__PERSIST__STORE": "sqlite"}
#: The stream of the runs below, in a virtual host of worker 1 (its directory moves between
#: data/streams and data/worker-1/streams as the number of workers changes).
STREAM_VHOST = VHOSTS[1][0]


def _start_sqlite(workdir: Path, count: int, store: dict[str, str] = SQLITE) -> Workers:
    """A broker with `count` workers on `store` (SQLite unless given)."""
    environment = {**store, "BATONMQ__BROKER__WORKERS": str(count)}
    broker = start_broker(workdir, environment=environment)
    wait_until(lambda: 'msg="broker started"' in broker.log(), "the broker to serve")
    return Workers(broker, environment)


def _kill_everything(workers: Workers, count: int) -> None:
    """SIGKILL of the `batonmq` process and of every worker, as a power cut ends them all."""
    pids = list(workers.pids().values()) if count > 1 else []
    workers.broker.kill()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        wait_until(functools.partial(process_gone, pid), f"worker pid {pid} to end")


def _publish(broker: RunningBroker, vhost: str, queue: str, bodies: list[bytes]) -> None:
    with confirming_channel(dataclasses.replace(broker, vhost=vhost)) as channel:
        channel.queue_declare(queue, durable=True)
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


def _get(broker: RunningBroker, vhost: str, queue: str, count: int | None) -> list[bytes]:
    """The bodies of the next `count` messages (None: all there are), each acknowledged."""
    with connect(broker, vhost=vhost) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        got = []
        while count is None or len(got) < count:
            method, _properties, body = channel.basic_get(queue)
            if method is None:
                break
            channel.basic_ack(method.delivery_tag)
            got.append(body)
        return got


def _append_to_stream(broker: RunningBroker, bodies: list[bytes]) -> None:
    with confirming_channel(dataclasses.replace(broker, vhost=STREAM_VHOST)) as channel:
        channel.queue_declare("log", durable=True, arguments={"x-queue-type": "stream"})
        for body in bodies:
            channel.basic_publish("", "log", body)


def _read_stream(broker: RunningBroker, count: int) -> list[bytes]:
    with connect(broker, vhost=STREAM_VHOST) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=50)
        got: list[bytes] = []
        for method, _properties, body in channel.consume(
            "log", arguments={"x-stream-offset": "first"}, inactivity_timeout=2
        ):
            if method is None:
                break
            channel.basic_ack(method.delivery_tag)
            got.append(body)
            if len(got) == count:
                break
        channel.cancel()
        return got


def test_the_number_of_workers_changes_between_clean_and_killed_runs_and_nothing_is_lost(
    tmp_path: Path, store_environment: dict[str, str]
) -> None:
    """Confirms' promise (RabbitMQ, "Consumer Acknowledgements and Publisher Confirms": a
    confirmed persistent message routed to a durable queue has been persisted) across SIGKILL
    of the whole broker and across changes of `broker.workers` between runs on one store
    (SQLite's file, or a PostgreSQL schema; made by one process: no migration): every confirmed
    message is consumed once, in publish order within its queue, and every record of a stream
    is read back, whether its virtual host moved between workers or not."""
    runs = [(1, "stop"), (2, "kill"), (2, "kill"), (1, "kill"), (2, "stop"), (1, "stop")]
    waiting: dict[str, list[bytes]] = {vhost: [] for vhost in ALL_VHOSTS}
    stream: list[bytes] = []
    (tmp_path / "data").mkdir()
    for vhost in ALL_VHOSTS:
        if vhost != "/":
            for command in (
                ("vhost", "add", vhost),
                ("permissions", "set", "guest", ".*", ".*", ".*", "--vhost", vhost),
            ):
                done = run_batonctl(tmp_path, *command, environment=store_environment)
                assert done.returncode == 0, done.stderr
    for number, (count, end) in enumerate(runs):
        workers = _start_sqlite(tmp_path, count, store_environment)
        for vhost in ALL_VHOSTS:
            # What the previous runs confirmed comes first, then what this run adds.
            assert _get(workers.broker, vhost, "kept", 3) == waiting[vhost][:3]
            del waiting[vhost][:3]
            bodies = [f"run{number}-{n}".encode() for n in range(10)]
            _publish(workers.broker, vhost, "kept", bodies)
            waiting[vhost] += bodies
        records = [f"record{number}-{n}".encode() for n in range(5)]
        _append_to_stream(workers.broker, records)
        stream += records
        if end == "kill":
            _kill_everything(workers, count)
        else:
            workers.broker.stop()
            assert workers.broker.wait() == 0

    final = _start_sqlite(tmp_path, 2, store_environment)
    try:
        for vhost in ALL_VHOSTS:
            assert _get(final.broker, vhost, "kept", None) == waiting[vhost]
        assert _read_stream(final.broker, len(stream)) == stream
        assert 'msg="virtual hosts moved to their owners"' in final.broker.log()
        if store_environment != SQLITE:
            return
        data = tmp_path / "data"
        assert sorted(path.name for path in data.glob("batonmq.sqlite3-appends*")) == [
            "batonmq.sqlite3-appends",  # the last one-process run's, empty
            "batonmq.sqlite3-appends-w0",
            "batonmq.sqlite3-appends-w1",
        ]
    finally:
        final.broker.stop()


def test_a_second_broker_on_the_same_store_is_refused(
    tmp_path: Path, store_environment: dict[str, str]
) -> None:
    """One broker per store, as with one process ("is locked by another running broker",
    "is in use by another running broker"), whatever the number of workers of either: on
    SQLite the supervisor holds the lock for its workers; on PostgreSQL the broker's own
    identity and its workers' exclude each other, and the refusal names the first broker's
    `batonmq` process, the one an operator would signal, beside the worker that holds the lease.
    A second supervisor is refused before it binds a port or starts a worker."""
    workers = _start_sqlite(tmp_path, 2, store_environment)
    try:
        for count in (1, 2):
            output = failed_start(
                tmp_path, {**store_environment, "BATONMQ__BROKER__WORKERS": str(count)}
            )
            if store_environment == SQLITE:
                assert "is locked by another running broker" in output
                pid = workers.broker.process.pid if workers.broker.process else 0
                assert f"(pid {pid})" in output
            else:
                assert "is in use by another running broker" in output
                batonmq = workers.broker.pids()[0]
                assert any(
                    f" pid {pid} (batonmq pid {batonmq}, run " in output
                    for pid in workers.pids().values()
                ), output
            assert 'msg="cannot open the store: ' in output
            assert 'msg="listening"' not in output
            assert "worker=" not in output
        connect(workers.broker).close()  # still serving
    finally:
        workers.broker.stop()


def test_a_user_added_on_the_stopped_sqlite_store_logs_in_on_every_worker(
    tmp_path: Path,
) -> None:
    """`batonctl user add` and `permissions set` on the stopped store (SQLite's only path
    for them while the management API is off with workers): the workers share the one
    catalogue, so the user logs in on a virtual host of each."""
    first = _start_sqlite(tmp_path, 2)
    first.broker.stop()
    for command in (
        ("user", "add", "alice", "--password", "pw"),
        ("vhost", "add", VHOSTS[1][0]),
        ("permissions", "set", "alice", ".*", ".*", ".*", "--vhost", VHOSTS[0][0]),
        ("permissions", "set", "alice", ".*", ".*", ".*", "--vhost", VHOSTS[1][0]),
    ):
        done = run_batonctl(tmp_path, *command, environment=SQLITE)
        assert done.returncode == 0, done.stderr
    again = _start_sqlite(tmp_path, 2)
    try:
        for owned in VHOSTS.values():
            for _ in range(ATTEMPTS):
                connect(again.broker, "alice", "pw", owned[0]).close()
        opened = {vhost for vhost, _worker in _opened_by_worker(again.broker.log())}
        assert opened >= {VHOSTS[0][0], VHOSTS[1][0]}
    finally:
        again.broker.stop()


@pytest.mark.parametrize("store_environment", ["sqlite"], indirect=True)
def test_db_stats_and_backup_count_every_workers_log_while_the_broker_runs(
    workers: Workers, tmp_path: Path
) -> None:
    """`batonctl db stats` and `db backup` "work while a broker runs" (their help): with
    workers, what each worker confirmed may still be only in its own append log, and both
    read every log as of one moment."""
    for owner, count in ((0, 30), (1, 20)):
        bodies = [b"m%d" % n for n in range(count)]
        _publish(workers.broker, VHOSTS[owner][0], "counted", bodies)
    logs = sorted(path.name for path in tmp_path.glob("data/batonmq.sqlite3-appends-w*"))
    assert logs == ["batonmq.sqlite3-appends-w0", "batonmq.sqlite3-appends-w1"]

    done = run_batonctl(tmp_path, "db", "stats", "--json", environment=SQLITE)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert (stats["messages"], stats["entries"]) == (50, 50)

    done = run_batonctl(tmp_path, "db", "backup", "--dir", str(tmp_path / "backup"))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert (manifest["messages"], manifest["entries"]) == (50, 50)


@pytest.mark.parametrize("store_environment", ["sqlite"], indirect=True)
def test_sigkill_of_the_batonmq_process_alone_ends_its_workers_too(
    workers: Workers, tmp_path: Path
) -> None:
    """As a broker of one process: SIGKILL of the `batonmq` process ends the broker, workers
    included (none is left holding the port and the store's lock), and a broker started again
    on the data directory brings back every message confirmed before."""
    _publish(workers.broker, VHOSTS[1][0], "kept", [b"m%d" % n for n in range(20)])
    pids = list(workers.pids().values())
    workers.broker.kill()
    for pid in pids:
        wait_until(
            functools.partial(process_gone, pid), f"worker pid {pid} to end with the supervisor"
        )

    again = _start_sqlite(tmp_path, WORKERS)
    try:
        assert _get(again.broker, VHOSTS[1][0], "kept", None) == [b"m%d" % n for n in range(20)]
    finally:
        again.broker.stop()


def test_the_memory_budget_holds_for_the_whole_broker_not_for_each_worker(
    tmp_path: Path,
) -> None:
    """MQ 3.5 admin guide (Table 2-4): the broker's memory, as a share of its budget, sets its
    state, and in red every publisher is blocked. With workers the broker's memory is that of
    all its processes: a budget that their sum passes, and no one process does, puts every
    worker in red. Held per worker, the same budget left the broker green, and two workers
    could use twice the memory the operator had allowed."""
    measured = _start_sqlite(tmp_path / "measured", WORKERS)
    try:
        sizes = [memory.resident_bytes(pid) for pid in measured.broker.pids()]
    finally:
        measured.broker.stop()
    # Red begins at 98 % of the budget: put it halfway between the largest process and all.
    budget = int((max(sizes) + sum(sizes)) / 2 / 0.98)
    environment = {**SQLITE, "BATONMQ__MEMORY__BUDGET": str(budget)}
    workers = _start_sqlite(tmp_path / "budgeted", WORKERS, environment)
    try:
        parameters = pika.URLParameters(workers.broker.url + "?blocked_connection_timeout=1")
        with pytest.raises(pika.exceptions.ConnectionBlockedTimeout):  # noqa: PT012 - the wait
            connection = pika.BlockingConnection(parameters)
            connection.channel().queue_declare("q")
            connection.process_data_events(time_limit=5)
        red = [
            int(_field(line, "worker"))
            for line in workers.broker.log().splitlines()
            if "memory state red" in line
        ]
        assert sorted(set(red)) == list(range(WORKERS)), red
    finally:
        workers.broker.stop()
