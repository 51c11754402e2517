"""The four AMQP exchange types are registered by importing batonmq.routing."""

from __future__ import annotations

import pytest

import batonmq.routing  # noqa: F401  (registers the types)
from batonmq.routing.base import exchange_type, known_types
from batonmq.routing.direct import DirectExchange
from batonmq.routing.fanout import FanoutExchange
from batonmq.routing.headers import HeadersExchange
from batonmq.routing.topic import TopicExchange


@pytest.mark.parametrize(
    ("type_name", "exchange_class", "needs_headers"),
    [
        ("direct", DirectExchange, False),
        ("fanout", FanoutExchange, False),
        ("topic", TopicExchange, False),
        ("headers", HeadersExchange, True),
    ],
)
def test_type_is_registered_under_its_amqp_name(type_name, exchange_class, needs_headers):
    """AMQP 0-9-1 3.1.3: a server must implement the direct and fanout types and should implement
    topic and headers; exchange.declare names them by these strings."""
    factory = exchange_type(type_name)
    assert factory is not None
    exchange = factory()
    assert isinstance(exchange, exchange_class)
    assert exchange.type_name == type_name
    assert exchange.needs_headers is needs_headers
    assert len(exchange) == 0


def test_known_types_lists_the_four():
    assert {"direct", "fanout", "topic", "headers"} <= set(known_types())


def test_unknown_type_has_no_factory():
    """exchange.declare of an unknown type is refused (503 COMMAND_INVALID): no factory."""
    assert exchange_type("x-no-such-type") is None
