"""ACL files (Qpid manual §2.2) with a real broker and real clients (pika, aio-pika): the three
worked examples of §2.2.4 as the seed writes them, a broken file at start, and reload on SIGHUP.

The users are added with `batonctl user add` before the broker starts (it reads its users at
start). The example texts are those of tests/unit/security/test_acl.py, where their restoration
from the seed's extracted text is checked word for word.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aio_pika
import aiormq.exceptions
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.brokerproc import RunningBroker, failed_start, run_batonctl, start_broker
from tests.unit.security.test_acl import EXAMPLE_1, EXAMPLE_2, EXAMPLE_3, without_elisions

pytestmark = pytest.mark.integration

PASSWORD = "s3cret"
REQUEST_QUEUE = "example.RequestQueue"
#: Worked example 3: the one routing key the server may publish responses with.
REPLY_KEY = "TempQueue"


def batonctl(workdir: Path, *args: str) -> None:
    done = run_batonctl(workdir, *args)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def acl_path() -> Iterator[Path]:
    """Where the broker-wide ACL file goes: a short name, since a 403's text names the file and
    must fit in 255 octets."""
    with tempfile.TemporaryDirectory(prefix="acl-") as name:
        yield Path(name) / "broker.acl"


@pytest.fixture
def start(tmp_path: Path, acl_path: Path) -> Iterator[Callable[..., RunningBroker]]:
    """start(acl_text, *users): a broker with `acl_text` as its broker-wide ACL file and `users`
    (password PASSWORD, and RabbitMQ's permissions to do everything in "/", so that the ACL
    alone decides) added with batonctl before it starts; stopped at the end of the test."""
    started: list[RunningBroker] = []

    def start_with(acl_text: str, *users: str) -> RunningBroker:
        (tmp_path / "data").mkdir(exist_ok=True)
        for user in users:
            batonctl(tmp_path, "user", "add", user, "--password", PASSWORD)
            batonctl(tmp_path, "permissions", "set", user, ".*", ".*", ".*")
        acl_path.write_text(acl_text, encoding="utf-8")
        broker = start_broker(tmp_path, environment={"BATONMQ__ACL__FILE": str(acl_path)})
        started.append(broker)
        return broker

    try:
        yield start_with
    finally:
        for broker in started:
            broker.stop()


def connect(broker: RunningBroker, user: str, password: str = PASSWORD) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            broker.host,
            broker.port,
            "/",
            pika.PlainCredentials(user, password),
            connection_attempts=1,
        )
    )


def refused_access(broker: RunningBroker, user: str) -> str:
    """connection.open refused: the text of the connection.close 403."""
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as raised:
        connect(broker, user)
    return str(raised.value)


def wait_for_log(broker: RunningBroker, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in broker.log():
        assert time.monotonic() < deadline, f"{text!r} not in the broker log:\n{broker.log()}"
        time.sleep(0.05)


def audit_lines(broker: RunningBroker) -> list[str]:
    return [line for line in broker.log().splitlines() if " batonmq.audit " in line]


# --- worked example 1 ----------------------------------------------------------------------------


def test_worked_example_1_management_users_may_not_connect_for_messaging(
    start: Callable[..., RunningBroker], acl_path: Path
) -> None:
    """Qpid manual §2.2.4.1: "Neither 'operator' nor 'readonly' should be allow to connect for
    messaging." and "# Explicitly deny all (log) to eveyone" """
    broker = start(without_elisions(EXAMPLE_1), "operator", "readonly", "bob")
    for user, line in (("operator", 6), ("readonly", 7)):
        refusal = refused_access(broker, user)
        assert "(403)" in refusal
        assert (
            f"ACCESS_REFUSED - access to vhost '/' refused for user '{user}': ACCESS denied by "
            f"{acl_path} line {line}"
        ) in refusal
    assert audit_lines(broker) == []
    # Everyone else: the last line, which logs.
    refusal = refused_access(broker, "bob")
    assert "access to vhost '/' refused for user 'bob': ACCESS denied by" in refusal
    (audit,) = audit_lines(broker)
    assert 'msg="ACL DENY-LOG"' in audit
    for field in ("user=bob", "action=ACCESS", "object=VIRTUALHOST", "decision=denied"):
        assert field in audit
    assert f"{acl_path}:13" in audit


