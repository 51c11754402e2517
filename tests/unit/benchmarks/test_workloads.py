"""The benchmark's rows: names, selection, and the topic row's routing keys."""

from collections import Counter
from dataclasses import replace

import pytest
from benchmarks.brokers.base import BrokerError
from benchmarks.brokers.sink import Sink
from benchmarks.brokers.spread import BatonMQSpread
from benchmarks.brokers.workers import BatonMQWorkers
from benchmarks.runner import RowFailed, RunSettings, backlog_peers, worker_specs
from benchmarks.workloads import (
    HEADLINES,
    QUICK,
    QUICK_MEMORY_MESSAGES,
    Kind,
    matrix,
    select,
    topic_bindings,
    topic_matches,
    topic_routing_keys,
)

from batonmq.model.destination import Destination
from batonmq.routing.topic import TopicExchange
from batonmq.server.placement import owner_of, queue_owner


def test_row_names_are_unique_and_name_the_headlines_and_the_quick_set():
    names = [row.name for row in matrix()]
    assert len(names) == len(set(names))
    assert set(HEADLINES) <= set(names)
    assert set(QUICK) <= set(names)


def test_rows_are_selected_by_wildcards_and_sets_in_matrix_order():
    assert [row.name for row in select(["transient-*-128B"], quick=False)] == [
        f"transient-{n}x{n}-128B" for n in (1, 2, 4, 8, 16, 32, 64)
    ]
    assert {row.name for row in select(["headline"], quick=False)} == set(HEADLINES)
    assert [row.name for row in select([], quick=True)] == [
        name for name in (row.name for row in matrix()) if name in QUICK
    ]


def test_quick_queues_fewer_messages_in_the_memory_row():
    (memory,) = select(["memory-1M"], quick=True)
    assert memory.kind is Kind.MEMORY
    assert memory.messages == QUICK_MEMORY_MESSAGES
    assert select(["memory-1M"], quick=False)[0].messages == 1_000_000


def test_persistent_rows_run_on_both_stores_with_rabbitmq_as_baseline():
    (row,) = select(["persistent-1x1-128B"], quick=False)
    assert row.targets == ("rabbitmq", "batonmq", "batonmq-pg")
    (plan,) = row.publisher_plans(row.topology("p"), confirm_window=1000)
    assert (plan.persistent, plan.confirm_window) == (True, 1000)
    assert row.topology("p").durable


def test_stream_rows_declare_stream_queues_publish_with_confirms_and_replay_from_first():
    """RabbitMQ's streams over AMQP 0-9-1: "declare a queue with the x-queue-type queue argument
    set to stream", durable; publishers use confirms. A stream lives where the store keeps
    it (segment files beside SQLite, tables in PostgreSQL), so the rows run on both stores."""
    rows = select(["stream-*"], quick=False)
    assert {row.kind for row in rows} == {Kind.STREAM_PUBLISH, Kind.STREAM_REPLAY}
    for row in rows:
        topology = row.topology("s")
        assert row.targets == ("rabbitmq", "batonmq", "batonmq-pg")
        assert topology.durable
        assert topology.queue_arguments == {"x-queue-type": "stream"}
        assert {plan.confirm_window for plan in row.publisher_plans(topology, 1000)} == {1000}
    (replay,) = [row for row in rows if row.kind is Kind.STREAM_REPLAY]
    (plan,) = replay.publisher_plans(replay.topology("s"), 1000)
    assert plan.count == replay.messages == 500_000
    assert select([replay.name], quick=True)[0].messages == QUICK_MEMORY_MESSAGES


def test_a_stream_publish_row_has_publishers_only_and_no_backlog_bound():
    (row,) = select(["stream-publish-4x0-1KiB"], quick=False)
    specs = worker_specs(row, row.topology("s"), Sink("discard", 1024), RunSettings())
    assert [len(spec.publishers) for spec in specs] == [4]
    assert [spec.consumer_queues for spec in specs] == [()]
    assert specs[0].backlog_limit == 0


