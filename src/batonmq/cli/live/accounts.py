"""``batonctl user add|passwd|tags|delete``, ``vhost add|delete`` and ``permissions
list|set|clear`` on a running broker, over /api/users, /api/vhosts and /api/permissions (for
administrators): the same commands, arguments and answers as
on a stopped broker's store (`batonmq.cli.users`, `batonmq.cli.vhosts`,
`batonmq.cli.permissions`), which
`batonmq.cli.ctl` chooses between. The broker writes each change to its store before it is in
force: a user added can log in at once (to the virtual hosts it has permissions on), a user
deleted is refused and its connections closed. A virtual host added here gives the user
batonctl logs in as full permissions in it, as RabbitMQ's management does.
"""

from __future__ import annotations

import argparse

from batonmq.cli.live.client import ApiRefused, BrokerClient, not_found_as, quoted
from batonmq.cli.live.objects import LISTINGS
from batonmq.cli.live.tables import json_text, table
from batonmq.cli.passwords import check_user_name, new_password
from batonmq.cli.storecommand import CommandFailed
from batonmq.management.access import parse_tags
from batonmq.management.listing import Json
from batonmq.security.permissions import InvalidPattern, UserPermission, validate


def _exists(client: BrokerClient, path: str) -> bool:
    try:
        client.get(path)
    except ApiRefused as refusal:
        if refusal.status == 404:
            return False
        raise
    return True


def _tags(text: str | None) -> str | None:
    """RabbitMQ's `tags`: comma-separated."""
    return None if text is None else ",".join(sorted(parse_tags(text)))


def add_user(args: argparse.Namespace, client: BrokerClient) -> int:
    return _set_password(args, client, adding=True)


def change_password(args: argparse.Namespace, client: BrokerClient) -> int:
    return _set_password(args, client, adding=False)


def _set_password(args: argparse.Namespace, client: BrokerClient, *, adding: bool) -> int:
    """`user add` (the user must be new) and `user passwd` (the user must exist); without
    --tags, passwd keeps the user's tags (the API keeps them when the body has none)."""
    name: str = args.name
    check_user_name(name)
    path = f"/api/users/{quoted(name)}"
    exists = _exists(client, path)
    if adding and exists:
        raise CommandFailed(f"user '{name}' exists: use `batonctl user passwd`")
    if not adding and not exists:
        raise CommandFailed(f"there is no user '{name}'")
    body: dict[str, Json] = {"password": new_password(args)}
    tags = _tags(args.tags)
    if tags is not None:
        body["tags"] = tags
    client.put(path, body)
    print(f"added user '{name}'" if adding else f"changed the password of user '{name}'")
    return 0


def set_tags(args: argparse.Namespace, client: BrokerClient) -> int:
    name: str = args.name
    path = f"/api/users/{quoted(name)}"
    with not_found_as(f"there is no user '{name}'"):
        client.get(path)  # else the PUT would be refused as a new user without a password
    tags = _tags(" ".join(args.tags)) or ""
    client.put(path, {"tags": tags})
    print(f"set the tags of user '{name}' to [{tags.replace(',', ', ')}]")
    return 0


def delete_user(args: argparse.Namespace, client: BrokerClient) -> int:
    name: str = args.name
    with not_found_as(f"there is no user '{name}'"):
        client.delete(f"/api/users/{quoted(name)}")
    print(f"deleted user '{name}'")
    return 0


def add_vhost(args: argparse.Namespace, client: BrokerClient) -> int:
    name: str = args.name
    if not name:
        raise CommandFailed("a virtual host needs a name")
    if client.put(f"/api/vhosts/{quoted(name)}") == 204:  # RabbitMQ: 204, it was there
        raise CommandFailed(f"virtual host '{name}' exists")
    print(f"added virtual host '{name}'")
    return 0


def delete_vhost(args: argparse.Namespace, client: BrokerClient) -> int:
    name: str = args.name
    with not_found_as(f"there is no virtual host '{name}'"):
        client.delete(f"/api/vhosts/{quoted(name)}")
    print(f"deleted virtual host '{name}' and everything in it")
    return 0


def list_permissions(args: argparse.Namespace, client: BrokerClient) -> int:
    """`permissions list` over /api/permissions (/api/vhosts/{vhost}/permissions)."""
    vhost: str | None = args.vhost
    if vhost is None:
        answer = client.get("/api/permissions")
    else:
        with not_found_as(f"there is no virtual host '{vhost}'"):
            answer = client.get(f"/api/vhosts/{quoted(vhost)}/permissions")
    items = [item for item in answer if isinstance(item, dict)] if isinstance(answer, list) else []
    if args.json:
        whole: list[Json] = list(items)
        print(json_text(whole))
    else:
        print(table(LISTINGS["permissions"].columns, items))
    return 0


def set_permissions(args: argparse.Namespace, client: BrokerClient) -> int:
    user: str = args.user
    vhost: str = args.vhost
    try:  # checked here too, for a one-line answer without the HTTP status
        validate(UserPermission(user, vhost, args.configure, args.write, args.read))
    except InvalidPattern as error:
        raise CommandFailed(str(error)) from None
    body: dict[str, Json] = {"configure": args.configure, "write": args.write, "read": args.read}
    client.put(f"/api/permissions/{quoted(vhost, user)}", body)
    print(f"set the permissions of user '{user}' in virtual host '{vhost}'")
    return 0


def clear_permissions(args: argparse.Namespace, client: BrokerClient) -> int:
    user: str = args.user
    vhost: str = args.vhost
    with not_found_as(f"user '{user}' has no permissions in virtual host '{vhost}'"):
        client.delete(f"/api/permissions/{quoted(vhost, user)}")
    print(f"cleared the permissions of user '{user}' in virtual host '{vhost}'")
    return 0