# --- worked example 2 ----------------------------------------------------------------------------


def test_worked_example_2_user_maintainers_get_no_messaging_rights(
    start: Callable[..., RunningBroker], acl_path: Path
) -> None:
    """Qpid manual §2.2.4.2: "This example illustrates the permissioning of a individual component
    and a group definition." The file loads as the seed writes it; its METHOD rules grant the
    group usermaint management of users and nothing in a virtual host, so its last line denies
    bob and alice messaging, and logs it."""
    broker = start(without_elisions(EXAMPLE_2), "bob", "alice")
    for user in ("bob", "alice"):
        refusal = refused_access(broker, user)
        assert f"access to vhost '/' refused for user '{user}': ACCESS denied by" in refusal
    audits = audit_lines(broker)
    assert len(audits) == 2
    assert all(f"{acl_path}:9" in line and "decision=denied" in line for line in audits)


# --- worked example 3 ----------------------------------------------------------------------------


def test_worked_example_3_request_and_response_with_pika(
    start: Callable[..., RunningBroker], acl_path: Path
) -> None:
    """Qpid manual §2.2.4.3: "Two users: 'client' publishes requests; 'server' consumes the requests
    and generates a response." and "[it] is required to create a temporary queue on which the
    server will resp[ond]": the client's reply queue is a server-named exclusive queue."""
    broker = start(EXAMPLE_3, "client", "server")
    with (
        connect(broker, "server") as server_connection,
        connect(broker, "client") as client_connection,
    ):
        server = server_connection.channel()
        server.queue_declare(REQUEST_QUEUE)
        server.queue_bind(REQUEST_QUEUE, "amq.direct", routing_key=REQUEST_QUEUE)
        client = client_connection.channel()
        reply_queue = client.queue_declare("", exclusive=True).method.queue
        client.queue_bind(reply_queue, "amq.direct", routing_key=REPLY_KEY)
        client.basic_publish(
            "amq.direct",
            REQUEST_QUEUE,
            b"what time is it?",
            pika.BasicProperties(reply_to=REPLY_KEY, correlation_id="1"),
        )
        request = _get(server, REQUEST_QUEUE)
        assert request[1] == b"what time is it?"
        properties = request[0]
        server.basic_publish(
            "amq.direct",
            properties.reply_to,
            b"noon",
            pika.BasicProperties(correlation_id=properties.correlation_id),
        )
        response = _get(client, reply_queue)
        assert (response[0].correlation_id, response[1]) == ("1", b"noon")
        client.queue_unbind(reply_queue, "amq.direct", routing_key=REPLY_KEY)
        client.queue_delete(reply_queue)


