"""Who may do what over the HTTP API: RabbitMQ's user tags, and HTTP basic authentication.

RabbitMQ's management reference, "Permissions": a user with no tag may not use the API;
`management` sees the virtual hosts it has permissions on and its own connections and
channels; `policymaker` as management (BatonMQ has no policies); `monitoring` sees every virtual
host and every connection and channel, and node-wide figures; `administrator` may do everything,
including users, virtual hosts and permissions, and close anyone's connection. What a user may
do to objects inside a virtual host is then decided by the same ACL as over AMQP.
"""

from __future__ import annotations

import base64
import binascii
import enum
from collections.abc import Collection, Iterable


class Tag(enum.StrEnum):
    ADMINISTRATOR = "administrator"
    MONITORING = "monitoring"
    POLICYMAKER = "policymaker"
    MANAGEMENT = "management"


def parse_tags(text: str) -> frozenset[str]:
    """Tags as RabbitMQ takes them: comma- or space-separated; unknown tags are kept (RabbitMQ
    keeps them too, and they grant nothing)."""
    return frozenset(tag for tag in text.replace(",", " ").split() if tag)


def may_use_api(tags: Collection[str]) -> bool:
    """RabbitMQ: "Not management user" unless one of the management tags is held."""
    return any(tag in Tag.__members__.values() for tag in tags)


def is_administrator(tags: Collection[str]) -> bool:
    return Tag.ADMINISTRATOR in tags


def sees_everything(tags: Collection[str]) -> bool:
    """Monitoring and administrator users see every virtual host, connection and channel."""
    return Tag.ADMINISTRATOR in tags or Tag.MONITORING in tags


def visible_vhosts(
    tags: Collection[str], permitted: Iterable[str], every: Iterable[str]
) -> set[str]:
    """The virtual hosts a user sees: every one, or those it has permissions on."""
    return set(every) if sees_everything(tags) else set(permitted) & set(every)


def may_see_connection(tags: Collection[str], user: str, owner: str) -> bool:
    return owner == user or sees_everything(tags)


def may_close_connection(tags: Collection[str], user: str, owner: str) -> bool:
    """Own connections, or anyone's for an administrator (monitoring may look, not close)."""
    return owner == user or is_administrator(tags)


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an `Authorization: Basic ...` header (RFC 7617); None when the header
    is missing or is not well-formed basic credentials."""
    if header is None:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None
