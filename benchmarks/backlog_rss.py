"""How much memory a broker needs to hold a backlog larger than its page window.

Publishes N persistent messages of SIZE bytes with confirms (pipelined, WINDOW outstanding) into
one durable queue that nobody consumes, then reports the broker's resident memory (VmRSS) and
its peak (VmHWM), the publish rate, and the store's size. The Durable messaging requirements ask
for the RSS with a backlog of 2 million 1 KiB persistent messages (goal: under 500 MB).

    python benchmarks/backlog_rss.py --messages 2000000 --size 1024 [--store postgres --dsn ...]

With --max-priority P the queue is a priority queue (x-max-priority P) and the messages' priorities
cycle through 0..P, so that every level holds a backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import aiormq
from pamqp import commands

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.brokerproc import start_broker


def memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


async def publish(url: str, messages: int, size: int, window: int, max_priority: int) -> float:
    connection = await aiormq.connect(url)
    channel = await connection.channel(publisher_confirms=True)
    arguments = {"x-max-priority": max_priority} if max_priority else {}
    await channel.queue_declare("backlog", durable=True, arguments=arguments)
    properties = [
        aiormq.spec.Basic.Properties(delivery_mode=2, priority=priority or None)
        for priority in range(max_priority + 1)
    ]
    body = os.urandom(size)
    semaphore = asyncio.Semaphore(window)
    nacks = 0

    async def send(number: int) -> None:
        nonlocal nacks
        try:
            confirmation = await channel.basic_publish(
                body, routing_key="backlog", properties=properties[number % len(properties)]
            )
            if not isinstance(confirmation, commands.Basic.Ack):
                nacks += 1
        finally:
            semaphore.release()

    started = time.monotonic()
    tasks = set()
    for number in range(messages):
        await semaphore.acquire()
        task = asyncio.ensure_future(send(number))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    declared = await channel.queue_declare(
        "backlog", durable=True, passive=True, arguments=arguments
    )
    await connection.close()
    assert nacks == 0, f"{nacks} publishes were nacked"
    assert declared.message_count == messages, declared.message_count
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", default="")
    parser.add_argument("--max-priority", type=int, default=0)
    args = parser.parse_args()
    environment = {"BATONMQ__PERSIST__STORE": args.store, "BATONMQ__LOG__LEVEL": "info"}
    if args.store == "postgres":
        environment["BATONMQ__PERSIST__POSTGRES__DSN"] = args.dsn
    with tempfile.TemporaryDirectory() as workdir:
        broker = start_broker(Path(workdir), environment=environment)
        try:
            assert broker.process is not None
            elapsed = asyncio.run(
                publish(broker.url, args.messages, args.size, args.window, args.max_priority)
            )
            memory = memory_kib(broker.process.pid)
            store_file = Path(workdir) / "data" / "batonmq.sqlite3"
            result = {
                "store": args.store,
                "max_priority": args.max_priority,
                "messages": args.messages,
                "size": args.size,
                "publish_seconds": round(elapsed, 1),
                "msgs_per_s": round(args.messages / elapsed),
                "rss_mib": round(memory["VmRSS"] / 1024, 1),
                "peak_rss_mib": round(memory["VmHWM"] / 1024, 1),
                "store_mib": round(store_file.stat().st_size / 2**20, 1)
                if store_file.exists()
                else None,
            }
            print(json.dumps(result))
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