def _get(channel: BlockingChannel, queue: str) -> tuple[pika.BasicProperties, bytes]:
    """basic.get until a message comes (it may be on its way through the broker)."""
    deadline = time.monotonic() + 10
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return properties, body
        assert time.monotonic() < deadline, f"nothing arrived on {queue}"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("user", "operation", "refusal"),
    [
        (
            "client",
            lambda channel: channel.basic_consume(REQUEST_QUEUE, lambda *_: None),
            f"access to queue '{REQUEST_QUEUE}' in vhost '/' refused for user 'client': CONSUME",
        ),
        (
            "client",
            lambda channel: channel.queue_declare("orders", durable=True),
            "access to queue 'orders' in vhost '/' refused for user 'client': CREATE",
        ),
        (
            "client",
            lambda channel: channel.basic_publish("amq.direct", REPLY_KEY, b"x"),
            "access to exchange 'amq.direct' in vhost '/' refused for user 'client': PUBLISH",
        ),
        (
            "server",
            lambda channel: channel.basic_publish("amq.direct", REQUEST_QUEUE, b"x"),
            "access to exchange 'amq.direct' in vhost '/' refused for user 'server': PUBLISH",
        ),
        (
            "server",
            lambda channel: channel.queue_purge(REQUEST_QUEUE),
            f"access to queue '{REQUEST_QUEUE}' in vhost '/' refused for user 'server': PURGE",
        ),
    ],
    ids=[
        "client consumes requests",
        "client creates a durable queue",
        "client publishes a response",
        "server publishes a request",
        "server purges the requests",
    ],
)
def test_worked_example_3_each_may_do_only_its_part(
    start: Callable[..., RunningBroker],
    user: str,
    operation: Callable[[BlockingChannel], object],
    refusal: str,
) -> None:
    """Qpid manual §2.2.4.3: "This example illustrates the permissioning of AMQP exchanges and
    queues"; the Security requirements: "A denied operation is channel error 403 ACCESS_REFUSED
    whose text names the operation and object"."""
    broker = start(EXAMPLE_3, "client", "server")
    with connect(broker, "server") as server_connection:
        server_connection.channel().queue_declare(REQUEST_QUEUE)
    with connect(broker, user) as connection:
        channel = connection.channel()
        channel.confirm_delivery()  # a refused publish then raises at once
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as raised:
            operation(channel)
        assert raised.value.reply_code == 403
        assert raised.value.reply_text.startswith(f"ACCESS_REFUSED - {refusal} denied by ")


async def test_worked_example_3_client_with_aio_pika(
    start: Callable[..., RunningBroker], acl_path: Path
) -> None:
    """Qpid manual §2.2.4.3, with the client on aio-pika: "ACL ALLOW client CREATE QUEUE
    temporary="true"", "CONSUME QUEUE temporary="true"", "DELETE QUEUE temporary="true"", and
    its BIND and UNBIND of amq.direct for that queue."""
    broker = start(EXAMPLE_3, "client", "server")

    def prepare_server() -> None:
        with connect(broker, "server") as connection:
            channel = connection.channel()
            channel.queue_declare(REQUEST_QUEUE)
            channel.queue_bind(REQUEST_QUEUE, "amq.direct", routing_key=REQUEST_QUEUE)

    def serve_one() -> None:
        with connect(broker, "server") as connection:
            channel = connection.channel()
            properties, body = _get(channel, REQUEST_QUEUE)
            channel.basic_publish(
                "amq.direct",
                properties.reply_to,
                body.upper(),
                pika.BasicProperties(correlation_id=properties.correlation_id),
            )

    await asyncio.to_thread(prepare_server)
    url = f"amqp://client:{PASSWORD}@{broker.host}:{broker.port}/%2F"
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        direct = await channel.get_exchange("amq.direct", ensure=False)
        reply_queue = await channel.declare_queue(exclusive=True)
        await reply_queue.bind(direct, routing_key=REPLY_KEY)
        responses: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await reply_queue.consume(responses.put, no_ack=True)
        await direct.publish(
            aio_pika.Message(b"ping", reply_to=REPLY_KEY, correlation_id="42"),
            routing_key=REQUEST_QUEUE,
        )
        await asyncio.to_thread(serve_one)
        response = await asyncio.wait_for(responses.get(), timeout=10)
        assert (response.correlation_id, response.body) == ("42", b"PING")
        await reply_queue.unbind(direct, routing_key=REPLY_KEY)
        await reply_queue.delete(if_unused=False, if_empty=False)
        # The request queue is the server's: the client may not even look at it.
        other = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as raised:
            await other.declare_queue(REQUEST_QUEUE, passive=True)
        assert "ACCESS denied by" in str(raised.value)


