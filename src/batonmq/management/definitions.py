"""Definitions: RabbitMQ's export and import of a broker's topology (GET and POST
/api/definitions), as a JSON document of users, virtual hosts, permissions, queues, exchanges
and bindings. Pure functions; no HTTP here.

Users are exported with their password hash, never a password, as RabbitMQ exports them; the
hash is BatonMQ's own (salted scrypt), so its `hashing_algorithm` says so ("batonmq_scrypt";
"batonmq_legacy_md5" for a user imported from a Qpid password file and not yet logged in
since). An import takes only those: RabbitMQ's SHA-256 hashes cannot be checked here, and a
user may instead carry its `password`. Permissions are RabbitMQ's (user, vhost, configure,
write, read); an import sets each one the document gives, as RabbitMQ's import does (its ACL
files are BatonMQ's own and stay out of the document).

Queues, exchanges and bindings are exported as RabbitMQ does: not the exclusive queues (they
end with their connection), not the default exchange nor the amq.* ones (every virtual host
has them), not the default exchange's implicit bindings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pamqp.common import FieldTable

from batonmq.engine.snapshots import BindingInfo, ExchangeInfo, QueueInfo, UserCredential
from batonmq.management import render
from batonmq.management.listing import Item, Json
from batonmq.management.render import field_table, table
from batonmq.security.permissions import InvalidPattern, UserPermission, validate

SCRYPT: Final = "batonmq_scrypt"
LEGACY_MD5: Final = "batonmq_legacy_md5"
#: How `batonmq.security.passwords.Credential.encode` marks a legacy MD5 credential.
_LEGACY_MD5_PREFIX: Final = "md5$"
_RESERVED_EXCHANGE_PREFIX: Final = "amq."
#: The fields of a queue and of an exchange in a definitions document: those of the management
#: API's listing (`render`) that describe the object rather than its state.
_QUEUE_FIELDS: Final = ("name", "vhost", "durable", "auto_delete", "arguments")
_EXCHANGE_FIELDS: Final = (
    "name",
    "vhost",
    "type",
    "durable",
    "auto_delete",
    "internal",
    "arguments",
)


def _fields(item: Item, names: Sequence[str]) -> Item:
    return {name: item[name] for name in names}


class InvalidDefinitions(ValueError):
    """A definitions document that cannot be imported; the text says why (a 400)."""


@dataclass(frozen=True, slots=True)
class UserDefinition:
    name: str
    tags: tuple[str, ...]
    #: An encoded credential (a password hash), or None when `password` is given.
    credential: str | None = None
    password: str | None = None


@dataclass(frozen=True, slots=True)
class QueueDefinition:
    vhost: str
    name: str
    durable: bool
    auto_delete: bool
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class Definitions:
    """What an import declares, in the order it declares it."""

    vhosts: list[str] = field(default_factory=list)
    users: list[UserDefinition] = field(default_factory=list)
    permissions: list[UserPermission] = field(default_factory=list)
    exchanges: list[ExchangeInfo] = field(default_factory=list)
    queues: list[QueueDefinition] = field(default_factory=list)
    bindings: list[BindingInfo] = field(default_factory=list)


# Export ----------------------------------------------------------------------------------------


def export(
    product_version: str,
    vhosts: Sequence[str],
    users: Sequence[UserCredential],
    permissions: Sequence[UserPermission],
    queues: Sequence[QueueInfo],
    exchanges: Sequence[ExchangeInfo],
    bindings: Sequence[BindingInfo],
) -> Item:
    exclusive = {(info.vhost, info.name) for info in queues if info.exclusive}
    return {
        "product_name": "BatonMQ",
        "product_version": product_version,
        "users": [
            {
                "name": user.name,
                "password_hash": user.credential,
                "hashing_algorithm": (
                    LEGACY_MD5 if user.credential.startswith(_LEGACY_MD5_PREFIX) else SCRYPT
                ),
                "tags": list(user.tags),
                "limits": {},
            }
            for user in users
        ],
        "vhosts": [{"name": name} for name in vhosts],
        "permissions": [render.permission(record) for record in permissions],
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [],
        "policies": [],
        "queues": [
            {
                "name": info.name,
                "vhost": info.vhost,
                "durable": info.durable,
                "auto_delete": info.auto_delete,
                "arguments": table(info.arguments),
            }
            for info in queues
            if not info.exclusive
        ],
        "exchanges": [
            {key: value for key, value in render.exchange(info).items() if key in _EXCHANGE_FIELDS}
            for info in exchanges
            if info.name and not info.name.startswith(_RESERVED_EXCHANGE_PREFIX)
        ],
        "bindings": [
            {
                "source": info.source,
                "vhost": info.vhost,
                "destination": info.destination,
                "destination_type": info.destination_type,
                "routing_key": info.routing_key,
                "arguments": table(info.arguments),
            }
            for info in bindings
            if info.source
            and not (
                info.destination_type == "queue" and (info.vhost, info.destination) in exclusive
            )
        ],
    }


# Import ----------------------------------------------------------------------------------------


def parse(document: Mapping[str, Json]) -> Definitions:
    """The document checked whole, before anything is declared: InvalidDefinitions if any
    part of it is not what RabbitMQ's export writes."""
    definitions = Definitions()
    for item in _objects(document, "vhosts"):
        definitions.vhosts.append(_text(item, "name", "vhosts"))
    for item in _objects(document, "users"):
        definitions.users.append(_user(item))
    for item in _objects(document, "permissions"):
        record = UserPermission(
            *(_text(item, key, "permissions") for key in ("user", "vhost")),
            *(_text(item, key, "permissions", "") for key in ("configure", "write", "read")),
        )
        try:
            validate(record)
        except InvalidPattern as error:
            raise InvalidDefinitions(f"permissions of user '{record.user}': {error}") from None
        definitions.permissions.append(record)
    for item in _objects(document, "exchanges"):
        definitions.exchanges.append(
            ExchangeInfo(
                _text(item, "vhost", "exchanges"),
                _text(item, "name", "exchanges"),
                _text(item, "type", "exchanges"),
                _flag(item, "durable", True),
                _flag(item, "auto_delete", False),
                _flag(item, "internal", False),
                _arguments(item),
            )
        )
    for item in _objects(document, "queues"):
        definitions.queues.append(
            QueueDefinition(
                _text(item, "vhost", "queues"),
                _text(item, "name", "queues"),
                _flag(item, "durable", True),
                _flag(item, "auto_delete", False),
                _arguments(item),
            )
        )
    for item in _objects(document, "bindings"):
        kind = _text(item, "destination_type", "bindings")
        if kind not in ("queue", "exchange"):
            raise InvalidDefinitions("a binding's destination_type is queue or exchange")
        definitions.bindings.append(
            BindingInfo(
                _text(item, "vhost", "bindings"),
                _text(item, "source", "bindings"),
                _text(item, "destination", "bindings"),
                kind,
                _text(item, "routing_key", "bindings", ""),
                _arguments(item),
            )
        )
    return definitions


