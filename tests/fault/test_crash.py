"""Kill -9 while a publisher in confirm mode is sending: nothing the broker confirmed is lost,
nothing comes back twice (the Durable messaging requirements, "Proven by": a crash test for both
stores at several kill points; BatonMQ architecture "Tests": every fault check counts confirmed
messages)."""

from __future__ import annotations

import asyncio
import random

import aiormq
import pytest
from pamqp import commands

from tests.brokerproc import BrokerLife

pytestmark = pytest.mark.integration

MESSAGES = 100_000
#: Confirms outstanding at once: a pipelined publisher, as real ones are.
WINDOW = 2_000
QUEUE = "crash-test"


async def publish_until_killed(url: str, kill_after: int, kill) -> set[int]:
    """Publish MESSAGES persistent messages numbered in their bodies; once `kill_after`
    confirms have arrived, call `kill` (SIGKILL the broker) and keep going until the
    connection breaks. Returns the numbers the broker confirmed."""
    confirmed: set[int] = set()
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.queue_declare(QUEUE, durable=True)
        semaphore = asyncio.Semaphore(WINDOW)
        properties = aiormq.spec.Basic.Properties(delivery_mode=2)
        killed = False

        async def send(number: int) -> None:
            nonlocal killed
            try:
                confirmation = await channel.basic_publish(
                    str(number).encode(), routing_key=QUEUE, properties=properties
                )
            finally:
                semaphore.release()
            if isinstance(confirmation, commands.Basic.Ack):
                confirmed.add(number)
            if len(confirmed) >= kill_after and not killed:
                killed = True
                kill()

        tasks = []
        for number in range(MESSAGES):
            await semaphore.acquire()
            if connection.is_closed:
                break
            tasks.append(asyncio.ensure_future(send(number)))
        await asyncio.gather(*tasks, return_exceptions=True)
    except (aiormq.exceptions.AMQPError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        if not connection.is_closed:
            await connection.close()
    return confirmed


async def consume_all(url: str) -> list[int]:
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        declared = await channel.queue_declare(QUEUE, durable=True, passive=True)
        expected = declared.message_count
        received: list[int] = []
        done = asyncio.Event()

        async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
            received.append(int(message.body))
            if len(received) >= expected:
                done.set()

        if expected:
            await channel.basic_qos(prefetch_count=1000)
            await channel.basic_consume(QUEUE, on_message, no_ack=True)
            await asyncio.wait_for(done.wait(), 120)
        rest = await channel.queue_declare(QUEUE, durable=True, passive=True)
        assert rest.message_count == 0
        return received
    finally:
        await connection.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kill_point", [0.02, 0.4, 0.9], ids=["early", "middle", "late"])
def test_nothing_confirmed_is_lost_when_the_broker_is_killed(
    broker_life: BrokerLife, kill_point: float
):
    """Every message whose confirm the publisher received is consumed back exactly once after
    SIGKILL and restart; unconfirmed ones may or may not be, but never twice."""
    seed = random.randrange(1 << 30)
    kill_after = max(1, int(MESSAGES * kill_point * random.Random(seed).uniform(0.8, 1.0)))
    broker = broker_life.current
    confirmed = asyncio.run(publish_until_killed(broker.url, kill_after, broker.kill))
    restarted = broker_life.restart(kill=True)
    received = asyncio.run(consume_all(restarted.url))
    context = f"seed={seed} kill_after={kill_after} confirmed={len(confirmed)}"
    assert len(received) == len(set(received)), f"duplicates; {context}"
    missing = confirmed - set(received)
    assert not missing, (
        f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}; {context}"
    )
    assert len(confirmed) >= kill_after, context
