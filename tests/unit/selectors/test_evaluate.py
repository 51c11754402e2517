"""What selectors select: each operator, the three-valued truth tables, NULL, mismatched types.

Results are the selector's truth value: True, False, or None for UNKNOWN; only True selects.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal

import pytest

from batonmq.selectors import parse_selector

T, F, U = True, False, None


def evaluate(text, **values):
    selector = parse_selector(text)
    result = selector.evaluate(values)
    assert selector.matches(values) is (result is True)
    return result


# Truth tables -----------------------------------------------------------------------------------

TRUTHS = [T, F, U]
AND = {(T, T): T, (T, F): F, (T, U): U, (F, T): F, (F, F): F, (F, U): F, (U, T): U, (U, F): F}
AND[(U, U)] = U
OR = {(T, T): T, (T, F): T, (T, U): T, (F, T): T, (F, F): F, (F, U): U, (U, T): T, (U, F): U}
OR[(U, U)] = U


@pytest.mark.parametrize(("p", "q"), list(itertools.product(TRUTHS, TRUTHS)))
def test_and_or_truth_tables(p, q):
    """JMS: "SQL treats a NULL value as unknown" and its AND and OR truth tables: "T AND U is
    U", "F AND U is F", "T OR U is T", "F OR U is U", "U AND U is U", "U OR U is U"."""
    assert evaluate("p AND q", p=p, q=q) is AND[(p, q)]
    assert evaluate("p OR q", p=p, q=q) is OR[(p, q)]


@pytest.mark.parametrize(("p", "expected"), [(T, F), (F, T), (U, U)])
def test_not_truth_table(p, expected):
    """JMS: "NOT T is F", "NOT F is T", "NOT U is U"."""
    assert evaluate("NOT p", p=p) is expected


def test_long_and_or_chains_follow_the_tables():
    assert evaluate("a AND b AND c", a=T, b=U, c=F) is F
    assert evaluate("a AND b AND c", a=T, b=U, c=T) is U
    assert evaluate("a OR b OR c", a=F, b=U, c=T) is T
    assert evaluate("a OR b OR c", a=F, b=U, c=F) is U


@pytest.mark.parametrize("value", [1, 0, "TRUE", 1.0])
def test_a_non_boolean_where_a_truth_value_is_needed_is_unknown(value):
    """Neither `flag` nor `NOT flag` selects a message whose flag is not a boolean."""
    assert evaluate("flag", flag=value) is U
    assert evaluate("NOT flag", flag=value) is U
    assert evaluate("flag OR TRUE", flag=value) is T


# Comparison -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("a = 1", {"a": 1}, T),
        ("a = 1", {"a": 2}, F),
        ("a <> 1", {"a": 2}, T),
        ("a < 1", {"a": 0}, T),
        ("a <= 1", {"a": 1}, T),
        ("a > 1", {"a": 1}, F),
        ("a >= 1", {"a": 1}, T),
        ("a = 1.0", {"a": 1}, T),
        ("a = 1", {"a": 1.0}, T),
        ("a < 1.5", {"a": 1}, T),
        ("a > 2", {"a": 2.5}, T),
        ("a = 'x'", {"a": "x"}, T),
        ("a = 'x'", {"a": "X"}, F),
        ("a <> 'x'", {"a": "X"}, T),
        ("a = 'literal''s'", {"a": "literal's"}, T),
        ("a = TRUE", {"a": True}, T),
        ("a <> TRUE", {"a": False}, T),
        ("a = b", {"a": "s", "b": "s"}, T),
        ("a < b", {"a": 1, "b": 2.5}, T),
        ("(a > 1) = (b > 1)", {"a": 2, "b": 3}, T),
        ("(a > 1) = FALSE", {"a": 0}, T),
        ("'x' = 'x'", {}, T),
        ("TRUE = TRUE", {}, T),
        ("1 = 1.0", {}, T),
    ],
)
def test_comparison(text, values, expected):
    """JMS: "it is valid to compare exact numeric values and approximate numeric values; the
    type conversion required is defined by the rules of numeric promotion in the Java
    programming language"; "Two strings are equal if and only if they contain the same sequence
    of characters"."""
    assert evaluate(text, **values) is expected


