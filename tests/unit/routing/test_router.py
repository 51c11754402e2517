"""An exchange's router: its type's bindings, and Qpid's `x-filter-jms-selector` bindings, which
match only the messages whose properties satisfy a JMS selector."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.destination import Destination
from batonmq.model.message import Message
from batonmq.routing.base import BindingArgumentError, ExchangeTypeFactory
from batonmq.routing.direct import DirectExchange
from batonmq.routing.fanout import FanoutExchange
from batonmq.routing.headers import HeadersExchange
from batonmq.routing.router import SELECTOR_ARGUMENT, Router
from batonmq.routing.topic import TopicExchange

Q1 = Destination.queue("q1")
Q2 = Destination.queue("q2")
X1 = Destination.exchange("x1")


def message(routing_key: str = "k", **properties: object) -> Message:
    payload = encode_header_payload(commands.Basic.Properties(**properties), 0)
    return Message("x", routing_key, payload, b"")


def selecting(text: str, **arguments: object) -> FieldTable:
    return {**arguments, SELECTOR_ARGUMENT: text}


def test_without_selectors_it_routes_as_its_type_and_decodes_no_properties():
    """The hot path: an exchange with no selector bindings routes by its type alone; a direct
    exchange never decodes the message's properties (BatonMQ architecture: "decode properties lazily
    and only where needed")."""
    router = Router(DirectExchange)
    router.bind(Q1, "k", {})
    router.bind(Q2, "other", {"x-note": 1})
    routed = message("k", headers={"a": 1})
    assert router.route(routed) == {Q1}
    assert routed._properties is None
    assert len(router) == 2


def test_a_selector_binding_matches_only_messages_the_selector_selects():
    """Qpid: a binding with x-filter-jms-selector routes a message only if its headers and
    properties satisfy the selector (JMS 1.1: "A message selector matches a message if the
    selector evaluates to true"; false and unknown do not select)."""
    router = Router(DirectExchange)
    assert router.bind(Q1, "k", selecting("colour = 'red' AND size > 2")) is True
    assert router.route(message(headers={"colour": "red", "size": 3})) == {Q1}
    assert router.route(message(headers={"colour": "red", "size": 2})) == set()
    assert router.route(message(headers={"colour": "blue", "size": 3})) == set()
    assert router.route(message(headers={"colour": "red"})) == set(), "unknown does not select"
    assert router.route(message()) == set()
    assert router.route(message("other", headers={"colour": "red", "size": 3})) == set()


def test_selectors_see_the_jms_header_fields():
    """JMS 1.1: JMSPriority, JMSType, JMSDeliveryMode ... are read from the basic properties."""
    router = Router(TopicExchange)
    router.bind(Q1, "orders.#", selecting("JMSPriority > 4"))
    router.bind(Q2, "orders.#", selecting("JMSType = 'refund' AND JMSDeliveryMode = 'PERSISTENT'"))
    assert router.route(message("orders.eu", priority=9)) == {Q1}
    assert router.route(message("orders.eu")) == set(), "JMS's default priority is 4"
    assert router.route(message("orders.eu", message_type="refund", delivery_mode=2)) == {Q2}
    assert router.route(message("orders.eu", message_type="refund", delivery_mode=1)) == set()


def test_bindings_that_differ_only_in_their_selector_are_distinct():
    """A binding's identity is (destination, routing key, arguments); the selector is one of the
    arguments, so two selectors are two bindings, and the same one again changes nothing."""
    router = Router(DirectExchange)
    assert router.bind(Q1, "k", selecting("n = 1")) is True
    assert router.bind(Q1, "k", selecting("n = 2")) is True
    assert router.bind(Q1, "k", selecting("n = 1")) is False
    assert router.bind(Q1, "k", {}) is True
    assert len(router) == 3
    assert router.unbind(Q1, "k", {}) is True
    assert router.route(message(headers={"n": 2})) == {Q1}
    assert router.unbind(Q1, "k", selecting("n = 2")) is True
    assert router.unbind(Q1, "k", selecting("n = 2")) is False
    assert router.route(message(headers={"n": 2})) == set()
    assert router.route(message(headers={"n": 1})) == {Q1}
    assert len(router) == 1


