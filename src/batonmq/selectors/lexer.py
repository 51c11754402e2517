"""Selector text into tokens, each with the 0-based character offset it starts at.

The lexical rules are javax.jms.Message's "Message Selectors" (JMS 1.1):

- "A string literal is enclosed in single quotes, with an included single quote represented by
  doubled single quote; for example, 'literal' and 'literal''s'."
- "An exact numeric literal is a numeric value without a decimal point, such as 57, -957, and
  +62; numbers in the range of long are supported. Exact numeric literals use the integer
  literal syntax of the Java programming language." Decimal, 0x hexadecimal and 0-prefixed
  octal, with an optional L; the sign is a unary operator (folded into the literal by the
  parser, which is how -9223372036854775808 is allowed). Hexadecimal and octal literals are
  magnitudes: at most 0x7FFFFFFFFFFFFFFF, never a two's-complement negative as in Java.
- "An approximate numeric literal is a numeric value in scientific notation, such as 7E3 and
  -57.9E2, or a numeric value with a decimal, such as 7., -95.7, and +6.2; numbers in the range
  of double are supported. Approximate literals use the floating-point literal syntax of the
  Java programming language." An F suffix makes a Java float (rounded to 32 bits, so that it
  equals a float header carrying the same literal); D or none a double.
- "An identifier is an unlimited-length character sequence that must begin with a Java
  identifier start character; all following characters must be Java identifier part
  characters." Keywords ("NULL, TRUE, FALSE, NOT, AND, OR, BETWEEN, LIKE, IN, IS, or ESCAPE")
  are recognised case-insensitively, in ASCII only.
- "Whitespace is the same as that defined for the Java programming language: space, horizontal
  tab, form feed, and line terminator."
"""

from __future__ import annotations

import enum
import struct
import unicodedata
from typing import Final, NamedTuple

from batonmq.selectors.errors import SelectorSyntaxError, excerpt

KEYWORDS: Final = frozenset(
    {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}
)
#: One past the largest magnitude of an exact literal: Long.MIN_VALUE, valid only negated.
LONG_MIN_MAGNITUDE: Final = 2**63

_WHITESPACE: Final = frozenset(" \t\f\n\r")
_TWO_CHAR_OPERATORS: Final = frozenset({"<>", "<=", ">="})
_ONE_CHAR_OPERATORS: Final = frozenset("=<>+-*/(),")
_DIGITS: Final = frozenset("0123456789")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_OCTAL_DIGITS: Final = frozenset("01234567")
#: Character.isJavaIdentifierStart: letters, letter numbers, currency symbols, connectors.
_START_CATEGORIES: Final = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Sc", "Pc"})
#: Character.isJavaIdentifierPart adds digits, combining marks and format characters.
_PART_CATEGORIES: Final = _START_CATEGORIES | {"Nd", "Mn", "Mc", "Cf"}
_FLOAT32: Final = struct.Struct("<f")


class Kind(enum.Enum):
    IDENTIFIER = "identifier"
    KEYWORD = "keyword"
    STRING = "string literal"
    INTEGER = "integer literal"
    FLOAT = "approximate numeric literal"
    OPERATOR = "operator"
    END = "end of selector"


class Token(NamedTuple):
    kind: Kind
    #: IDENTIFIER: the name; KEYWORD: upper-cased; STRING: unescaped; INTEGER: int (a magnitude);
    #: FLOAT: float; OPERATOR: the symbol; END: "".
    value: str | int | float
    position: int
    #: The source text of the token, for error messages.
    text: str


def is_identifier_start(char: str) -> bool:
    if char.isascii():
        return char.isalpha() or char in "_$"
    return unicodedata.category(char) in _START_CATEGORIES


def is_identifier_part(char: str) -> bool:
    if char.isascii():
        return char.isalnum() or char in "_$"
    return unicodedata.category(char) in _PART_CATEGORIES


def is_identifier(name: str) -> bool:
    """Whether a selector can name `name` without quoting (there is no quoting in JMS)."""
    return (
        bool(name)
        and is_identifier_start(name[0])
        and all(is_identifier_part(char) for char in name[1:])
        and not (name.isascii() and name.upper() in KEYWORDS)
    )


