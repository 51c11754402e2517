"""The headers exchange: bindings match on the message's headers, not on its routing key.

Rules (RabbitMQ's, which extend AMQP 0-9-1 section 3.1.3.3):
- The binding argument `x-match` chooses the rule: "all" (the default) needs every binding argument
  to match a header, "any" needs one. "all-with-x" and "any-with-x" do the same but also compare the
  binding arguments whose names start with "x-", which "all" and "any" ignore. `x-match` itself is
  never compared. Any other `x-match` value is refused (406 PRECONDITION_FAILED).
- A binding argument whose value is void (None) matches when the header is present, whatever its
  value ("a 'no value' in a pattern field is supposed to mean simple presence").
- Values compare as RabbitMQ's Erlang `==` compares the decoded values: by value whatever the
  integer width, a number equals a float of the same value, a long string its byte array; a
  boolean is not a number. header_values.py has the rule for every field type.
- "all" with nothing to compare matches every message; "any" with nothing to compare matches none.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Final

from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.base import BindingArgumentError
from batonmq.routing.bindings import BindingId, BindingTable, binding_id
from batonmq.routing.header_values import match_form


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
            (name, _PRESENT if value is None else match_form(value))
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


class HeadersExchange:
    """Routes to the destinations whose binding arguments match the message headers.

    Matching is a linear scan of the bindings, as in RabbitMQ: a headers exchange has no index.
    """

    type_name: ClassVar[str] = "headers"
    needs_headers: ClassVar[bool] = True

    def __init__(self) -> None:
        self._bindings = BindingTable()
        #: destination -> binding identity -> the binding's arguments, prepared for matching
        self._patterns: dict[Destination, dict[BindingId, HeadersPattern]] = {}

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        pattern = HeadersPattern.from_arguments(arguments)  # validate before anything else
        if not self._bindings.add(destination, routing_key, arguments):
            return False
        self._patterns.setdefault(destination, {})[binding_id(routing_key, arguments)] = pattern
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        if not self._bindings.remove(destination, routing_key, arguments):
            return False
        patterns = self._patterns[destination]
        del patterns[binding_id(routing_key, arguments)]
        if not patterns:
            del self._patterns[destination]
        return True

    def unbind_destination(self, destination: Destination) -> int:
        self._patterns.pop(destination, None)
        return len(self._bindings.remove_destination(destination))

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        if not self._patterns:
            return set()
        header_forms = {name: match_form(value) for name, value in (headers or {}).items()}
        return {
            destination
            for destination, patterns in self._patterns.items()
            if any(pattern.matches(header_forms) for pattern in patterns.values())
        }

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        return iter(self._bindings)

    def __len__(self) -> int:
        return len(self._bindings)
