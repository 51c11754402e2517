"""The README's HA clients, run as written against a real two-broker HA cluster: a consumer
connected to the first member sees it SIGKILLed, connects to the survivor and gets every message
the killed broker held, once the survivor has taken it over.

MQ 4.1 HA guide: "Message Queue clients ... are automatically reconnected to the takeover
broker"; over AMQP 0-9-1 the client's own multi-host failover does the reconnecting, as with
RabbitMQ: pika's BlockingConnection takes a list of parameters, kombu a ";"-separated URL with a
failover strategy, and aio-pika, whose connect_robust takes one URL, a loop over the members that
leaves one whose robust connection stays lost. A message handled twice (its ack lost with the
killed broker) comes the second time flagged: AMQP 0-9-1, basic.deliver "redelivered: this
indicates that the message has been previously delivered to this or another client", and the
takeover hands over every message "redelivered".
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import signal
from collections.abc import Callable

import pika
import pytest

from tests.brokerproc import RunningBroker, confirming_channel
from tests.fault.conftest import StartMember
from tests.integration.test_readme import readme_blocks

pytestmark = pytest.mark.integration

QUEUE = "orders"
#: Far more than a client prefetches (the README's 100), so that most must come from the
#: survivor: with fewer, a client could finish on what it had buffered before the kill.
MESSAGES = 600
#: Messages consumed from the first member before it is killed.
BEFORE_THE_KILL = 10
PERSISTENT = pika.BasicProperties(delivery_mode=2)


class Done(Exception):
    """Every message was consumed: ends the README's consume loop."""


def readme_consume(client: str, first: RunningBroker, second: RunningBroker) -> Callable[..., None]:
    """The `consume` function of the README's block for `client`, with the cluster's members
    where the README names mq1 and mq2 (and the tests' guest for app:secret)."""
    (block,) = [
        block
        for block in readme_blocks()
        if block.language == "python" and re.search(rf"^(from|import) {client}\b", block.text, re.M)
    ]
    code = block.text
    for name, broker in (("mq1", first), ("mq2", second)):
        code = code.replace(
            f"app:secret@{name}.example.com:5672", f"guest:guest@127.0.0.1:{broker.port}"
        )
    namespace: dict[str, object] = {}
    exec(compile(code, f"README.md:{block.line}", "exec"), namespace)
    consume = namespace.get("consume")
    if not callable(consume):
        raise LookupError(f"README.md:{block.line}: the {client} block defines no consume()")
    if inspect.iscoroutinefunction(consume):
        return lambda queue, handle: asyncio.run(consume(queue, handle))
    return consume


@pytest.mark.parametrize("client", ["pika", "aio_pika", "kombu"])
def test_a_consumer_fails_over_to_the_survivor_and_gets_every_message(
    start_member: StartMember, client: str
) -> None:
    first, second = start_member("brokerA"), start_member("brokerB")
    with confirming_channel(first) as channel:
        channel.queue_declare(QUEUE, durable=True)
        for number in range(MESSAGES):
            channel.basic_publish("", QUEUE, str(number).encode(), PERSISTENT, mandatory=True)
    consume = readme_consume(client, first, second)
    seen: set[bytes] = set()
    unflagged_duplicates: list[bytes] = []
    assert first.process is not None

    def handle(body: bytes, redelivered: bool) -> None:
        if body in seen and not redelivered:
            unflagged_duplicates.append(body)
        seen.add(body)
        if len(seen) == BEFORE_THE_KILL and first.process.poll() is None:
            os.kill(first.process.pid, signal.SIGKILL)
        if len(seen) == MESSAGES:
            raise Done

    with pytest.raises(Done):
        consume(QUEUE, handle)

    assert seen == {str(number).encode() for number in range(MESSAGES)}
    assert unflagged_duplicates == []
    # The first member died of the kill, and the rest came through the survivor's takeover.
    assert first.process.wait(10) == -signal.SIGKILL
    assert "takeover complete" in second.log()
