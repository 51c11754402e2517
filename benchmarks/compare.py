"""BatonMQ side by side with RabbitMQ: one run, the same load generator, ratios per row.

    python -m benchmarks.compare                 # every row (about 30 minutes)
    python -m benchmarks.compare --quick         # a handful of rows, 3 s each
    python -m benchmarks.compare --rows headline # the Benchmarks requirements' headline rows
    python -m benchmarks.compare --rows 'transient-*-128B' --rows latency-1000
    python -m benchmarks.compare --list          # the rows and what each measures
    python -m benchmarks.compare --build before=/tmp/wt  # also run BatonMQ from another tree
    python -m benchmarks.compare --rows headline --http  # the statistics cost: HTTP on vs off
    python -m benchmarks.compare --rabbitmq-url amqp://user:pass@host:5672/vhost

All brokers are started at the beginning (RabbitMQ, BatonMQ with SQLite, and BatonMQ with
PostgreSQL when a row needs it; batonmq-w2, BatonMQ with `[broker] workers = 2` on SQLite, and
batonmq-pg-w2 on PostgreSQL for a persistent row, each queue in a virtual host of its own, and
batonmq-s2, two workers sharing one spread virtual host, so that messages cross between them,
for the rows that measure what more cores buy), each on
free loopback ports with temporary directories, and stopped at the end. They stay up together,
but only one is loaded at a time: a row runs on each broker in turn (alternating which goes
first, so that drift in the machine's load does not favour one side), and the CPU and memory
reported are those of the loaded broker's processes only.

--rabbitmq-url compares with a RabbitMQ that is already running instead of one of the harness's
own (installed from Debian's packages if missing, started, stopped after). Its CPU and peak RSS
are measured when its process is found on this machine, listening on the URL's port; otherwise
the rows show none for it (a note says so) and the memory rows report an error.

--build NAME=PATH runs BatonMQ from the source tree at PATH as well (PATH/src on PYTHONPATH), as
the brokers batonmq@NAME and batonmq-pg@NAME, each with a store of its own: a git worktree of an
earlier commit measures what a change did, against the same RabbitMQ in the same run.

--http runs each row on BatonMQ with its management HTTP listener on as well (batonmq+http,
batonmq-pg+http; the other BatonMQ targets run with it off, as they always do) and reports each
row's figure and CPU per message with it on against off: what the statistics that the
management API reads cost the hot path (the management issue's goal: no row slower by more
than 3 %).

Output: the per-row table, the producers/consumers sweeps in the format of Qpid manual Table 1.6,
the headline goals, a JSON file (benchmarks/results/<time>.json) and a PNG chart next to it.
Install matplotlib for the chart: pip install -e '.[bench]'.

Reading the table: msgs/s is what the consumers received per second of the window (fanout: every
copy), pub/s what the publishers sent. Latency is publish-to-delivery on the machine's monotonic
clock; in throughput rows it is latency under saturation (about the backlog bound divided by the
rate), in the latency rows it is the broker's. CPU s and peak RSS are the broker's process tree
(with PostgreSQL, its server too); CPU us/msg is CPU per message received. gen CPU s is the load
generator's own CPU, other CPU s what the rest of the machine used meanwhile: when it is large,
the row was measured on a busy machine and its absolute numbers (less so its ratios) are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

from tests.pgthrowaway import PostgresUnavailable

from benchmarks.brokers.base import Broker, BrokerError
from benchmarks.brokers.batonmq import BatonMQ, Build
from benchmarks.brokers.postgres import BenchPostgres, start_postgres
from benchmarks.brokers.rabbitmq import RabbitMQ, RunningRabbitMQ
from benchmarks.brokers.sink import Sink
from benchmarks.brokers.spread import BatonMQSpread
from benchmarks.brokers.workers import BatonMQWorkers
from benchmarks.loadgen.client import Endpoint
from benchmarks.report import (
    first_line,
    headline_summary,
    http_cost_table,
    results_table,
    sweep_tables,
)
from benchmarks.results import COMPARED_METRICS, Measurement, metric_value, ratio
from benchmarks.runner import UNMEASURED, RunSettings, run_row
from benchmarks.workloads import (
    HTTP_SUFFIX,
    PG_WORKERS_PREFIX,
    SPREAD_PREFIX,
    WORKERS_PREFIX,
    Kind,
    Workload,
    select,
    target_name,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: The brokers --skip names, besides those of each --build.
SKIPPABLE = (
    "rabbitmq",
    "batonmq",
    "batonmq-pg",
    f"{WORKERS_PREFIX}2",
    f"{PG_WORKERS_PREFIX}2",
    f"{SPREAD_PREFIX}2",
    f"batonmq{HTTP_SUFFIX}",
    f"batonmq-pg{HTTP_SUFFIX}",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--quick", action="store_true", help="a few rows, 3 s each (1 s warm-up)")
    parser.add_argument(
        "--rows",
        action="append",
        default=[],
        metavar="PATTERN",
        help="rows to run: names, shell wildcards, comma-separated, or headline/quick/all "
        "(repeatable; default: all, or quick with --quick)",
    )
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--duration", type=float, help="measured seconds per row (default 10)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per row (default 2)")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="BROKER",
        help=f"do not run on this broker: one of {', '.join(SKIPPABLE)}, or a build's "
        "(batonmq@NAME, batonmq-pg@NAME) (repeatable)",
    )
    parser.add_argument(
        "--build",
        action="append",
        default=[],
        type=_build,
        metavar="NAME=PATH",
        help="also run BatonMQ from the source tree at PATH, as batonmq@NAME (repeatable)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="also run BatonMQ with its management HTTP listener on (batonmq+http, "
        "batonmq-pg+http), and report each row's ratios with it on and off",
    )
    parser.add_argument(
        "--rabbitmq-url",
        type=_rabbitmq_url,
        metavar="URL",
        help="compare with the RabbitMQ running at amqp://user:pass@host:port/vhost instead of "
        "starting one",
    )
    parser.add_argument("--prefetch", type=int, default=1000, help="consumers' basic.qos")
    parser.add_argument(
        "--confirm-window", type=int, default=1000, help="unconfirmed publishes per publisher"
    )
    parser.add_argument(
        "--max-backlog",
        type=int,
        default=0,
        help="messages in flight between publishers and consumers (default: twice the "
        "consumers' prefetch, at least 10,000; never more than 256 MiB of bodies)",
    )
    parser.add_argument("--publisher-processes", type=int, default=1)
    parser.add_argument("--consumer-processes", type=int, default=1)
    parser.add_argument("--output", type=Path, help="JSON file (default benchmarks/results/)")
    parser.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")
    return parser


def _build(text: str) -> Build:
    name, separator, path = text.partition("=")
    if not separator or not re.fullmatch(r"[A-Za-z0-9_]+", name):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=PATH, NAME of letters, digits and underscores"
        )
    root = Path(path).resolve()
    if not (root / "src" / "batonmq" / "__main__.py").is_file():
        raise argparse.ArgumentTypeError(f"{root} holds no BatonMQ source tree (src/batonmq)")
    return Build(name, root)


def _rabbitmq_url(text: str) -> Endpoint:
    try:
        return Endpoint.from_url(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def rabbitmq_broker(url: Endpoint | None) -> Broker:
    """The RabbitMQ to compare with: the one running at `url`, or one the harness starts."""
    return RabbitMQ() if url is None else RunningRabbitMQ(url)


def _settings(arguments: argparse.Namespace) -> RunSettings:
    duration = arguments.duration or (3.0 if arguments.quick else 10.0)
    warmup = arguments.warmup if arguments.warmup is not None else (1.0 if arguments.quick else 2.0)
    return RunSettings(
        duration=duration,
        warmup=warmup,
        prefetch=arguments.prefetch,
        confirm_window=arguments.confirm_window,
        backlog_messages=arguments.max_backlog,
        publisher_processes=arguments.publisher_processes,
        consumer_processes=arguments.consumer_processes,
    )


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Brokers(contextlib.ExitStack):
    """The brokers a run needs, started once; those that cannot start are `skipped` with why.
    Each build's BatonMQ on PostgreSQL gets a PostgreSQL server of its own, so that one build's
    load (its dead rows, autovacuum, checkpoints) cannot slow down another's rows."""

    def __init__(
        self, needed: set[str], builds: Sequence[Build] = (), rabbitmq_url: Endpoint | None = None
    ) -> None:
        super().__init__()
        self.needed = needed
        self.builds = builds
        self.rabbitmq_url = rabbitmq_url
        self.running: dict[str, Broker] = {}
        self.skipped: dict[str, str] = {}
        self.labels: dict[str, str] = {"sink": "load-generator sink"}
        #: Per build (None: this tree): its server, or why there is none.
        self._postgres: dict[str | None, BenchPostgres | str] = {}

    def start(self) -> None:
        if "rabbitmq" in self.needed:
            self._start(rabbitmq_broker(self.rabbitmq_url))
        for target in sorted(self.needed):
            if target.startswith(WORKERS_PREFIX):
                self._start(BatonMQWorkers(int(target.removeprefix(WORKERS_PREFIX))))
            elif target.startswith(SPREAD_PREFIX):
                self._start(BatonMQSpread(int(target.removeprefix(SPREAD_PREFIX))))
            elif target.startswith(PG_WORKERS_PREFIX):
                workers = int(target.removeprefix(PG_WORKERS_PREFIX))
                self._start_on_postgres(target, None, partial(BatonMQWorkers, workers))
        for build in (None, *self.builds):
            name = build.name if build else None
            for management, suffix in ((False, ""), (True, HTTP_SUFFIX)):
                if target_name("batonmq", name) + suffix in self.needed:
                    self._start(BatonMQ(build=build, management=management))
                with_postgres = target_name("batonmq-pg", name) + suffix
                if with_postgres in self.needed:
                    self._start_on_postgres(
                        with_postgres,
                        name,
                        partial(BatonMQ, build=build, management=management),
                    )

    def _start_on_postgres(
        self, target: str, build: str | None, broker: Callable[[BenchPostgres], Broker]
    ) -> None:
        """Start `broker` on the PostgreSQL server of `build`, or record `target` as skipped
        when there is none."""
        postgres = self._postgres_server(build)
        if isinstance(postgres, str):
            self.skipped[target] = f"skipped: no PostgreSQL ({postgres})"
            self.labels[target] = target
            _say(f"{target}: {self.skipped[target]}")
        else:
            self._start(broker(postgres))

    def _postgres_server(self, build: str | None) -> BenchPostgres | str:
        if build not in self._postgres:
            try:
                server = start_postgres()
            except PostgresUnavailable as error:
                self._postgres[build] = str(error)
            else:
                self.callback(server.stop)
                self._postgres[build] = server
        return self._postgres[build]

    def _start(self, broker: Broker) -> None:
        self.labels[broker.name] = broker.label
        _say(f"starting {broker.name} ...")
        started = time.monotonic()
        try:
            broker.start()
        except BrokerError as error:
            broker.stop()
            self.skipped[broker.name] = f"skipped: {broker.name} did not start: {error}"
            _say(self.skipped[broker.name])
            return
        except BaseException:
            broker.stop()
            raise
        self.labels[broker.name] = broker.label
        self.callback(broker.stop)
        self.running[broker.name] = broker
        _say(f"  {broker.label} on port {broker.port} ({time.monotonic() - started:.1f} s)")
        if not broker.measured_pids():
            _say(f"  {broker.name}: {UNMEASURED}")