def test_a_selector_is_not_evaluated_when_its_bindings_add_no_destination():
    """Q1 is already routed to by a binding without a selector: the selector binding could add
    nothing, so the message's properties are not even decoded."""
    router = Router(DirectExchange)
    router.bind(Q1, "k", {})
    router.bind(Q1, "k", selecting("n = 1"))
    routed = message(headers={"n": 2})
    assert router.route(routed) == {Q1}
    assert routed._properties is None


def test_the_destinations_of_every_selecting_selector_are_added_once():
    router = Router(FanoutExchange)
    router.bind(Q1, "", selecting("n > 0"))
    router.bind(Q2, "", selecting("n > 1"))
    router.bind(X1, "", selecting("n > 1"))
    router.bind(Q1, "", selecting("n > 1"))
    assert router.route(message(headers={"n": 1})) == {Q1}
    assert router.route(message(headers={"n": 2})) == {Q1, Q2, X1}
    assert router.route(message(headers={"n": 0})) == set()


@pytest.mark.parametrize(
    ("text", "position"),
    [("colour = ", 9), ("a = 'x", 4), ("a >< 1", 3), ("AND", 0), ("x IN ()", 6)],
)
def test_a_selector_that_does_not_parse_is_refused_with_its_position(text: str, position: int):
    """JMS 1.1: an invalid selector is refused (InvalidSelectorException); BatonMQ answers
    queue.bind and exchange.bind with 406, naming where the error is."""
    router = Router(DirectExchange)
    with pytest.raises(BindingArgumentError, match=f"at position {position}") as refused:
        router.bind(Q1, "k", selecting(text))
    assert SELECTOR_ARGUMENT in str(refused.value)
    assert len(router) == 0
    assert list(router.bindings()) == []


@pytest.mark.parametrize("value", [1, True, bytearray(b"a = 1"), b"\xff", ["a = 1"]])
def test_a_selector_that_is_not_a_string_is_refused(value):
    router = Router(DirectExchange)
    arguments = {SELECTOR_ARGUMENT: value}
    with pytest.raises(BindingArgumentError, match="is not a string"):
        router.bind(Q1, "k", arguments)
    assert router.unbind(Q1, "k", arguments) is False
    assert len(router) == 0


def test_a_void_selector_is_no_selector():
    """JMS 1.1: a null selector "indicates that there is no message selector"."""
    router = Router(DirectExchange)
    assert router.bind(Q1, "k", {SELECTOR_ARGUMENT: None}) is True
    assert router.route(message()) == {Q1}
    assert router.unbind(Q1, "k", {SELECTOR_ARGUMENT: None}) is True


def test_a_type_that_refuses_the_other_arguments_leaves_nothing_behind():
    router = Router(HeadersExchange)
    with pytest.raises(BindingArgumentError, match="x-match"):
        router.bind(Q1, "", selecting("a = 1", **{"x-match": "bogus"}))
    assert len(router) == 0
    assert router.bind(Q1, "", selecting("a = 1", **{"x-match": "any", "h": 1})) is True


def test_the_empty_selector_selects_every_message_but_is_still_a_distinct_binding():
    """JMS 1.1: "If the value of a message selector is an empty string, the value is treated as
    a null and indicates that there is no message selector"."""
    router = Router(DirectExchange)
    assert router.bind(Q1, "k", selecting("")) is True
    assert router.bind(Q1, "k", {}) is True
    assert router.unbind(Q1, "k", {}) is True
    assert router.route(message()) == {Q1}


def test_headers_matching_does_not_see_the_selector_argument():
    """The selector is the binding's filter, not a header to compare, even with all-with-x."""
    router = Router(HeadersExchange)
    router.bind(Q1, "", selecting("b = 2", **{"x-match": "all-with-x", "a": 1}))
    assert router.route(message(headers={"a": 1, "b": 2})) == {Q1}
    assert router.route(message(headers={"a": 1, "b": 3})) == set()
    assert router.route(message(headers={"a": 2, "b": 2})) == set()