def tokenize(text: str) -> list[Token]:
    """All tokens of `text`, ending with one END token at `len(text)`."""
    tokens: list[Token] = []
    length = len(text)
    i = 0
    while i < length:
        char = text[i]
        if char in _WHITESPACE:
            i += 1
        elif char == "'":
            token, i = _string(text, i)
            tokens.append(token)
        elif char in _DIGITS or (char == "." and i + 1 < length and text[i + 1] in _DIGITS):
            token, i = _number(text, i)
            tokens.append(token)
        elif is_identifier_start(char):
            end = i + 1
            while end < length and is_identifier_part(text[end]):
                end += 1
            word = text[i:end]
            upper = word.upper() if word.isascii() else ""
            if upper in KEYWORDS:
                tokens.append(Token(Kind.KEYWORD, upper, i, word))
            else:
                tokens.append(Token(Kind.IDENTIFIER, word, i, word))
            i = end
        elif text[i : i + 2] in _TWO_CHAR_OPERATORS:
            tokens.append(Token(Kind.OPERATOR, text[i : i + 2], i, text[i : i + 2]))
            i += 2
        elif char in _ONE_CHAR_OPERATORS:
            tokens.append(Token(Kind.OPERATOR, char, i, char))
            i += 1
        elif text[i : i + 2] == "!=":
            raise SelectorSyntaxError(i, "'!=' is not a selector operator; not equal is '<>'")
        else:
            raise SelectorSyntaxError(i, f"unexpected character {char!r}")
    tokens.append(Token(Kind.END, "", length, ""))
    return tokens


def _string(text: str, start: int) -> tuple[Token, int]:
    parts: list[str] = []
    i = start + 1
    while True:
        quote = text.find("'", i)
        if quote < 0:
            raise SelectorSyntaxError(start, "unterminated string literal")
        parts.append(text[i:quote])
        if text.startswith("'", quote + 1):
            parts.append("'")
            i = quote + 2
        else:
            end = quote + 1
            return Token(Kind.STRING, "".join(parts), start, text[start:end]), end


def _scan(text: str, i: int, allowed: frozenset[str]) -> int:
    while i < len(text) and text[i] in allowed:
        i += 1
    return i


def _number(text: str, start: int) -> tuple[Token, int]:
    length = len(text)
    if text[start] == "0" and text[start + 1 : start + 2] in ("x", "X"):
        end = _scan(text, start + 2, _HEX_DIGITS)
        if end == start + 2:
            raise SelectorSyntaxError(start, "malformed hexadecimal literal")
        value = int(text[start + 2 : end], 16)
        if text[end : end + 1] in ("l", "L"):
            end += 1
        return _integer(text, start, end, value, "hexadecimal")
    end = _scan(text, start, _DIGITS)
    digits_end = end
    approximate = False
    if end < length and text[end] == ".":
        approximate = True
        end = _scan(text, end + 1, _DIGITS)
    if end < length and text[end] in "eE":
        approximate = True
        end += 1
        if end < length and text[end] in "+-":
            end += 1
        exponent_start = end
        end = _scan(text, end, _DIGITS)
        if end == exponent_start:
            raise SelectorSyntaxError(start, "malformed exponent in numeric literal")
    mantissa_end = end
    suffix = text[end : end + 1]
    if suffix and suffix in "fFdD":
        approximate = True
        end += 1
    elif suffix and suffix in "lL" and not approximate:
        end += 1
    if approximate:
        _check_followed_by_separator(text, start, end)
        number = float(text[start:mantissa_end])
        if suffix and suffix in "fF":
            try:
                number = _FLOAT32.unpack(_FLOAT32.pack(number))[0]
            except OverflowError:
                raise SelectorSyntaxError(start, "literal out of the range of float") from None
        if number in (float("inf"), float("-inf")):
            raise SelectorSyntaxError(start, "literal out of the range of double")
        return Token(Kind.FLOAT, number, start, text[start:end]), end
    digits = text[start:digits_end]
    if len(digits) > 1 and digits[0] == "0":
        if any(char not in _OCTAL_DIGITS for char in digits):
            raise SelectorSyntaxError(start, "malformed octal literal (a leading 0 means octal)")
        return _integer(text, start, end, int(digits, 8), "octal")
    return _integer(text, start, end, int(digits), "decimal")


def _integer(text: str, start: int, end: int, value: int, base: str) -> tuple[Token, int]:
    _check_followed_by_separator(text, start, end)
    limit = LONG_MIN_MAGNITUDE if base == "decimal" else LONG_MIN_MAGNITUDE - 1
    if value > limit:
        raise SelectorSyntaxError(start, "integer literal out of the range of long")
    return Token(Kind.INTEGER, value, start, text[start:end]), end


def _check_followed_by_separator(text: str, start: int, end: int) -> None:
    if end < len(text) and (text[end] == "." or is_identifier_part(text[end])):
        raise SelectorSyntaxError(
            start,
            f"malformed numeric literal: {excerpt(text[start:end])} followed by {text[end]!r}",
        )
