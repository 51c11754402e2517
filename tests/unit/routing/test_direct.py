"""The direct exchange: "The message is passed to the message queue if K = R" (AMQP 0-9-1
3.1.3.1)."""

from __future__ import annotations

from batonmq.model.destination import Destination
from batonmq.routing.direct import DirectExchange

Q1 = Destination.queue("q1")
Q2 = Destination.queue("q2")
X1 = Destination.exchange("x1")


def test_routes_to_destinations_bound_with_exactly_the_routing_key():
    exchange = DirectExchange()
    exchange.bind(Q1, "orders", {})
    exchange.bind(Q2, "orders", {})
    exchange.bind(X1, "invoices", {})
    assert exchange.route("orders", None) == {Q1, Q2}
    assert exchange.route("invoices", None) == {X1}


def test_a_different_key_misses():
    """Only K = R matches: no prefix, case folding or wildcard."""
    exchange = DirectExchange()
    exchange.bind(Q1, "orders", {})
    assert exchange.route("order", None) == set()
    assert exchange.route("Orders", None) == set()
    assert exchange.route("orders.eu", None) == set()
    assert exchange.route("*", None) == set()


def test_empty_routing_key_is_a_key_like_any_other():
    exchange = DirectExchange()
    exchange.bind(Q1, "", {})
    assert exchange.route("", None) == {Q1}
    assert exchange.route("a", None) == set()


def test_binding_twice_is_idempotent():
    """queue.bind of an existing binding is a no-op (RabbitMQ: bindings are a set)."""
    exchange = DirectExchange()
    assert exchange.bind(Q1, "k", {"a": 1}) is True
    assert exchange.bind(Q1, "k", {"a": 1}) is False
    assert len(exchange) == 1
    assert list(exchange.bindings()) == [(Q1, "k", {"a": 1})]


def test_arguments_are_part_of_the_identity_but_not_of_matching():
    """RabbitMQ identifies a binding by (source, destination, key, arguments)."""
    exchange = DirectExchange()
    assert exchange.bind(Q1, "k", {}) is True
    assert exchange.bind(Q1, "k", {"a": 1}) is True
    assert len(exchange) == 2
    assert exchange.route("k", None) == {Q1}
    assert exchange.unbind(Q1, "k", {}) is True
    assert exchange.route("k", None) == {Q1}, "the binding with arguments still routes"
    assert exchange.unbind(Q1, "k", {"a": 1}) is True
    assert exchange.route("k", None) == set()


def test_unbind_of_a_missing_binding_returns_false():
    exchange = DirectExchange()
    exchange.bind(Q1, "k", {"a": 1})
    assert exchange.unbind(Q1, "other", {"a": 1}) is False
    assert exchange.unbind(Q2, "k", {"a": 1}) is False
    assert exchange.unbind(Q1, "k", {"a": 2}) is False
    assert exchange.unbind(Q1, "k", {}) is False
    assert len(exchange) == 1
    assert exchange.unbind(Q1, "k", {"a": 1}) is True
    assert exchange.unbind(Q1, "k", {"a": 1}) is False
    assert len(exchange) == 0


def test_unbind_destination_removes_all_its_bindings_and_no_other():
    exchange = DirectExchange()
    exchange.bind(Q1, "a", {})
    exchange.bind(Q1, "b", {})
    exchange.bind(Q1, "b", {"x": "y"})
    exchange.bind(Q2, "a", {})
    assert exchange.unbind_destination(Q1) == 3
    assert exchange.unbind_destination(Q1) == 0
    assert len(exchange) == 1
    assert exchange.route("a", None) == {Q2}
    assert exchange.route("b", None) == set()
    assert list(exchange.bindings()) == [(Q2, "a", {})]


def test_bindings_lists_every_binding():
    exchange = DirectExchange()
    exchange.bind(Q1, "a", {})
    exchange.bind(Q2, "b", {"n": 1})
    exchange.bind(X1, "a", {})
    assert sorted(exchange.bindings(), key=repr) == sorted(
        [(Q1, "a", {}), (Q2, "b", {"n": 1}), (X1, "a", {})], key=repr
    )
    assert len(exchange) == 3


def test_argument_key_order_does_not_change_identity():
    exchange = DirectExchange()
    assert exchange.bind(Q1, "k", {"a": 1, "b": 2}) is True
    assert exchange.bind(Q1, "k", {"b": 2, "a": 1}) is False


def test_route_returns_a_fresh_set():
    """The engine may mutate what route returns without corrupting the bindings."""
    exchange = DirectExchange()
    exchange.bind(Q1, "k", {})
    exchange.route("k", None).add(Q2)
    assert exchange.route("k", None) == {Q1}
