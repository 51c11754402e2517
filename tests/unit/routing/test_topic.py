"""The topic exchange, with RabbitMQ's rules: "* (star) can substitute for exactly one word. #
(hash) can substitute for zero or more words", words being delimited by dots."""

from __future__ import annotations

import pytest

from batonmq.model.destination import Destination
from batonmq.routing.topic import TopicExchange

Q1 = Destination.queue("q1")
Q2 = Destination.queue("q2")
X1 = Destination.exchange("x1")


def matches(binding_key: str, routing_key: str) -> bool:
    exchange = TopicExchange()
    exchange.bind(Q1, binding_key, {})
    return exchange.route(routing_key, None) == {Q1}


@pytest.mark.parametrize(
    ("binding_key", "routing_key", "expected"),
    [
        # literal words
        ("stock.usd.nyse", "stock.usd.nyse", True),
        ("stock.usd.nyse", "stock.usd", False),
        ("stock.usd", "stock.usd.nyse", False),
        ("stock.usd.nyse", "stock.eur.nyse", False),
        ("stock", "stocks", False),
        # `*` is exactly one word
        ("*", "a", True),
        ("*", "a.b", False),
        ("*.*", "a", False),
        ("*.*", "a.b", True),
        ("*.*", "a.b.c", False),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.c", False),
        ("a.*.c", "a.b.b.c", False),
        # `#` at the start
        ("#.c", "c", True),
        ("#.c", "a.c", True),
        ("#.c", "a.b.c", True),
        ("#.c", "c.d", False),
        # `#` in the middle
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.b.c", True),
        ("a.#.c", "a.b.b.b.c", True),
        ("a.#.c", "a.b", False),
        ("a.#.c", "b.c", False),
        # `#` at the end
        ("a.#", "a", True),
        ("a.#", "a.b", True),
        ("a.#", "a.b.c", True),
        ("a.#", "b", False),
        ("a.#", "ab", False),
        # `#` alone matches everything
        ("#", "", True),
        ("#", "a", True),
        ("#", "a.b.c", True),
        # runs of `#`
        ("#.#", "", True),
        ("#.#", "a", True),
        ("#.#", "a.b.c", True),
        ("a.#.#.b", "a.b", True),
        ("a.#.#.b", "a.x.b", True),
        ("a.#.#.b", "a.x.y.z.b", True),
        ("a.#.#.b", "a.x.y.z", False),
        # `#` next to `*`
        ("#.*", "", False),
        ("#.*", "a", True),
        ("*.#", "a.b.c", True),
        ("*.#.*", "a", False),
        ("*.#.*", "a.b", True),
        ("a.*.#", "a", False),
        ("a.*.#", "a.b", True),
    ],
)
def test_wildcards(binding_key, routing_key, expected):
    """RabbitMQ: "* (star) can substitute for exactly one word. # (hash) can substitute for zero
    or more words." """
    assert matches(binding_key, routing_key) is expected


@pytest.mark.parametrize(
    ("binding_key", "routing_key", "expected"),
    [
        # RabbitMQ's split_topic_key turns "" into no words at all ...
        ("", "", True),
        ("", "a", False),
        ("*", "", False),
        ("#", "", True),
        # ... and every other empty word is a word.
        ("a..b", "a..b", True),
        ("a..b", "a.b", False),
        ("a.*.b", "a..b", True),
        ("a.#.b", "a..b", True),
        ("*.*", ".", True),
        ("*", ".", False),
        (".", ".", True),
        ("", ".", False),
        (".a", ".a", True),
        ("*.a", ".a", True),
        ("a", ".a", False),
        ("a.", "a.", True),
        ("a.*", "a.", True),
        ("a.#", "a.", True),
        ("a", "a.", False),
    ],
)
def test_empty_keys_and_empty_words(binding_key, routing_key, expected):
    """Words are what lies between dots, empty ones included; RabbitMQ splits the empty key into
    zero words (so `*` does not match "", `#` does)."""
    assert matches(binding_key, routing_key) is expected


def test_routing_key_wildcard_characters_are_literal_words():
    """Only binding keys have wildcards; "*" in a routing key is a word like any other."""
    assert matches("a.*", "a.*")
    assert not matches("a.b", "a.*")
    assert not matches("a.b", "a.#")
    assert matches("a.#", "a.#")
    assert matches("*", "#")


