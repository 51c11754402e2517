"""The headers exchange: bindings match on the message's headers, not on its routing key.

Rules (RabbitMQ's, which extend AMQP 0-9-1 section 3.1.3.3):
- The binding argument `x-match` chooses the rule: "all" (the default) needs every binding argument
  to match a header, "any" needs one. "all-with-x" and "any-with-x" do the same but also compare the
  binding arguments whose names start with "x-", which "all" and "any" ignore. `x-match` itself is
  never compared. Any other `x-match` value is refused (406 PRECONDITION_FAILED).
- A binding argument whose value is void (None) matches when the header is present, whatever its
  value ("a 'no value' in a pattern field is supposed to mean simple presence").
- Values compare by AMQP value, not by wire type: every integer width and a float of the same value
  are equal, a long string equals its UTF-8 bytes (pamqp decodes a long string to bytes when it is
  not valid UTF-8), a boolean is not a number.
- "all" with nothing to compare matches every message; "any" with nothing to compare matches none.

This module also owns how a field table is made hashable for binding identity (`arguments_key`),
which every exchange type uses: field values are the business of this exchange type.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar, Final

from pamqp.common import FieldTable, FieldValue

from batonmq.model.destination import Destination
from batonmq.routing.base import BindingArgumentError

#: A field table in a canonical, hashable form: equal for the same AMQP table whatever the key
#: order, and distinct for different wire types (a binding's identity includes its arguments'
#: types, as in RabbitMQ).
ArgumentsKey = frozenset[tuple[str, Hashable]]


def arguments_key(arguments: FieldTable) -> ArgumentsKey:
    """The identity of a binding's arguments (field tables are dicts, so unhashable)."""
    return frozenset((name, _identity_form(value)) for name, value in arguments.items())


def _identity_form(value: FieldValue) -> Hashable:
    # bool before int: bool is a subclass of int in Python, not in AMQP.
    if value is None:
        return ("void",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value.hex())  # hex() makes NaN equal to itself, so a NaN binding unbinds
    if isinstance(value, Decimal):
        return ("decimal", value.as_tuple())  # 1.0 and 1.00 are different wire values
    if isinstance(value, str):
        return ("longstr", value.encode())
    if isinstance(value, bytes):
        return ("longstr", value)
    if isinstance(value, bytearray):
        return ("bytearray", bytes(value))
    if isinstance(value, datetime.datetime):
        return ("timestamp", value)
    if isinstance(value, dict):
        return ("table", arguments_key(value))
    return ("array", tuple(_identity_form(item) for item in value))


def _match_form(value: FieldValue) -> Hashable:
    """The form two field values are compared in for matching: equal forms, equal AMQP values."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)  # 1 == 1.0 and hash(1) == hash(1.0), as Erlang's == does
    if isinstance(value, str):
        return ("bytes", value.encode())
    if isinstance(value, bytes | bytearray):
        return ("bytes", bytes(value))
    if isinstance(value, dict):
        return ("table", frozenset((name, _match_form(item)) for name, item in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_match_form(item) for item in value))
    return (type(value).__name__, value)  # None, Decimal, datetime: compared within their type


class XMatch(enum.Enum):
    ALL = "all"
    ANY = "any"
    ALL_WITH_X = "all-with-x"
    ANY_WITH_X = "any-with-x"

    @property
    def needs_all(self) -> bool:
        return self in (XMatch.ALL, XMatch.ALL_WITH_X)

    @property
    def compares_x_arguments(self) -> bool:
        return self in (XMatch.ALL_WITH_X, XMatch.ANY_WITH_X)


_X_MATCH: Final = "x-match"
_PRESENT: Final = object()  # the expected value of a void binding argument: any value matches


def parse_x_match(arguments: FieldTable) -> XMatch:
    """The binding's match rule; raises BindingArgumentError for an unknown one."""
    if _X_MATCH not in arguments:
        return XMatch.ALL  # RabbitMQ: the spec is vague on omitting it, in practice it is "all"
    raw = arguments[_X_MATCH]
    # A long string decodes to bytes when it is not valid UTF-8; no such bytes name a rule.
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    if not isinstance(text, str):
        raise BindingArgumentError(
            f"invalid x-match field type {type(raw).__name__} (value {raw!r}); expected longstr"
        )
    try:
        return XMatch(text)
    except ValueError:
        raise BindingArgumentError(
            f"invalid x-match field value {text!r}; expected all, any, all-with-x or any-with-x"
        ) from None


@dataclass(frozen=True, slots=True)
class HeadersPattern:
    """A binding's arguments, prepared for matching."""

    x_match: XMatch
    #: (header name, expected match form, or _PRESENT for a void argument)
    expected: tuple[tuple[str, Hashable], ...]

    @classmethod
    def from_arguments(cls, arguments: FieldTable) -> HeadersPattern:
        x_match = parse_x_match(arguments)
        expected = tuple(
            (name, _PRESENT if value is None else _match_form(value))
            for name, value in arguments.items()
            if name != _X_MATCH and (x_match.compares_x_arguments or not name.startswith("x-"))
        )
        return cls(x_match, expected)

    def matches(self, headers: dict[str, Hashable]) -> bool:
        """Whether message headers (already in match form) satisfy this pattern."""
        if self.x_match.needs_all:
            return all(self._matches_one(name, want, headers) for name, want in self.expected)
        return any(self._matches_one(name, want, headers) for name, want in self.expected)

    @staticmethod
    def _matches_one(name: str, want: Hashable, headers: dict[str, Hashable]) -> bool:
        if name not in headers:
            return False
        return want is _PRESENT or headers[name] == want


_BindingId = tuple[str, ArgumentsKey]


class HeadersExchange:
    """Routes to the destinations whose binding arguments match the message headers.

    Matching is a linear scan of the bindings, as in RabbitMQ: a headers exchange has no index.
    """

    type_name: ClassVar[str] = "headers"
    needs_headers: ClassVar[bool] = True

    def __init__(self) -> None:
        self._by_destination: dict[
            Destination, dict[_BindingId, tuple[FieldTable, HeadersPattern]]
        ] = {}
        self._count = 0

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        pattern = HeadersPattern.from_arguments(arguments)  # validate before anything else
        bindings = self._by_destination.setdefault(destination, {})
        binding_id = (routing_key, arguments_key(arguments))
        if binding_id in bindings:
            return False
        bindings[binding_id] = (dict(arguments), pattern)
        self._count += 1
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        bindings = self._by_destination.get(destination)
        if bindings is None or bindings.pop((routing_key, arguments_key(arguments)), None) is None:
            return False
        self._count -= 1
        if not bindings:
            del self._by_destination[destination]
        return True

    def unbind_destination(self, destination: Destination) -> int:
        removed = len(self._by_destination.pop(destination, {}))
        self._count -= removed
        return removed

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        if not self._by_destination:
            return set()
        header_forms = {name: _match_form(value) for name, value in (headers or {}).items()}
        return {
            destination
            for destination, bindings in self._by_destination.items()
            if any(pattern.matches(header_forms) for _, pattern in bindings.values())
        }

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        for destination, bindings in self._by_destination.items():
            for (routing_key, _), (arguments, _) in bindings.items():
                yield destination, routing_key, arguments

    def __len__(self) -> int:
        return self._count
