"""The expression tree: precedence, associativity, what the parser folds, and syntax errors that
name where they are."""

from __future__ import annotations

import inspect
import pickle
import sys

import pytest

from batonmq.selectors import (
    MAX_NESTING_DEPTH,
    MAX_SELECTOR_LENGTH,
    SelectorSyntaxError,
    parse_selector,
)
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
    Not,
    Or,
    Unary,
)
from batonmq.selectors.parser import parse


def shape(node):
    """A node as nested tuples, positions left out."""
    match node:
        case Literal(value=value):
            return value
        case Identifier(name=name):
            return name
        case Unary(operator=symbol, operand=operand):
            return (symbol, shape(operand))
        case Arithmetic(first=first, rest=rest):
            result = shape(first)
            for symbol, operand in rest:
                result = (symbol, result, shape(operand))
            return result
        case Comparison(operator=symbol, left=left, right=right):
            return (symbol, shape(left), shape(right))
        case Between(operand=operand, low=low, high=high, negated=negated):
            return (
                "NOT BETWEEN" if negated else "BETWEEN",
                shape(operand),
                shape(low),
                shape(high),
            )
        case In(operand=operand, values=values, negated=negated):
            return ("NOT IN" if negated else "IN", shape(operand), values)
        case Like(operand=operand, pattern=pattern, escape=escape, negated=negated):
            return ("NOT LIKE" if negated else "LIKE", shape(operand), pattern, escape)
        case IsNull(operand=operand, negated=negated):
            return ("IS NOT NULL" if negated else "IS NULL", shape(operand))
        case Not(operand=operand):
            return ("NOT", shape(operand))
        case And(operands=operands):
            return ("AND", *map(shape, operands))
        case Or(operands=operands):
            return ("OR", *map(shape, operands))
    raise AssertionError(node)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a OR b AND c", ("OR", "a", ("AND", "b", "c"))),
        ("a AND b OR c", ("OR", ("AND", "a", "b"), "c")),
        ("NOT a AND b", ("AND", ("NOT", "a"), "b")),
        ("NOT a = 1", ("NOT", ("=", "a", 1))),
        ("NOT NOT a", ("NOT", ("NOT", "a"))),
        ("a OR b OR c", ("OR", "a", "b", "c")),
        ("(a OR b) AND c", ("AND", ("OR", "a", "b"), "c")),
        ("x + y * z = 1", ("=", ("+", "x", ("*", "y", "z")), 1)),
        ("(x + y) * z = 1", ("=", ("*", ("+", "x", "y"), "z"), 1)),
        ("x - y - z = 1", ("=", ("-", ("-", "x", "y"), "z"), 1)),
        ("x / y * z = 1", ("=", ("*", ("/", "x", "y"), "z"), 1)),
        ("-x * y = 1", ("=", ("*", ("-", "x"), "y"), 1)),
        ("- - x = 1", ("=", ("-", ("-", "x")), 1)),
        ("x = -957", ("=", "x", -957)),
        ("x = +62", ("=", "x", 62)),
        ("x = -57.9E2", ("=", "x", -5790.0)),
        ("x = -9223372036854775808", ("=", "x", -(2**63))),
        ("x - 1 > 2", (">", ("-", "x", 1), 2)),
        ("x = TRUE", ("=", "x", True)),
        ("x <> false", ("<>", "x", False)),
        ("age BETWEEN 15 AND 19", ("BETWEEN", "age", 15, 19)),
        ("age NOT BETWEEN 15 AND 19 AND b", ("AND", ("NOT BETWEEN", "age", 15, 19), "b")),
        ("age BETWEEN x + 1 AND y * 2", ("BETWEEN", "age", ("+", "x", 1), ("*", "y", 2))),
        ("c IN ('UK', 'US')", ("IN", "c", ("UK", "US"))),
        ("c NOT IN ('UK')", ("NOT IN", "c", ("UK",))),
        ("p LIKE '12%3'", ("LIKE", "p", "12%3", None)),
        ("w NOT LIKE '\\_%' ESCAPE '\\'", ("NOT LIKE", "w", "\\_%", "\\")),
        ("p IS NULL", ("IS NULL", "p")),
        ("p IS NOT NULL OR q", ("OR", ("IS NOT NULL", "p"), "q")),
        ("flag", "flag"),
        ("TRUE", True),
        ("(a > 1) = TRUE", ("=", (">", "a", 1), True)),
        ("'a' = 1", ("=", "a", 1)),
    ],
)
def test_precedence_and_shape(text, expected):
    """JMS: "Logical operators in precedence order: NOT, AND, OR"; "Arithmetic operators in
    precedence order: +, - (unary) *, / (multiplication and division) +, - (addition and
    subtraction)"; "The order of evaluation of a message selector is from left to right within
    precedence level. Parentheses can be used to change this order."."""
    assert shape(parse(text)) == expected


