"""The rows of the benchmark: the Benchmarks requirements' workload matrix.

Kinds of row:

- throughput: producers publish as fast as the broker takes them (bounded by the shared backlog,
  see loadgen/backlog.py), consumers ack; msgs/s is what the consumers received per second of the
  measured window. `persistent` rows publish delivery-mode 2 to durable queues with publisher
  confirms (a window of outstanding confirms per publisher) and are run on BatonMQ with each store.
- latency: one producer at a fixed rate; the percentiles are the point of the row.
- memory: publish `messages` transient messages to a queue nobody consumes; the row's figure is
  the broker's RSS growth per message beyond the body.
- many clients (`clients-*`, `latency-100pub`, `idle1000-*`): every client in an OS process of
  its own, as most deployments load a broker; the idle row adds connections that only exchange
  heartbeats, and reports the broker's RSS per idle connection.
- sink-publish / sink-consume: the load generator against its sink, not a broker: its ceiling.
- stream-publish: publishers with confirms into a stream queue (`x-queue-type: stream`, as
  RabbitMQ's streams over AMQP 0-9-1), nobody consuming; the row's figure is pub/s.
- stream-replay: a stream is filled with `messages` first (not measured), then one consumer
  (basic.qos, then basic.consume with `x-stream-offset: first`) reads all of it; msgs/s is
  `messages` over the time from the consume to the last delivery.
"""

from __future__ import annotations

import fnmatch
import random
from dataclasses import dataclass, replace
from enum import StrEnum

from benchmarks.loadgen.publisher import PublisherPlan
from benchmarks.topic_routing import binding_key, routing_key
from benchmarks.topology import Topology

PAIRS = (1, 2, 4, 8, 16, 32, 64)
BODIES = (128, 1024, 65536)
TOPIC_KEYS = 100
#: How results name BatonMQ with `[broker] workers = N` (brokers/workers.py): this + N, on
#: SQLite...
WORKERS_PREFIX = "batonmq-w"
#: ... and on PostgreSQL (rows of persistent messages, as `batonmq-pg`).
PG_WORKERS_PREFIX = "batonmq-pg-w"
#: How results name BatonMQ with N workers and one virtual host spread over them
#: (brokers/spread.py): this + N, on SQLite.
SPREAD_PREFIX = "batonmq-s"
#: How results name BatonMQ with its management HTTP listener on: its store's name + this.
HTTP_SUFFIX = "+http"


class Kind(StrEnum):
    THROUGHPUT = "throughput"
    LATENCY = "latency"
    MEMORY = "memory"
    SINK_PUBLISH = "sink-publish"
    SINK_CONSUME = "sink-consume"
    STREAM_PUBLISH = "stream-publish"
    STREAM_REPLAY = "stream-replay"


#: The row's figure (a key of Measurement.metrics()) and whether more of it is better.
PRIMARY_METRIC: dict[Kind, tuple[str, bool]] = {
    Kind.THROUGHPUT: ("deliver_rate", True),
    Kind.LATENCY: ("p99_ms", False),
    Kind.MEMORY: ("bytes_per_message", False),
    Kind.SINK_PUBLISH: ("publish_rate", True),
    Kind.SINK_CONSUME: ("deliver_rate", True),
    Kind.STREAM_PUBLISH: ("publish_rate", True),
    Kind.STREAM_REPLAY: ("deliver_rate", True),
}
#: The rows on stream queues.
STREAM_KINDS = (Kind.STREAM_PUBLISH, Kind.STREAM_REPLAY)


def target_name(store: str, build: str | None = None) -> str:
    """How results name BatonMQ on `store` ("batonmq" or "batonmq-pg"): of this source tree, or
    of the build named `build` (compare.py --build)."""
    return f"{store}@{build}" if build else store


