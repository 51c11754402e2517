"""ACL text (Qpid manual §2.2.3) on arbitrary input, and rule sets written out in many layouts.

Any text either parses or is an AclSyntaxError placed inside the text; generated rules and groups,
written with random keyword case, quoting, blanks, comments, continuation lines and line ends,
parse back to themselves on the lines they start on.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from batonmq.security.acl import (
    AclGroup,
    AclRule,
    AclRules,
    AclSyntaxError,
    Action,
    ObjectType,
    Permission,
    Property,
    wildcard_matches,
)
from batonmq.security.acl_parser import parse_acl

#: Words of ACL files, and the characters that mean something in them.
WORDS = [
    "ACL", "GROUP", "allow", "DENY-LOG", "ALL", "all", "bob", "g", "PUBLISH", "QUEUE", "name",
    "durable", "true", "amq.*", '"x y"', "=", '"', "'", "#", "\\", "\t", "\r", "\x00",
]  # fmt: skip
#: Lines that mostly start like a statement, so that text gets past the first word.
acl_like_lines = st.tuples(
    st.sampled_from(["ACL", "acl ALLOW", "ACL DENY bob", "GROUP", "GROUP g", ""]),
    st.lists(st.sampled_from(WORDS), max_size=8),
).map(lambda line: " ".join([line[0], *line[1]]))
acl_like_text = st.lists(acl_like_lines, max_size=6).map("\n".join)
spliced_text = st.lists(st.sampled_from([*WORDS, " ", "\n"]) | st.text(max_size=2)).map("".join)


def parse_or_error(text: str) -> AclRules | AclSyntaxError:
    """The parsed text, or its syntax error; any other exception fails the test."""
    try:
        return parse_acl(text)
    except AclSyntaxError as error:
        return error


@settings(max_examples=1000, deadline=None)
@given(text=st.text() | acl_like_text | spliced_text)
def test_any_text_parses_or_is_a_syntax_error_placed_in_it(text: str):
    physical_lines = text.split("\n")
    outcome = parse_or_error(text)
    if isinstance(outcome, AclSyntaxError):
        assert 1 <= outcome.line <= len(physical_lines)
        assert 1 <= outcome.column <= len(physical_lines[outcome.line - 1]) + 1
        assert outcome.message
    else:
        assert all(1 <= rule.line <= len(physical_lines) for rule in outcome.rules)


def reference_wildcard(pattern: str, value: str) -> bool:
    regex = ".*".join(re.escape(piece) for piece in pattern.split("*"))
    return re.fullmatch(regex, value, re.DOTALL) is not None


@settings(max_examples=1000, deadline=None)
@given(pattern=st.text("ab*", max_size=8), value=st.text("ab", max_size=8))
def test_wildcards_match_as_the_regular_expression_would(pattern: str, value: str):
    assert wildcard_matches(pattern, value) is reference_wildcard(pattern, value)


# --- round trip ----------------------------------------------------------------------------------

#: Characters that need quotes around a name or value (blanks, `=`, `#`, `\` and quotes).
NEEDS_QUOTES = frozenset(" =#\\'\"")
name_chars = st.characters(categories=("L", "N")) | st.sampled_from("_-.@:*/$ =#\\'\"")
names = st.text(name_chars, min_size=1, max_size=8).filter(
    lambda text: (
        not (text.isascii() and text.upper() == "ALL") and not ('"' in text and "'" in text)
    )
)
#: Between tokens: blanks, or a line break with or without a comment after the slash.
SEPARATORS = [" ", "  ", "\t", " \\\n", "\\\n  ", " \\ # continued = \\ \n\t"]
#: Lines before a statement: nothing, blank, comments (a slash in a comment is no continuation).
PREFIXES = ["", "\n", "# a comment\n", "  \t\n", '   # ACL ALLOW x = "y" \\\n']


def render_keyword(draw: st.DrawFn, keyword: str) -> str:
    spelled = draw(st.sampled_from([str.upper, str.lower, str.title]))(keyword)
    return f'"{spelled}"' if draw(st.integers(0, 9)) == 0 else spelled


def render_text(draw: st.DrawFn, text: str) -> str:
    if not NEEDS_QUOTES.intersection(text) and not draw(st.booleans()):
        return text
    quote = "'" if '"' in text else '"'
    return f"{quote}{text}{quote}"


def render_rule(draw: st.DrawFn, rule: AclRule) -> list[str]:
    tokens = [render_keyword(draw, "ACL"), render_keyword(draw, rule.permission.value)]
    if rule.subject is None:
        tokens.append(render_keyword(draw, "ALL"))
    else:
        tokens.append(render_text(draw, rule.subject))
    tokens.append(render_keyword(draw, rule.action.value if rule.action else "ALL"))
    if rule.object_type is not None:
        tokens.append(render_keyword(draw, rule.object_type.value))
    elif rule.properties or draw(st.booleans()):
        tokens.append(render_keyword(draw, "ALL"))
    for prop, value in rule.properties:
        written = render_keyword(draw, value) if prop.is_boolean else render_text(draw, value)
        around_equals = draw(st.sampled_from(["", *SEPARATORS]))
        tokens.append(f"{render_keyword(draw, prop.value)}{around_equals}={around_equals}{written}")
    return tokens


def render_group(draw: st.DrawFn, group: AclGroup) -> list[str]:
    tokens = [render_keyword(draw, "GROUP"), render_text(draw, group.name)]
    return tokens + [render_text(draw, member) for member in group.members]


@st.composite
def rule_values(draw: st.DrawFn, subjects: list[str]) -> AclRule:
    properties = draw(st.lists(st.sampled_from(Property), unique=True, max_size=3))
    return AclRule(
        permission=draw(st.sampled_from(Permission)),
        subject=draw(st.none() | st.sampled_from(subjects) | names),
        action=draw(st.none() | st.sampled_from(Action)),
        object_type=draw(st.none() | st.sampled_from(ObjectType)),
        properties=tuple(
            (prop, draw(st.sampled_from(["true", "false"]) if prop.is_boolean else names))
            for prop in properties
        ),
        line=0,
    )


def expand(groups: Mapping[str, AclGroup], name: str) -> frozenset[str]:
    users: set[str] = set()
    for member in groups[name].members:
        users |= expand(groups, member) if member in groups else {member}
    return frozenset(users)


@st.composite
def acl_files(draw: st.DrawFn) -> tuple[str, list[AclRule], list[AclGroup]]:
    """A file's text and the rules and groups it must parse to. Group i may contain users and
    groups after it in the list, so groups nest, are used before their definition, and never
    contain themselves."""
    group_names = draw(st.lists(names, unique=True, max_size=4))
    users = draw(st.lists(names.filter(lambda name: name not in group_names), min_size=1))
    groups = [
        AclGroup(
            name=name,
            members=tuple(
                draw(st.lists(st.sampled_from(users + group_names[index + 1 :]), min_size=1))
            ),
            line=0,
        )
        for index, name in enumerate(group_names)
    ]
    rules = draw(st.lists(rule_values(users + group_names), max_size=6))
    statements: list[AclRule | AclGroup] = draw(st.permutations([*groups, *rules]))
    text = ""
    placed: list[AclRule | AclGroup] = []
    for statement in statements:
        text += draw(st.sampled_from(PREFIXES))
        line = text.count("\n") + 1
        if isinstance(statement, AclRule):
            tokens = render_rule(draw, statement)
        else:
            tokens = render_group(draw, statement)
        for token in tokens[:-1]:
            text += token + draw(st.sampled_from(SEPARATORS))
        text += tokens[-1] + draw(st.sampled_from(["", " # trailing comment", "\t#"])) + "\n"
        placed.append(dataclasses.replace(statement, line=line))
    text = text.replace("\n", draw(st.sampled_from(["\n", "\r\n"])))
    return (
        text,
        [statement for statement in placed if isinstance(statement, AclRule)],
        [statement for statement in placed if isinstance(statement, AclGroup)],
    )


@settings(max_examples=500, deadline=None)
@given(acl_file=acl_files())
def test_written_rules_parse_back_to_themselves(
    acl_file: tuple[str, list[AclRule], list[AclGroup]],
):
    text, rules, groups = acl_file
    parsed = parse_acl(text)
    assert list(parsed.rules) == rules
    assert list(parsed.groups) == groups
    by_name = {group.name: group for group in groups}
    assert parsed.users_by_group == {name: expand(by_name, name) for name in by_name}
