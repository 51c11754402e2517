"""RabbitMQ's permissions: per user and virtual host, three regular expressions saying which
resources (exchanges and queues, by name) the user may configure, write to and read from; the
pure check of one request against them.

RabbitMQ's access control guide: "RabbitMQ distinguishes between configure, write and read
operations on a resource. The configure operations create or destroy resources, or alter their
behaviour. The write operations inject messages into a resource. And the read operations
retrieve messages from a resource." A user with no permissions on a virtual host may not even
connect to it ("When an AMQP 0-9-1 client establishes a connection to a RabbitMQ server, it
specifies a virtual host within which it intends to operate. A first level of access control
is enforced at this point").

How a pattern matches, as RabbitMQ's internal authorisation backend
(rabbit_auth_backend_internal) has it: the pattern is searched for anywhere in the resource's
name (`re:run(Name, Regexp)`, not anchored: `^` and `$` say where it must start and end), and
an empty pattern is "^$", which no resource name matches. The default exchange is checked under
the name "amq.default" (rabbit_access_control), as in the ACL.

Cheap on the hot path: each grant compiles its patterns once, and remembers the answer for each
(permission, resource name) it was asked about, up to `DECIDED_PER_GRANT` of them (clients that
make a fresh name per queue must not grow it without end). `generation` changes with every
change of the table, so that a channel that cached "may publish to X" (as RabbitMQ's channels
do) knows its cache is stale.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

#: The patterns of a grant of everything (RabbitMQ's `set_permissions USER ".*" ".*" ".*"`).
EVERYTHING: Final = ".*"
#: Answers a grant remembers before it forgets them all and starts again.
DECIDED_PER_GRANT: Final = 4096


#: RabbitMQ's default user, who may do everything in the default virtual host of a new store.
DEFAULT_USER: Final = "guest"


def default_grants(vhost: str, users: Iterable[str]) -> list[UserPermission]:
    """What the default virtual host `vhost` starts with when it is created in a store whose
    users are `users`: RabbitMQ's default user gets "full access to the / virtual host" (access
    control guide, Default Virtual Host and User), if the store has it."""
    return [UserPermission.full(DEFAULT_USER, vhost)] if DEFAULT_USER in users else []


class Permission(enum.StrEnum):
    CONFIGURE = "configure"
    WRITE = "write"
    READ = "read"


class ResourceKind(enum.StrEnum):
    EXCHANGE = "exchange"
    QUEUE = "queue"


class InvalidPattern(ValueError):
    """A permission's pattern is not a regular expression; the text names it and says why."""