@dataclass(frozen=True, slots=True)
class Headline:
    """A goal of the Benchmarks requirements that this row measures, on `target`."""

    label: str
    goal: str
    target: str = "batonmq"


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    description: str
    kind: Kind
    producers: int = 1
    consumers: int = 1
    body_size: int = 128
    persistent: bool = False
    exchange_type: str = ""
    queues: int = 1
    bindings: int = 0
    #: Messages per second across all producers (latency rows).
    rate: int = 0
    #: Messages to queue (memory rows), or in the stream to replay (stream-replay rows).
    messages: int = 0
    headline: Headline | None = None
    #: Each publisher and each consumer in a load-generator process of its own (else they share
    #: `RunSettings.publisher_processes` and `consumer_processes` processes).
    process_per_client: bool = False
    #: Connections opened beside the row's clients that do nothing but exchange heartbeats.
    idle_connections: int = 0
    #: Other BatonMQ source trees to run beside this one (compare.py --build NAME=PATH).
    builds: tuple[str, ...] = ()
    #: Also run on BatonMQ with this many worker processes, each queue in a virtual host of its
    #: own (brokers/workers.py); 0: not.
    workers: int = 0
    #: Also run on BatonMQ with its management HTTP listener on (`batonmq+http`, and
    #: `batonmq-pg+http` for a persistent row), to measure what the statistics cost the hot
    #: path (compare.py --http); the others run with it off.
    http: bool = False

    @property
    def targets(self) -> tuple[str, ...]:
        """The brokers this row runs on; the first is the baseline of the comparison. Each
        build adds its own BatonMQ targets, named `batonmq@NAME` and `batonmq-pg@NAME`; `http`
        adds `batonmq+http` (and `batonmq-pg+http`)."""
        if self.kind in (Kind.SINK_PUBLISH, Kind.SINK_CONSUME):
            return ("sink",)
        # Streams too: with the PostgreSQL store, a stream lives in its tables.
        batonmq = ("batonmq", "batonmq-pg") if self.persistent else ("batonmq",)
        served = tuple(target + HTTP_SUFFIX for target in batonmq) if self.http else ()
        built = tuple(target_name(target, build) for build in self.builds for target in batonmq)
        prefixes = (WORKERS_PREFIX, PG_WORKERS_PREFIX) if self.persistent else (WORKERS_PREFIX,)
        workers = tuple(
            f"{prefix}{self.workers}" for prefix in (*prefixes, SPREAD_PREFIX) if self.workers
        )
        return ("rabbitmq", *batonmq, *served, *workers, *built)

    @property
    def deliveries_per_publish(self) -> int:
        return self.queues if self.exchange_type == "fanout" else 1

    @property
    def primary_metric(self) -> tuple[str, bool]:
        return PRIMARY_METRIC[self.kind]

    def queue_names(self, prefix: str) -> tuple[str, ...]:
        return tuple(f"{prefix}.q{index}" for index in range(self.queues))

    def topology(self, prefix: str) -> Topology:
        queues = self.queue_names(prefix)
        if self.kind in STREAM_KINDS:
            return Topology(queues, durable=True, stream=True)
        if not self.exchange_type:
            return Topology(queues, durable=self.persistent)
        exchange = f"{prefix}.x"
        if self.exchange_type == "fanout":
            bindings = tuple((queue, "") for queue in queues)
        else:
            bindings = tuple(
                (queues[index % len(queues)], key) for index, key in enumerate(topic_bindings())
            )
        return Topology(queues, self.persistent, exchange, self.exchange_type, bindings)

    def publisher_plans(self, topology: Topology, confirm_window: int) -> list[PublisherPlan]:
        if not topology.exchange:
            # Through the default exchange, publisher i feeds queue i (mod the queues), as
            # consumer i reads queue i: each queue has its own producers and consumers.
            routes: list[tuple[tuple[str, str], ...]] = [
                (("", queue),) for queue in topology.queues
            ]
        elif self.exchange_type == "topic":
            routes = [tuple((topology.exchange, key) for key in topic_routing_keys())]
        else:
            routes = [((topology.exchange, ""),)]
        return [
            PublisherPlan(
                routes=routes[index % len(routes)],
                body_size=self.body_size,
                persistent=self.persistent,
                confirm_window=confirm_window if self.persistent else 0,
                rate=self.rate / self.producers,
                count=self.messages // self.producers,
            )
            for index in range(self.producers)
        ]

    def consumer_queues(self, topology: Topology) -> list[str]:
        return [topology.queues[index % len(topology.queues)] for index in range(self.consumers)]


def size_label(size: int) -> str:
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024}KiB"
    return f"{size}B"


# The topic row: the binding shapes of benchmarks/topic_routing.py. Every binding key holds its
# entity id, so a routing key about entity i can match only binding i: the harness keeps the keys
# that do, and each message is delivered to exactly one queue.


def topic_bindings(count: int = 10_000) -> list[str]:
    rng = random.Random(count)
    return [binding_key(index, rng) for index in range(count)]


def topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic matching ('*' one word, '#' zero or more), as a plain reference."""
    return _match_words(pattern.split("."), key.split("."))


def _match_words(pattern: list[str], words: list[str]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_match_words(rest, words[skip:]) for skip in range(len(words) + 1))
    return bool(words) and head in ("*", words[0]) and _match_words(rest, words[1:])


def topic_routing_keys(count: int = 10_000, wanted: int = TOPIC_KEYS) -> list[str]:
    bindings = topic_bindings(count)
    rng = random.Random(1)
    keys: list[str] = []
    while len(keys) < wanted:
        key = routing_key(count, rng)
        entity = int(key.split(".")[2])
        if entity < count and topic_matches(bindings[entity], key):
            keys.append(key)
    return keys


def _headline_for(name: str) -> Headline | None:
    return HEADLINES.get(name)


HEADLINES = {
    "transient-1x1-128B": Headline("transient 1/1 128 B", "msgs/s ratio >= 1.0 (issue: >= 0.7)"),
    "transient-4x4-1KiB": Headline("transient 4/4 1 KiB", "msgs/s ratio >= 1.0 (issue: >= 0.7)"),
    "persistent-1x1-128B": Headline(
        "persistent+confirms 1/1 128 B, sqlite", "msgs/s ratio >= 1.0 (issue: >= 0.7)"
    ),
    "latency-1000": Headline("p99 latency at 1,000 msgs/s", "p99 ratio <= 1.0"),
    "memory-1M": Headline("memory per queued 128 B message", "<= 1,024 B beyond the body"),
}


def matrix() -> list[Workload]:
    """Every row, in the order they run: the idle-connections row first, while the brokers'
    memory holds nothing freed by earlier rows to reuse (its figure is RSS growth), the memory
    row last (it leaves the most behind in a broker)."""
    rows: list[Workload] = [idle_connections()]
    for body in BODIES:
        for pairs in PAIRS:
            name = f"transient-{pairs}x{pairs}-{size_label(body)}"
            rows.append(
                Workload(
                    name,
                    f"one queue, {pairs}/{pairs} producers/consumers, {size_label(body)}, "
                    "transient, no confirms",
                    Kind.THROUGHPUT,
                    pairs,
                    pairs,
                    body,
                    headline=_headline_for(name),
                )
            )
    persistent = [(body, pairs) for body in (128, 1024) for pairs in PAIRS]
    persistent += [(65536, 1), (65536, 4)]
    for body, pairs in persistent:
        name = f"persistent-{pairs}x{pairs}-{size_label(body)}"
        rows.append(
            Workload(
                name,
                f"one durable queue, {pairs}/{pairs}, {size_label(body)}, persistent, confirms",
                Kind.THROUGHPUT,
                pairs,
                pairs,
                body,
                persistent=True,
                headline=_headline_for(name),
            )
        )
    for body in (128, 1024):
        rows.append(
            Workload(
                f"fanout10-{size_label(body)}",
                f"fanout exchange to 10 queues, 1 producer, 10 consumers, {size_label(body)}",
                Kind.THROUGHPUT,
                1,
                10,
                body,
                exchange_type="fanout",
                queues=10,
            )
        )
    rows.append(
        Workload(
            "topic10k-128B",
            "topic exchange, 10,000 bindings over 10 queues, 1 producer, 10 consumers, 128B",
            Kind.THROUGHPUT,
            1,
            10,
            128,
            exchange_type="topic",
            queues=10,
            bindings=10_000,
        )
    )
    rows += stream_rows()
    for rate in (1_000, 10_000):
        name = f"latency-{rate}"
        rows.append(
            Workload(
                name,
                f"1/1, 128B, transient, at a fixed {rate:,} msgs/s",
                Kind.LATENCY,
                rate=rate,
                headline=_headline_for(name),
            )
        )
    rows += many_clients()
    rows.append(
        Workload(
            "sink-publish-128B",
            "load generator's ceiling: 1 publisher into a sink that discards, 128B",
            Kind.SINK_PUBLISH,
            1,
            0,
        )
    )
    rows.append(
        Workload(
            "sink-consume-128B",
            "load generator's ceiling: 1 consumer of a sink that replays deliveries, 128B",
            Kind.SINK_CONSUME,
            0,
            1,
        )
    )
    rows.append(
        Workload(
            "memory-1M",
            "1,000,000 transient 128B messages queued, no consumer: RSS growth per message",
            Kind.MEMORY,
            1,
            0,
            messages=1_000_000,
            headline=_headline_for("memory-1M"),
        )
    )
    return rows


def many_clients() -> list[Workload]:
    """The many-clients rows: what a broker pays per connection, with every client a process
    (and `idle_connections`, which runs first)."""
    rows = [
        Workload(
            f"clients-{pairs}x{pairs}-1KiB",
            f"one queue, {pairs}/{pairs} producers/consumers, each its own process, 1KiB, "
            "transient, no confirms",
            Kind.THROUGHPUT,
            pairs,
            pairs,
            1024,
            process_per_client=True,
        )
        for pairs in (4, 16)
    ]
    rows.append(
        Workload(
            "clients-4x4-1KiB-2q",
            "two queues, each with 2/2 of the 4/4 producers/consumers, each its own process, "
            "1KiB, transient, no confirms: a load that more than one core can share by queue",
            Kind.THROUGHPUT,
            4,
            4,
            1024,
            queues=2,
            process_per_client=True,
            workers=2,
        )
    )
    rows.append(
        Workload(
            "clients-4x4-1KiB-2q-persistent",
            "two durable queues, each with 2/2 of the 4/4 producers/consumers, each its own "
            "process, 1KiB, persistent, confirms: the store's share of a load split by queue",
            Kind.THROUGHPUT,
            4,
            4,
            1024,
            persistent=True,
            queues=2,
            process_per_client=True,
            workers=2,
        )
    )
    rows.append(
        Workload(
            "latency-100pub",
            "100 producers, each its own process, 1 consumer, 128B, transient, "
            "at a fixed 10,000 msgs/s in all",
            Kind.LATENCY,
            100,
            1,
            rate=10_000,
            process_per_client=True,
        )
    )
    return rows


def stream_rows() -> list[Workload]:
    """Stream queues beside RabbitMQ's: publishing with confirms, and replaying from `first`."""
    rows = [
        Workload(
            f"stream-publish-{producers}x0-{size_label(body)}",
            f"a stream queue, {producers} producer(s) with confirms, no consumer, "
            f"{size_label(body)}",
            Kind.STREAM_PUBLISH,
            producers,
            0,
            body,
            persistent=True,
        )
        for producers, body in ((1, 128), (4, 1024))
    ]
    rows.append(
        Workload(
            "stream-replay-500k-128B",
            "a stream of 500,000 128B messages read from x-stream-offset first by one consumer "
            "(basic.qos, acks)",
            Kind.STREAM_REPLAY,
            1,
            1,
            128,
            persistent=True,
            messages=500_000,
        )
    )
    return rows


