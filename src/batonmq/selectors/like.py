"""LIKE patterns, compiled once when the selector is parsed.

JMS 1.1 (javax.jms.Message): "pattern-value is a string literal where '_' stands for any single
character; '%' stands for any sequence of characters, including the empty sequence; and all
other characters stand for themselves. The optional escape-character is a single-character
string literal whose character is used to escape the special meaning of the '_' and '%' in
pattern-value."

An escape character makes the character after it stand for itself, whatever it is (so the escape
character escapes itself too); an escape character with nothing after it is an error, as in
SQL-92 ("invalid escape sequence"). Matching is of the whole string, case-sensitive, and `_`
and `%` match line terminators like any other character.

The pattern is not one regular expression: `%a%a%a%b` as `.*a.*a.*a.*b` backtracks
polynomially in the string's length, once per message. It is split at `%` into fixed-length
segments (literal text and `_`), each a regular expression built with re.escape; the first must
match at the start, the last at the end, and each middle one is found leftmost after the one
before it, which is a match whenever one exists. Work is linear in the string times the pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class LikePatternError(ValueError):
    """The pattern ends in its escape character; `offset` is that character's index."""

    def __init__(self, offset: int) -> None:
        super().__init__("LIKE pattern ends with its escape character")
        self.offset = offset


@dataclass(frozen=True, slots=True)
class _Segment:
    """Pattern text between two `%`: each item a character, or None for `_`."""

    length: int
    #: The segment as a string when it has no `_` (found with str methods, fastest).
    literal: str | None
    regex: re.Pattern[str]

    @classmethod
    def of(cls, items: list[str | None]) -> _Segment:
        if None not in items:
            text = "".join(item for item in items if item is not None)
            return cls(len(items), text, re.compile(re.escape(text), re.DOTALL))
        source = "".join("." if item is None else re.escape(item) for item in items)
        return cls(len(items), None, re.compile(source, re.DOTALL))

    def at(self, text: str, position: int) -> bool:
        if self.literal is not None:
            return text.startswith(self.literal, position)
        return self.regex.match(text, position) is not None

    def find(self, text: str, start: int, end: int) -> int:
        """Where this segment first matches in text[start:end], or -1."""
        if self.literal is not None:
            return text.find(self.literal, start, end)
        found = self.regex.search(text, start, end)
        return -1 if found is None else found.start()


@dataclass(frozen=True, slots=True)
class LikeMatcher:
    """A compiled pattern: call it with a string."""

    pattern: str
    escape: str | None
    #: Segments between `%`s; one segment when the pattern has no `%`.
    _segments: tuple[_Segment, ...] = field(repr=False, compare=False)
    _minimum_length: int = field(repr=False, compare=False)

    def __call__(self, text: str) -> bool:
        segments = self._segments
        if len(segments) == 1:
            only = segments[0]
            return len(text) == only.length and only.at(text, 0)
        if len(text) < self._minimum_length:
            return False
        first, last = segments[0], segments[-1]
        end = len(text) - last.length
        if not (first.at(text, 0) and last.at(text, end)):
            return False
        position = first.length
        for segment in segments[1:-1]:
            found = segment.find(text, position, end)
            if found < 0:
                return False
            position = found + segment.length
        return True


def compile_like(pattern: str, escape: str | None = None) -> LikeMatcher:
    """Raises LikePatternError when `pattern` ends with `escape`."""
    segments: list[list[str | None]] = [[]]
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == escape:
            if i + 1 == len(pattern):
                raise LikePatternError(i)
            segments[-1].append(pattern[i + 1])
            i += 2
            continue
        if char == "%":
            segments.append([])
        else:
            segments[-1].append(None if char == "_" else char)
        i += 1
    compiled = tuple(_Segment.of(items) for items in segments)
    if len(compiled) > 2:
        # Empty middle segments (from `%%`) match anywhere: drop them.
        middle = tuple(segment for segment in compiled[1:-1] if segment.length)
        compiled = (compiled[0], *middle, compiled[-1])
    return LikeMatcher(pattern, escape, compiled, sum(segment.length for segment in compiled))
