"""Selector text into an expression tree (nodes.py), by recursive descent.

The grammar, lowest precedence first; JMS 1.1 lists "Logical operators in precedence order:
NOT, AND, OR", comparison operators, and "Arithmetic operators in precedence order: +, -
(unary) *, / (multiplication and division) +, - (addition and subtraction)", and "The order of
evaluation of a message selector is from left to right within precedence level":

    selector   := [or]                                  (empty: select every message)
    or         := and ( OR and )*
    and        := not ( AND not )*
    not        := NOT not | predicate
    predicate  := sum [ ( = | <> | < | <= | > | >= ) sum
                      | [NOT] BETWEEN sum AND sum
                      | [NOT] IN ( string ( , string )* )
                      | [NOT] LIKE string [ESCAPE string]
                      | IS [NOT] NULL ]
    sum        := product ( ( + | - ) product )*
    product    := unary ( ( * | / ) unary )*
    unary      := ( + | - ) unary | primary
    primary    := literal | identifier | ( or )

Comparisons do not chain (`a = b = c` is an error, as in SQL). JMS writes the left side of IN,
LIKE and IS NULL as an identifier; any expression is accepted there (as Qpid does), its type
checked where the parser knows it. NULL is not a value: it is written only in IS [NOT] NULL.

Types are checked where they are known without a message (literals and operator results, not
identifiers): "providers may also optionally provide some semantic checking at the time the
selector is presented. Not all semantic checking can be performed at the time a message selector
is presented, because property types are not known." So `3 AND x`, `'a' < 'b'`, `x + 'a'`,
`5 LIKE 'x'` and a selector that is a bare number or string are syntax errors; the same
mismatches through identifiers are evaluated per message (semantics.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from batonmq.selectors.errors import (
    MAX_NESTING_DEPTH,
    MAX_SELECTOR_LENGTH,
    SelectorSyntaxError,
    excerpt,
)
from batonmq.selectors.lexer import LONG_MIN_MAGNITUDE, Kind, Token, tokenize
from batonmq.selectors.like import LikePatternError, compile_like
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
    StaticType,
    Unary,
)

COMPARISON_OPERATORS: Final = frozenset({"=", "<>", "<", "<=", ">", ">="})
ORDERING_OPERATORS: Final = frozenset({"<", "<=", ">", ">="})
_BOOLEAN_OR_ANY: Final = frozenset({StaticType.BOOLEAN, StaticType.ANY})
_NUMBER_OR_ANY: Final = frozenset({StaticType.NUMBER, StaticType.ANY})
_STRING_OR_ANY: Final = frozenset({StaticType.STRING, StaticType.ANY})


def parse(text: str) -> Node | None:
    """The expression of `text`, or None for an empty (all-whitespace) selector."""
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorSyntaxError(
            MAX_SELECTOR_LENGTH, f"selector longer than {MAX_SELECTOR_LENGTH} characters"
        )
    parser = _Parser(tokenize(text))
    try:
        return parser.selector()
    except RecursionError:
        # Only when called on a stack already deep: MAX_NESTING_DEPTH bounds the parser's own.
        raise SelectorSyntaxError(parser.position, "nested too deeply to parse here") from None


def describe(token: Token) -> str:
    if token.kind is Kind.END:
        return "end of selector"
    if token.kind is Kind.KEYWORD:
        return f"keyword {token.text!r}"
    if token.kind is Kind.OPERATOR:
        return repr(token.text)
    return f"{token.kind.value} {excerpt(token.text)}"


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._index = 0
        self._depth = 0

    @property
    def position(self) -> int:
        return self._tokens[self._index].position

    # Tokens -------------------------------------------------------------------------------------

    @property
    def _token(self) -> Token:
        return self._tokens[self._index]

    def _next(self) -> Token:
        token = self._tokens[self._index]
        if token.kind is not Kind.END:
            self._index += 1
        return token

    def _at_keyword(self, *words: str) -> bool:
        return self._token.kind is Kind.KEYWORD and self._token.value in words

    def _at_operator(self, *symbols: str) -> bool:
        return self._token.kind is Kind.OPERATOR and self._token.value in symbols

    def _expected(self, what: str) -> SelectorSyntaxError:
        token = self._token
        return SelectorSyntaxError(token.position, f"expected {what}, found {describe(token)}")

    def _expect_keyword(self, word: str) -> Token:
        if not self._at_keyword(word):
            raise self._expected(word)
        return self._next()

    def _expect_operator(self, symbol: str) -> Token:
        if not self._at_operator(symbol):
            raise self._expected(repr(symbol))
        return self._next()

    def _expect_string(self, what: str) -> Token:
        if self._token.kind is not Kind.STRING:
            raise self._expected(what)
        return self._next()

    def _enter(self, token: Token) -> None:
        self._depth += 1
        if self._depth > MAX_NESTING_DEPTH:
            raise SelectorSyntaxError(
                token.position, f"nested more than {MAX_NESTING_DEPTH} levels deep"
            )

    # Types --------------------------------------------------------------------------------------

    @staticmethod
    def _check(node: Node, allowed: frozenset[StaticType], what: str) -> Node:
        if node.static_type not in allowed:
            raise SelectorSyntaxError(node.position, f"{what}, found {node.static_type.value}")
        return node

    def _boolean(self, node: Node) -> Node:
        return self._check(node, _BOOLEAN_OR_ANY, "expected a boolean expression")

    def _numeric(self, node: Node, what: str) -> Node:
        return self._check(node, _NUMBER_OR_ANY, what)

    # Grammar ------------------------------------------------------------------------------------

    def selector(self) -> Node | None:
        if self._token.kind is Kind.END:
            return None
        node = self._boolean(self._or())
        token: Token = self._token  # a fresh read: _or() has moved on
        if token.kind is not Kind.END:
            if self._at_operator(*COMPARISON_OPERATORS) or self._at_keyword(
                "BETWEEN", "IN", "LIKE", "IS"
            ):
                raise self._expected("AND, OR or end of selector (comparisons do not chain)")
            raise self._expected("AND, OR or end of selector")
        return node

    def _or(self) -> Node:
        return self._connective("OR", self._and, Or)

    def _and(self) -> Node:
        return self._connective("AND", self._not, And)

    def _connective(
        self,
        keyword: str,
        operand: Callable[[], Node],
        connective: Callable[[int, tuple[Node, ...]], Node],
    ) -> Node:
        """`operand ( keyword operand )*` as one n-ary node (And or Or), or the lone operand."""
        first = operand()
        if not self._at_keyword(keyword):
            return first
        operands = [self._boolean(first)]
        while self._at_keyword(keyword):
            self._next()
            operands.append(self._boolean(operand()))
        return connective(first.position, tuple(operands))

    def _not(self) -> Node:
        if not self._at_keyword("NOT"):
            return self._predicate()
        token = self._next()
        self._enter(token)
        operand = self._boolean(self._not())
        self._depth -= 1
        return Not(token.position, operand)

    def _predicate(self) -> Node:
        left = self._sum()
        if self._at_operator(*COMPARISON_OPERATORS):
            operator = str(self._next().value)
            right = self._sum()
            if operator in ORDERING_OPERATORS:
                what = f"{operator!r} compares only numbers (strings and booleans: = and <>)"
                self._numeric(left, what)
                self._numeric(right, what)
            return Comparison(left.position, operator, left, right)
        if self._at_keyword("IS"):
            self._next()
            negated = self._at_keyword("NOT")
            if negated:
                self._next()
            self._expect_keyword("NULL")
            return IsNull(left.position, left, negated)
        negated = False
        if self._at_keyword("NOT"):
            following = self._tokens[self._index + 1]
            if following.kind is Kind.KEYWORD and following.value in ("BETWEEN", "IN", "LIKE"):
                self._next()
                negated = True
            else:
                raise SelectorSyntaxError(
                    self._token.position,
                    f"expected BETWEEN, IN or LIKE after NOT, found {describe(following)}",
                )
        if self._at_keyword("BETWEEN"):
            return self._between(left, negated)
        if self._at_keyword("IN"):
            return self._in(left, negated)
        if self._at_keyword("LIKE"):
            return self._like(left, negated)
        return left

    def _between(self, operand: Node, negated: bool) -> Node:
        self._next()
        what = "BETWEEN compares only numbers"
        self._numeric(operand, what)
        low = self._numeric(self._sum(), what)
        self._expect_keyword("AND")
        high = self._numeric(self._sum(), what)
        return Between(operand.position, operand, low, high, negated)

    def _in(self, operand: Node, negated: bool) -> Node:
        self._next()
        self._check(operand, _STRING_OR_ANY, "IN tests strings")
        self._expect_operator("(")
        values = [str(self._expect_string("a string literal (IN lists only strings)").value)]
        while self._at_operator(","):
            self._next()
            values.append(
                str(self._expect_string("a string literal (IN lists only strings)").value)
            )
        self._expect_operator(")")
        return In(operand.position, operand, tuple(values), negated)

    def _like(self, operand: Node, negated: bool) -> Node:
        self._next()
        self._check(operand, _STRING_OR_ANY, "LIKE matches strings")
        pattern = self._expect_string("a string literal pattern")
        escape: str | None = None
        if self._at_keyword("ESCAPE"):
            self._next()
            escape_token = self._expect_string("a string literal escape character")
            escape = str(escape_token.value)
            if len(escape) != 1:
                raise SelectorSyntaxError(
                    escape_token.position,
                    f"ESCAPE must be a single character, found {len(escape)} characters",
                )
        try:
            matcher = compile_like(str(pattern.value), escape)
        except LikePatternError as error:
            raise SelectorSyntaxError(pattern.position, str(error)) from None
        return Like(operand.position, operand, str(pattern.value), escape, negated, matcher)

    def _sum(self) -> Node:
        return self._chain(self._product, ("+", "-"))

    def _product(self) -> Node:
        return self._chain(self._unary, ("*", "/"))

    def _chain(self, operand: Callable[[], Node], symbols: tuple[str, ...]) -> Node:
        first = operand()
        if not self._at_operator(*symbols):
            return first
        rest: list[tuple[str, Node]] = []
        what = "arithmetic needs numbers"
        self._numeric(first, what)
        while self._at_operator(*symbols):
            symbol = str(self._next().value)
            rest.append((symbol, self._numeric(operand(), what)))
        return Arithmetic(first.position, first, tuple(rest))

    def _unary(self) -> Node:
        if not self._at_operator("+", "-"):
            return self._primary()
        sign = self._next()
        following = self._token
        if following.kind in (Kind.INTEGER, Kind.FLOAT):
            # "-957", "+6.2": JMS writes the sign as part of the literal.
            self._next()
            value = following.value
            assert isinstance(value, int | float)
            if sign.value == "-":
                return Literal(sign.position, -value)
            return self._primary_literal(following, Literal(sign.position, value))
        self._enter(sign)
        operand = self._numeric(self._unary(), f"unary {sign.value} needs a number")
        self._depth -= 1
        return Unary(sign.position, str(sign.value), operand)

    @staticmethod
    def _primary_literal(token: Token, literal: Literal) -> Literal:
        """An integer literal not negated: 9223372036854775808 is in range only negated."""
        if token.kind is Kind.INTEGER and token.value == LONG_MIN_MAGNITUDE:
            raise SelectorSyntaxError(token.position, "integer literal out of the range of long")
        return literal

    def _primary(self) -> Node:
        token = self._token
        kind = token.kind
        if kind is Kind.IDENTIFIER:
            self._next()
            return Identifier(token.position, str(token.value))
        if kind is Kind.STRING or kind is Kind.FLOAT:
            self._next()
            return Literal(token.position, token.value)
        if kind is Kind.INTEGER:
            self._next()
            return self._primary_literal(token, Literal(token.position, token.value))
        if kind is Kind.KEYWORD:
            if token.value in ("TRUE", "FALSE"):
                self._next()
                return Literal(token.position, token.value == "TRUE")
            if token.value == "NULL":
                raise SelectorSyntaxError(
                    token.position, "NULL is not a value; test for it with IS [NOT] NULL"
                )
            raise SelectorSyntaxError(
                token.position,
                f"expected an expression, found keyword {excerpt(token.text)}"
                " (keywords cannot be identifiers)",
            )
        if self._at_operator("("):
            self._enter(token)
            self._next()
            inner = self._or()
            self._expect_operator(")")
            self._depth -= 1
            return replace(inner, position=token.position)
        raise self._expected("an expression")