def test_destination_matched_by_two_bindings_is_routed_once():
    exchange = TopicExchange()
    exchange.bind(Q1, "a.*", {})
    exchange.bind(Q1, "*.b", {})
    exchange.bind(Q1, "#", {})
    exchange.bind(Q2, "a.b", {})
    assert exchange.route("a.b", None) == {Q1, Q2}
    assert len(exchange) == 4


def test_binding_twice_is_idempotent():
    exchange = TopicExchange()
    assert exchange.bind(Q1, "a.#", {}) is True
    assert exchange.bind(Q1, "a.#", {}) is False
    assert len(exchange) == 1
    assert exchange.unbind(Q1, "a.#", {}) is True
    assert exchange.route("a.b", None) == set()


def test_same_key_with_different_arguments_is_two_bindings():
    """RabbitMQ identifies a binding by (source, destination, key, arguments)."""
    exchange = TopicExchange()
    assert exchange.bind(Q1, "a.*", {}) is True
    assert exchange.bind(Q1, "a.*", {"x-note": "second"}) is True
    assert len(exchange) == 2
    assert exchange.unbind(Q1, "a.*", {}) is True
    assert exchange.route("a.b", None) == {Q1}
    assert exchange.unbind(Q1, "a.*", {"x-note": "second"}) is True
    assert exchange.route("a.b", None) == set()
    assert exchange.trie.is_empty()


def test_unbind_of_a_missing_binding_returns_false():
    exchange = TopicExchange()
    exchange.bind(Q1, "a.b", {})
    assert exchange.unbind(Q1, "a", {}) is False
    assert exchange.unbind(Q1, "a.b.c", {}) is False
    assert exchange.unbind(Q2, "a.b", {}) is False
    assert exchange.unbind(Q1, "a.b", {"k": 1}) is False
    assert len(exchange) == 1
    assert exchange.route("a.b", None) == {Q1}


def test_unbind_keeps_siblings_and_prunes_the_rest():
    exchange = TopicExchange()
    exchange.bind(Q1, "a.b.c", {})
    exchange.bind(Q2, "a.b", {})
    exchange.bind(Q2, "a.x.#", {})
    nodes_before = exchange.trie.node_count()
    exchange.bind(X1, "a.b.c.d.e", {})
    exchange.unbind(X1, "a.b.c.d.e", {})
    assert exchange.trie.node_count() == nodes_before
    assert exchange.unbind(Q1, "a.b.c", {}) is True
    assert exchange.route("a.b", None) == {Q2}
    assert exchange.route("a.x.y", None) == {Q2}
    assert exchange.route("a.b.c", None) == set()


def test_unbind_destination():
    exchange = TopicExchange()
    exchange.bind(Q1, "a.*", {})
    exchange.bind(Q1, "#", {})
    exchange.bind(Q1, "#", {"k": "v"})
    exchange.bind(Q2, "a.b", {})
    assert exchange.unbind_destination(Q1) == 3
    assert exchange.unbind_destination(Q1) == 0
    assert len(exchange) == 1
    assert exchange.route("a.b", None) == {Q2}
    assert exchange.route("z", None) == set()
    assert list(exchange.bindings()) == [(Q2, "a.b", {})]
    exchange.unbind_destination(Q2)
    assert exchange.trie.is_empty()


def test_churn_leaves_no_nodes_behind():
    """Unbind prunes the trie: memory does not grow with bind/unbind churn."""
    exchange = TopicExchange()
    exchange.bind(Q2, "keep.#", {})
    baseline = exchange.trie.node_count()
    for round_number in range(50):
        for index in range(20):
            exchange.bind(Q1, f"r{round_number}.{index}.*.#.end", {})
        for index in range(20):
            exchange.unbind(Q1, f"r{round_number}.{index}.*.#.end", {})
    assert exchange.trie.node_count() == baseline
    assert len(exchange) == 1


def test_bindings_lists_every_binding():
    exchange = TopicExchange()
    exchange.bind(Q1, "a.*", {})
    exchange.bind(Q1, "a.*", {"n": 1})
    exchange.bind(X1, "#", {})
    assert sorted(exchange.bindings(), key=repr) == sorted(
        [(Q1, "a.*", {}), (Q1, "a.*", {"n": 1}), (X1, "#", {})], key=repr
    )