@pytest.mark.parametrize("operator", ["=", "<>", "<", "<=", ">", ">="])
def test_comparison_with_null_is_unknown(operator):
    """JMS: "If either of the type values evaluates to NULL, the value of the expression is
    unknown"; "If a property that does not exist in a message is referenced, its value is
    NULL"."""
    assert evaluate(f"a {operator} 1") is U
    assert evaluate(f"a {operator} b", a=1) is U
    assert evaluate(f"1 {operator} b") is U
    assert evaluate(f"a {operator} b") is U


@pytest.mark.parametrize(
    ("left", "right"),
    [("1", "'1'"), ("'1'", "1"), ("TRUE", "1"), ("1", "TRUE"), ("'TRUE'", "TRUE"), ("0", "FALSE")],
)
def test_comparing_unlike_types_is_false_for_equal_and_not_equal(left, right):
    """JMS: "Only like type values can be compared. ... If the comparison of non-like type
    values is attempted, the value of the operation is false." So <> is FALSE too, and NOT of =
    is TRUE."""
    assert evaluate(f"{left} = {right}") is F
    assert evaluate(f"{left} <> {right}") is F
    assert evaluate(f"NOT ({left} = {right})") is T


@pytest.mark.parametrize(
    ("value", "other"), [("b", "a"), (True, False), ("1", 0), (True, 0), (1, "a")]
)
@pytest.mark.parametrize("operator", ["<", "<=", ">", ">="])
def test_ordering_anything_but_numbers_is_false(operator, value, other):
    """JMS: "String and boolean comparison is restricted to = and <>"; and unlike types compare
    false."""
    assert evaluate(f"a {operator} b", a=value, b=other) is F


def test_nan_compares_as_java_double_does():
    assert evaluate("a = a", a=math.nan) is F
    assert evaluate("a <> a", a=math.nan) is T
    assert evaluate("a < 1", a=math.nan) is F


def test_big_integers_meet_floats_as_java_doubles():
    """Numeric promotion: long to double, so 2**53 + 1 equals the double 2**53."""
    assert evaluate("a = 9007199254740992.0", a=2**53 + 1) is T
    assert evaluate("a = 9007199254740993", a=2**53 + 1) is T
    assert evaluate("a = 9007199254740992", a=2**53 + 1) is F
    assert (
        evaluate(
            "a * a * a * a * a * a * a * a * a * a * a * a * a * a * a * a * a > 1.0", a=2**63 - 1
        )
        is T
    )


# Arithmetic -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("a + 1 = 3", {"a": 2}, T),
        ("a - 1 = 1", {"a": 2}, T),
        ("a * 3 = 6", {"a": 2}, T),
        ("a / 2 = 3", {"a": 7}, T),
        ("a / 2 = -3", {"a": -7}, T),
        ("a / -2 = -3", {"a": 7}, T),
        ("a / 2 = 3.5", {"a": 7.0}, T),
        ("a / 2.0 = 3.5", {"a": 7}, T),
        ("-a = -2", {"a": 2}, T),
        ("+a = 2", {"a": 2}, T),
        ("- -a = 2", {"a": 2}, T),
        ("1 + 2 * 3 = 7", {}, T),
        ("(1 + 2) * 3 = 9", {}, T),
        ("10 - 4 - 3 = 3", {}, T),
        ("12 / 2 / 3 = 2", {}, T),
        ("a + 0.5 = 2.5", {"a": 2}, T),
        ("a * 1e308 * 10 > 1e308", {"a": 1}, T),
        ("9223372036854775807 + 1 > 0", {}, T),
    ],
)
def test_arithmetic(text, values, expected):
    """JMS: "Arithmetic operations must use numeric promotion in the Java programming
    language" (int / int truncates toward zero; int with double is double). Integers do not
    wrap at 64 bits."""
    assert evaluate(text, **values) is expected


