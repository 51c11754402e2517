"""An expression tree compiled, once, into nested Python closures: one call per node per message,
no tree walk, no dispatch on node types at evaluation time.

Each closure takes the message's values (identifier to value) and returns a Value; a truth value
is True, False, or None for UNKNOWN. How each construct treats NULL and mismatched types is in
semantics.py; the constructs JMS defines by equivalence are compiled as those equivalences:

- "age BETWEEN 15 AND 19 is equivalent to age >= 15 AND age <= 19" and "age NOT BETWEEN 15 AND
  19 is equivalent to age < 15 OR age > 19". So a string `age` is FALSE for both (each
  comparison is of non-like types), and NOT BETWEEN is not NOT (BETWEEN).
- "[NOT] IN (comparison operator where identifier has a String or NULL value)" and "If
  identifier of an IN or NOT IN operation is NULL, the value of the operation is unknown." A
  value that is neither is FALSE for IN and NOT IN alike: the whole of [NOT] IN is one
  comparison, and "if the comparison of non-like type values is attempted, the value of the
  operation is false". (JMS also calls `Country NOT IN ('UK', 'US', 'France')` "equivalent to
  the expression NOT ((Country = 'UK') OR (Country = 'US') OR (Country = 'France'))", which
  would make NOT IN TRUE for a number; the rule for comparisons is followed instead, as Qpid's
  QPID-6717 did, so that NOT IN, like NOT BETWEEN, never selects a value of the wrong type.)
- "[NOT] LIKE (comparison operator, where identifier has a String value ...)" and "If
  identifier of a LIKE or NOT LIKE operation is NULL, the value of the operation is unknown."
  A value that is not a string is FALSE for LIKE and NOT LIKE, as for IN.
- "The IS NULL and IS NOT NULL operators convert an unknown value into the respective TRUE and
  FALSE values."
- JMS 1.1: "Conditional expressions are composed of themselves, comparison operations, logical
  operations, identifiers with boolean values, and boolean literals." An identifier where a
  truth value is needed (`flag AND x > 1`) is its boolean value; a value of another type there is
  UNKNOWN, so that neither `flag` nor `NOT flag` selects it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from batonmq.selectors import semantics
from batonmq.selectors.nodes import (
    And,
    Arithmetic,
    Between,
    Comparison,
    Identifier,
    In,
    IsNull,
    Like,
    Literal,
    Node,
    Not,
    Or,
    Unary,
    Value,
)

Values = Mapping[str, object]
Evaluator = Callable[[Values], Value]


def compile_expression(node: Node) -> Evaluator:
    """`node` as a function of the message's values."""
    match node:
        case Literal(value=value):
            return lambda _values: value
        case Identifier(name=name):
            return _identifier(name)
        case Unary(operator=symbol, operand=operand):
            return _unary(symbol, compile_expression(operand))
        case Arithmetic(first=first, rest=rest):
            return _arithmetic(first, rest)
        case Comparison():
            return _comparison(node)
        case Between():
            return _between(node)
        case In(operand=operand, values=strings, negated=negated):
            return _in(compile_expression(operand), frozenset(strings), negated)
        case Like(operand=operand, matcher=matcher, negated=negated):
            return _like(compile_expression(operand), matcher, negated)
        case IsNull(operand=operand, negated=negated):
            return _is_null(compile_expression(operand), negated)
        case Not(operand=operand):
            return _not(compile_expression(operand))
        case And(operands=operands):
            return _connective(tuple(compile_expression(each) for each in operands), False)
        case Or(operands=operands):
            return _connective(tuple(compile_expression(each) for each in operands), True)
    raise TypeError(f"not a selector node: {node!r}")  # pragma: no cover


def _identifier(name: str) -> Evaluator:
    normalize = semantics.normalize

    def identifier(values: Values) -> Value:
        value = values.get(name)
        kind = type(value)
        if kind is str or kind is int or kind is float or kind is bool or value is None:
            return value  # type: ignore[return-value]
        return normalize(value)

    return identifier


def _unary(symbol: str, operand: Evaluator) -> Evaluator:
    apply = semantics.negate if symbol == "-" else semantics.plus
    return lambda values: apply(operand(values))


def _arithmetic(first: Node, rest: tuple[tuple[str, Node], ...]) -> Evaluator:
    start = compile_expression(first)
    steps = tuple(
        (semantics.ARITHMETIC[symbol], compile_expression(operand)) for symbol, operand in rest
    )
    if len(steps) == 1:
        ((apply, right),) = steps
        return lambda values: apply(start(values), right(values))

    def arithmetic(values: Values) -> Value:
        result = start(values)
        for apply, operand in steps:
            if result is None:
                return None
            result = apply(result, operand(values))
        return result

    return arithmetic


def _comparison(node: Comparison) -> Evaluator:
    compare = semantics.COMPARATORS[node.operator]
    left = compile_expression(node.left)
    if isinstance(node.right, Literal):
        # The common `property = 'literal'`: no call for the constant.
        constant = node.right.value
        return lambda values: compare(left(values), constant)
    right = compile_expression(node.right)
    return lambda values: compare(left(values), right(values))


def _between(node: Between) -> Evaluator:
    operand = compile_expression(node.operand)
    low = compile_expression(node.low)
    high = compile_expression(node.high)
    comparators = semantics.COMPARATORS
    if node.negated:
        below, above = comparators["<"], comparators[">"]

        def not_between(values: Values) -> Value:
            value = operand(values)
            return semantics.or_(below(value, low(values)), above(value, high(values)))

        return not_between
    at_least, at_most = comparators[">="], comparators["<="]

    def between(values: Values) -> Value:
        value = operand(values)
        return semantics.and_(at_least(value, low(values)), at_most(value, high(values)))

    return between


def _in(operand: Evaluator, strings: frozenset[str], negated: bool) -> Evaluator:
    def in_(values: Values) -> Value:
        value = operand(values)
        if value is None:
            return None
        if type(value) is not str:
            return False
        return (value in strings) is not negated

    return in_


def _like(operand: Evaluator, matcher: Callable[[str], bool], negated: bool) -> Evaluator:
    def like(values: Values) -> Value:
        value = operand(values)
        if value is None:
            return None
        if type(value) is not str:
            return False
        return matcher(value) is not negated

    return like


def _is_null(operand: Evaluator, negated: bool) -> Evaluator:
    if negated:
        return lambda values: operand(values) is not None
    return lambda values: operand(values) is None


def _not(operand: Evaluator) -> Evaluator:
    return lambda values: semantics.not_(operand(values))


def _connective(operands: tuple[Evaluator, ...], deciding: bool) -> Evaluator:
    """AND (`deciding` False) or OR (`deciding` True) of any number of operands, left to right:
    `deciding` as soon as an operand is; otherwise the other truth value if every operand is
    that, else UNKNOWN (semantics.and_ and semantics.or_ for two operands)."""
    neutral = not deciding

    def connective(values: Values) -> Value:
        result: bool | None = neutral
        for operand in operands:
            value = operand(values)
            if value is deciding:
                return deciding
            if value is not neutral:
                result = None
        return result

    return connective