def test_keywords_in_any_case():
    assert shape(parse("a between 1 and 2 or b is not null")) == shape(
        parse("a BETWEEN 1 AND 2 OR b IS NOT NULL")
    )


def test_nodes_remember_where_they_start():
    node = parse("  (a = 1) AND b LIKE 'x'")
    assert isinstance(node, And)
    assert node.position == 2
    assert [operand.position for operand in node.operands] == [2, 14]


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_empty_selector_selects_everything(text):
    """JMS: "If the value of a message selector is an empty string, the value is treated as a
    null and indicates that there is no message selector for the message consumer"."""
    selector = parse_selector(text)
    assert selector.expression is None
    assert selector.selects_everything
    assert selector.matches({})
    assert selector.evaluate({}) is True


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("a = ", 4, "expected an expression, found end of selector"),
        ("(a = 1", 6, "expected ')', found end of selector"),
        ("a = 1)", 5, "expected AND, OR or end of selector, found ')'"),
        ("a = = 1", 4, "expected an expression, found '='"),
        ("a = 1 = 2", 6, "comparisons do not chain"),
        ("a b", 2, "found identifier 'b'"),
        ("between = 1", 0, "keyword 'between' (keywords cannot be identifiers)"),
        ("a = 1 AND or = 2", 10, "keyword 'or'"),
        ("x = NULL", 4, "IS [NOT] NULL"),
        ("x IS 1", 5, "expected NULL, found integer literal '1'"),
        ("x IS NOT TRUE", 9, "expected NULL"),
        ("x NOT = 1", 2, "expected BETWEEN, IN or LIKE after NOT"),
        ("x IN ('a', 2)", 11, "IN lists only strings"),
        ("x IN ('a', y)", 11, "IN lists only strings"),
        ("x IN ()", 6, "string literal"),
        ("x IN 'a'", 5, "expected '('"),
        ("x IN ('a' 'b')", 10, "expected ')'"),
        ("x LIKE y", 7, "a string literal pattern"),
        ("x LIKE 'a' ESCAPE 'ab'", 18, "ESCAPE must be a single character"),
        ("x LIKE 'a' ESCAPE ''", 18, "ESCAPE must be a single character"),
        ("x LIKE 'a!' ESCAPE '!'", 7, "ends with its escape character"),
        ("x BETWEEN 1 OR 2", 12, "expected AND"),
        ("x BETWEEN 'a' AND 'z'", 10, "BETWEEN compares only numbers, found a string"),
        ("3 AND x", 0, "expected a boolean expression, found a number"),
        ("x AND 'y'", 6, "expected a boolean expression, found a string"),
        ("NOT 1", 4, "expected a boolean expression"),
        ("x + 1", 0, "expected a boolean expression, found a number"),
        ("'a' < 'b'", 0, "'<' compares only numbers"),
        ("x >= TRUE", 5, "'>=' compares only numbers"),
        ("x + 'a' = 1", 4, "arithmetic needs numbers, found a string"),
        ("-'a' = 1", 1, "unary - needs a number"),
        ("5 LIKE 'a'", 0, "LIKE matches strings, found a number"),
        ("TRUE IN ('a')", 0, "IN tests strings, found a boolean"),
        ("x = 9223372036854775808", 4, "range of long"),
        ("x = +9223372036854775808", 5, "range of long"),
        ("x = 1 AND", 9, "expected an expression, found end of selector"),
    ],
)
def test_syntax_errors_name_their_position(text, position, fragment):
    with pytest.raises(SelectorSyntaxError) as caught:
        parse_selector(text)
    error = caught.value
    assert error.position == position
    assert fragment in error.message
    assert str(error) == f"selector syntax error at position {position}: {error.message}"


