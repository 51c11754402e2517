"""The headers exchange, with RabbitMQ's rules (rabbit_exchange_type_headers)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.base import BindingArgumentError
from batonmq.routing.headers import HeadersExchange

Q1 = Destination.queue("q1")
Q2 = Destination.queue("q2")


def matches(arguments, headers) -> bool:
    exchange = HeadersExchange()
    exchange.bind(Q1, "", arguments)
    return exchange.route("", headers) == {Q1}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"format": "pdf", "type": "report"}, True),
        ({"format": "pdf", "type": "report", "extra": 1}, True),
        ({"format": "pdf"}, False),
        ({"format": "pdf", "type": "log"}, False),
        ({}, False),
        (None, False),
    ],
)
def test_all_needs_every_argument(headers, expected):
    """x-match=all: "all the values must match" (every binding argument present and equal)."""
    assert matches({"x-match": "all", "format": "pdf", "type": "report"}, headers) is expected


def test_all_is_the_default():
    """RabbitMQ: a binding without x-match behaves as x-match=all."""
    assert matches({"format": "pdf", "type": "report"}, {"format": "pdf", "type": "report"})
    assert not matches({"format": "pdf", "type": "report"}, {"format": "pdf"})


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"format": "pdf", "type": "report"}, True),
        ({"format": "pdf"}, True),
        ({"type": "report", "other": 1}, True),
        ({"format": "zip", "type": "log"}, False),
        ({"other": "pdf"}, False),
        (None, False),
    ],
)
def test_any_needs_one_argument(headers, expected):
    """x-match=any: "just one matching header value is sufficient"."""
    assert matches({"x-match": "any", "format": "pdf", "type": "report"}, headers) is expected


def test_x_arguments_are_ignored_by_all_and_any():
    """RabbitMQ: "Delete all other bindings starting with x- unless x-match is set to all-with-x
    or any-with-x"."""
    assert matches({"x-match": "all", "h": 1, "x-key": "v"}, {"h": 1})
    assert not matches({"x-match": "any", "x-key": "v"}, {"x-key": "v"})


def test_all_with_x_compares_x_arguments_too():
    arguments = {"x-match": "all-with-x", "h": 1, "x-key": "v"}
    assert matches(arguments, {"h": 1, "x-key": "v"})
    assert not matches(arguments, {"h": 1})
    assert not matches(arguments, {"h": 1, "x-key": "w"})


def test_any_with_x_compares_x_arguments_too():
    arguments = {"x-match": "any-with-x", "h": 1, "x-key": "v"}
    assert matches(arguments, {"x-key": "v"})
    assert matches(arguments, {"h": 1})
    assert not matches(arguments, {"x-key": "w", "h": 2})


def test_x_match_itself_is_never_compared():
    """RabbitMQ: "Always delete binding x-match"."""
    assert matches({"x-match": "all-with-x"}, {})
    assert not matches({"x-match": "any-with-x"}, {"x-match": "any-with-x"})


def test_all_with_nothing_to_compare_matches_every_message():
    assert matches({}, None)
    assert matches({"x-match": "all", "x-ignored": 1}, {"a": 1})


def test_any_with_nothing_to_compare_matches_no_message():
    assert not matches({"x-match": "any"}, {"a": 1})
    assert not matches({"x-match": "any", "x-ignored": 1}, {"x-ignored": 1})


@pytest.mark.parametrize("x_match", ["none", "ALL", "", "all ", "some"])
def test_invalid_x_match_value_is_refused(x_match):
    """RabbitMQ answers 406: "Invalid x-match field value ~tp; expected all, any, all-with-x, or
    any-with-x"."""
    exchange = HeadersExchange()
    with pytest.raises(BindingArgumentError, match="x-match"):
        exchange.bind(Q1, "", {"x-match": x_match, "h": 1})
    assert len(exchange) == 0


