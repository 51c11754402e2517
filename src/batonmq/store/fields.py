"""Field tables (queue, exchange, binding and consume arguments) as text a store can keep and a
record between workers can carry (`batonmq.cluster.recordfields`), and back.

A table is written as JSON in which every value carries its type, so that what comes back is what
was declared: a float stays a float (written as its exact hex form), a byte array ('x', pamqp's
bytearray) stays a byte array and a long string that is not UTF-8 (pamqp's bytes) stays bytes (a
binding's identity tells the two wire types apart, routing/bindings.py), a timestamp stays a
timestamp. Keys are sorted, so two equal tables give equal text: that text identifies a binding's
arguments in a primary key.
"""

from __future__ import annotations

import base64
import datetime
import json
from decimal import Decimal
from typing import TypeVar

from pamqp.common import FieldTable, FieldValue

_Tagged = list[object]
_T = TypeVar("_T")


def encode_table(table: FieldTable) -> str:
    return json.dumps(_tag_table(table), sort_keys=True, separators=(",", ":"))


def decode_table(text: str) -> FieldTable:
    """The table `text` holds; ValueError when it is not what `encode_table` writes."""
    tagged = json.loads(text)
    if not isinstance(tagged, dict):
        raise ValueError(f"a table that is a {type(tagged).__name__}")
    return {name: _untag(value) for name, value in tagged.items()}


def _tag_table(table: FieldTable) -> dict[str, _Tagged]:
    return {name: _tag(value) for name, value in table.items()}


def _tag(value: FieldValue) -> _Tagged:
    # bool before int: bool is a subclass of int in Python, not in AMQP.
    if value is None:
        return ["void"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", value.hex()]
    if isinstance(value, Decimal):
        return ["decimal", str(value)]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, bytearray):
        return ["bytearray", base64.b64encode(value).decode("ascii")]
    if isinstance(value, bytes):
        return ["bytes", base64.b64encode(value).decode("ascii")]
    if isinstance(value, datetime.datetime):
        return ["timestamp", value.isoformat()]
    if isinstance(value, dict):
        return ["table", _tag_table(value)]
    return ["array", [_tag(item) for item in value]]


def _untag(tagged: object) -> FieldValue:
    if not isinstance(tagged, list) or not tagged:
        raise ValueError(f"a field value that is not [type, value]: {tagged!r:.64}")
    kind = tagged[0]
    payload = tagged[1] if len(tagged) > 1 else None
    if kind == "void":
        return None
    if kind == "bool":
        return _payload(payload, bool)
    if kind == "int":
        return _payload(payload, int)
    if kind == "str":
        return _payload(payload, str)
    if kind == "float":
        return float.fromhex(_payload(payload, str))
    if kind == "decimal":
        try:
            return Decimal(_payload(payload, str))
        except ArithmeticError as error:  # decimal.InvalidOperation
            raise ValueError(f"a decimal that is not one: {payload!r:.64}") from error
    if kind == "bytes":
        return base64.b64decode(_payload(payload, str))
    if kind == "bytearray":
        return bytearray(base64.b64decode(_payload(payload, str)))
    if kind == "timestamp":
        return datetime.datetime.fromisoformat(_payload(payload, str))
    if kind == "table":
        return {name: _untag(value) for name, value in _payload(payload, dict).items()}
    if kind == "array":
        return [_untag(item) for item in _payload(payload, list)]
    raise ValueError(f"unknown field type {kind!r:.64} in a table")


def _payload(payload: object, kind: type[_T]) -> _T:
    if not isinstance(payload, kind):
        raise ValueError(f"a field value of the wrong type: {payload!r:.64}")
    return payload