def test_each_build_runs_a_row_on_batonmq_with_each_store_the_row_uses():
    """compare.py --build NAME=PATH: BatonMQ from another source tree, beside this one, with
    RabbitMQ still first (the baseline of every ratio)."""
    (persistent,) = select(["persistent-1x1-128B"], quick=False)
    assert replace(persistent, builds=("old", "older")).targets == (
        "rabbitmq",
        "batonmq",
        "batonmq-pg",
        "batonmq@old",
        "batonmq-pg@old",
        "batonmq@older",
        "batonmq-pg@older",
    )
    (transient,) = select(["transient-1x1-128B"], quick=False)
    assert replace(transient, builds=("old",)).targets == ("rabbitmq", "batonmq", "batonmq@old")
    (sink,) = select(["sink-publish-128B"], quick=False)
    assert replace(sink, builds=("old",)).targets == ("sink",)


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("a.b", "a.b", True),
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.b.c", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("#.c", "c", True),
        ("#", "a.b", True),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.x.y.c", True),
        ("a.#.c", "a.x.y", False),
        ("*.b.#", "a.b", True),
    ],
)
def test_topic_matching(pattern, key, matches):
    assert topic_matches(pattern, key) is matches


def test_each_topic_routing_key_reaches_exactly_one_queue_as_batonmq_routes_it():
    row = next(row for row in matrix() if row.name == "topic10k-128B")
    topology = row.topology("t")
    assert len(topology.bindings) == 10_000 == len(topic_bindings())
    exchange = TopicExchange()
    for queue, key in topology.bindings:
        exchange.bind(Destination.queue(queue), key, {})
    keys = topic_routing_keys()
    assert len(keys) == 100
    for key in keys:
        assert len(exchange.route(key, None)) == 1


def test_the_matrix_holds_every_workload_the_benchmark_requirements_name():
    """The Benchmarks requirements, Workloads: "one queue with 1/1, 2/2, 4/4, 8/8, 16/16, 32/32 and
    64/64 producers/consumers; bodies of 128 B, 1 KiB and 64 KiB; transient without confirms;
    persistent with confirms (sqlite and postgres); fanout to 10 queues; topic routing with
    10,000 bindings; latency at fixed rates of 1,000 and 10,000 msgs/s", and the load generator's
    ceiling against a sink. (Persistent 64 KiB runs at 1/1 and 4/4 only: 8 MB a second of bodies
    through fsync is the disk's row, not the broker's.)"""
    rows = {row.name: row for row in matrix()}
    pairs = (1, 2, 4, 8, 16, 32, 64)
    for size in ("128B", "1KiB", "64KiB"):
        for n in pairs:
            transient = rows[f"transient-{n}x{n}-{size}"]
            assert (transient.producers, transient.consumers) == (n, n)
            assert not transient.persistent
    for size in ("128B", "1KiB"):
        for n in pairs:
            assert rows[f"persistent-{n}x{n}-{size}"].targets == (
                "rabbitmq",
                "batonmq",
                "batonmq-pg",
            )
    fanout = rows["fanout10-128B"]
    assert (fanout.exchange_type, fanout.queues, fanout.consumers) == ("fanout", 10, 10)
    topic = rows["topic10k-128B"]
    assert (topic.exchange_type, len(topic.topology("t").bindings)) == ("topic", 10_000)
    assert [rows[f"latency-{rate}"].rate for rate in (1000, 10000)] == [1000, 10000]
    assert rows["sink-publish-128B"].kind is Kind.SINK_PUBLISH
    assert rows["memory-1M"].messages == 1_000_000