@pytest.mark.parametrize("x_match", [1, True, None, {"all": 1}])
def test_x_match_of_another_type_is_refused(x_match):
    """RabbitMQ: "Invalid x-match field type ~tp (value ~tp); expected longstr"."""
    exchange = HeadersExchange()
    with pytest.raises(BindingArgumentError, match="x-match"):
        exchange.bind(Q1, "", {"x-match": x_match})


def test_x_match_as_bytes_is_accepted():
    """pamqp decodes a long string to bytes when it is not valid UTF-8; valid bytes are accepted."""
    assert matches({"x-match": b"any", "a": 1, "b": 2}, {"b": 2})


def test_void_argument_checks_presence_only():
    """RabbitMQ: "a 'no value' in a pattern field is supposed to mean simple presence of the
    corresponding data field"."""
    assert matches({"h": None}, {"h": "anything"})
    assert matches({"h": None}, {"h": None})
    assert matches({"h": None}, {"h": 0})
    assert not matches({"h": None}, {"other": 1})
    assert matches({"x-match": "any", "h": None, "g": 1}, {"h": 5})


def test_void_header_does_not_equal_a_value():
    assert not matches({"h": 1}, {"h": None})
    assert not matches({"h": ""}, {"h": None})


JAN_1_2024 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
JAN_1_2024_SECONDS = 1_704_067_200


@pytest.mark.parametrize(
    ("binding_value", "header_value"),
    [
        pytest.param(1, 1, id="int"),
        pytest.param(-(2**63), -(2**63), id="long-min"),
        pytest.param(2**64 - 1, 2**64 - 1, id="unsigned-long-long-max"),
        pytest.param(1, 1.0, id="int-float"),
        pytest.param(1.5, 1.5, id="float"),
        pytest.param(JAN_1_2024, JAN_1_2024, id="timestamp"),
        pytest.param(JAN_1_2024, JAN_1_2024_SECONDS, id="timestamp-int"),
        pytest.param(JAN_1_2024_SECONDS, JAN_1_2024, id="int-timestamp"),
        pytest.param(JAN_1_2024, float(JAN_1_2024_SECONDS), id="timestamp-double"),
        pytest.param(JAN_1_2024.replace(tzinfo=None), JAN_1_2024, id="naive-timestamp-is-utc"),
        pytest.param(Decimal("1.5"), Decimal("1.5"), id="decimal"),
        pytest.param(Decimal("-0.05"), Decimal("-0.05"), id="negative-decimal"),
        pytest.param(True, True, id="bool"),
        pytest.param(False, False, id="false"),
        pytest.param("text", "text", id="longstr"),
        pytest.param("text", b"text", id="str-bytes"),
        pytest.param("caf\u00e9", "caf\u00e9".encode(), id="utf8-str-bytes"),
        pytest.param(b"\xff\x00", b"\xff\x00", id="non-utf8-longstr"),
        pytest.param("text", bytearray(b"text"), id="longstr-bytearray"),
        pytest.param(bytearray(b"\xff"), b"\xff", id="bytearray-non-utf8-longstr"),
        pytest.param(bytearray(b"\x00\x01"), bytearray(b"\x00\x01"), id="bytearray"),
        pytest.param({"n": 1, "s": "a"}, {"n": 1, "s": b"a"}, id="table"),
        pytest.param({"n": 1, "s": "a"}, {"s": "a", "n": 1}, id="table-key-order"),
        pytest.param({"t": {"deep": [1, None]}}, {"t": {"deep": [1, None]}}, id="nested-table"),
        pytest.param([1, "a", None, Decimal("2.5")], [1, b"a", None, Decimal("2.5")], id="array"),
        pytest.param([], [], id="empty-array"),
        pytest.param({}, {}, id="empty-table"),
        pytest.param([JAN_1_2024], [JAN_1_2024], id="array-timestamp"),
    ],
)
def test_values_equal_as_rabbitmq_compares_them(binding_value, header_value):
    """RabbitMQ compares a binding value with a header with Erlang's == on the decoded values,
    whatever the wire type: every integer width is an integer, 1 == 1.0, a timestamp is its
    integer seconds, a long string and a byte array are the same octets (UTF-8 or not)."""
    assert matches({"h": binding_value}, {"h": header_value})
    assert matches({"x-match": "any", "h": binding_value, "other": 0}, {"h": header_value})