@dataclass(frozen=True, slots=True)
class UserPermission:
    """What `user` may do in `vhost`: RabbitMQ's permission record (its JSON fields)."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str

    @classmethod
    def full(cls, user: str, vhost: str) -> UserPermission:
        return cls(user, vhost, EVERYTHING, EVERYTHING, EVERYTHING)

    def pattern(self, permission: Permission) -> str:
        return str(getattr(self, permission.value))


def compile_pattern(permission: Permission, pattern: str) -> re.Pattern[str]:
    """The pattern as it is searched for ("" as "^$": nothing matches); InvalidPattern when it
    is not a regular expression."""
    try:
        return re.compile(pattern or "^$")
    except re.error as error:
        raise InvalidPattern(f"{permission.value} pattern {pattern!r}: {error}") from None


@dataclass(slots=True)
class Grant:
    """One record with its patterns compiled, and the answers it has given."""

    record: UserPermission
    patterns: dict[Permission, re.Pattern[str]] = field(init=False)
    decided: dict[tuple[Permission, str], bool] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.patterns = {
            permission: compile_pattern(permission, self.record.pattern(permission))
            for permission in Permission
        }

    def allows(self, permission: Permission, name: str) -> bool:
        key = (permission, name)
        answer = self.decided.get(key)
        if answer is None:
            answer = self.patterns[permission].search(name) is not None
            if len(self.decided) >= DECIDED_PER_GRANT:
                self.decided.clear()
            self.decided[key] = answer
        return answer


def validate(record: UserPermission) -> None:
    """InvalidPattern unless every pattern of `record` compiles (the edge's check)."""
    Grant(record)


class Permissions:
    """Every user's permissions in every virtual host, in memory (the store's copy)."""

    __slots__ = ("_grants", "generation")

    def __init__(self, records: list[UserPermission] | None = None) -> None:
        self._grants: dict[tuple[str, str], Grant] = {}
        self.generation = 0
        self.replace(records or [])

    def replace(self, records: list[UserPermission]) -> None:
        self._grants = {(record.user, record.vhost): Grant(record) for record in records}
        self.generation += 1

    def set(self, record: UserPermission) -> None:
        self._grants[record.user, record.vhost] = Grant(record)
        self.generation += 1

    def clear(self, user: str, vhost: str) -> bool:
        """Forget `user`'s permissions in `vhost`; whether it had any."""
        self.generation += 1
        return self._grants.pop((user, vhost), None) is not None

    def clear_user(self, user: str) -> None:
        for key in [key for key in self._grants if key[0] == user]:
            del self._grants[key]
        self.generation += 1

    def clear_vhost(self, vhost: str) -> None:
        for key in [key for key in self._grants if key[1] == vhost]:
            del self._grants[key]
        self.generation += 1

    def get(self, user: str, vhost: str) -> UserPermission | None:
        grant = self._grants.get((user, vhost))
        return None if grant is None else grant.record

    def records(self) -> list[UserPermission]:
        """Every record, by user then virtual host."""
        return [self._grants[key].record for key in sorted(self._grants)]

    def may_access(self, user: str, vhost: str) -> bool:
        """Whether `user` may open a connection to `vhost`: it has permissions there."""
        return (user, vhost) in self._grants

    def allows(
        self, user: str, vhost: str, permission: Permission, kind: ResourceKind, name: str
    ) -> bool:
        grant = self._grants.get((user, vhost))
        if grant is None:
            return False
        return grant.allows(permission, resource_name(kind, name))

    def refusal(
        self, user: str, vhost: str, permission: Permission, kind: ResourceKind, name: str
    ) -> str | None:
        """None when allowed; else RabbitMQ's text: "configure access to queue 'q' in vhost
        '/' refused for user 'bob'"."""
        if self.allows(user, vhost, permission, kind, name):
            return None
        return resource_refusal(user, vhost, permission, kind, name)


class PermitCache:
    """The resources one channel was found allowed to use with one permission, while the table
    does not change: RabbitMQ's channel remembers the exchanges it may write to, so that a
    publish pays a set lookup, not a match."""

    __slots__ = ("generation", "names")

    def __init__(self) -> None:
        #: The names found allowed while the table had this generation (public, so that the
        #: publish path can test them inline: `permits.generation == table.generation and
        #: name in permits.names` is all a publish to a known exchange costs).
        self.names: set[str] = set()
        self.generation = -1

    def refusal(
        self,
        permissions: Permissions,
        user: str,
        vhost: str,
        permission: Permission,
        kind: ResourceKind,
        name: str,
    ) -> str | None:
        if self.generation != permissions.generation:
            self.names.clear()
            self.generation = permissions.generation
        if name in self.names:
            return None
        refusal = permissions.refusal(user, vhost, permission, kind, name)
        if refusal is None:
            self.names.add(name)
        return refusal


def resource_name(kind: ResourceKind, name: str) -> str:
    """The name a resource is checked under: the default exchange as "amq.default"."""
    return "amq.default" if kind is ResourceKind.EXCHANGE and not name else name


def resource_refusal(
    user: str, vhost: str, permission: Permission, kind: ResourceKind, name: str
) -> str:
    """rabbit_access_control: "~s access to ~ts refused for user '~ts'" with the resource as
    rabbit_misc:rs prints it ("queue 'q' in vhost '/'")."""
    resource = f"{kind.value} '{resource_name(kind, name)}' in vhost '{vhost}'"
    return f"{permission.value} access to {resource} refused for user '{user}'"


def vhost_refusal(user: str, vhost: str) -> str:
    """rabbit_access_control:check_vhost_access: "access to vhost '~ts' refused for user
    '~ts'", with what an operator runs to grant access."""
    return (
        f"access to vhost '{vhost}' refused for user '{user}': it has no permissions there "
        f"(batonctl permissions set {user} '.*' '.*' '.*' --vhost {vhost})"
    )