@pytest.mark.parametrize("text", ["a + 1 = 1", "1 - a = 1", "a * 2 > 0", "-a < 0", "+a = 0"])
def test_arithmetic_with_null_is_unknown(text):
    """JMS: "Comparison or arithmetic with an unknown value always yields an unknown value"."""
    assert evaluate(text) is U


@pytest.mark.parametrize("value", ["1", True, b"1"])
def test_arithmetic_on_a_non_number_is_unknown(value):
    assert evaluate("a + 1 = 2", a=value) is U
    assert evaluate("-a = -1", a=value) is U
    assert evaluate("NOT (a + 1 = 2)", a=value) is U


@pytest.mark.parametrize("text", ["a / 0 = 1", "a / 0.0 > 0", "a / (a - a) = 1", "1 / a < 2"])
def test_division_by_zero_is_unknown(text):
    """Java throws for long division by zero and makes an infinity of a double's; a selector
    has no exception to throw and no infinity is right, so both are UNKNOWN."""
    assert evaluate(text, a=0 if "1 / a" in text else 5) is U
    assert evaluate(f"NOT ({text})", a=0 if "1 / a" in text else 5) is U


# BETWEEN ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "between", "not_between"),
    [(14, F, T), (15, T, F), (17.5, T, F), (19, T, F), (20, F, T), (None, U, U), ("17", F, F)],
)
def test_between(age, between, not_between):
    """JMS: "age BETWEEN 15 AND 19 is equivalent to age >= 15 AND age <= 19" and "age NOT
    BETWEEN 15 AND 19 is equivalent to age < 15 OR age > 19": a string age is FALSE for both."""
    assert evaluate("age BETWEEN 15 AND 19", age=age) is between
    assert evaluate("age NOT BETWEEN 15 AND 19", age=age) is not_between


def test_between_with_a_null_bound_is_as_its_equivalence():
    assert evaluate("a BETWEEN lo AND 10", a=5) is U
    assert evaluate("a BETWEEN lo AND 3", a=5) is F
    assert evaluate("a NOT BETWEEN lo AND 3", a=5) is T
    assert evaluate("a NOT BETWEEN lo AND 10", a=5) is U


# IN ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("country", "in_", "not_in"),
    [("UK", T, F), ("Peru", F, T), ("uk", F, T), (None, U, U), (1, F, F), (True, F, F)],
)
def test_in(country, in_, not_in):
    """JMS: "Country IN (' UK', 'US', 'France') is true for 'UK' and false for 'Peru'"; "If
    identifier of an IN or NOT IN operation is NULL, the value of the operation is unknown";
    [NOT] IN is a "comparison operator where identifier has a String or NULL value", and "If
    the comparison of non-like type values is attempted, the value of the operation is
    false"."""
    assert evaluate("Country IN ('UK', 'US', 'France')", Country=country) is in_
    assert evaluate("Country NOT IN ('UK', 'US', 'France')", Country=country) is not_in


