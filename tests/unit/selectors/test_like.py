"""LIKE patterns compiled to segment matchers: correct, and linear on patterns that would make a
backtracking regular expression crawl."""

from __future__ import annotations

import time

import pytest

from batonmq.selectors.like import LikePatternError, compile_like


@pytest.mark.parametrize(
    ("pattern", "escape", "matches", "does_not_match"),
    [
        ("abc", None, ["abc"], ["ab", "abcd", "ABC", ""]),
        ("a%", None, ["a", "abc", "a%"], ["", "ba"]),
        ("%a", None, ["a", "ba"], ["ab", ""]),
        ("%a%", None, ["a", "bab", "aaa"], ["", "bbb"]),
        ("a%b%c", None, ["abc", "aXbYc", "abbc", "acbc"], ["acb", "ab", "abcX"]),
        ("%%", None, ["", "x"], []),
        ("a%%b", None, ["ab", "axxb"], ["a", "ba"]),
        ("_", None, ["a", "%", "\n"], ["", "ab"]),
        ("_%_", None, ["ab", "abc"], ["a", ""]),
        ("%a_c%", None, ["abc", "xxabcxx", "aac"], ["ac", "abbc"]),
        ("%aa%aa%", None, ["aaaa", "aaXaa"], ["aaa", "aa"]),
        ("a\\%b", "\\", ["a%b"], ["axb", "a\\%b"]),
        ("a\\\\b", "\\", ["a\\b"], ["a\\\\b"]),
        ("\\a", "\\", ["a"], ["\\a"]),
        ("x%_", "%", ["x_"], ["xy", "x"]),
        ("[a-z]+", None, ["[a-z]+"], ["abc"]),
        ("$^.*?", None, ["$^.*?"], ["$^x"]),
    ],
)
def test_patterns(pattern, escape, matches, does_not_match):
    matcher = compile_like(pattern, escape)
    for text in matches:
        assert matcher(text), text
    for text in does_not_match:
        assert not matcher(text), text


def test_a_trailing_escape_is_an_error_naming_its_offset():
    with pytest.raises(LikePatternError) as caught:
        compile_like("ab!", "!")
    assert caught.value.offset == 2
    compile_like("ab!!", "!")


def test_matchers_compare_by_pattern_and_escape():
    first, second = compile_like("a%", None), compile_like("a%", None)
    assert first is not second
    assert first == second
    assert compile_like("a%", None) != compile_like("a%", "!")


@pytest.mark.timeout(10)
def test_many_wildcards_against_a_long_near_miss_is_fast():
    """`%a%a%...%b` as one backtracking regex is polynomial in the string length with the
    number of `%` as exponent; the segment matcher is linear."""
    matcher = compile_like("%a" * 30 + "%b")
    text = "a" * 20_000
    started = time.perf_counter()
    for _ in range(10):
        assert not matcher(text)
    assert time.perf_counter() - started < 1.0
    underscores = compile_like("%" + "_%" * 200 + "b")
    assert not underscores("a" * 5_000)
