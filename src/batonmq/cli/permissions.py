"""``batonctl permissions``: what each user may do in each virtual host (RabbitMQ's
permissions: `rabbitmqctl set_permissions`, `clear_permissions`, `list_permissions`).

    batonctl permissions list [--vhost VHOST]
    batonctl permissions set USER CONFIGURE WRITE READ [--vhost VHOST]
    batonctl permissions clear USER [--vhost VHOST]

CONFIGURE, WRITE and READ are regular expressions searched for in the names of exchanges and
queues, as RabbitMQ's: '.*' allows everything, '' nothing, '^orders$' only "orders". Configure
is what declaring and deleting need, write what publishing (to an exchange) and binding (a
queue) need, read what consuming, getting, purging and binding (from an exchange) need. A user
without permissions in a virtual host cannot connect to it. The virtual host is / unless
--vhost says otherwise.

Permissions live in the broker's store. With a data directory (--data-dir, --config ...), the
commands work on it while no broker runs on it (they take its lock); without one, or with an
option of the running broker's (--url, --user ...), they go to the running broker over its
HTTP API (as an administrator), in force at the next access check of every client.
"""

from __future__ import annotations

import argparse

from batonmq.cli.live import accounts
from batonmq.cli.live.objects import DEFAULT_VHOST
from batonmq.cli.storecommand import CommandFailed, opened, require_store_file, run_on_store
from batonmq.config import Config
from batonmq.security.permissions import (
    InvalidPattern,
    UserPermission,
    default_grants,
    validate,
)
from batonmq.store.base import Store, WriteBatch


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``permissions`` group and its commands to `groups` (see `batonmq.cli.ctl`)."""
    group = groups.add_parser(
        "permissions",
        help="what users may do in virtual hosts: list, set, clear",
        description=__doc__.split("\n\n", 2)[2].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = group.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    listing = commands.add_parser(
        "list", help="list permissions", description="List every user's permissions."
    )
    listing.add_argument("--vhost", metavar="VHOST", help="only this virtual host's")
    listing.add_argument("--json", action="store_true", help="the API's JSON (live only)")
    listing.set_defaults(
        handler=_list, live=accounts.list_permissions, what="cannot list permissions"
    )
    setting = commands.add_parser(
        "set",
        help="set a user's permissions in a virtual host",
        description="Set a user's configure, write and read patterns in a virtual host.",
    )
    setting.add_argument("user", metavar="USER")
    for pattern in ("configure", "write", "read"):
        setting.add_argument(pattern, metavar=pattern.upper())
    _vhost_option(setting)
    setting.set_defaults(
        handler=_set,
        live=accounts.set_permissions,
        what="cannot set the permissions of user '{user}' in virtual host '{vhost}'",
    )
    clearing = commands.add_parser(
        "clear",
        help="take a user's permissions in a virtual host away",
        description="Take all of a user's permissions in a virtual host away.",
    )
    clearing.add_argument("user", metavar="USER")
    _vhost_option(clearing)
    clearing.set_defaults(
        handler=_clear,
        live=accounts.clear_permissions,
        what="cannot clear the permissions of user '{user}' in virtual host '{vhost}'",
    )


def _vhost_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vhost", metavar="VHOST", default=DEFAULT_VHOST, help="the virtual host (default: /)"
    )


def _list(args: argparse.Namespace, config: Config) -> int:
    vhost: str | None = args.vhost

    async def listing(store: Store) -> str:
        require_store_file(store, config)
        async with opened(store, create=False, migrate=False, lock=False):
            records = await store.permissions()
        rows = [("USER", "VHOST", "CONFIGURE", "WRITE", "READ")] + [
            (p.user, p.vhost, p.configure, p.write, p.read)
            for p in records
            if vhost is None or p.vhost == vhost
        ]
        widths = [max(len(row[column]) for row in rows) for column in range(5)]
        return "\n".join(
            "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )

    return run_on_store(config, "cannot list permissions", listing)


def _set(args: argparse.Namespace, config: Config) -> int:
    record = UserPermission(args.user, args.vhost, args.configure, args.write, args.read)
    what = f"cannot set the permissions of user '{record.user}' in virtual host '{record.vhost}'"

    async def setting(store: Store) -> str:
        try:
            validate(record)
        except InvalidPattern as error:
            raise CommandFailed(str(error)) from None
        async with opened(store, create=True, migrate=True, lock=True, catalogue_only=True):
            users = {user.name for user in await store.users()}
            if record.user not in users:
                raise CommandFailed(f"there is no user '{record.user}'")
            vhosts = await store.vhosts()
            # The default virtual host always exists: a broker creates it at its first start,
            # with the default user's permissions, as it is created here then.
            if record.vhost not in vhosts and record.vhost != config.default_vhost:
                raise CommandFailed(f"there is no virtual host '{record.vhost}'")
            batch = WriteBatch(permissions_put=[record])
            if record.vhost not in vhosts:
                batch.vhosts_put.append(record.vhost)
                batch.permissions_put[:0] = default_grants(record.vhost, users)
            await store.commit(batch)
        return f"set the permissions of user '{record.user}' in virtual host '{record.vhost}'"

    return run_on_store(config, what, setting)


def _clear(args: argparse.Namespace, config: Config) -> int:
    user: str = args.user
    vhost: str = args.vhost
    what = f"cannot clear the permissions of user '{user}' in virtual host '{vhost}'"

    async def clearing(store: Store) -> str:
        async with opened(store, create=False, migrate=True, lock=True, catalogue_only=True):
            if not any(p.user == user and p.vhost == vhost for p in await store.permissions()):
                raise CommandFailed(f"user '{user}' has no permissions in virtual host '{vhost}'")
            await store.commit(WriteBatch(permissions_deleted=[(user, vhost)]))
        return f"cleared the permissions of user '{user}' in virtual host '{vhost}'"

    return run_on_store(config, what, clearing)
