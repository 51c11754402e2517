"""A parsed selector: its text, its expression tree, and the compiled predicate.

JMS 1.1: "A message selector matches a message if the selector evaluates to true when the
message's header field values and property values are substituted for their corresponding
identifiers in the selector." FALSE and UNKNOWN do not select. "If the value of a message
selector is an empty string, the value is treated as a null and indicates that there is no
message selector for the message consumer": an empty or all-whitespace selector selects all.
"""

from __future__ import annotations

from collections.abc import Mapping

from batonmq.selectors.evaluate import Evaluator, compile_expression
from batonmq.selectors.nodes import Node
from batonmq.selectors.parser import parse


class Selector:
    """Immutable and safe to share: one parsed selector may serve many consumers."""

    __slots__ = ("_evaluate", "expression", "text")

    text: str
    #: None for a selector that selects everything.
    expression: Node | None
    _evaluate: Evaluator | None

    def __init__(self, text: str, expression: Node | None) -> None:
        self.text = text
        self.expression = expression
        self._evaluate = None if expression is None else compile_expression(expression)

    @property
    def selects_everything(self) -> bool:
        """True for the empty selector: callers may skip building values for it."""
        return self._evaluate is None

    def evaluate(self, values: Mapping[str, object]) -> bool | None:
        """The selector's truth value for a message: True, False, or None for UNKNOWN."""
        if self._evaluate is None:
            return True
        result = self._evaluate(values)
        return result if result is True or result is False else None

    def matches(self, values: Mapping[str, object]) -> bool:
        """Whether the selector selects a message whose identifiers have `values` (a missing
        identifier is NULL; values other than str, int, float and bool count as missing)."""
        return self._evaluate is None or self._evaluate(values) is True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selector):
            return NotImplemented
        return self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def parse_selector(text: str) -> Selector:
    """Parse and compile `text`; raises SelectorSyntaxError, naming the position of the error."""
    return Selector(text, parse(text))
