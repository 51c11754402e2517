"""Tokens of selector text: literals, identifiers, keywords, operators, and where each starts."""

from __future__ import annotations

import struct

import pytest

from batonmq.selectors import SelectorSyntaxError, is_identifier
from batonmq.selectors.lexer import Kind, tokenize


def kinds_and_values(text: str) -> list[tuple[Kind, object]]:
    return [(token.kind, token.value) for token in tokenize(text)[:-1]]


def only_value(text: str) -> object:
    tokens = tokenize(text)
    assert len(tokens) == 2, tokens
    return tokens[0].value


def test_positions_are_character_offsets_and_end_is_at_the_length():
    tokens = tokenize("ab  <>'x''y'")
    assert [(token.kind, token.position) for token in tokens] == [
        (Kind.IDENTIFIER, 0),
        (Kind.OPERATOR, 4),
        (Kind.STRING, 6),
        (Kind.END, 12),
    ]


def test_strings_double_their_quotes():
    """JMS: "an included single quote represented by doubled single quote; for example,
    'literal' and 'literal''s'"."""
    assert only_value("'literal''s'") == "literal's"
    assert only_value("''") == ""
    assert only_value("''''") == "'"
    assert only_value("'a\nb %_'") == "a\nb %_"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("57", 57),
        ("57L", 57),
        ("57l", 57),
        ("0x1F", 31),
        ("0XffL", 255),
        ("017", 15),
        ("00", 0),
        ("9223372036854775807", 2**63 - 1),
        ("0x7FFFFFFFFFFFFFFF", 2**63 - 1),
    ],
)
def test_exact_numeric_literals_use_java_integer_syntax(text, value):
    """JMS: "Exact numeric literals use the integer literal syntax of the Java programming
    language" (decimal, hexadecimal, octal, with an optional L)."""
    assert tokenize(text)[0].kind is Kind.INTEGER
    assert only_value(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("7.", 7.0),
        ("95.7", 95.7),
        (".5", 0.5),
        ("7E3", 7000.0),
        ("57.9E2", 5790.0),
        ("7e-2", 0.07),
        ("1e+3", 1000.0),
        ("2D", 2.0),
        ("2.5d", 2.5),
        ("09.5", 9.5),
        ("1.5F", 1.5),
    ],
)
def test_approximate_numeric_literals_use_java_floating_point_syntax(text, value):
    """JMS: "Approximate literals use the floating-point literal syntax of the Java programming
    language"."""
    assert tokenize(text)[0].kind is Kind.FLOAT
    assert only_value(text) == value


def test_a_float_suffix_rounds_to_32_bits():
    """A Java float literal is a 32-bit float: 1.1F equals a float header sent as 1.1f."""
    as_float32 = struct.unpack("<f", struct.pack("<f", 1.1))[0]
    assert only_value("1.1F") == as_float32 != 1.1
    assert only_value("1.1") == 1.1


def test_keywords_are_case_insensitive_identifiers_case_sensitive():
    """JMS: "Predefined selector literals and operator names are shown here in uppercase;
    however, they are case insensitive." and "Identifiers are case-sensitive"."""
    assert kinds_and_values("and Or nOt between") == [
        (Kind.KEYWORD, "AND"),
        (Kind.KEYWORD, "OR"),
        (Kind.KEYWORD, "NOT"),
        (Kind.KEYWORD, "BETWEEN"),
    ]
    assert kinds_and_values("Colour colour") == [
        (Kind.IDENTIFIER, "Colour"),
        (Kind.IDENTIFIER, "colour"),
    ]


def test_keywords_are_ascii_only():
    """Dotless i (U+0131) upper-cases to I; dotless-i n is an identifier, not IN."""
    assert kinds_and_values("\u0131n") == [(Kind.IDENTIFIER, "\u0131n")]


@pytest.mark.parametrize(
    "name", ["a", "_x", "$cost", "JMSPriority", "élan", "a1_$", "数量", "x\u0301"]
)
def test_java_identifiers(name):
    """JMS: an identifier "must begin with a Java identifier start character; all following
    characters must be Java identifier part characters"."""
    assert is_identifier(name)
    assert kinds_and_values(name) == [(Kind.IDENTIFIER, name)]


@pytest.mark.parametrize("name", ["", "1a", "x-match", "a.b", "NULL", "true", "Escape", "is"])
def test_not_identifiers(name):
    assert not is_identifier(name)


def test_operators_longest_first():
    assert [token.value for token in tokenize("<><=>=<>=+-*/(),")[:-1]] == [
        "<>",
        "<=",
        ">=",
        "<>",
        "=",
        "+",
        "-",
        "*",
        "/",
        "(",
        ")",
        ",",
    ]


def test_java_whitespace_separates():
    """JMS: "Whitespace is the same as that defined for the Java programming language: space,
    horizontal tab, form feed, and line terminator"."""
    assert kinds_and_values("a\t=\f1\r\n") == [
        (Kind.IDENTIFIER, "a"),
        (Kind.OPERATOR, "="),
        (Kind.INTEGER, 1),
    ]


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("a = 'abc", 4, "unterminated string"),
        ("a = 'it''s", 4, "unterminated string"),
        ("a = 08", 4, "octal"),
        ("a = 0x", 4, "hexadecimal"),
        ("a = 1e", 4, "exponent"),
        ("a = 1.2.3", 4, "malformed numeric literal"),
        ("a = 12abc", 4, "malformed numeric literal"),
        ("a = 1.5L", 4, "malformed numeric literal"),
        ("a = 9223372036854775809", 4, "range of long"),
        ("a = 0x8000000000000000", 4, "range of long"),
        ("a = 1e400", 4, "range of double"),
        ("a = 1e39F", 4, "range of float"),
        ("a # 1", 2, "unexpected character '#'"),
        ('"a" = 1', 0, "unexpected character '\"'"),
        ("a != 1", 2, "'<>'"),
        ("a\u00a0= 1", 1, "unexpected character"),
    ],
)
def test_lexical_errors_name_their_position(text, position, fragment):
    with pytest.raises(SelectorSyntaxError) as caught:
        tokenize(text)
    assert caught.value.position == position
    assert fragment in caught.value.message
