"""Access control lists as Qpid writes them, and the pure check of one request against them.

Qpid manual §2.2 "Configuring ACLs": "Each ACL rule grants (or denies) a particular action on a
object to a user. The rule may be augmented with one or more properties, restricting the rule's
applicability." and "The ACL is considered in strict line order with the first matching rule
taking precedence over all those that follow." and "All ACL files end with a implict rule denying
all operations to all users. It is as if each file ends with ACL DENY ALL ALL".

A rule matches a request when all of these hold:

- its subject is ALL, or the user's name, or a group the user belongs to, directly or through
  groups nested in it;
- its action is ALL or the request's action;
- its object type is ALL (written, or left out) or the request's object type;
- every property it gives is present in the request and matches the request's value there.

A rule property the request does not carry does not match: properties only ever *restrict* a
rule ("restricting the rule's applicability"), so `ACL ALLOW bob CREATE QUEUE name="q"` must not
allow a request that says nothing about the name. This is also what the Qpid Java broker does
(the request's properties must contain all of the rule's). A boolean property (Table 2.5 says
"Boolean." for durable, passive, autodelete, exclusive and temporary) matches when the request
says the same of true or false, in any case; any other property's value may use `*` for any run
of characters, and is otherwise compared exactly.

The text of an ACL file becomes these objects in `batonmq.security.acl_parser`; here there is
no IO, so the engine can ask "may alice bind?" synchronously, once per method.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


class AclError(Exception):
    """An ACL that cannot be used: the broker refuses to start rather than guess."""


class AclSyntaxError(AclError, ValueError):
    """ACL text that does not parse. `line` and `column` are 1-based and point at the physical
    line and character where the offending token starts (just past the last token when one is
    missing); `path` is the file's name when the text came from one."""

    def __init__(self, message: str, line: int, column: int, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.path = path

    def __str__(self) -> str:
        return f"{self.path or '<acl>'}:{self.line}:{self.column}: {self.message}"

    def __reduce__(self) -> tuple[type[AclSyntaxError], tuple[str, int, int, str | None]]:
        return (type(self), (self.message, self.line, self.column, self.path))


class AclFileError(AclError):
    """An ACL file that cannot be read at all (missing, unreadable)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot read ACL file {path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[AclFileError], tuple[str, str]]:
        return (type(self), (self.path, self.reason))


class Permission(enum.Enum):
    """Table 2.2, "ACL Rules: permission"; the value is the keyword as written."""

    ALLOW = "ALLOW"
    ALLOW_LOG = "ALLOW-LOG"
    DENY = "DENY"
    DENY_LOG = "DENY-LOG"

    @property
    def allows(self) -> bool:
        return self in (Permission.ALLOW, Permission.ALLOW_LOG)

    @property
    def logs(self) -> bool:
        """ "… and log the action in the log" (Table 2.2)."""
        return self in (Permission.ALLOW_LOG, Permission.DENY_LOG)


class Action(enum.Enum):
    """Table 2.3, "ACL Rules:action". A rule's ALL is None in `AclRule.action`, so a request
    cannot ask about "all actions"."""

    CONSUME = "CONSUME"
    PUBLISH = "PUBLISH"
    CREATE = "CREATE"
    ACCESS = "ACCESS"
    BIND = "BIND"
    UNBIND = "UNBIND"
    DELETE = "DELETE"
    PURGE = "PURGE"
    UPDATE = "UPDATE"


class ObjectType(enum.Enum):
    """Table 2.4, "ACL Rules:object". LINK ("A federation or inter-broker link") parses, so a Qpid
    ACL file loads unchanged, but BatonMQ has no links to ask about."""

    VIRTUALHOST = "VIRTUALHOST"
    QUEUE = "QUEUE"
    EXCHANGE = "EXCHANGE"
    METHOD = "METHOD"
    BROKER = "BROKER"
    LINK = "LINK"


class Property(enum.Enum):
    """Table 2.5, "ACL Rules:property"; the value is the name as the table writes it (the parser
    accepts any case: the seed's own worked example 3 writes `routingKey`)."""

    NAME = "name"
    DURABLE = "durable"
    ROUTING_KEY = "routingkey"
    PASSIVE = "passive"
    AUTO_DELETE = "autodelete"
    EXCLUSIVE = "exclusive"
    TEMPORARY = "temporary"
    TYPE = "type"
    ALTERNATE = "alternate"
    QUEUE_NAME = "queuename"
    COMPONENT = "component"
    SCHEMA_PACKAGE = "schemapackage"
    SCHEMA_CLASS = "schemaclass"

    @property
    def is_boolean(self) -> bool:
        return self in BOOLEAN_PROPERTIES


#: The properties Table 2.5 types "Boolean."; all others are "String.".
BOOLEAN_PROPERTIES: Final = frozenset(
    {
        Property.DURABLE,
        Property.PASSIVE,
        Property.AUTO_DELETE,
        Property.EXCLUSIVE,
        Property.TEMPORARY,
    }
)
WILDCARD: Final = "*"


def wildcard_matches(pattern: str, value: str) -> bool:
    """Whether `value` is `pattern` with each `*` replaced by some run of characters (maybe none).

    Split at `*`: the first piece must start the value, the last end it, and each middle piece
    is found leftmost after the one before, which finds a match whenever there is one.
    """
    if WILDCARD not in pattern:
        return pattern == value
    first, *middle, last = pattern.split(WILDCARD)
    if len(value) < len(first) + len(last):
        return False
    if not (value.startswith(first) and value.endswith(last)):
        return False
    position, end = len(first), len(value) - len(last)
    for piece in middle:
        found = value.find(piece, position, end)
        if found < 0:
            return False
        position = found + len(piece)
    return True


@dataclass(frozen=True, slots=True)
class AclRule:
    """One `ACL` line. None stands for ALL in subject, action and object type (an absent object
    is ALL too). Boolean property values are kept as "true" or "false"."""

    permission: Permission
    subject: str | None
    action: Action | None
    object_type: ObjectType | None
    properties: tuple[tuple[Property, str], ...]
    #: The physical line the rule starts on (1-based), for audit lines and 403 texts.
    line: int

    def properties_match(self, request: Mapping[Property, str]) -> bool:
        for prop, expected in self.properties:
            actual = request.get(prop)
            if actual is None:
                return False
            if prop.is_boolean:
                if actual.lower() != expected:
                    return False
            elif not wildcard_matches(expected, actual):
                return False
        return True


@dataclass(frozen=True, slots=True)
class AclGroup:
    """One `GROUP` line, members as written (users, or names of other groups)."""

    name: str
    members: tuple[str, ...]
    line: int


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one request: allowed or not, whether to write an audit line (ALLOW-LOG,
    DENY-LOG), and the rule that decided, None for the implicit final `ACL DENY ALL ALL`."""

    allowed: bool
    log: bool
    rule: AclRule | None

    @property
    def line(self) -> int | None:
        return None if self.rule is None else self.rule.line


IMPLICIT_DENY: Final = Decision(allowed=False, log=False, rule=None)


@dataclass(frozen=True, slots=True)
class AclRules:
    """A parsed ACL file. `users_by_group` is each group's users with nested groups expanded
    (built by the parser, which has checked there is no cycle)."""

    rules: tuple[AclRule, ...]
    groups: tuple[AclGroup, ...]
    users_by_group: Mapping[str, frozenset[str]]

    def check(
        self,
        user: str,
        action: Action,
        object_type: ObjectType,
        properties: Mapping[Property, str],
    ) -> Decision:
        """The first rule, in file order, matching the request decides; none matching, denied."""
        for rule in self.rules:
            if (
                self._subject_matches(rule.subject, user)
                and rule.action in (None, action)
                and rule.object_type in (None, object_type)
                and rule.properties_match(properties)
            ):
                return Decision(allowed=rule.permission.allows, log=rule.permission.logs, rule=rule)
        return IMPLICIT_DENY

    def _subject_matches(self, subject: str | None, user: str) -> bool:
        return subject is None or subject == user or user in self.users_by_group.get(subject, ())
