"""Stored field tables come back exactly as declared (type and value)."""

from __future__ import annotations

import datetime
import math
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from batonmq.store.fields import decode_table, encode_table

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.text()
    | st.binary()
    | st.datetimes(timezones=st.just(datetime.UTC))
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_tables = st.dictionaries(st.text(), _values, max_size=6)


@given(_tables)
def test_round_trip_keeps_types_and_values(table):
    decoded = decode_table(encode_table(table))
    assert decoded == table
    assert _types(decoded) == _types(table)


def test_nan_and_negative_zero_survive():
    decoded = decode_table(encode_table({"nan": math.nan, "zero": -0.0}))
    assert math.isnan(decoded["nan"])
    assert math.copysign(1.0, decoded["zero"]) == -1.0


def test_equal_tables_give_equal_text_whatever_the_key_order():
    assert encode_table({"a": 1, "b": Decimal("1.50")}) == encode_table(
        {"b": Decimal("1.50"), "a": 1}
    )


def _types(value):
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value)