# --- loading and reloading -----------------------------------------------------------------------


def test_a_broken_acl_file_stops_the_broker_at_start(tmp_path: Path) -> None:
    """The Security requirements: "A file that does not parse names the file, line and column: the
    broker refuses to start with it"."""
    acl_path = tmp_path / "broker.acl"
    acl_path.write_text("ACL ALLOW bob ALL\nACL ALLOW bob PUBLSH\n", encoding="utf-8")
    output = failed_start(tmp_path, {"BATONMQ__ACL__FILE": str(acl_path)})
    assert "cannot start" in output
    assert f"{acl_path}:2:15: unknown action 'PUBLSH'" in output


@pytest.mark.expected_log_errors(r"ACL reload failed", reason="it breaks the ACL file on purpose")
def test_sighup_reloads_the_acl_and_a_broken_file_keeps_the_old_rules(
    start: Callable[..., RunningBroker], acl_path: Path
) -> None:
    """The Security requirements: "a reload keeps the old rules. Reload on SIGHUP ... without a
    restart." """
    connects = "ACL ALLOW bob ACCESS VIRTUALHOST\n"
    broker = start(connects + 'ACL ALLOW bob CREATE QUEUE name="a"\n', "bob")

    def declare(name: str) -> int:
        """0 if bob may declare queue `name`, else the reply code that closed the channel."""
        with connect(broker, "bob") as connection:
            try:
                connection.channel().queue_declare(name)
            except pika.exceptions.ChannelClosedByBroker as error:
                return error.reply_code
            return 0

    assert (declare("a"), declare("b")) == (0, 403)
    acl_path.write_text(connects + 'ACL ALLOW bob CREATE QUEUE name="b"\n', encoding="utf-8")
    broker.signal(signal.SIGHUP)
    wait_for_log(broker, "ACL reloaded")
    assert (declare("a"), declare("b")) == (403, 0)

    acl_path.write_text(connects + "ACL ALLOW bob CREATE QUEUE name=\n", encoding="utf-8")
    broker.signal(signal.SIGHUP)
    wait_for_log(broker, "ACL reload failed, keeping the old rules")
    assert f"{acl_path}:2:33: expected a value for property 'name'" in broker.log()
    assert (declare("a"), declare("b")) == (403, 0)
    assert broker.process is not None and broker.process.poll() is None


def test_batonctl_acl_reload_checks_the_files_then_has_the_broker_reload(
    start: Callable[..., RunningBroker], acl_path: Path, tmp_path: Path
) -> None:
    """The Security requirements: "Reload on SIGHUP and with `batonctl acl reload`, without a
    restart"; a file that does not parse "names the file, line and column" and is not applied."""
    connects = "ACL ALLOW bob ACCESS VIRTUALHOST\n"
    broker = start(connects + 'ACL ALLOW bob CREATE QUEUE name="a"\n', "bob")

    def batonctl_acl(*args: str) -> subprocess.CompletedProcess[str]:
        return run_batonctl(
            tmp_path, "acl", *args, environment={"BATONMQ__ACL__FILE": str(acl_path)}
        )

    acl_path.write_text(connects + "ACL ALLOW bob CREATE QUEUE name=\n", encoding="utf-8")
    broken = batonctl_acl("reload")
    assert broken.returncode == 1
    assert f"not reloaded: {acl_path}:2:33: expected a value for property 'name'" in broken.stderr
    assert "ACL reload" not in broker.log()

    acl_path.write_text(connects + 'ACL ALLOW bob CREATE QUEUE name="b"\n', encoding="utf-8")
    assert batonctl_acl("check").returncode == 0
    reloaded = batonctl_acl("reload")
    assert reloaded.returncode == 0, reloaded.stderr
    wait_for_log(broker, "ACL reloaded")
    with connect(broker, "bob") as connection:
        connection.channel().queue_declare("b")