def test_bindings_list_their_selectors_and_unbind_destination_removes_them():
    router = Router(TopicExchange)
    router.bind(Q1, "a.*", {})
    router.bind(Q1, "a.*", selecting("n = 1"))
    router.bind(Q2, "#", selecting("n = 1", **{"x-note": "kept"}))
    router.bind(Q1, "b", selecting("n = 2"))
    assert sorted(router.bindings(), key=repr) == sorted(
        [
            (Q1, "a.*", {}),
            (Q1, "a.*", selecting("n = 1")),
            (Q2, "#", selecting("n = 1", **{"x-note": "kept"})),
            (Q1, "b", selecting("n = 2")),
        ],
        key=repr,
    )
    assert router.unbind_destination(Q1) == 3
    assert router.unbind_destination(Q1) == 0
    assert len(router) == 1
    assert list(router.bindings()) == [(Q2, "#", selecting("n = 1", **{"x-note": "kept"}))]
    assert router.route(message("a.b", headers={"n": 1})) == {Q2}


SELECTORS = [None, "", "n = 1", "n > 1", "n IS NULL"]
DESTINATIONS = [Q1, Q2, X1]
KEYS = ["a", "b"]


def reference_route(bindings: set[tuple[Destination, str, str | None]], key: str, n: int | None):
    """The definition: a destination gets the message if one of its bindings matches the key
    and has no selector, or a selector that selects the message."""

    def selects(text: str | None) -> bool:
        match text:
            case None | "":
                return True
            case "n = 1":
                return n == 1
            case "n > 1":
                return n is not None and n > 1
            case _:
                return n is None

    return {d for d, k, text in bindings if k == key and selects(text)}


@settings(max_examples=300)
@given(
    operations=st.lists(
        st.tuples(
            st.booleans(),
            st.sampled_from(DESTINATIONS),
            st.sampled_from(KEYS),
            st.sampled_from(SELECTORS),
        ),
        max_size=30,
    ),
    key=st.sampled_from(KEYS),
    n=st.sampled_from([None, 0, 1, 2]),
)
def test_bind_unbind_sequences_route_like_the_definition(operations, key, n):
    router = Router(DirectExchange)
    model: set[tuple[Destination, str, str | None]] = set()
    for is_bind, destination, binding_key, text in operations:
        arguments = {} if text is None else selecting(text)
        binding = (destination, binding_key, text)
        if is_bind:
            assert router.bind(destination, binding_key, arguments) is (binding not in model)
            model.add(binding)
        else:
            assert router.unbind(destination, binding_key, arguments) is (binding in model)
            model.discard(binding)
    assert len(router) == len(model)
    headers = {} if n is None else {"n": n}
    assert router.route(message(key, headers=headers)) == reference_route(model, key, n)
    for destination in DESTINATIONS:
        router.unbind_destination(destination)
    assert len(router) == 0
    assert router._selected == {}, "no empty per-selector index is left behind"


@pytest.mark.parametrize("factory", [DirectExchange, FanoutExchange, TopicExchange])
def test_every_exchange_type_takes_selector_bindings(factory: ExchangeTypeFactory):
    router = Router(factory)
    router.bind(Q1, "k", selecting("n = 1"))
    assert router.route(message("k", headers={"n": 1})) == {Q1}
    assert router.route(message("k", headers={"n": 2})) == set()


@pytest.mark.parametrize(
    "factory", [DirectExchange, FanoutExchange, TopicExchange, HeadersExchange]
)
def test_every_exchange_type_returns_a_set_the_router_may_extend(factory: ExchangeTypeFactory):
    """The router adds a selector's destinations to the set the type returned: that set must be
    the caller's, not the type's own index."""
    exchange = factory()
    exchange.bind(Q1, "k", {})
    routed = exchange.route("k", {})
    routed.add(Q2)
    assert exchange.route("k", {}) == {Q1}
