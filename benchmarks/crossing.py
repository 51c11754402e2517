"""What a message costs when it crosses between two workers of one broker (a spread virtual
host), in one process: two engines whose peer links are a real Unix socket pair, their clients
in-memory sessions (the unit tests' client, as `benchmarks.hot_path` drives one), so that the
CPU time measured is the two engines' and the link's, free of client processes and of where the
kernel puts connections (which decides, in `benchmarks.compare`'s `batonmq-s2`, how many
messages cross at all).

Four cases move the same messages (publish with confirms, route, enqueue, deliver, ack multiple
per batch; transient, 1 KiB by default): both clients on the queue's owner (nothing crosses),
the publisher elsewhere (PUBLISH and QUEUED cross), the consumer elsewhere (CREDIT, DELIVER and
SETTLE cross), both elsewhere. Each prints the CPU time per message (both workers together)
and its ratio to the first: the cost of crossing, which docs/multi-core.md's plan bounds.

    python -m benchmarks.crossing [--body 1024] [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pamqp import commands, frame
from tests.memclient import connect
from tests.peerpair import LinkedWorker, joined, linked_worker

from batonmq.engine.channel import Channel
from batonmq.engine.session import Session
from benchmarks.hot_path import BATCH, collector_as_in_the_broker

QUEUE = "crossing"
#: (name, worker of the publisher, worker of the consumer); worker 1 owns the queue.
CASES = (
    ("nothing crosses", 1, 1),
    ("the publish crosses", 0, 1),
    ("the delivery crosses", 1, 0),
    ("both cross", 0, 0),
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", type=int, default=1024, help="body size in bytes")
    parser.add_argument("--rounds", type=int, default=10, help=f"batches of {BATCH} per sample")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(Path(directory), args))


async def _run(directory: Path, args: argparse.Namespace) -> None:
    async with (
        linked_worker(directory / "w0", 0) as first,
        linked_worker(directory / "w1", 1) as second,
    ):
        await joined(first.links, second.links)
        workers = (first, second)
        local = 0.0
        for name, publisher, consumer in CASES:
            cost = await _case(workers[publisher], workers[consumer], second, args)
            local = local or cost
            print(f"{name:22} {cost * 1e6:6.2f} us of CPU per message, {cost / local:.2f}x")


async def _case(
    publisher: LinkedWorker, consumer: LinkedWorker, owner: LinkedWorker, args: argparse.Namespace
) -> float:
    """The least CPU time per message of five samples, the queue made anew."""
    owner_client, _ = connect(owner.broker)
    owner_client.send(1, commands.Queue.Declare(queue=QUEUE))
    for worker in (publisher, consumer):
        if worker is not owner:
            worker.know(owner.broker, QUEUE)
    _, publishing = connect(publisher.broker)
    publishing.receive_data(frame.marshal(commands.Confirm.Select(), 1))
    consuming_client, consuming = connect(consumer.broker)
    consuming_client.send(1, commands.Basic.Qos(prefetch_count=2 * BATCH))
    consuming_client.send(1, commands.Basic.Consume(queue=QUEUE, consumer_tag="c"))
    while not any(
        isinstance(got.method, commands.Basic.ConsumeOk) for got in consuming_client.receive()
    ):
        await asyncio.sleep(0)
    consuming.resume_input()  # held until the owner admitted the consumer
    rounds = _Rounds(publishing, consuming, args.body)
    await rounds.run(3)  # warm up
    best = float("inf")
    with collector_as_in_the_broker():
        for _ in range(5):
            cpu = time.process_time()
            await rounds.run(args.rounds)
            best = min(best, (time.process_time() - cpu) / (args.rounds * BATCH))
    for session in (publishing, consuming):
        session.teardown()
    owner_client.send(1, commands.Queue.Delete(queue=QUEUE))
    for worker in (publisher, consumer):
        worker.broker.vhosts["/"].remote.pop(QUEUE, None)
    return best


class _Rounds:
    """Batches published on one session and consumed, then acked at once, on another."""

    def __init__(self, publishing: Session, consuming: Session, body: int) -> None:
        self._publishing = publishing
        self._consuming = consuming
        self._channel: Channel = consuming.channels[1]
        method = commands.Basic.Publish(exchange="", routing_key=QUEUE)
        client, _ = connect(publishing.broker)
        self._batch = client.content_bytes(1, method, b"x" * body) * BATCH

    async def run(self, count: int) -> None:
        async with asyncio.timeout(60):  # a message lost on the way ends the run
            await self._run(count)

    async def _run(self, count: int) -> None:
        publishing, consuming, unsettled = (
            self._publishing,
            self._consuming,
            self._channel.unsettled,
        )
        for _ in range(count):
            publishing.receive_data(self._batch)
            publishing.flush()
            while len(unsettled) < BATCH:
                consuming.flush()
                await asyncio.sleep(0.001)  # not 0: the loop waits for the link, idle
            consuming.flush()
            last = next(reversed(unsettled))
            consuming.receive_data(
                frame.marshal(commands.Basic.Ack(delivery_tag=last, multiple=True), 1)
            )
            consuming.flush()
            publishing.flush()  # the confirms that came meanwhile


if __name__ == "__main__":
    main()
