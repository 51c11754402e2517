"""The PySpark connector's rows/s beside the raw AMQP rate of the same machine.

The stream-queue issue asks for "a benchmark of the connector (rows/s read and written on
`local[2]`, N = 1,000,000 small messages) beside the raw AMQP rate". One BatonMQ (SQLite store),
one local Spark, and these phases, each timed on its own:

- raw write: the load generator (benchmarks/loadgen, pipelined publishes, 1,000 unconfirmed at
  most per publisher) publishes N messages into a stream queue with confirms;
- raw read: one load-generator consumer reads the N messages from `x-stream-offset: first`;
- spark read: `spark.read.format("batonmq")` of that stream, counted (every row is made: a Python
  data source prunes no column);
- spark readStream: `spark.readStream.format("batonmq")` of the stream with
  Trigger.AvailableNow into Spark's `noop` sink;
- spark write: `df.write.format("batonmq")` of N rows of the same body size into another stream
  (every row published with a confirm), the count checked after.

For each: rows/s, the ratio to the raw rate of the same direction, the broker's CPU us per row,
and how many of the machine's cores were busy (everything: the broker, Spark's JVM and Python
workers, other processes).

    python -m benchmarks.spark_connector                     # N = 1,000,000, local[2]
    python -m benchmarks.spark_connector --messages 200000 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import batonmq.spark
from benchmarks.brokers.base import Broker
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.loadgen.client import connect
from benchmarks.loadgen.publisher import PublisherPlan
from benchmarks.procstats import cpu_seconds, machine_busy_seconds
from benchmarks.results import Measurement
from benchmarks.runner import RunSettings, fill_stream, replay_stream
from benchmarks.topology import Topology, declare, message_count

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RAW = "bench.connector.raw"
WRITTEN = "bench.connector.written"


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    direction: str  # "read" or "write"
    rows: int
    seconds: float
    broker_cpu_seconds: float
    busy_cores: float

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds

    @property
    def broker_cpu_us_per_row(self) -> float:
        return self.broker_cpu_seconds / self.rows * 1e6


@contextmanager
def timed(broker: Broker, into: dict[str, float]) -> Iterator[None]:
    """Wall time, the broker's CPU and the machine's busy CPU seconds of the block, into `into`."""
    pids = broker.measured_pids()
    wall, cpu, busy = time.monotonic(), cpu_seconds(pids), machine_busy_seconds()
    yield
    into["seconds"] = time.monotonic() - wall
    into["broker_cpu_seconds"] = cpu_seconds(pids) - cpu
    into["busy_cores"] = (machine_busy_seconds() - busy) / into["seconds"]


def phase(name: str, direction: str, rows: int, measured: dict[str, float]) -> Phase:
    result = Phase(name, direction, rows, **measured)
    _say(
        f"  {name:<16} {result.rows_per_second:>10,.0f} rows/s  ({rows:,} in "
        f"{result.seconds:.1f} s, broker {result.broker_cpu_us_per_row:.1f} us/row, "
        f"{result.busy_cores:.2f} cores busy)"
    )
    return result


async def _declare_streams(broker: Broker) -> None:
    client = await connect(broker.endpoint)
    try:
        await declare(client, Topology((RAW, WRITTEN), durable=True, stream=True))
    finally:
        await client.close()


async def _count(broker: Broker, queue: str) -> int:
    client = await connect(broker.endpoint)
    try:
        return await message_count(client, queue)
    finally:
        await client.close()


def raw_phases(broker: Broker, messages: int, body_size: int) -> list[Phase]:
    settings = RunSettings(memory_timeout=1800.0)
    plan = PublisherPlan(
        routes=(("", RAW),),
        body_size=body_size,
        persistent=True,
        confirm_window=settings.confirm_window,
        count=messages,
    )
    measured: dict[str, float] = {}
    with timed(broker, measured):
        fill_stream(broker, RAW, [plan], settings)
    written = phase("raw write", "write", messages, measured)
    replayed = Measurement("raw read", broker.name)
    with timed(broker, measured):
        replay_stream(broker, RAW, messages, settings, replayed)
    if replayed.error:
        raise RuntimeError(f"the raw read failed: {replayed.error}")
    return [written, phase("raw read", "read", replayed.delivered, measured)]


def spark_session(master: str) -> SparkSession:
    from pyspark.sql import SparkSession

    # Spark's Python workers (and its data source planners) run this Python, with BatonMQ.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(master)
        .appName("batonmq-connector-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    batonmq.spark.register(session)
    return session


def spark_phases(spark: SparkSession, broker: Broker, messages: int, body_size: int) -> list[Phase]:
    from pyspark.sql import functions

    url = f"amqp://guest:guest@{broker.host}:{broker.port}/%2F"
    phases: list[Phase] = []
    measured: dict[str, float] = {}

    frame = spark.read.format("batonmq").option("url", url).option("queue", RAW).load()
    with timed(broker, measured):
        rows = frame.count()
    _expect("spark read", rows, messages)
    phases.append(phase("spark read", "read", rows, measured))

    with tempfile.TemporaryDirectory(prefix="batonmq-connector-") as checkpoint:
        query = (
            spark.readStream.format("batonmq")
            .option("url", url)
            .option("queue", RAW)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
        )
        with timed(broker, measured):
            running = query.start()
            running.awaitTermination()
        rows = sum(progress["numInputRows"] for progress in running.recentProgress)
    _expect("spark readStream", rows, messages)
    phases.append(phase("spark readStream", "read", rows, measured))

    bodies = spark.range(messages, numPartitions=spark.sparkContext.defaultParallelism).select(
        functions.expr(f"cast(repeat('x', {body_size}) AS binary)").alias("body")
    )
    with timed(broker, measured):
        bodies.write.format("batonmq").option("url", url).option("routingKey", WRITTEN).mode(
            "append"
        ).save()
    rows = asyncio.run(_count(broker, WRITTEN))
    _expect("spark write", rows, messages)
    phases.append(phase("spark write", "write", rows, measured))
    return phases


def _expect(name: str, rows: int, messages: int) -> None:
    if rows != messages:
        raise RuntimeError(f"{name}: {rows:,} rows, not {messages:,}")


def run(messages: int, body_size: int, master: str) -> list[Phase]:
    with BatonMQ() as broker:
        asyncio.run(_declare_streams(broker))
        _say(f"BatonMQ (sqlite) on port {broker.port}; {messages:,} messages of {body_size} B")
        phases = raw_phases(broker, messages, body_size)
        _say(f"starting Spark ({master}) ...")
        spark = spark_session(master)
        try:
            phases += spark_phases(spark, broker, messages, body_size)
        finally:
            spark.stop()
    return phases


def report(phases: list[Phase], master: str) -> str:
    raw = {item.direction: item for item in phases if item.name.startswith("raw")}
    lines = [
        f"{'phase':<18}{'rows/s':>12}{'ratio to raw':>14}{'broker us/row':>15}{'cores busy':>12}"
    ]
    for item in phases:
        ratio = item.rows_per_second / raw[item.direction].rows_per_second
        lines.append(
            f"{item.name:<18}{item.rows_per_second:>12,.0f}{ratio:>14.3f}"
            f"{item.broker_cpu_us_per_row:>15.1f}{item.busy_cores:>12.2f}"
        )
    lines.append(
        f"Spark on {master}; {os.cpu_count()} CPUs; cores busy counts the whole machine "
        "(broker, Spark, load generator and anything else running)"
    )
    return "\n".join(lines)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.spark_connector",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--messages", type=int, default=1_000_000, help="N (1,000,000)")
    parser.add_argument("--body-size", type=int, default=128, help="bytes per body (128)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", type=Path, help="also write the results here")
    arguments = parser.parse_args()
    phases = run(arguments.messages, arguments.body_size, arguments.master)
    print(report(phases, arguments.master))
    if arguments.json:
        results = [{**asdict(item), "rows_per_second": item.rows_per_second} for item in phases]
        arguments.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
