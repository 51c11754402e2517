"""The Overload requirements, "Other limits" with a real broker and pika: "connections per user and
per virtual host, channels per connection, consumers per channel; each refusal names the limit".

The limits are set as RabbitMQ users would expect them refused (rabbit_reader and rabbit_channel):
connection.close 530 NOT_ALLOWED with RabbitMQ's text, followed here by the configuration key.
Channels per connection are amqp.channel_max (tests/integration/test_raw_frames.py).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.brokerproc import (
    RunningBroker,
    connection_on,
    run_batonctl,
    start_broker,
    wait_until,
    worker_pids,
)

pytestmark = pytest.mark.integration

PASSWORD = "s3cret"
#: Two workers, both serving "/": a connection stays in the worker the kernel gave it to.
SPREAD = {"BATONMQ__BROKER__WORKERS": "2", "BATONMQ__BROKER__SPREAD_VHOSTS": '["/"]'}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., RunningBroker]]:
    """start(**limits): a broker with [limits] keys set from the environment and user alice
    (password PASSWORD, permissions to do everything in "/") besides guest; stopped at the end
    of the test. With `spread`, two workers and "/" spread over them."""
    started: list[RunningBroker] = []

    def start_with(*, spread: bool = False, **limits: int) -> RunningBroker:
        (tmp_path / "data").mkdir(exist_ok=True)
        for command in (
            ("user", "add", "alice", "--password", PASSWORD),
            ("permissions", "set", "alice", ".*", ".*", ".*"),
        ):
            done = run_batonctl(tmp_path, *command)
            assert done.returncode == 0, done.stderr
        environment = {
            f"BATONMQ__LIMITS__{key.upper()}": str(value) for key, value in limits.items()
        }
        if spread:
            environment |= SPREAD
        broker = start_broker(tmp_path, environment=environment)
        started.append(broker)
        return broker

    try:
        yield start_with
    finally:
        for broker in started:
            broker.stop()


def connect(broker: RunningBroker, user: str = "guest") -> pika.BlockingConnection:
    password = "guest" if user == "guest" else PASSWORD
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            broker.host,
            broker.port,
            "/",
            pika.PlainCredentials(user, password),
            connection_attempts=1,
        )
    )


def refused(broker: RunningBroker, user: str = "guest") -> str:
    """connection.open refused: what pika says of the connection.close it got."""
    with pytest.raises(pika.exceptions.AMQPConnectionError) as raised:
        connect(broker, user)
    return str(raised.value)


def test_connections_per_vhost(start: Callable[..., RunningBroker]) -> None:
    """RabbitMQ (vhost max-connections): 530 NOT_ALLOWED "access to vhost '~s' refused for user
    '~s': connection limit (~p) is reached"; a closed connection makes room again."""
    broker = start(max_connections_per_vhost=2)
    first = connect(broker, "guest")
    with connect(broker, "alice"):
        refusal = refused(broker, "alice")
        assert "(530" in refusal
        assert (
            "NOT_ALLOWED - access to vhost '/' refused for user 'alice': connection limit (2) is "
            "reached (limits.max_connections_per_vhost)"
        ) in refusal
        first.close()
        with connect(broker, "alice"):
            assert "connection limit (2) is reached" in refused(broker, "guest")


def test_connections_per_user(start: Callable[..., RunningBroker]) -> None:
    """RabbitMQ (user max-connections): 530 NOT_ALLOWED "Connection refused for user '~s': user
    connection limit (~p) is reached"; other users may still connect, and a closed connection
    makes room again."""
    broker = start(max_connections_per_user=2)
    first = connect(broker, "alice")
    with connect(broker, "alice"):
        refusal = refused(broker, "alice")
        assert "(530" in refusal
        assert (
            "NOT_ALLOWED - Connection refused for user 'alice': user connection limit (2) is "
            "reached (limits.max_connections_per_user)"
        ) in refusal
        with connect(broker, "guest"):
            pass
        first.close()
        with connect(broker, "alice"):
            assert "user connection limit (2)" in refused(broker, "alice")


@pytest.mark.parametrize(
    "limit",
    [
        (
            "max_connections_per_vhost",
            "access to vhost '/' refused for user 'guest': connection limit (2) is reached "
            "(limits.max_connections_per_vhost)",
        ),
        (
            "max_connections_per_user",
            "Connection refused for user 'guest': user connection limit (2) is reached "
            "(limits.max_connections_per_user)",
        ),
    ],
    ids=["per-vhost", "per-user"],
)
def test_connections_on_both_workers_count_against_one_limit(
    start: Callable[..., RunningBroker], limit: tuple[str, str]
) -> None:
    """RabbitMQ's vhost and user max-connections, the Overload requirements' "connections per
    user and per virtual host": the limit is the broker's. With two workers serving "/", one
    connection on each reaches a limit of 2, whichever worker the next one lands on; the end
    of one on either worker makes room on both."""
    key, text = limit
    broker = start(spread=True, **{key: 2})
    with connection_on(broker, 0) as first, connection_on(broker, 1):
        for _ in range(4):  # the kernel gives each to either worker
            assert f'(530) "NOT_ALLOWED - {text}"' in refused(broker)
        first.close()
        with connect(broker):
            assert text in refused(broker)


def test_a_limit_holds_after_the_first_worker_is_killed_and_started_again(
    start: Callable[..., RunningBroker],
) -> None:
    """RabbitMQ's vhost max-connections holds for the broker. The first worker, which counts
    every worker's connections, dies (SIGKILL) and is started again with an empty count
    (README, "Worker processes"): the other worker gives it the two connections it holds, so
    neither worker lets a third in."""
    broker = start(spread=True, max_connections_per_vhost=2)
    with connection_on(broker, 1), connection_on(broker, 1):
        before = worker_pids(broker.log())
        os.kill(before[0], signal.SIGKILL)
        wait_until(
            lambda: worker_pids(broker.log()).get(0) not in (None, before[0]), "worker 0 again"
        )
        for _ in range(8):  # the kernel gives each to either worker
            assert "connection limit (2) is reached" in refused(broker)


def test_consumers_per_channel(start: Callable[..., RunningBroker]) -> None:
    """RabbitMQ's consumer_max_per_channel: basic.consume over it is "reached maximum (~B) of
    consumers per channel", 530 NOT_ALLOWED, which closes the connection; a cancelled consumer
    makes room again."""
    broker = start(max_consumers_per_channel=2)
    with connect(broker) as connection:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        tag = channel.basic_consume(queue, lambda *_: None)
        channel.basic_consume(queue, lambda *_: None)
        channel.basic_cancel(tag)
        channel.basic_consume(queue, lambda *_: None)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as raised:
            channel.basic_consume(queue, lambda *_: None)
    assert raised.value.reply_code == 530
    assert raised.value.reply_text == (
        "NOT_ALLOWED - reached maximum (2) of consumers per channel "
        "(limits.max_consumers_per_channel)"
    )
    # The connection that went over the limit is gone, and with it its consumers.
    with connect(broker) as connection:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_consume(queue, lambda *_: None)
        channel.basic_consume(queue, lambda *_: None)