def run(
    workloads: Sequence[Workload],
    settings: RunSettings,
    skip: set[str],
    builds: Sequence[Build] = (),
    rabbitmq_url: Endpoint | None = None,
) -> tuple[
    dict[tuple[str, str], Measurement], dict[str, str], dict[str, str], dict[str, list[str]]
]:
    """Every row on every broker it names; (measurements, broker labels, skipped brokers, the
    errors each broker's log showed)."""
    needed = {target for workload in workloads for target in workload.targets} - skip - {"sink"}
    measurements: dict[tuple[str, str], Measurement] = {}
    run_id = datetime.datetime.now().strftime("%H%M%S")
    with Brokers(needed, builds, rabbitmq_url) as brokers:
        brokers.start()
        for index, workload in enumerate(workloads):
            targets = [target for target in workload.targets if target not in skip]
            if index % 2:
                targets.reverse()
            for target in targets:
                measurement = _run_one(workload, target, brokers, settings, run_id)
                measurements[(workload.name, target)] = measurement
                _say(_progress(workload, measurement))
        labels, skipped = dict(brokers.labels), dict(brokers.skipped)
    # Stopped now: each broker's log was read when it stopped.
    problems = {
        name: list(broker.log_problems)
        for name, broker in brokers.running.items()
        if broker.log_problems
    }
    return measurements, labels, skipped, problems