def _user(item: Mapping[str, Json]) -> UserDefinition:
    name = _text(item, "name", "users")
    tags = item.get("tags", [])
    if isinstance(tags, str):  # RabbitMQ before 3.10 wrote them comma-separated
        tags = [tag for tag in tags.split(",") if tag]
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidDefinitions(f"user '{name}': tags must be a list of strings")
    tag_names = tuple(str(tag).strip() for tag in tags)
    password = item.get("password")
    if isinstance(password, str):
        return UserDefinition(name, tag_names, password=password)
    algorithm = item.get("hashing_algorithm", SCRYPT)
    if algorithm not in (SCRYPT, LEGACY_MD5):
        raise InvalidDefinitions(
            f"user '{name}': hashing_algorithm {algorithm} cannot be checked by BatonMQ "
            f"(it takes {SCRYPT}, {LEGACY_MD5}, or a password)"
        )
    return UserDefinition(name, tag_names, credential=_text(item, "password_hash", "users"))


def _objects(document: Mapping[str, Json], key: str) -> list[Mapping[str, Json]]:
    items = document.get(key, [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise InvalidDefinitions(f"{key} must be a list of objects")
    return [item for item in items if isinstance(item, dict)]


def _text(item: Mapping[str, Json], key: str, where: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise InvalidDefinitions(f"each of {where} needs {key}, a string")
    return value


def _flag(item: Mapping[str, Json], key: str, default: bool) -> bool:
    value = item.get(key, default)
    if not isinstance(value, bool):
        raise InvalidDefinitions(f"{key} must be true or false")
    return value


def _arguments(item: Mapping[str, Json]) -> FieldTable:
    value = item.get("arguments", {})
    if not isinstance(value, dict):
        raise InvalidDefinitions("arguments must be an object")
    try:
        return field_table(value)
    except ValueError as error:
        raise InvalidDefinitions(f"arguments: {error}") from None