def idle_connections() -> Workload:
    return Workload(
        "idle1000-1x1-128B",
        "1/1, 128B, transient, beside 1,000 idle connections (heartbeats only): "
        "RSS per idle connection",
        Kind.THROUGHPUT,
        process_per_client=True,
        idle_connections=1000,
    )


QUICK = (
    "transient-1x1-128B",
    "transient-4x4-1KiB",
    "persistent-1x1-128B",
    "latency-1000",
    "fanout10-128B",
    "topic10k-128B",
    "sink-publish-128B",
    "sink-consume-128B",
    "stream-publish-1x0-128B",
    "stream-replay-500k-128B",
    "memory-1M",
)
#: Messages the memory row queues, and the stream-replay rows replay, with --quick.
QUICK_MEMORY_MESSAGES = 200_000


def select(patterns: list[str], quick: bool) -> list[Workload]:
    """The rows named by `patterns` (shell wildcards over names; "headline", "quick" and "all"
    name those sets), in matrix order. No patterns: the quick set with `quick`, else all."""
    rows = matrix()
    if not patterns:
        patterns = ["quick"] if quick else ["all"]
    chosen = []
    for row in rows:
        for pattern in patterns:
            if (
                pattern == "all"
                or (pattern == "headline" and row.headline is not None)
                or (pattern == "quick" and row.name in QUICK)
                or fnmatch.fnmatchcase(row.name, pattern)
            ):
                chosen.append(row)
                break
    if quick:
        chosen = [
            replace(row, messages=min(row.messages, QUICK_MEMORY_MESSAGES))
            if row.kind in (Kind.MEMORY, Kind.STREAM_REPLAY)
            else row
            for row in chosen
        ]
    return chosen
