"""The text of a Qpid ACL file into `AclRules`, every mistake an `AclSyntaxError` with its place.

The syntax is Qpid manual §2.2.3:

    ACL {permission} {<group-name>|<user-name>|ALL} {action|ALL} [object|ALL]
    GROUP {group name} {username 1}..{username n}

and then `property=value` pairs after the object (§2.2.2: `ACL DENY bob CREATE QUEUE
name="myqueue"`), as in the Qpid Java broker, where the properties need the object before them.

- "Comments may be introduced with the hash (#) character and are ignored": a `#` outside quotes
  starts a comment to the end of the physical line, at its start or after a rule (the seed's own
  example: `ACL ALLOW admin CREATE ALL # Also a comment`).
- "Long lines can be broken with the slash (\\) character": a `\\` followed on its physical line
  by nothing but blanks or a comment joins the next physical line to this one. Anywhere else it
  is an error. A rule's line is the physical line it starts on; an error's line is the physical
  line of the token at fault.
- Keywords (ACL, GROUP, permissions, actions, objects, ALL, property names) are matched in any
  ASCII case, as Qpid does (the seed writes `routingKey` for Table 2.5's `routingkey`); user,
  group and object names are kept as written. ALL in the subject means every user, in any case,
  so no user or group called "all" can be named, and a GROUP may not use it.
- A value or name may be quoted with `"` or `'` (Qpid accepts both) to hold blanks, `=` or `#`;
  quotes do not change what a token means. A quote ends on the same physical line.
- Groups may contain groups, defined before or after them, as deep as wanted; a group that
  contains itself, directly or through others, is an error. A group may be defined only once.
- A rule may give a property once; a Boolean property (Table 2.5) takes true or false.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple, TypeVar

from batonmq.security.acl import (
    AclFileError,
    AclGroup,
    AclRule,
    AclRules,
    AclSyntaxError,
    Action,
    ObjectType,
    Permission,
    Property,
)

_ALL: Final = "ALL"
_CONTINUATION: Final = "\\"
_COMMENT: Final = "#"
_EQUALS: Final = "="
_QUOTES: Final = frozenset("\"'")
_SPECIAL: Final = frozenset({_CONTINUATION, _COMMENT, _EQUALS}) | _QUOTES
_BOOLEANS: Final = frozenset({"true", "false"})

_T = TypeVar("_T")

_PERMISSIONS: Final[Mapping[str, Permission]] = {p.value: p for p in Permission}
_ACTIONS: Final[Mapping[str, Action | None]] = {a.value: a for a in Action} | {_ALL: None}
_OBJECT_TYPES: Final[Mapping[str, ObjectType | None]] = {o.value: o for o in ObjectType} | {
    _ALL: None
}
_PROPERTIES: Final[Mapping[str, Property]] = {p.value.upper(): p for p in Property}


class _Kind(enum.Enum):
    WORD = enum.auto()
    QUOTED = enum.auto()
    EQUALS = enum.auto()


class _Token(NamedTuple):
    kind: _Kind
    #: The word, the quoted text without its quotes, or "=".
    text: str
    line: int
    column: int
    #: The column just past the token, where a missing next token is reported.
    end_column: int


def _keyword_key(text: str) -> str:
    """`text` upper-cased for comparing with keywords, in ASCII only (so that, say, a long s
    does not spell ACCESS)."""
    return text.upper() if text.isascii() else text


def _is_word_char(char: str) -> bool:
    return char.isprintable() and not char.isspace() and char not in _SPECIAL


def _tokenize_line(text: str, line: int, path: str | None, tokens: list[_Token]) -> bool:
    """Append the tokens of one physical line; True when it ends in a continuation."""
    index = 0
    while index < len(text):
        char = text[index]
        column = index + 1
        if char.isspace():
            index += 1
        elif char == _COMMENT:
            return False
        elif char == _CONTINUATION:
            rest = text[index + 1 :].strip()
            if rest and not rest.startswith(_COMMENT):
                raise AclSyntaxError(
                    "'\\' breaks a line only at its end (a comment may follow it)",
                    line,
                    column,
                    path,
                )
            return True
        elif char == _EQUALS:
            tokens.append(_Token(_Kind.EQUALS, char, line, column, column + 1))
            index += 1
        elif char in _QUOTES:
            close = text.find(char, index + 1)
            if close < 0:
                raise AclSyntaxError(f"quote {char} is not closed on its line", line, column, path)
            tokens.append(_Token(_Kind.QUOTED, text[index + 1 : close], line, column, close + 2))
            index = close + 1
        elif _is_word_char(char):
            start = index
            while index < len(text) and _is_word_char(text[index]):
                index += 1
            tokens.append(_Token(_Kind.WORD, text[start:index], line, column, index + 1))
        else:
            raise AclSyntaxError(f"unexpected character U+{ord(char):04X}", line, column, path)
    return False


def _logical_lines(text: str, path: str | None) -> Iterator[list[_Token]]:
    """The tokens of each rule or group definition, continuation lines joined; blank and
    comment-only lines give none."""
    tokens: list[_Token] = []
    for line, physical in enumerate(text.split("\n"), start=1):
        continues = _tokenize_line(physical.removesuffix("\r"), line, path, tokens)
        if tokens and not continues:
            yield tokens
            tokens = []
    if tokens:
        yield tokens


@dataclass(slots=True)
class _Cursor:
    """Reads the tokens of one logical line left to right."""

    tokens: list[_Token]
    path: str | None
    index: int = 0

    def error(self, message: str, token: _Token) -> AclSyntaxError:
        return AclSyntaxError(message, token.line, token.column, self.path)

    def at_end(self) -> bool:
        return self.index == len(self.tokens)

    def take(self, expected: str) -> _Token:
        """The next token; at the end, an error that `expected` is missing, placed just past
        the last token."""
        if self.at_end():
            last = self.tokens[-1]
            raise AclSyntaxError(f"expected {expected}", last.line, last.end_column, self.path)
        token = self.tokens[self.index]
        self.index += 1
        return token

    def take_text(self, expected: str) -> _Token:
        """The next token, which must be a word or quoted text, and not empty."""
        token = self.take(expected)
        if token.kind is _Kind.EQUALS:
            raise self.error(f"expected {expected}, found '='", token)
        if not token.text:
            raise self.error(f"expected {expected}, found empty quotes", token)
        return token

    def take_keyword(self, expected: str, choices: Mapping[str, _T], what: str) -> _T:
        return self.keyword(self.take_text(expected), choices, what)

    def keyword(self, token: _Token, choices: Mapping[str, _T], what: str) -> _T:
        """What `token` names among `choices` (upper-case keys), or an error."""
        key = _keyword_key(token.text)
        if key not in choices:
            raise self.error(f"unknown {what} {token.text!r}", token)
        return choices[key]

    def take_name(self, expected: str) -> _Token:
        """A group name or member: anything but the reserved ALL."""
        token = self.take_text(expected)
        if _keyword_key(token.text) == _ALL:
            raise self.error("ALL means every user; it cannot name a group or a member", token)
        return token


def _parse_rule(cursor: _Cursor, line: int) -> AclRule:
    permission = cursor.take_keyword(
        "a permission (ALLOW, ALLOW-LOG, DENY or DENY-LOG)", _PERMISSIONS, "permission"
    )
    subject = cursor.take_text("a user or group name, or ALL").text
    action = cursor.take_keyword("an action, or ALL", _ACTIONS, "action")
    object_type = None
    if not cursor.at_end():
        object_type = cursor.take_keyword("an object type, or ALL", _OBJECT_TYPES, "object type")
    return AclRule(
        permission=permission,
        subject=None if _keyword_key(subject) == _ALL else subject,
        action=action,
        object_type=object_type,
        properties=_parse_properties(cursor),
        line=line,
    )


def _parse_properties(cursor: _Cursor) -> tuple[tuple[Property, str], ...]:
    values: dict[Property, str] = {}
    while not cursor.at_end():
        name = cursor.take_text("a property name")
        prop = cursor.keyword(name, _PROPERTIES, "property")
        if prop in values:
            raise cursor.error(f"property {name.text!r} is given twice", name)
        equals = cursor.take(f"'=' after property {name.text!r}")
        if equals.kind is not _Kind.EQUALS:
            raise cursor.error(f"expected '=' after property {name.text!r}", equals)
        value = cursor.take_text(f"a value for property {name.text!r}")
        if not prop.is_boolean:
            values[prop] = value.text
        elif value.text.lower() in _BOOLEANS:
            values[prop] = value.text.lower()
        else:
            raise cursor.error(
                f"property {name.text!r} is true or false, not {value.text!r}", value
            )
    return tuple(values.items())


class _GroupDefinition(NamedTuple):
    name: _Token
    members: tuple[_Token, ...]
    #: The physical line the definition starts on.
    line: int


def _parse_group(cursor: _Cursor, line: int) -> _GroupDefinition:
    name = cursor.take_name("a group name")
    members = [cursor.take_name("at least one member")]
    while not cursor.at_end():
        members.append(cursor.take_name("a member"))
    return _GroupDefinition(name, tuple(members), line)


def _expand_groups(
    definitions: Mapping[str, _GroupDefinition], path: str | None
) -> dict[str, frozenset[str]]:
    """Each group's users, nested groups expanded depth first without recursion (so a long chain
    of groups is no RecursionError); a group met again while it is being expanded is a cycle."""
    users_by_group: dict[str, frozenset[str]] = {}
    for root in definitions.values():
        if root.name.text in users_by_group:
            continue
        stack = [(root, iter(root.members))]
        expanding = {root.name.text}
        while stack:
            group, members = stack[-1]
            member = next(members, None)
            if member is None:
                stack.pop()
                expanding.discard(group.name.text)
                users: set[str] = set()
                for each in group.members:
                    nested_users = users_by_group.get(each.text)
                    if nested_users is None:
                        users.add(each.text)
                    else:
                        users |= nested_users
                users_by_group[group.name.text] = frozenset(users)
                continue
            nested = definitions.get(member.text)
            if nested is None or member.text in users_by_group:
                continue
            if member.text in expanding:
                trail = [entry.name.text for entry, _ in stack]
                cycle = " -> ".join([*trail[trail.index(member.text) :], member.text])
                raise AclSyntaxError(
                    f"group {member.text!r} contains itself: {cycle}",
                    member.line,
                    member.column,
                    path,
                )
            stack.append((nested, iter(nested.members)))
            expanding.add(member.text)
    return users_by_group


def parse_acl(text: str, path: str | None = None) -> AclRules:
    """The rules and groups of ACL `text`; `path` only names the file in errors."""
    rules: list[AclRule] = []
    definitions: dict[str, _GroupDefinition] = {}
    for tokens in _logical_lines(text, path):
        cursor = _Cursor(tokens, path)
        keyword = cursor.take("ACL or GROUP")
        match _keyword_key(keyword.text):
            case "ACL":
                rules.append(_parse_rule(cursor, keyword.line))
            case "GROUP":
                group = _parse_group(cursor, keyword.line)
                earlier = definitions.get(group.name.text)
                if earlier is not None:
                    raise cursor.error(
                        f"group {group.name.text!r} is already defined on line {earlier.line}",
                        group.name,
                    )
                definitions[group.name.text] = group
            case _:
                raise cursor.error(
                    f"unknown keyword {keyword.text!r}: a line starts with ACL or GROUP", keyword
                )
    return AclRules(
        rules=tuple(rules),
        groups=tuple(
            AclGroup(
                name=group.name.text,
                members=tuple(member.text for member in group.members),
                line=group.line,
            )
            for group in definitions.values()
        ),
        users_by_group=_expand_groups(definitions, path),
    )


def load_acl_file(path: str | os.PathLike[str]) -> AclRules:
    """Read and parse an ACL file (UTF-8; a leading byte order mark is ignored)."""
    name = os.fspath(path)
    try:
        data = Path(name).read_bytes()
    except OSError as error:
        raise AclFileError(name, error.strerror or str(error)) from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        raise AclSyntaxError(
            "the file is not UTF-8 text",
            data.count(b"\n", 0, error.start) + 1,
            len(data[line_start : error.start].decode("utf-8")) + 1,
            name,
        ) from error
    return parse_acl(text.removeprefix("\ufeff"), name)
