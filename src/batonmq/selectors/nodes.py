"""The parsed form of a selector: an expression tree whose nodes remember where they start.

Chains of one precedence level (`a OR b OR c`, `a + b - c`) are single n-ary nodes, so that a
long selector makes a wide tree, not a deep one: only parentheses, NOT and unary signs nest, and
those are bounded by MAX_NESTING_DEPTH.

`static_type` is what the parser knows of a node's type without a message: literals and
operators have one, identifiers do not (a property may hold any type). The parser uses it to
reject what no message could make meaningful, such as `3 AND x` or `'a' < 'b'`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from batonmq.selectors.like import LikeMatcher


class StaticType(enum.Enum):
    BOOLEAN = "a boolean"
    NUMBER = "a number"
    STRING = "a string"
    #: An identifier: its type is the property's, known per message.
    ANY = "an identifier"


#: A selector value: JMS property types as Python, None for NULL and for UNKNOWN.
Value = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Literal:
    position: int
    value: str | int | float | bool

    @property
    def static_type(self) -> StaticType:
        if isinstance(self.value, bool):
            return StaticType.BOOLEAN
        if isinstance(self.value, str):
            return StaticType.STRING
        return StaticType.NUMBER


@dataclass(frozen=True, slots=True)
class Identifier:
    position: int
    name: str

    static_type: ClassVar[StaticType] = StaticType.ANY


@dataclass(frozen=True, slots=True)
class Unary:
    """Unary `+` or `-` (a sign directly before a numeric literal is folded into it)."""

    position: int
    operator: str
    operand: Node

    static_type: ClassVar[StaticType] = StaticType.NUMBER


@dataclass(frozen=True, slots=True)
class Arithmetic:
    """`first op1 operand1 op2 operand2 ...`, left to right; all operators `+ -` or all `* /`."""

    position: int
    first: Node
    rest: tuple[tuple[str, Node], ...]

    static_type: ClassVar[StaticType] = StaticType.NUMBER


@dataclass(frozen=True, slots=True)
class Comparison:
    """`left op right`, op one of = <> < <= > >=."""

    position: int
    operator: str
    left: Node
    right: Node

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Between:
    position: int
    operand: Node
    low: Node
    high: Node
    negated: bool

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


@dataclass(frozen=True, slots=True)
class In:
    position: int
    operand: Node
    values: tuple[str, ...]
    negated: bool

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Like:
    position: int
    operand: Node
    pattern: str
    escape: str | None
    negated: bool
    #: The pattern compiled at parse time, to be called with a whole string.
    matcher: LikeMatcher

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


@dataclass(frozen=True, slots=True)
class IsNull:
    position: int
    operand: Node
    negated: bool

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Not:
    position: int
    operand: Node

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


@dataclass(frozen=True, slots=True)
class And:
    position: int
    operands: tuple[Node, ...]

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Or:
    position: int
    operands: tuple[Node, ...]

    static_type: ClassVar[StaticType] = StaticType.BOOLEAN


Node = (
    Literal
    | Identifier
    | Unary
    | Arithmetic
    | Comparison
    | Between
    | In
    | Like
    | IsNull
    | Not
    | And
    | Or
)
