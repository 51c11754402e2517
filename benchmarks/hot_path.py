"""The broker's hot path in one process, without sockets: publish -> route -> enqueue -> deliver ->
ack, driven through an engine `Session` by the in-memory client of the unit tests.

It measures the engine's own cost per message, free of the noise of a load generator and a
second process sharing two cores, so that one change to the hot path can be judged by itself
(the side-by-side numbers come from `benchmarks/compare.py`). `--profile` prints the functions
that take the time (cProfile). It prints wall time and CPU time per message: on a machine that
other work keeps busy, the wall time grows with the others' load and the CPU time does not.

    python -m benchmarks.hot_path [--body 128] [--rounds 20] [--profile [--top 25]]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Sequence

from pamqp import commands, frame
from tests.memclient import connect

from batonmq.engine.broker import Broker

BATCH = 1000


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", type=int, default=128, help="body size in bytes")
    parser.add_argument("--rounds", type=int, default=20, help=f"batches of {BATCH} per sample")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one sample")
    parser.add_argument("--top", type=int, default=25, help="functions the profile lists")
    args = parser.parse_args(argv)

    client, session = connect(Broker())
    client.send(1, commands.Queue.Declare(queue="q"))
    client.send(1, commands.Basic.Qos(prefetch_count=2 * BATCH))
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    publish = commands.Basic.Publish(exchange="", routing_key="q")
    batch = client.content_bytes(1, publish, b"x" * args.body, None) * BATCH
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

    rounds(5)  # warm up
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(rounds, args.rounds)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
        return
    best_wall = best_cpu = float("inf")
    messages = args.rounds * BATCH
    for _ in range(5):
        wall, cpu = time.perf_counter(), time.process_time()
        rounds(args.rounds)
        best_wall = min(best_wall, (time.perf_counter() - wall) / messages)
        best_cpu = min(best_cpu, (time.process_time() - cpu) / messages)
    print(
        f"{best_wall * 1e6:.2f} us per message (publish, route, enqueue, deliver, ack), "
        f"{best_cpu * 1e6:.2f} us of CPU; best of 5"
    )


if __name__ == "__main__":
    main()
