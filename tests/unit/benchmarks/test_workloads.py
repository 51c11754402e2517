"""The benchmark's rows: names, selection, and the topic row's routing keys."""

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
