"""Binding identity and bookkeeping shared by every exchange type: RabbitMQ identifies a binding by
(source, destination, key, arguments), the arguments with their wire types."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.bindings import BindingTable, arguments_key, binding_id

Q1 = Destination.queue("q1")
Q2 = Destination.queue("q2")
X1 = Destination.exchange("x1")


# arguments_key ----------------------------------------------------------------------------------


def test_key_order_does_not_change_identity():
    assert arguments_key({"a": 1, "b": 2}) == arguments_key({"b": 2, "a": 1})


def test_empty_table_is_an_identity_like_any_other():
    empty, another_empty = {}, {}
    assert arguments_key(empty) == arguments_key(another_empty)
    assert arguments_key({}) != arguments_key({"a": None})


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("v", b"v"),  # pamqp gives a long string as str or, when not UTF-8, as bytes
        ("caf\u00e9", "caf\u00e9".encode()),
        (float("nan"), float("nan")),  # or a NaN binding could never be unbound
        (Decimal("1.5"), Decimal("1.5")),
        ({"n": 1, "s": "v"}, {"s": b"v", "n": 1}),
        ([1, "a"], [1, b"a"]),
        (
            datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
            datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        ),
    ],
)
def test_same_wire_value_same_identity(first, second):
    assert arguments_key({"h": first}) == arguments_key({"h": second})


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (1, 1.0),
        (1, True),
        (0, False),
        (None, False),
        (Decimal("1.0"), Decimal("1.00")),
        (b"v", bytearray(b"v")),
        ({"n": 1}, {"n": 2}),
        ([1, 2], [2, 1]),
        ([1], {"0": 1}),
        ("1", 1),
    ],
)
def test_different_wire_values_different_identity(first, second):
    assert arguments_key({"h": first}) != arguments_key({"h": second})


def test_binding_id_is_routing_key_and_arguments():
    arguments = {"a": 1}
    assert binding_id("k", arguments) == binding_id("k", dict(arguments))
    assert binding_id("k", {"a": 1}) != binding_id("k2", {"a": 1})
    assert binding_id("k", {"a": 1}) != binding_id("k", {})


# BindingTable -----------------------------------------------------------------------------------


def test_empty_table():
    table = BindingTable()
    assert len(table) == 0
    assert list(table) == []
    assert not table.destinations()


def test_add_is_idempotent():
    table = BindingTable()
    assert table.add(Q1, "k", {"a": 1}) is True
    assert table.add(Q1, "k", {"a": 1}) is False
    assert table.add(Q1, "k", {"a": 1.0}) is True, "another wire type is another binding"
    assert len(table) == 2
    assert list(table) == [(Q1, "k", {"a": 1}), (Q1, "k", {"a": 1.0})]


def test_routing_key_arguments_and_destination_each_identify_a_binding():
    table = BindingTable()
    assert table.add(Q1, "k", {}) is True
    assert table.add(Q1, "other", {}) is True
    assert table.add(Q1, "k", {"a": 1}) is True
    assert table.add(Q2, "k", {}) is True
    assert len(table) == 4
    assert set(table.destinations()) == {Q1, Q2}


def test_remove():
    table = BindingTable()
    table.add(Q1, "k", {"a": 1})
    table.add(Q1, "k", {})
    assert table.remove(Q1, "k", {"a": 2}) is False
    assert table.remove(Q1, "other", {"a": 1}) is False
    assert table.remove(Q2, "k", {"a": 1}) is False
    assert len(table) == 2
    assert table.remove(Q1, "k", {"a": 1}) is True
    assert table.remove(Q1, "k", {"a": 1}) is False
    assert list(table) == [(Q1, "k", {})]
    assert table.remove(Q1, "k", {}) is True
    assert len(table) == 0
    assert not table.destinations(), "a destination with no binding left is forgotten"


def test_remove_matches_by_identity_not_by_object():
    table = BindingTable()
    table.add(Q1, "", {"b": 2, "s": "v", "n": float("nan")})
    assert table.remove(Q1, "", {"n": float("nan"), "s": b"v", "b": 2}) is True
    assert len(table) == 0


def test_remove_destination_returns_its_bindings_and_keeps_the_others():
    table = BindingTable()
    table.add(Q1, "a", {})
    table.add(Q1, "b", {"x": 1})
    table.add(X1, "a", {})
    assert table.remove_destination(Q1) == [("a", {}), ("b", {"x": 1})]
    assert table.remove_destination(Q1) == []
    assert table.remove_destination(Q2) == []
    assert len(table) == 1
    assert list(table) == [(X1, "a", {})]
    assert set(table.destinations()) == {X1}


def test_destination_can_be_bound_again_after_removal():
    table = BindingTable()
    table.add(Q1, "a", {})
    table.remove_destination(Q1)
    assert table.add(Q1, "a", {}) is True
    assert len(table) == 1


def test_iteration_is_by_destination_then_binding_order():
    table = BindingTable()
    table.add(Q1, "a", {})
    table.add(Q2, "b", {})
    table.add(Q1, "c", {})
    assert list(table) == [(Q1, "a", {}), (Q1, "c", {}), (Q2, "b", {})]


def test_stored_arguments_do_not_alias_the_callers_table():
    table = BindingTable()
    arguments: FieldTable = {"a": 1}
    table.add(Q1, "k", arguments)
    arguments["a"] = 2
    assert list(table) == [(Q1, "k", {"a": 1})]
    assert table.remove(Q1, "k", {"a": 1}) is True
