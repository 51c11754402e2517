"""Field tables (queue, exchange and binding arguments) as text a store can keep, and back.

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

from pamqp.common import FieldTable, FieldValue

_Tagged = list[object]


def encode_table(table: FieldTable) -> str:
    return json.dumps(_tag_table(table), sort_keys=True, separators=(",", ":"))


def decode_table(text: str) -> FieldTable:
    tagged = json.loads(text)
    assert isinstance(tagged, dict)
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
    assert isinstance(tagged, list) and tagged
    kind = tagged[0]
    payload = tagged[1] if len(tagged) > 1 else None
    if kind == "void":
        return None
    if kind in ("bool", "int", "str"):
        assert isinstance(payload, bool | int | str)
        return payload
    if kind == "float":
        assert isinstance(payload, str)
        return float.fromhex(payload)
    if kind == "decimal":
        assert isinstance(payload, str)
        return Decimal(payload)
    if kind == "bytes":
        assert isinstance(payload, str)
        return base64.b64decode(payload)
    if kind == "bytearray":
        assert isinstance(payload, str)
        return bytearray(base64.b64decode(payload))
    if kind == "timestamp":
        assert isinstance(payload, str)
        return datetime.datetime.fromisoformat(payload)
    if kind == "table":
        assert isinstance(payload, dict)
        return {name: _untag(value) for name, value in payload.items()}
    if kind == "array":
        assert isinstance(payload, list)
        return [_untag(item) for item in payload]
    raise ValueError(f"unknown field type {kind!r} in a stored table")
