"""The benchmark's rows: names, selection, and the topic row's routing keys."""

from dataclasses import replace

import pytest
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


def test_the_matrix_holds_every_workload_issue_7_names():
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