@pytest.mark.parametrize(
    ("binding_value", "header_value"),
    [
        pytest.param(1, 2, id="int"),
        pytest.param(1, "1", id="int-longstr"),
        pytest.param(1, True, id="int-bool"),
        pytest.param(True, 1, id="bool-int"),
        pytest.param(0, False, id="zero-false"),
        pytest.param(True, "true", id="bool-longstr"),
        pytest.param(1.5, 1.25, id="float"),
        pytest.param(float("nan"), float("nan"), id="nan"),
        pytest.param(Decimal("1.5"), Decimal("1.50"), id="decimal-scale"),
        pytest.param(Decimal(1), 1, id="decimal-int"),
        pytest.param(Decimal("1.5"), 1.5, id="decimal-float"),
        pytest.param(JAN_1_2024, JAN_1_2024_SECONDS + 1, id="timestamp-int"),
        pytest.param(JAN_1_2024, "2024-01-01", id="timestamp-longstr"),
        pytest.param("text", "Text", id="longstr-case"),
        pytest.param("text", b"text ", id="longstr-bytes"),
        pytest.param("", None, id="empty-longstr-void"),
        pytest.param(0, None, id="zero-void"),
        pytest.param({"n": 1}, {"n": 2}, id="table-value"),
        pytest.param({"n": 1}, {"n": 1, "m": 1}, id="table-extra-key"),
        pytest.param({"n": 1}, {"n": 1.0}, id="nested-int-double"),
        pytest.param({"n": 1}, {"n": True}, id="nested-int-bool"),
        pytest.param(
            {"n": 5},
            {"n": datetime.datetime.fromtimestamp(5, datetime.UTC)},
            id="nested-int-timestamp",
        ),
        pytest.param({"s": "a"}, {"s": bytearray(b"a")}, id="nested-longstr-bytearray"),
        pytest.param({"n": None}, {"n": 0}, id="nested-void-is-a-value"),
        pytest.param([1, 2], [2, 1], id="array-order"),
        pytest.param([1], [1, 1], id="array-length"),
        pytest.param([1], [1.0], id="array-int-double"),
        pytest.param(["a"], [bytearray(b"a")], id="array-longstr-bytearray"),
        pytest.param([1], {"0": 1}, id="array-table"),
        pytest.param([], None, id="empty-array-void"),
    ],
)
def test_different_values_do_not_match(binding_value, header_value):
    """A boolean is an atom, not a number (Erlang: true =/= 1); a decimal is (scale, value), so
    1.5 is not 1.50 and is no float; strings compare octet by octet; inside a table or array an
    element keeps its wire type, so a nested 1 is not a nested 1.0 (RabbitMQ 3.10.8)."""
    assert not matches({"h": binding_value}, {"h": header_value})
    assert not matches({"x-match": "any", "h": binding_value}, {"h": header_value})


def test_void_binding_value_in_every_match_mode_checks_presence_only():
    """RabbitMQ's headers_match: a pattern field of type void matches any data field of that
    name, in all, any, all-with-x and any-with-x; a missing header never matches it."""
    for x_match in ("all", "any", "all-with-x", "any-with-x"):
        arguments = {"x-match": x_match, "h": None}
        for value in (None, 0, False, "", b"\xff", [], {}, Decimal(0), JAN_1_2024, 1.5):
            assert matches(arguments, {"h": value}), (x_match, value)
        assert not matches(arguments, {"g": 1}), x_match
    assert matches({"x-match": "all-with-x", "x-h": None}, {"x-h": 1})
    assert not matches({"x-match": "all-with-x", "x-h": None}, {})


