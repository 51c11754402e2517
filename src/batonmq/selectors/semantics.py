"""What the operators mean on values: JMS 1.1's rules over SQL's three-valued logic.

Values are str, int, float, bool, and None, which is both a NULL value and the UNKNOWN truth
value. The rules, quoted from javax.jms.Message, "Message Selectors":

- "SQL treats a NULL value as unknown. Comparison or arithmetic with an unknown value always
  yields an unknown value."
- "Only like type values can be compared. One exception is that it is valid to compare exact
  numeric values and approximate numeric values; the type conversion required is defined by
  the rules of numeric promotion in the Java programming language. If the comparison of non-like
  type values is attempted, the value of the operation is false. If either of the type values
  evaluates to NULL, the value of the expression is unknown." So `'1' = 1` and `'1' <> 1` are
  both FALSE (and so `NOT ('1' = 1)` is TRUE): <> is a comparison, not the negation of =.
- "String and boolean comparison is restricted to = and <>." Ordering strings or booleans is
  FALSE, as a comparison the types do not support (the parser rejects it when it can see it).
- For a property set as the string "2", `NumberOfOrders > 1` "would evaluate to false, because a
  string cannot be used in an arithmetic expression": a string against a number is FALSE.
- "Arithmetic operations must use numeric promotion in the Java programming language." An int
  meeting a float becomes a float (an int beyond double's range becomes an infinity, as
  BigInteger.doubleValue does); int / int truncates toward zero, as Java's does. Two departures:
  integers do not wrap at 64 bits (Python ints are exact), and division by zero, which Java
  answers with ArithmeticException (long) or an infinity (double), is UNKNOWN for both, since
  no value is right. Arithmetic on a non-number, which JMS leaves undefined, is UNKNOWN.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, Final

from batonmq.selectors.nodes import Value

Number = int | float


def normalize(value: object) -> Value:
    """A property value as a selector value: other types (bytes, Decimal, tables) are absent."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value  # type: ignore[return-value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return None


def is_number(value: Value) -> bool:
    kind = type(value)
    return kind is int or kind is float


def as_float(value: Number) -> float:
    if type(value) is float:
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


# Logic -------------------------------------------------------------------------------------------


def not_(value: Value) -> bool | None:
    """NOT TRUE is FALSE, NOT FALSE is TRUE, NOT UNKNOWN is UNKNOWN (and so is NOT of a value
    that is no truth value)."""
    if value is True:
        return False
    if value is False:
        return True
    return None


def and_(first: Value, second: Value) -> bool | None:
    if first is False or second is False:
        return False
    if first is True and second is True:
        return True
    return None


def or_(first: Value, second: Value) -> bool | None:
    if first is True or second is True:
        return True
    if first is False and second is False:
        return False
    return None


# Comparison --------------------------------------------------------------------------------------


def _comparison(compare: Callable[[Any, Any], bool], ordering: bool) -> Comparator:
    def comparator(left: Value, right: Value) -> bool | None:
        if left is None or right is None:
            return None
        left_type = type(left)
        right_type = type(right)
        left_number = left_type is int or left_type is float
        right_number = right_type is int or right_type is float
        if left_number and right_number:
            if left_type is not right_type:
                return compare(as_float(left), as_float(right))  # type: ignore[arg-type]
            return compare(left, right)
        if ordering or left_type is not right_type:
            return False
        return compare(left, right)

    return comparator


Comparator = Callable[[Value, Value], bool | None]

COMPARATORS: Final[dict[str, Comparator]] = {
    "=": _comparison(operator.eq, ordering=False),
    "<>": _comparison(operator.ne, ordering=False),
    "<": _comparison(operator.lt, ordering=True),
    "<=": _comparison(operator.le, ordering=True),
    ">": _comparison(operator.gt, ordering=True),
    ">=": _comparison(operator.ge, ordering=True),
}


# Arithmetic --------------------------------------------------------------------------------------


def _divide(left: Number, right: Number) -> Number | None:
    if right == 0:
        return None
    if type(left) is int and type(right) is int:
        quotient = abs(left) // abs(right)
        return quotient if (left < 0) == (right < 0) else -quotient
    return as_float(left) / as_float(right)


def _arithmetic(compute: Callable[[Number, Number], Number | None]) -> Arithmetic:
    def arithmetic(left: Value, right: Value) -> Number | None:
        left_type = type(left)
        right_type = type(right)
        if not (left_type is int or left_type is float) or not (
            right_type is int or right_type is float
        ):
            return None
        if left_type is not right_type:
            return compute(as_float(left), as_float(right))  # type: ignore[arg-type]
        return compute(left, right)  # type: ignore[arg-type]

    return arithmetic


Arithmetic = Callable[[Value, Value], Value]

ARITHMETIC: Final[dict[str, Arithmetic]] = {
    "+": _arithmetic(operator.add),
    "-": _arithmetic(operator.sub),
    "*": _arithmetic(operator.mul),
    "/": _arithmetic(_divide),
}


def negate(value: Value) -> Number | None:
    return -value if is_number(value) else None  # type: ignore[operator]


def plus(value: Value) -> Number | None:
    return value if is_number(value) else None  # type: ignore[return-value]
