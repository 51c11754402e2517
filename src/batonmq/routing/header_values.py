"""How the headers exchange compares a binding argument with a message header: RabbitMQ's rule.

RabbitMQ (rabbit_exchange_type_headers) compares a binding value with a header value using
Erlang's `==` on the decoded values, whatever their wire types. Checked against RabbitMQ 3.10.8
with hand-typed field tables (tests/integration/test_routing.py):

- integers of every width (b, B, s, u, I, i, l) are equal when their values are, and equal a
  float or double of the same value (Erlang: 1 == 1.0);
- a timestamp decodes to its integer seconds, so it equals that integer (or double);
- a long string and a byte array are the same octets, so they are equal, UTF-8 or not;
- a boolean is an atom, never equal to a number or a string;
- a decimal is (scale, unscaled value): 1.5 and 1.50 differ, and no decimal equals a number;
- a void header equals nothing (a void *binding* value means presence, see headers.py);
- inside a nested table or array every element keeps its wire type, so an element equals only an
  element of the same type and value (a nested long 1 is not a nested double 1.0, a nested long
  string is not a nested byte array).

What BatonMQ cannot see after decoding, it cannot compare: nested integers of different widths
are equal here (RabbitMQ: not equal), and so are a nested float and double of the same value;
a nested table's key order is ignored (as it is in a binding's identity, bindings.py). A
timestamp above 2**32 - 1 is decoded as milliseconds (pamqp's rule), so it equals another such
timestamp but not the integer with its wire value.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable
from decimal import Decimal
from typing import Final

from pamqp.common import FieldValue

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_SECOND: Final = datetime.timedelta(seconds=1)


def match_form(value: FieldValue) -> Hashable:
    """The form a top-level header (or binding argument) is compared in: equal forms, equal
    values to RabbitMQ."""
    # bool before int: bool is a subclass of int in Python, an atom in Erlang.
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)  # 1 == 1.0 and hash(1) == hash(1.0), as Erlang's == has it
    if isinstance(value, datetime.datetime):
        return ("number", posix_seconds(value))
    if isinstance(value, str | bytes | bytearray):
        return ("binary", _octets(value))
    return _container_or_scalar_form(value)


def _element_form(value: FieldValue) -> Hashable:
    """The form of a value inside a table or array, where its wire type takes part."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, datetime.datetime):
        return ("timestamp", posix_seconds(value))
    if isinstance(value, bytearray):
        return ("bytearray", bytes(value))
    if isinstance(value, str | bytes):
        return ("longstr", _octets(value))
    return _container_or_scalar_form(value)


def _container_or_scalar_form(value: FieldValue) -> Hashable:
    if value is None:
        return ("void",)
    if isinstance(value, Decimal):
        return ("decimal", *decimal_parts(value))
    if isinstance(value, dict):
        return ("table", frozenset((name, _element_form(item)) for name, item in value.items()))
    assert isinstance(value, list), type(value)
    return ("array", tuple(_element_form(item) for item in value))


def posix_seconds(timestamp: datetime.datetime) -> int | float:
    """A timestamp as seconds since the epoch (a naive one is taken for UTC); whole seconds,
    the AMQP case, as an int."""
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=datetime.UTC)
    elapsed = timestamp - _EPOCH
    if elapsed.microseconds:
        return elapsed.total_seconds()
    return elapsed // _SECOND


def decimal_parts(value: Decimal) -> tuple[int, int]:
    """(scale, unscaled value): AMQP's decimal, and RabbitMQ's decoded form of it."""
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int), value  # AMQP has no infinite or NaN decimals
    return -exponent, int(value.scaleb(-exponent))


def _octets(value: str | bytes | bytearray) -> bytes:
    # pamqp decodes a long string to str when it is UTF-8 and to bytes when not.
    return value.encode() if isinstance(value, str) else bytes(value)