def test_many_clients_rows_give_every_client_a_process_and_open_idle_connections_apart():
    """The many-clients requirements: "each client its own OS process with its own connection;
    rows 4 x 4 and 16 x 16 publishers x consumers at 1 KiB, 100 publisher connections at a fixed
    total rate (latency p50 / p99), and 1,000 idle connections plus one busy pair"."""
    rows = {row.name: row for row in matrix()}
    settings = RunSettings()  # clients share one process each way unless a row says otherwise
    for pairs in (4, 16):
        row = rows[f"clients-{pairs}x{pairs}-1KiB"]
        specs = worker_specs(row, row.topology("t"), Sink("publish", 1024), settings)
        assert len(specs) == 2 * pairs
        assert all(len(spec.publishers) + len(spec.consumer_queues) == 1 for spec in specs)
        assert [spec.slot for spec in specs] == list(range(2 * pairs))
    latency = rows["latency-100pub"]
    assert (latency.kind, latency.producers, latency.rate) == (Kind.LATENCY, 100, 10_000)
    specs = worker_specs(latency, latency.topology("t"), Sink("publish", 128), settings)
    assert sum(1 for spec in specs if spec.publishers) == 100
    assert {plan.rate for spec in specs for plan in spec.publishers} == {100.0}
    idle = rows["idle1000-1x1-128B"]
    specs = worker_specs(idle, idle.topology("t"), Sink("publish", 128), settings)
    assert [spec.idle for spec in specs] == [0, 0, 1000]
    assert not specs[-1].publishers and not specs[-1].consumer_queues
    transient = rows["transient-4x4-1KiB"]
    shared = worker_specs(transient, transient.topology("t"), Sink("publish", 128), settings)
    assert len(shared) == 2, "the other rows keep their clients in one process each way"


def test_the_two_queue_row_gives_each_queue_its_own_producers_and_consumers():
    """The many-clients requirements ask for the 4 x 4 row on more than one core: a load that a
    broker can spread over cores by queue needs more than one queue, each with producers and
    consumers of its own."""
    (row,) = select(["clients-4x4-1KiB-2q"], quick=False)
    topology = row.topology("t")
    assert topology.queues == ("t.q0", "t.q1")
    plans = row.publisher_plans(topology, confirm_window=1000)
    assert [plan.routes for plan in plans] == [(("", "t.q0"),), (("", "t.q1"),)] * 2
    assert row.consumer_queues(topology) == ["t.q0", "t.q1"] * 2
    assert row.targets == ("rabbitmq", "batonmq", "batonmq-w2", "batonmq-s2")


def test_the_persistent_two_queue_row_runs_on_workers_on_both_stores():
    """Persistent rows run on both stores (`batonmq`, `batonmq-pg`), and so on workers: what the
    store costs two workers sharing SQLite's one file, and PostgreSQL."""
    (row,) = select(["clients-4x4-1KiB-2q-persistent"], quick=False)
    assert row.persistent and row.queues == 2
    assert row.targets == (
        "rabbitmq",
        "batonmq",
        "batonmq-pg",
        "batonmq-w2",
        "batonmq-pg-w2",
        "batonmq-s2",
    )


def _never_started(count: int) -> BatonMQWorkers:
    """A `batonmq-w<count>` target with no process: only where it would listen."""
    workers = BatonMQWorkers(count)
    workers.port = 1001
    return workers


def test_on_workers_each_queue_is_in_a_virtual_host_of_its_own_worker():
    """Queues are placed round-robin over the workers, each in a virtual host its worker owns,
    and a load-generator process names its queue's virtual host: the broker hands it to that
    owner, so no message crosses from one worker to another."""
    (row,) = select(["clients-4x4-1KiB-2q"], quick=False)
    workers = _never_started(2)
    topology = row.topology("t")

    parts = workers.place(topology)

    assert [owner_of(vhost, 2) for vhost in workers.vhosts] == [0, 1]
    assert [(endpoint.port, endpoint.vhost, part.queues) for endpoint, part in parts] == [
        (1001, workers.vhosts[0], ("t.q0",)),
        (1001, workers.vhosts[1], ("t.q1",)),
    ]
    specs = worker_specs(row, topology, workers, RunSettings())
    vhosts: dict[str, set[str]] = {}
    for spec in specs:
        (queue,) = spec.consumer_queues or tuple(plan.routes[0][1] for plan in spec.publishers)
        vhosts.setdefault(queue, set()).add(spec.endpoint.vhost)
    assert vhosts == {"t.q0": {workers.vhosts[0]}, "t.q1": {workers.vhosts[1]}}


def test_workers_refuse_a_row_that_routes_through_an_exchange():
    (fanout,) = select(["fanout10-128B"], quick=False)
    with pytest.raises(BrokerError, match="cannot route through an exchange"):
        _never_started(2).place(fanout.topology("f"))