@pytest.mark.parametrize(
    "text", ["a = 1 '" + "x" * 3000 + "'", "a = " + "9" * 3000 + "x", "a b" + "c" * 3000]
)
def test_error_messages_quote_only_an_excerpt(text):
    """The message becomes a 406's reply text, an AMQP short string of at most 255 octets."""
    with pytest.raises(SelectorSyntaxError) as caught:
        parse_selector(text)
    assert len(str(caught.value).encode()) <= 255
    assert "..." in caught.value.message


def test_the_error_is_a_value_error_and_pickles():
    with pytest.raises(ValueError, match="position 4") as caught:
        parse_selector("a = ")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.position, copy.message, str(copy)) == (
        caught.value.position,
        caught.value.message,
        str(caught.value),
    )


def test_a_selector_too_long_is_a_syntax_error():
    text = " OR ".join(["a = 1"] * 1000)
    assert len(text) > MAX_SELECTOR_LENGTH
    with pytest.raises(SelectorSyntaxError) as caught:
        parse_selector(text)
    assert caught.value.position == MAX_SELECTOR_LENGTH


def test_long_chains_make_wide_trees_not_deep_ones():
    """A selector of the longest length made of one long OR (or +) chain parses and evaluates:
    chains are n-ary nodes, so no recursion limit is approached."""
    ors = " OR ".join(["a = 1"] * 450)
    assert len(ors) <= MAX_SELECTOR_LENGTH
    assert parse_selector(ors).matches({"a": 1})
    sums = "a" + " + a" * 1000 + " = 1001"
    assert len(sums) <= MAX_SELECTOR_LENGTH
    assert parse_selector(sums).matches({"a": 1})


NESTINGS = {
    "parentheses": lambda depth: "(" * depth + "a = 1" + ")" * depth,
    "NOT": lambda depth: "NOT " * depth + "a = 1",
    "NOT and parentheses": lambda depth: "NOT (" * (depth // 2) + "a = 1" + ")" * (depth // 2),
    "unary minus": lambda depth: "x = " + "- " * depth + "a",
    "unary plus": lambda depth: "x = " + "+ " * depth + "a",
}


@pytest.mark.parametrize("nested", NESTINGS.values(), ids=NESTINGS.keys())
def test_nesting_is_bounded(nested):
    """Nesting at the limit parses and evaluates; more is a syntax error, never a
    RecursionError, however deep the text goes."""
    parse_selector(nested(MAX_NESTING_DEPTH)).evaluate({"a": 1, "x": 1})
    with pytest.raises(SelectorSyntaxError, match="nested more than") as caught:
        parse_selector(nested(MAX_NESTING_DEPTH + 2))
    assert caught.value.position < len(nested(MAX_NESTING_DEPTH + 2))
    with pytest.raises(SelectorSyntaxError, match="nested more than"):
        parse_selector(nested(MAX_NESTING_DEPTH * 10))


def test_selectors_are_equal_by_text():
    first, second = parse_selector("a = 1"), parse_selector("a = 1")
    assert first is not second
    assert first == second
    assert parse_selector("a = 1") != parse_selector("a=1")
    assert len({parse_selector("a = 1"), parse_selector("a = 1")}) == 1
    assert repr(parse_selector("a = 1")) == "Selector('a = 1')"


def test_parsing_on_a_stack_already_deep_is_a_syntax_error_too():
    """The nesting limit bounds the parser's own recursion; a caller that is itself near the
    recursion limit still gets a SelectorSyntaxError."""
    text = "(" * MAX_NESTING_DEPTH + "a = 1" + ")" * MAX_NESTING_DEPTH
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 60)
    try:
        with pytest.raises(SelectorSyntaxError, match="nested too deeply to parse here"):
            parse_selector(text)
    finally:
        sys.setrecursionlimit(limit)
    assert parse_selector(text).matches({"a": 1})
