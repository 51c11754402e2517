"""The HA benchmark, in the shape of the Qpid broker manual's performance table (1.6.16, Table
1.6: throughput of 1/1 to 64/64 producers/consumers on one durable queue, "No HA" against HA
nodes, as the difference in %), and the failover time of an HA cluster.

    python -m benchmarks.ha                       # pairs 1, 4, 16; 5 s each; 3 failovers
    python -m benchmarks.ha --pairs 1 2 4 8 16 32 64 --duration 10 --failovers 5

Throughput: the persistent-NxN-1KiB rows of benchmarks.compare (persistent 1 KiB messages with
confirms, manual acks) on a standalone BatonMQ with the PostgreSQL store ("No HA") and on a
member of a two-member HA cluster sharing one PostgreSQL database (the other member idle but
running: heartbeats, its store updates). The same PostgreSQL server (fsync on) serves both, and
the brokers run one at a time, alternating which goes first. CPU µs/msg counts the broker's
processes and PostgreSQL's.

Failover: a member holds a queue of persistent messages (confirmed); it is SIGKILLed, and a
client polls the survivor (connect, basic.get) until it gets the first message: the time from
the kill to that message is what a client waits (failure detection, the takeover, the
reconnection). With heartbeat interval 1 s and thresholds 2, as the tests run the cluster; the
defaults (interval 2 s, threshold 3; monitor 30 s, 2) add about a minute of detection.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence

import pika
import pika.exceptions

from benchmarks.brokers.base import Broker
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.brokers.postgres import BenchPostgres, start_postgres
from benchmarks.report import first_line
from benchmarks.results import Measurement
from benchmarks.runner import RunSettings, run_row
from benchmarks.workloads import select

CLUSTER = "bench"
#: Failure detection as the tests run it: suspect after 2 s without heartbeats, failed after
#: 2 s without a store update.
DETECTION = ("interval = 1", "threshold = 2")
FAILOVER_MESSAGES = 1000
FAILOVER_QUEUE = "failover"


def member(postgres: BenchPostgres, broker_id: str, database: str) -> BatonMQ:
    """A member of cluster `bench` in `database` (its heartbeat service on a port the system
    picks: the members find each other's in the store)."""
    return BatonMQ(
        postgres,
        database=database,
        name=f"batonmq-ha-{broker_id}",
        label=f"BatonMQ HA member {broker_id}",
        settings=(
            "[cluster]",
            "ha = true",
            f'clusterid = "{CLUSTER}"',
            f'brokerid = "{broker_id}"',
            "[cluster.heartbeat]",
            "port = 0",
            *DETECTION,
            "[cluster.monitor]",
            *DETECTION,
        ),
    )


def throughput(
    postgres: BenchPostgres, pairs: Sequence[int], settings: RunSettings
) -> list[tuple[int, Measurement, Measurement]]:
    """(pairs, standalone, HA member) for each row."""
    standalone = BatonMQ(postgres, label="No HA")
    members = [member(postgres, broker_id, "batonmq_ha") for broker_id in ("A", "B")]
    started: list[Broker] = []
    rows: list[tuple[int, Measurement, Measurement]] = []
    try:
        for starting in (standalone, *members):
            starting.start()
            started.append(starting)
        for index, count in enumerate(pairs):
            (workload,) = select([f"persistent-{count}x{count}-1KiB"], quick=False)
            order: list[Broker] = [standalone, members[0]]
            if index % 2:
                order.reverse()
            measured = {
                target.name: run_row(workload, target, settings, f"ha{index}-") for target in order
            }
            rows.append((count, measured[standalone.name], measured[members[0].name]))
            _print_row(*rows[-1])
    finally:
        for stopping in reversed(started):
            stopping.stop()
            _report_problems(stopping)
    return rows


def failovers(postgres: BenchPostgres, trials: int) -> list[float]:
    """Seconds from the SIGKILL of the member holding the queue to the first message a client
    gets from the survivor, per trial; the killed member rejoins for the next. A cluster of
    its own: the throughput rows' members, stopped, would be taken over by these."""
    members = {
        broker_id: member(postgres, broker_id, "batonmq_ha_failover") for broker_id in ("C", "D")
    }
    for broker in members.values():
        broker.start()
    used, other = "C", "D"
    seconds: list[float] = []
    try:
        for trial in range(trials):
            _fill(members[used], f"{FAILOVER_QUEUE}{trial}")
            process = members[used].process
            assert process is not None
            killed = time.monotonic()
            process.kill()
            process.wait()
            _first_message(members[other], f"{FAILOVER_QUEUE}{trial}")
            seconds.append(time.monotonic() - killed)
            print(f"failover {trial + 1}: {seconds[-1]:.2f} s", flush=True)
            members[used].stop()  # its temporary directory; the process is gone
            _report_problems(members[used])
            members[used].start()  # rejoins as a fresh member, owning nothing
            used, other = other, used
    finally:
        for broker in members.values():
            broker.stop()
            _report_problems(broker)
    return seconds


def _report_problems(broker: Broker) -> None:
    """A broker whose log showed errors or tracebacks: its numbers are not to be trusted."""
    for problem in broker.log_problems[:3]:
        print(f"{broker.label}'s log: {first_line(problem)}", flush=True)


def _parameters(broker: Broker) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(broker.host, broker.port, connection_attempts=1)


def _fill(broker: Broker, queue: str) -> None:
    connection = pika.BlockingConnection(_parameters(broker))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for number in range(FAILOVER_MESSAGES):
            channel.basic_publish(
                "", queue, str(number).encode(), pika.BasicProperties(delivery_mode=2)
            )
    finally:
        connection.close()


def _first_message(survivor: Broker, queue: str, timeout: float = 120.0) -> None:
    """Poll the survivor until a message of `queue` comes: its queue appears once it has taken
    the killed member over."""
    deadline = time.monotonic() + timeout
    connection: pika.BlockingConnection | None = None
    try:
        while time.monotonic() < deadline:
            try:
                if connection is None or connection.is_closed:
                    connection = pika.BlockingConnection(_parameters(survivor))
                method, _, _ = connection.channel().basic_get(queue)
                if method is not None:
                    return
            except pika.exceptions.ChannelClosedByBroker:
                pass  # 404: not taken over yet
            except pika.exceptions.AMQPConnectionError:
                connection = None
            time.sleep(0.02)
    finally:
        if connection is not None and connection.is_open:
            connection.close()
    raise TimeoutError(f"no message of {queue} from the survivor within {timeout:.0f} s")


def _rate(measurement: Measurement) -> str:
    if measurement.error:
        return f"error: {first_line(measurement.error, 60)}"
    return f"{measurement.deliver_rate or 0:,.0f}"


def _cpu(measurement: Measurement) -> str:
    value = measurement.cpu_us_per_message
    return "-" if value is None else f"{value:.1f}"


def _print_row(pairs: int, standalone: Measurement, ha: Measurement) -> None:
    rates = (standalone.deliver_rate, ha.deliver_rate)
    difference = (
        f"{(rates[1] / rates[0] - 1) * 100:+.1f}%"
        if rates[0] and rates[1] and not (standalone.error or ha.error)
        else "-"
    )
    print(
        f"{pairs:>3}/{pairs:<3} {_rate(standalone):>12} {_rate(ha):>12} {difference:>8}"
        f" {_cpu(standalone):>10} {_cpu(ha):>10}",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ha",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pairs", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per row")
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args(argv)
    settings = RunSettings(duration=args.duration, warmup=min(2.0, args.duration / 2))
    print(f"load average at start: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    postgres = start_postgres()
    try:
        print("persistent 1 KiB, confirms; msgs/s received; CPU µs/msg (broker and PostgreSQL)")
        print(f"{'pairs':<7} {'No HA':>12} {'HA member':>12} {'diff':>8} {'No HA':>10} {'HA':>10}")
        throughput(postgres, args.pairs, settings)
        if args.failovers:
            times = failovers(postgres, args.failovers)
            print(
                f"failover, SIGKILL to the first message from the survivor: median "
                f"{statistics.median(times):.2f} s, min {min(times):.2f}, max {max(times):.2f} "
                f"({len(times)} trials, {FAILOVER_MESSAGES} messages held)"
            )
    finally:
        postgres.stop()
    print(f"load average at end: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")


if __name__ == "__main__":
    main()