def _run_one(
    workload: Workload, target: str, brokers: Brokers, settings: RunSettings, run_id: str
) -> Measurement:
    if target in brokers.skipped:
        return Measurement(workload.name, target, error=brokers.skipped[target])
    prefix = f"bench.{run_id}.{workload.name}"
    if target == "sink":
        mode = "discard" if workload.kind is Kind.SINK_PUBLISH else "replay"
        sink = Sink(mode, workload.body_size)
        try:
            with sink:
                return run_row(workload, sink, settings, prefix)
        except BrokerError as error:
            return Measurement(workload.name, target, error=f"sink did not start: {error}")
    broker = brokers.running[target]
    if not broker.alive():
        return Measurement(workload.name, target, error=f"{target} is not running")
    return run_row(workload, broker, settings, prefix)


def _progress(workload: Workload, measurement: Measurement) -> str:
    if measurement.error:
        return f"  {workload.name:<24} {measurement.target:<11} {first_line(measurement.error)}"
    metric, _ = workload.primary_metric
    value = metric_value(measurement, metric)
    shown = "-" if value is None else f"{value:,.2f}"
    return (
        f"  {workload.name:<24} {measurement.target:<11} {metric} {shown}  "
        f"(pub/s {measurement.publish_rate or 0:,.0f}, del/s {measurement.deliver_rate or 0:,.0f},"
        f" p99 {measurement.p99_ms or 0:.2f} ms, CPU {measurement.cpu_seconds or 0:.2f} s)"
    )


