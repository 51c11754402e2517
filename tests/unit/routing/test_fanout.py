"""The fanout exchange: "routes messages to all bound queues and exchanges, regardless of the
routing key" (AMQP 0-9-1 3.1.3.2)."""

from __future__ import annotations

from batonmq.model.destination import Destination
from batonmq.routing.fanout import FanoutExchange

Q1 = Destination.queue("q1")
Q2 = Destination.queue("q2")
X1 = Destination.exchange("x1")


def test_routes_to_every_destination_whatever_the_key():
    exchange = FanoutExchange()
    exchange.bind(Q1, "", {})
    exchange.bind(Q2, "ignored", {})
    exchange.bind(X1, "x.y", {})
    assert exchange.route("", None) == {Q1, Q2, X1}
    assert exchange.route("anything", None) == {Q1, Q2, X1}


def test_no_bindings_routes_nowhere():
    assert FanoutExchange().route("k", None) == set()


def test_destination_bound_twice_receives_once():
    exchange = FanoutExchange()
    assert exchange.bind(Q1, "a", {}) is True
    assert exchange.bind(Q1, "b", {}) is True
    assert exchange.bind(Q1, "b", {"x": 1}) is True
    assert len(exchange) == 3
    assert exchange.route("z", None) == {Q1}


def test_binding_twice_is_idempotent():
    exchange = FanoutExchange()
    assert exchange.bind(Q1, "a", {"x": 1}) is True
    assert exchange.bind(Q1, "a", {"x": 1}) is False
    assert len(exchange) == 1


def test_unbind():
    exchange = FanoutExchange()
    exchange.bind(Q1, "a", {})
    exchange.bind(Q1, "b", {})
    assert exchange.unbind(Q1, "c", {}) is False
    assert exchange.unbind(Q2, "a", {}) is False
    assert exchange.unbind(Q1, "a", {}) is True
    assert exchange.route("", None) == {Q1}, "still bound with key b"
    assert exchange.unbind(Q1, "b", {}) is True
    assert exchange.route("", None) == set()
    assert len(exchange) == 0


def test_unbind_destination():
    exchange = FanoutExchange()
    exchange.bind(Q1, "a", {})
    exchange.bind(Q1, "b", {})
    exchange.bind(Q2, "a", {})
    assert exchange.unbind_destination(Q1) == 2
    assert exchange.unbind_destination(X1) == 0
    assert exchange.route("", None) == {Q2}
    assert list(exchange.bindings()) == [(Q2, "a", {})]
    assert len(exchange) == 1
