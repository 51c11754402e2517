"""Stored field tables come back exactly as declared (type and value).

store/fields.py keeps queue, exchange and binding arguments; a binding's identity includes its
arguments' wire types (routing/bindings.py, as in RabbitMQ), so a value that came back as another
type would make a restored binding one that queue.unbind no longer finds.
"""

from __future__ import annotations

import datetime
import math
import struct
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batonmq.routing.bindings import arguments_key
from batonmq.store.fields import decode_table, encode_table

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()  # NaN, infinities and -0.0 too
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.binary()  # pamqp's long string that is not UTF-8
    | st.binary().map(bytearray)  # pamqp's byte array ('x')
    | st.datetimes(timezones=st.just(datetime.UTC))
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_tables = st.dictionaries(st.text(), _values, max_size=6)


def same(left: object, right: object) -> bool:
    """Equal values of equal types; floats by their bits (-0.0 is not 0.0) except that any NaN
    is any other (a NaN's sign and payload are not kept: nothing reads them, and a binding's
    identity takes every NaN for one), decimals by their digits and exponent (1.0 and 1.00 are
    different wire values)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float) and isinstance(right, float):
        if math.isnan(left) and math.isnan(right):
            return True
        return struct.pack(">d", left) == struct.pack(">d", right)
    if isinstance(left, Decimal) and isinstance(right, Decimal):
        return left.as_tuple() == right.as_tuple()
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same, left, right))
    return left == right


@given(_tables)
def test_round_trip_keeps_types_and_values(table):
    """Spec 4.2.5.5: every field type pamqp decodes a table to (void, boolean, integers, float,
    decimal, long string as text or as bytes, byte array, timestamp, table, array) comes back
    from the store as the same type and the same value, at every depth."""
    assert same(decode_table(encode_table(table)), table)


@given(_tables)
def test_a_restored_table_has_the_identity_of_the_declared_one(table):
    """A binding restored from the store is the binding the client declared: queue.unbind with
    the declared arguments finds it (routing/bindings.py `arguments_key`)."""
    assert arguments_key(decode_table(encode_table(table))) == arguments_key(table)


def test_a_byte_array_and_a_long_string_of_the_same_octets_stay_apart():
    """'x' (pamqp's bytearray) and an 'S' that is not UTF-8 (pamqp's bytes) are two wire types."""
    decoded = decode_table(encode_table({"array": bytearray(b"\xff"), "string": b"\xff"}))
    assert type(decoded["array"]) is bytearray
    assert type(decoded["string"]) is bytes


def test_text_stored_before_byte_arrays_had_their_own_tag_still_reads():
    """Tables written when a byte array was stored as "bytes" read back as bytes."""
    assert decode_table('{"old":["bytes","/w=="]}') == {"old": b"\xff"}


def test_nan_and_negative_zero_survive():
    decoded = decode_table(encode_table({"nan": math.nan, "zero": -0.0}))
    nan, zero = decoded["nan"], decoded["zero"]
    assert isinstance(nan, float) and math.isnan(nan)
    assert isinstance(zero, float) and math.copysign(1.0, zero) == -1.0


def test_equal_tables_give_equal_text_whatever_the_key_order():
    assert encode_table({"a": 1, "b": Decimal("1.50")}) == encode_table(
        {"b": Decimal("1.50"), "a": 1}
    )


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("[]", "a table that is a list"),
        ('{"a":1}', "not \\[type, value\\]"),
        ('{"a":[]}', "not \\[type, value\\]"),
        ('{"a":["int","1"]}', "of the wrong type"),
        ('{"a":["decimal","one"]}', "a decimal that is not one"),
        ('{"a":["table",[]]}', "of the wrong type"),
        ('{"a":["array",{}]}', "of the wrong type"),
    ],
)
def test_text_encode_table_does_not_write_is_a_value_error(text: str, refusal: str) -> None:
    """A table read from a record between workers (cluster/recordfields.py) that is not what
    `encode_table` writes is refused with ValueError, which the record's reader turns into a
    malformed record, not with an assertion."""
    with pytest.raises(ValueError, match=refusal):
        decode_table(text)