def test_clients_sharing_a_process_cannot_span_virtual_hosts():
    """One load-generator process has one endpoint, one virtual host: a row whose shared
    processes hold clients of queues in different virtual hosts fails, rather than send some
    of them to the wrong one."""
    (row,) = select(["clients-4x4-1KiB-2q"], quick=False)
    shared = replace(row, process_per_client=False)
    workers = _never_started(2)
    topology = shared.topology("t")
    workers.place(topology)

    with pytest.raises(RowFailed, match="use 2 brokers"):
        worker_specs(shared, topology, workers, RunSettings())


def test_http_adds_batonmq_with_its_http_listener_on_beside_each_store():
    """compare.py --http: the statistics-cost row (the management issue: "headline rows with the
    HTTP listener on and off"), each store with the listener on beside it with it off."""
    (persistent,) = select(["persistent-1x1-128B"], quick=False)
    assert replace(persistent, http=True).targets == (
        "rabbitmq",
        "batonmq",
        "batonmq-pg",
        "batonmq+http",
        "batonmq-pg+http",
    )
    (transient,) = select(["transient-1x1-128B"], quick=False)
    assert replace(transient, http=True).targets == ("rabbitmq", "batonmq", "batonmq+http")


def test_each_queue_with_its_own_clients_has_a_backlog_bound_of_its_own():
    """The backlog bound keeps every broker in the same steady state (loadgen/backlog.py). Over
    two queues, each with its own producers and consumers, one bound shared by both let a
    queue that fell behind hold back the other's publishers, and a broker that serves the two
    queues on two cores waited on the slower one. Each group of clients that share a queue is
    bounded by its share of the consumers; clients that route through an exchange, or one
    process that consumes from both queues, make one group again."""
    (row,) = select(["clients-4x4-1KiB-2q"], quick=False)
    settings = RunSettings()
    specs = worker_specs(row, row.topology("t"), Sink("publish", 1024), settings)
    queue_of = {
        spec.slot: (spec.consumer_queues or (spec.publishers[0].routes[0][1],))[0] for spec in specs
    }
    for spec in specs:
        assert {queue_of[peer] for peer in spec.backlog_peers} == {queue_of[spec.slot]}
        assert len(spec.backlog_peers) == 4  # 2 producers and 2 consumers
        assert spec.backlog_limit == settings.backlog_limit(1024, 4) // 2

    shared = replace(row, process_per_client=False)
    specs = worker_specs(shared, shared.topology("t"), Sink("publish", 1024), settings)
    assert {spec.backlog_peers for spec in specs} == {(0, 1)}
    assert {spec.backlog_limit for spec in specs} == {settings.backlog_limit(1024, 4)}

    (fanout,) = select(["fanout10-128B"], quick=False)
    specs = worker_specs(fanout, fanout.topology("f"), Sink("publish", 128), settings)
    assert {spec.backlog_peers for spec in specs} == {tuple(range(len(specs)))}


def test_backlog_peers_join_processes_through_every_queue_they_share():
    q0, q1, q2 = frozenset({"q0"}), frozenset({"q1"}), frozenset({"q2"})
    assert backlog_peers([q0, q1, q0, q1]) == [(0, 2), (1, 3), (0, 2), (1, 3)]
    assert backlog_peers([q0, q1, q0 | q1, q2]) == [(0, 1, 2), (0, 1, 2), (0, 1, 2), (3,)]
    assert backlog_peers([q0, None, q1]) == [(0, 1, 2)] * 3


def test_on_a_spread_virtual_host_each_worker_runs_as_many_queues_as_on_workers():
    """`batonmq-s<N>` shares a row's queues out over the workers as evenly as `batonmq-w<N>`
    does (give or take one), by the owner rule of a spread virtual host, so that the two
    differ only in what crosses between workers."""
    for name, workers in (("clients-4x4-1KiB-2q", 2), ("fanout10-128B", 2), ("fanout10-128B", 3)):
        (row,) = select([name], quick=False)
        prefix = BatonMQSpread(workers).queue_prefix("bench.r", row.queue_names)
        assert prefix.startswith("bench.r-")
        counts = Counter(queue_owner("/", q, workers) for q in row.queue_names(prefix))
        assert sorted(counts) == list(range(workers))
        assert max(counts.values()) - min(counts.values()) <= 1