def test_same_key_with_different_arguments_are_two_bindings():
    """The headers exchange relies on arguments being part of a binding's identity."""
    exchange = HeadersExchange()
    assert exchange.bind(Q1, "", {"a": 1}) is True
    assert exchange.bind(Q1, "", {"b": 2}) is True
    assert exchange.bind(Q1, "", {"a": 1}) is False
    assert len(exchange) == 2
    assert exchange.route("", {"b": 2}) == {Q1}
    assert exchange.unbind(Q1, "", {"b": 2}) is True
    assert exchange.route("", {"b": 2}) == set()
    assert exchange.route("", {"a": 1}) == {Q1}


def test_identity_keeps_wire_types_apart():
    """int 1 and float 1.0 match alike but are different binding arguments (RabbitMQ's binding
    arguments carry their types); a str and its UTF-8 bytes are the same longstr."""
    exchange = HeadersExchange()
    assert exchange.bind(Q1, "", {"a": 1}) is True
    assert exchange.bind(Q1, "", {"a": 1.0}) is True
    assert exchange.bind(Q1, "", {"a": True}) is True
    assert exchange.bind(Q1, "", {"s": "v"}) is True
    assert exchange.bind(Q1, "", {"s": b"v"}) is False
    assert exchange.bind(Q1, "", {"n": float("nan")}) is True
    assert exchange.bind(Q1, "", {"n": float("nan")}) is False
    assert exchange.unbind(Q1, "", {"n": float("nan")}) is True


def test_routing_key_is_ignored_for_matching_but_identifies_the_binding():
    exchange = HeadersExchange()
    assert exchange.bind(Q1, "k1", {"a": 1}) is True
    assert exchange.bind(Q1, "k2", {"a": 1}) is True
    assert exchange.route("unrelated", {"a": 1}) == {Q1}
    assert exchange.unbind(Q1, "k3", {"a": 1}) is False
    assert len(exchange) == 2


def test_routes_to_each_matching_destination_once():
    exchange = HeadersExchange()
    exchange.bind(Q1, "", {"x-match": "any", "a": 1})
    exchange.bind(Q1, "", {"b": 2})
    exchange.bind(Q2, "", {"a": 2})
    assert exchange.route("", {"a": 1, "b": 2}) == {Q1}
    assert exchange.route("", {"a": 2}) == {Q2}


def test_unbind_of_a_missing_binding_returns_false():
    exchange = HeadersExchange()
    exchange.bind(Q1, "", {"a": 1})
    assert exchange.unbind(Q1, "", {"a": 2}) is False
    assert exchange.unbind(Q2, "", {"a": 1}) is False
    assert exchange.unbind(Q1, "", {"x-match": "bogus"}) is False
    assert len(exchange) == 1


def test_unbind_destination_and_bindings():
    exchange = HeadersExchange()
    exchange.bind(Q1, "", {"a": 1})
    exchange.bind(Q1, "", {"x-match": "any", "b": 1})
    exchange.bind(Q2, "", {"a": 1})
    assert sorted(exchange.bindings(), key=repr) == sorted(
        [(Q1, "", {"a": 1}), (Q1, "", {"x-match": "any", "b": 1}), (Q2, "", {"a": 1})], key=repr
    )
    assert exchange.unbind_destination(Q1) == 2
    assert exchange.unbind_destination(Q1) == 0
    assert len(exchange) == 1
    assert exchange.route("", {"a": 1, "b": 1}) == {Q2}


def test_stored_arguments_do_not_alias_the_callers_table():
    exchange = HeadersExchange()
    arguments: FieldTable = {"a": 1}
    exchange.bind(Q1, "", arguments)
    arguments["a"] = 2
    assert exchange.route("", {"a": 1}) == {Q1}
    assert exchange.unbind(Q1, "", {"a": 1}) is True
