"""A loss checker in the manner of Jepsen: clients publish uniquely numbered persistent messages
with confirms and consume them with manual acks while a nemesis kills, pauses and restarts the
broker (and its PostgreSQL server); afterwards every message is accounted for.

What the broker promises, and what `Report.problems` holds it to:
- lost: a message whose publish was confirmed must be delivered (at least once);
- unexpected: nothing is delivered that was never published;
- duplicated: a message delivered again must carry `redelivered` (AMQP 0-9-1, basic.deliver:
  "redelivered: this indicates that the message has been previously delivered to this or another
  client"); an unflagged second delivery is a duplicate the consumer cannot detect;
- nacked and delivered: a nacked publish is on no queue (a nack means the broker did not take it).
Messages published but never confirmed (the connection broke first) may or may not arrive: those
that do are counted as recovered.

The clients reach the broker at one URL, or at a list of them tried in order at each reconnect:
the multi-host failover of an HA cluster's clients (the README's pika list of URLParameters).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiormq
from pamqp import commands

#: Publishes in flight on the publisher's channel at once.
WINDOW = 50
#: Seconds any one client operation may take before the client gives up on the connection.
PATIENCE = 20.0

#: Where the clients connect: one URL, or several tried in order (a list of hosts to fail over
#: to). Asked again at each reconnect: a restarted broker may listen elsewhere.
Addresses = Callable[[], str | Sequence[str]]


@dataclass
class History:
    published: set[int] = field(default_factory=set)
    confirmed: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)
    #: (number, redelivered) in the order the consumer received them.
    deliveries: list[tuple[int, bool]] = field(default_factory=list)
    #: What the nemesis did, in order, for the report.
    faults: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    published: int
    confirmed: int
    delivered: int
    lost: list[int]
    unexpected: list[int]
    duplicated: list[int]
    nacked_delivered: list[int]
    recovered: int
    faults: Sequence[str]

    def problems(self) -> list[str]:
        found = []
        for name in ("lost", "unexpected", "duplicated", "nacked_delivered"):
            numbers = getattr(self, name)
            if numbers:
                found.append(f"{len(numbers)} {name.replace('_', ' ')}, e.g. {numbers[:5]}")
        return found

    def __str__(self) -> str:
        return (
            f"published {self.published}, confirmed {self.confirmed}, delivered "
            f"{self.delivered}, lost {len(self.lost)}, unexpected {len(self.unexpected)}, "
            f"duplicated {len(self.duplicated)}, nacked and delivered "
            f"{len(self.nacked_delivered)}, recovered {self.recovered}; faults: "
            + ", ".join(self.faults)
        )


def analyse(history: History) -> Report:
    seen: Counter[int] = Counter()
    duplicated: set[int] = set()
    for number, redelivered in history.deliveries:
        if seen[number] and not redelivered:
            duplicated.add(number)
        seen[number] += 1
    delivered = set(seen)
    return Report(
        published=len(history.published),
        confirmed=len(history.confirmed),
        delivered=len(delivered),
        lost=sorted(history.confirmed - delivered),
        unexpected=sorted(delivered - history.published),
        duplicated=sorted(duplicated),
        nacked_delivered=sorted(history.nacked & delivered),
        recovered=len((delivered & history.published) - history.confirmed - history.nacked),
        faults=tuple(history.faults),
    )


@dataclass(frozen=True)
class Workload:
    """The queue the clients use: a durable queue and persistent messages, unless a test asks
    for the lossy setting (a transient queue, whose messages a crash takes with it)."""

    queue: str = "loss-check"
    durable: bool = True
    #: Seconds the consumer spends on each message (a slow consumer lets a backlog build up).
    consumer_delay: float = 0.0

    @property
    def properties(self) -> aiormq.spec.Basic.Properties:
        return aiormq.spec.Basic.Properties(delivery_mode=2 if self.durable else 1)


Fault = Callable[[], str]


async def check(
    url: Addresses,
    faults: Sequence[Fault],
    *,
    duration: float,
    workload: Workload,
    seed: int,
    drain_timeout: float = 120.0,
    at_least: int = 0,
) -> History:
    """Run the clients against `url()` (see `Addresses`) for `duration` seconds, and on until
    `at_least` faults ran (a slow machine fits fewer in `duration`), while the nemesis runs one
    of `faults` at a time, chosen with `seed`; then stop publishing, let the consumer drain the
    queue, and return what happened. Each fault runs in a thread, blocks until it is over, and
    names itself."""
    history = History()
    stop_publishing = asyncio.Event()
    drained = asyncio.Event()
    last_delivery = [time.monotonic()]
    clients = [
        asyncio.ensure_future(_publish(url, workload, history, stop_publishing)),
        asyncio.ensure_future(_consume(url, workload, history, drained, last_delivery)),
    ]
    try:
        await _nemesis(faults, duration, at_least, random.Random(seed), history)
        stop_publishing.set()
        await asyncio.wait_for(clients[0], PATIENCE * 2)
        await _wait_for_drain(url, workload, last_delivery, drain_timeout)
    finally:
        drained.set()
        stop_publishing.set()
        for client in clients:
            client.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
    return history


async def _nemesis(
    faults: Sequence[Fault],
    duration: float,
    at_least: int,
    chance: random.Random,
    history: History,
) -> None:
    deadline = time.monotonic() + duration

    def going_on() -> bool:
        return time.monotonic() < deadline or len(history.faults) < at_least

    while going_on():
        await asyncio.sleep(chance.uniform(0.5, 2.0))
        if faults and going_on():
            fault = chance.choice(faults)
            history.faults.append(await asyncio.to_thread(fault))


async def _publish(
    url: Addresses, workload: Workload, history: History, stop: asyncio.Event
) -> None:
    number = 0
    while not stop.is_set():
        async with _connection(url) as connection:
            if connection is None:
                await asyncio.sleep(0.2)
                continue
            channel = await _patiently(connection.channel(publisher_confirms=True))
            await _patiently(channel.queue_declare(workload.queue, durable=workload.durable))
            while not stop.is_set():
                numbers = range(number, number + WINDOW)
                number += WINDOW
                history.published.update(numbers)
                outcomes = await asyncio.gather(
                    *(
                        _patiently(
                            channel.basic_publish(
                                str(n).encode(),
                                routing_key=workload.queue,
                                properties=workload.properties,
                            )
                        )
                        for n in numbers
                    ),
                    return_exceptions=True,
                )
                for n, outcome in zip(numbers, outcomes, strict=True):
                    if isinstance(outcome, commands.Basic.Ack):
                        history.confirmed.add(n)
                    elif isinstance(outcome, commands.Basic.Nack):
                        history.nacked.add(n)
                if any(isinstance(outcome, BaseException) for outcome in outcomes):
                    break  # the connection is gone: what was in flight is unknown
                await asyncio.sleep(0.005)


async def _consume(
    url: Addresses,
    workload: Workload,
    history: History,
    done: asyncio.Event,
    last_delivery: list[float],
) -> None:
    while not done.is_set():
        async with _connection(url) as connection:
            if connection is None:
                await asyncio.sleep(0.2)
                continue
            channel = await _patiently(connection.channel())
            await _patiently(channel.basic_qos(prefetch_count=200))
            await _patiently(channel.queue_declare(workload.queue, durable=workload.durable))

            one_at_a_time = asyncio.Lock()  # aiormq runs each callback as a task of its own

            async def received(
                message: aiormq.abc.DeliveredMessage, one_at_a_time: asyncio.Lock = one_at_a_time
            ) -> None:
                async with one_at_a_time:
                    history.deliveries.append((int(message.body), bool(message.redelivered)))
                    if workload.consumer_delay:
                        await asyncio.sleep(workload.consumer_delay)
                    last_delivery[0] = time.monotonic()
                    await message.channel.basic_ack(message.delivery_tag)

            await _patiently(channel.basic_consume(workload.queue, received))
            closing = asyncio.ensure_future(asyncio.shield(connection.closing))
            finished = asyncio.ensure_future(done.wait())
            await asyncio.wait([closing, finished], return_when=asyncio.FIRST_COMPLETED)
            closing.cancel()
            finished.cancel()


async def _wait_for_drain(
    url: Addresses, workload: Workload, last_delivery: list[float], timeout: float
) -> None:
    """Until the queue is empty and nothing was delivered for a second (every delivery
    acknowledged, none redelivered in flight)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if time.monotonic() - last_delivery[0] < 1.0:
            continue
        async with _connection(url) as connection:
            if connection is None:
                continue
            channel = await _patiently(connection.channel())
            declared = await _patiently(
                channel.queue_declare(workload.queue, durable=workload.durable, passive=True)
            )
            if declared.message_count == 0:
                return
    raise TimeoutError(f"the queue was not drained within {timeout} s")


@contextlib.asynccontextmanager
async def _connection(url: Addresses):  # type: ignore[no-untyped-def]
    """A connection to the first of `url()` that answers, or None when none can be reached now;
    errors inside the block that mean "the connection broke" end the block quietly (the caller
    reconnects)."""
    found = url()
    candidates = [found] if isinstance(found, str) else list(found)
    connection = None
    for candidate in candidates:
        try:
            # A paused broker accepts the TCP connection and never answers: the next host is
            # tried within the patience that one operation has.
            connection = await asyncio.wait_for(
                aiormq.connect(candidate), PATIENCE / len(candidates)
            )
            break
        except (TimeoutError, OSError, aiormq.exceptions.AMQPError):
            continue
    if connection is None:
        yield None
        return
    try:
        yield connection
    except (TimeoutError, OSError, aiormq.exceptions.AMQPError, RuntimeError):
        pass
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 2)


async def _patiently(awaitable):  # type: ignore[no-untyped-def]
    return await asyncio.wait_for(awaitable, PATIENCE)
