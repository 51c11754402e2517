"""The broker's hot path in one process, without sockets: publish -> route -> enqueue -> deliver ->
ack, driven through an engine `Session` by the in-memory client of the unit tests. With
`--persistent`, the messages are persistent, on a durable queue of a real SQLite store (in a
temporary directory), published with confirms: each batch is delivered after its write commits,
and its acknowledgements are written in the next, as in the broker.

It measures the engine's own cost per message, free of the noise of a load generator and a
second process sharing two cores, so that one change to the hot path can be judged by itself
(the side-by-side numbers come from `benchmarks/compare.py`). `--profile` prints the functions
that take the time (cProfile). It prints wall time and CPU time per message: on a machine that
other work keeps busy, the wall time grows with the others' load and the CPU time does not.

    python -m benchmarks.hot_path [--body 128] [--rounds 20] [--persistent] [--profile [--top 25]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import pstats
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pamqp import commands, frame
from tests.memclient import connect

from batonmq.engine.broker import Broker
from batonmq.engine.recovery import restore
from batonmq.server.app import tune_garbage_collector
from batonmq.store.journal import Journal
from batonmq.store.sqlite import SQLiteStore

BATCH = 1000


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", type=int, default=128, help="body size in bytes")
    parser.add_argument("--rounds", type=int, default=20, help=f"batches of {BATCH} per sample")
    parser.add_argument(
        "--persistent", action="store_true", help="persistent messages on a SQLite store"
    )
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one sample")
    parser.add_argument("--top", type=int, default=25, help="functions the profile lists")
    args = parser.parse_args(argv)
    if args.persistent:
        with tempfile.TemporaryDirectory() as directory:
            _persistent(Path(directory), args)
    else:
        _measure(_transient(args.body), args)


def _transient(body: int) -> Callable[[int], None]:
    client, session = connect(Broker())
    client.send(1, commands.Queue.Declare(queue="q"))
    client.send(1, commands.Basic.Qos(prefetch_count=2 * BATCH))
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    publish = commands.Basic.Publish(exchange="", routing_key="q")
    batch = client.content_bytes(1, publish, b"x" * body, None) * BATCH
    acknowledged = 0

    def rounds(count: int) -> None:
        nonlocal acknowledged
        for _ in range(count):
            session.receive_data(batch)
            session.flush()
            acknowledged += BATCH
            ack = commands.Basic.Ack(delivery_tag=acknowledged, multiple=True)
            session.receive_data(frame.marshal(ack, 1))
            session.flush()

    return rounds


def _persistent(directory: Path, args: argparse.Namespace) -> None:
    loop = asyncio.new_event_loop()
    store = SQLiteStore(directory / "batonmq.sqlite3", broker_id="hotpath", sync=False)
    loop.run_until_complete(store.open())
    broker = Broker(store=store)
    restore(broker, loop.run_until_complete(store.recover()))
    journal = broker.journal
    loop.run_until_complete(_start(journal))
    client, session = connect(broker)
    client.send(1, commands.Confirm.Select())
    client.send(1, commands.Queue.Declare(queue="q", durable=True))
    loop.run_until_complete(journal.durable())
    client.send(1, commands.Basic.Qos(prefetch_count=2 * BATCH))
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    publish = commands.Basic.Publish(exchange="", routing_key="q")
    persistent = commands.Basic.Properties(delivery_mode=2)
    batch = client.content_bytes(1, publish, b"x" * args.body, persistent) * BATCH
    acknowledged = 0

    def rounds(count: int) -> None:
        nonlocal acknowledged
        for _ in range(count):
            session.receive_data(batch)
            loop.run_until_complete(journal.durable())  # written: delivered and confirmed
            session.flush()
            acknowledged += BATCH
            ack = commands.Basic.Ack(delivery_tag=acknowledged, multiple=True)
            session.receive_data(frame.marshal(ack, 1))
            loop.run_until_complete(journal.durable())  # the acknowledgements written
            session.flush()

    try:
        _measure(rounds, args)
    finally:
        loop.run_until_complete(journal.stop())
        loop.run_until_complete(store.close())
        loop.close()


async def _start(journal: Journal) -> None:
    journal.start()  # its task belongs to the running loop


def _measure(rounds: Callable[[int], None], args: argparse.Namespace) -> None:
    rounds(5)  # warm up
    with collector_as_in_the_broker():
        _sample(rounds, args)


@contextlib.contextmanager
def collector_as_in_the_broker() -> Iterator[None]:
    """The garbage collector tuned as the broker tunes it once started; as before afterwards."""
    threshold = gc.get_threshold()
    tune_garbage_collector()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _sample(rounds: Callable[[int], None], args: argparse.Namespace) -> None:
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(rounds, args.rounds)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
        return
    best_wall = best_cpu = best_engine = float("inf")
    messages = args.rounds * BATCH
    for _ in range(5):
        wall, cpu, engine = time.perf_counter(), time.process_time(), time.thread_time()
        rounds(args.rounds)
        # The thread's clock is read inside the process's, so that its share never exceeds it.
        engine = time.thread_time() - engine
        cpu = time.process_time() - cpu
        best_wall = min(best_wall, (time.perf_counter() - wall) / messages)
        best_cpu = min(best_cpu, cpu / messages)
        best_engine = min(best_engine, engine / messages)
    print(
        f"{best_wall * 1e6:.2f} us per message (publish, route, enqueue, deliver, ack), "
        f"{best_cpu * 1e6:.2f} us of CPU, {best_engine * 1e6:.2f} us of it on the engine's "
        "thread; best of 5"
    )


if __name__ == "__main__":
    main()