def to_json(
    workloads: Sequence[Workload],
    measurements: dict[tuple[str, str], Measurement],
    labels: dict[str, str],
    skipped: dict[str, str],
    settings: RunSettings,
    started: datetime.datetime,
    builds: Sequence[Build] = (),
) -> dict[str, object]:
    rows = []
    for workload in workloads:
        row_measurements = {
            target: measurements[(workload.name, target)].to_json()
            for target in workload.targets
            if (workload.name, target) in measurements
        }
        baseline = measurements.get((workload.name, "rabbitmq"))
        ratios: dict[str, dict[str, float | None]] = {}
        for target in workload.targets:
            ours = measurements.get((workload.name, target))
            if target in ("rabbitmq", "sink") or ours is None or baseline is None:
                continue
            ratios[target] = {
                metric: ratio(metric_value(ours, metric), metric_value(baseline, metric))
                for metric in COMPARED_METRICS
            }
        description = asdict(workload)
        description["kind"] = str(workload.kind)
        description["primary_metric"] = workload.primary_metric[0]
        rows.append({**description, "measurements": row_measurements, "ratios": ratios})
    return {
        "started": started.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": asdict(settings),
        "brokers": labels,
        "builds": {
            build.name: {"path": str(build.root), "commit": build.commit()} for build in builds
        },
        "skipped": skipped,
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    patterns = [part for pattern in arguments.rows for part in pattern.split(",") if part]
    builds: list[Build] = arguments.build
    names = tuple(build.name for build in builds)
    if len(set(names)) != len(names):
        print(f"--build names must differ: {', '.join(names)}", file=sys.stderr)
        return 2
    built = {target_name(store, name) for name in names for store in ("batonmq", "batonmq-pg")}
    unknown = sorted(set(arguments.skip) - set(SKIPPABLE) - built)
    if unknown:
        print(f"--skip: no broker named {', '.join(unknown)}", file=sys.stderr)
        return 2
    workloads = [
        replace(workload, builds=names, http=arguments.http)
        for workload in select(patterns, arguments.quick)
    ]
    if arguments.list:
        for workload in workloads:
            mark = "*" if workload.headline else " "
            print(f"{mark} {workload.name:<24} {workload.description}")
        return 0
    if not workloads:
        print(f"no row matches {patterns}", file=sys.stderr)
        return 2
    settings = _settings(arguments)
    started = datetime.datetime.now()
    _say(
        f"{len(workloads)} rows, {settings.duration:g} s each after {settings.warmup:g} s warm-up; "
        f"{os.cpu_count()} CPUs; load generator: {settings.publisher_processes} publisher and "
        f"{settings.consumer_processes} consumer process(es)"
    )
    measurements, labels, skipped, log_problems = run(
        workloads, settings, set(arguments.skip), builds, arguments.rabbitmq_url
    )

    print()
    print(results_table(workloads, measurements, labels))
    for table in sweep_tables(workloads, measurements, labels):
        print()
        print(table)
    if arguments.http:
        print()
        print(http_cost_table(workloads, measurements))
    print()
    print(headline_summary(workloads, measurements))
    for reason in sorted(set(skipped.values())):
        print(reason)
    for name, problems in log_problems.items():
        print(f"{name}: its log shows {len(problems)} error(s), the first: {problems[0]}")

    output = arguments.output or RESULTS_DIR / f"{started:%Y%m%d-%H%M%S}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    payload = to_json(workloads, measurements, labels, skipped, settings, started, builds)
    payload["log_problems"] = log_problems
    output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nJSON: {output}")
    if not arguments.no_chart:
        chart = output.with_suffix(".png")
        try:
            from benchmarks.chart import draw_chart

            draw_chart(
                chart, workloads, measurements, f"BatonMQ vs RabbitMQ, {started:%Y-%m-%d %H:%M}"
            )
        except ImportError:
            print("chart: matplotlib is not installed (pip install -e '.[bench]')")
        else:
            print(f"chart: {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