# LIKE --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ("phone LIKE '12%3'", "123", T),
        ("phone LIKE '12%3'", "12993", T),
        ("phone LIKE '12%3'", "1234", F),
        ("phone NOT LIKE '12%3'", "1234", T),
        ("phone NOT LIKE '12%3'", "123", F),
        ("word LIKE 'l_se'", "lose", T),
        ("word LIKE 'l_se'", "loose", F),
        ("word LIKE 'l_se'", "lse", F),
        ("underscored LIKE '\\_%' ESCAPE '\\'", "_foo", T),
        ("underscored LIKE '\\_%' ESCAPE '\\'", "bar", F),
        ("underscored NOT LIKE '\\_%' ESCAPE '\\'", "bar", T),
        ("x LIKE '100!%' ESCAPE '!'", "100%", T),
        ("x LIKE '100!%' ESCAPE '!'", "1000", F),
        ("x LIKE 'a!!b' ESCAPE '!'", "a!b", T),
        ("x LIKE 'a%%' ESCAPE '%'", "a%", T),
        ("x LIKE 'a%%' ESCAPE '%'", "ab", F),
        ("x LIKE 'a%_' ESCAPE '%'", "a_", T),
        ("x LIKE 'a%_' ESCAPE '%'", "ab", F),
        ("x LIKE '%'", "", T),
        ("x LIKE ''", "", T),
        ("x LIKE ''", "a", F),
        ("x LIKE 'a.c'", "abc", F),
        ("x LIKE '(.*)'", "(.*)", T),
        ("x LIKE '%b%'", "a\nb\nc", T),
        ("x LIKE 'a_c'", "a\nc", T),
        ("x LIKE 'A%'", "abc", F),
    ],
)
def test_like(text, value, expected):
    """JMS: "phone LIKE '12%3' is true for '123' or '12993' and false for '1234'"; "word LIKE
    'l_se' is true for 'lose' and false for 'loose'"; "underscored LIKE '\\_%' ESCAPE '\\' is
    true for '_foo' and false for 'bar'"; "phone NOT LIKE '12%3' is false for '123' and '12993'
    and true for '1234'"."""
    name = text.split()[0]
    assert evaluate(text, **{name: value}) is expected


@pytest.mark.parametrize(("value", "expected"), [(None, U), (123, F), (True, F)])
def test_like_on_null_is_unknown_and_on_a_non_string_false(value, expected):
    """JMS: "If identifier of a LIKE or NOT LIKE operation is NULL, the value of the operation
    is unknown"; [NOT] LIKE is a "comparison operator, where identifier has a String value"."""
    assert evaluate("phone LIKE '12%3'", phone=value) is expected
    assert evaluate("phone NOT LIKE '12%3'", phone=value) is expected


# IS NULL -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "is_null"), [(None, T), (0, F), ("", F), (False, F)])
def test_is_null(value, is_null):
    """JMS: "prop_name IS NULL" tests "for a null header field value or a missing property
    value"."""
    assert evaluate("prop_name IS NULL", prop_name=value) is is_null
    assert evaluate("prop_name IS NOT NULL", prop_name=value) is (not is_null)


def test_is_null_turns_unknown_into_a_truth_value():
    """JMS: "The IS NULL and IS NOT NULL operators convert an unknown value into the respective
    TRUE and FALSE values"."""
    assert evaluate("(a > 1) IS NULL") is T
    assert evaluate("(a + 1) IS NOT NULL") is F
    assert evaluate("(a / 0) IS NULL", a=1) is T


def test_absent_and_unsupported_values_are_null():
    """Values other than str, int, float and bool (bytes, Decimal, tables) are absent."""
    for value in (b"x", bytearray(b"x"), Decimal("1.5"), {"k": 1}, [1], object()):
        assert evaluate("a IS NULL", a=value) is T
        assert evaluate("a = 1", a=value) is U


def test_subclasses_of_supported_types_count_as_the_type():
    class Name(str):
        pass

    class Count(int):
        pass

    assert evaluate("a = 'x' AND b = 2", a=Name("x"), b=Count(2)) is T


def test_booleans_are_not_numbers():
    """Python's bool is an int; JMS's boolean is no number."""
    assert evaluate("a = 1", a=True) is F
    assert evaluate("a > 0", a=True) is F
    assert evaluate("a = TRUE", a=1) is F


def test_identifiers_are_case_sensitive():
    assert evaluate("Colour = 'red'", colour="red") is U
    assert evaluate("Colour = 'red'", Colour="red") is T


def test_a_selector_is_reusable_and_pure():
    selector = parse_selector("a > 1 AND b IN ('x')")
    assert [selector.matches({"a": a, "b": "x"}) for a in (0, 2, 1, 3)] == [F, T, F, T]
