"""How fast the management API answers with many queues, BatonMQ beside RabbitMQ in one run.

    python -m benchmarks.management_latency [--queues 10000] [--repeats 20]

Declares QUEUES queues on each broker, then times (median and worst of REPEATS) the answers
that slow down with the number of objects: a page of 100 queues (`/api/queues?page=1&
page_size=100`), the same page sorted by publish rate (every queue's message_stats written
first), the overview, and a Prometheus scrape (RabbitMQ's on its Prometheus plugin's
port, BatonMQ's /metrics and /metrics/per-object). The management issue's goals: a page of 100 in
under 200 ms, a scrape in under a second, at 10,000 queues.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Final

import aiormq

from benchmarks.brokers.base import HOST, Broker
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.brokers.rabbitmq import RabbitMQ

PAGE: Final = "/api/queues?page=1&page_size=100"
#: The same page sorted by a figure every queue must write first (a dashboard's busiest queues).
BUSIEST: Final = PAGE + "&sort=message_stats.publish_details.rate&sort_reverse=true"
#: Declares in flight at once.
WINDOW: Final = 200


def fetch(url: str) -> bytes:
    request = urllib.request.Request(url)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=120) as response:
        return bytes(response.read())


async def declare(port: int, count: int) -> None:
    connection = await aiormq.connect(f"amqp://guest:guest@{HOST}:{port}/")
    channel = await connection.channel()
    pending: set[asyncio.Future[object]] = set()
    for number in range(count):
        pending.add(asyncio.ensure_future(channel.queue_declare(f"q{number:05d}", durable=True)))
        if len(pending) >= WINDOW:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    if pending:
        await asyncio.wait(pending)
    await channel.basic_publish(b"x", routing_key="q00000")
    await connection.close()


def timed(read: Callable[[], bytes], repeats: int) -> tuple[float, float]:
    """Median and worst milliseconds of `repeats` reads (after one unmeasured)."""
    read()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def measure(
    broker: Broker, api: str, scrapes: dict[str, str], queues: int, repeats: int
) -> dict[str, tuple[float, float]]:
    broker.start()
    try:
        started = time.perf_counter()
        asyncio.run(declare(broker.port, queues))
        print(f"{broker.label}: {queues} queues declared in {time.perf_counter() - started:.1f} s")
        time.sleep(6)  # RabbitMQ's statistics arrive every 5 s
        reads = {
            "page of 100 queues": api + PAGE,
            "page by publish rate": api + BUSIEST,
            "overview": api + "/api/overview",
            **scrapes,
        }
        return {name: timed(lambda url=url: fetch(url), repeats) for name, url in reads.items()}
    finally:
        broker.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    options = parser.parse_args(argv)
    batonmq, rabbitmq = BatonMQ(management=True), RabbitMQ(management=True)
    ours = f"http://{HOST}:{batonmq.management_port}"
    theirs = f"http://{HOST}:{rabbitmq.management_port}"
    results = {
        "BatonMQ": measure(
            batonmq,
            ours,
            {"scrape": ours + "/metrics", "scrape per object": ours + "/metrics/per-object"},
            options.queues,
            options.repeats,
        ),
        "RabbitMQ": measure(
            rabbitmq,
            theirs,
            {
                "scrape": f"http://{HOST}:{rabbitmq.prometheus_port}/metrics",
                "scrape per object": f"http://{HOST}:{rabbitmq.prometheus_port}/metrics/per-object",
            },
            options.queues,
            options.repeats,
        ),
    }
    print(f"\n{options.queues} queues, {options.repeats} reads each: median / worst ms")
    print(f"{'read':<20} {'BatonMQ':>18} {'RabbitMQ':>18} {'ratio':>7}")
    for name, (median, worst) in results["BatonMQ"].items():
        their_median, their_worst = results["RabbitMQ"][name]
        print(
            f"{name:<20} {median:>8.1f} / {worst:>7.1f} {their_median:>8.1f} / {their_worst:>7.1f}"
            f" {their_median / median:>6.2f}x"
        )
    print("ratio: RabbitMQ's median over BatonMQ's (above 1: BatonMQ answers faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
