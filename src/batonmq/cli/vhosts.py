"""``batonctl vhost``: virtual hosts, each with its own exchanges, queues, ACL and permissions.

    batonctl vhost add NAME
    batonctl vhost delete NAME
    batonctl vhost list

Virtual hosts live in the broker's store. With a data directory (--data-dir, --config ...), the
commands work on it while no broker runs on it (they take its lock); without one, or with an
option of the running broker's (--url, --user ...), add and delete go to the running broker
over its HTTP API (as an administrator). A virtual host added on the data has no user with
permissions there (as `rabbitmqctl add_vhost`); one added on the running broker gives the user
batonctl logs in as full permissions there (as RabbitMQ's management).
Deleting one deletes everything in it: its exchanges, queues, bindings and messages. The
configured default virtual host (broker.default_vhost) always exists: a broker
creates it at start, and it cannot be deleted.
"""

from __future__ import annotations

import argparse

from batonmq.cli.live import accounts
from batonmq.cli.storecommand import CommandFailed, opened, require_store_file, run_on_store
from batonmq.config import Config
from batonmq.security.permissions import default_grants
from batonmq.store.base import Store, WriteBatch


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``vhost`` group and its commands to `groups` (see `batonmq.cli.ctl`)."""
    group = groups.add_parser(
        "vhost",
        help="virtual hosts: add, delete, list",
        description=__doc__.split("\n\n", 2)[2].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = group.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    add = commands.add_parser("add", help="add a virtual host", description="Add a virtual host.")
    add.add_argument("name", metavar="NAME")
    add.set_defaults(handler=_add, live=accounts.add_vhost, what="cannot add virtual host '{name}'")
    delete = commands.add_parser(
        "delete",
        help="delete a virtual host and everything in it",
        description="Delete a virtual host and its exchanges, queues, bindings and messages.",
    )
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(
        handler=_delete, live=accounts.delete_vhost, what="cannot delete virtual host '{name}'"
    )
    listing = commands.add_parser(
        "list", help="list the virtual hosts", description="List the virtual hosts."
    )
    listing.set_defaults(handler=_list)


def _add(args: argparse.Namespace, config: Config) -> int:
    name: str = args.name

    async def add(store: Store) -> str:
        if not name:
            raise CommandFailed("a virtual host needs a name")
        async with opened(store, create=True, migrate=True, lock=True, catalogue_only=True):
            if name in await store.vhosts():
                raise CommandFailed(f"virtual host '{name}' exists")
            granted = []
            if name == config.default_vhost:  # created early: as a broker would create it
                granted = default_grants(name, {user.name for user in await store.users()})
            await store.commit(WriteBatch(vhosts_put=[name], permissions_put=granted))
        # As `rabbitmqctl add_vhost`: no one may use it until given permissions there.
        return (
            f"added virtual host '{name}' (no user has permissions there yet: "
            f"`batonctl permissions set USER '.*' '.*' '.*' --vhost {name}`)"
        )

    return run_on_store(config, f"cannot add virtual host '{name}'", add)


def _delete(args: argparse.Namespace, config: Config) -> int:
    name: str = args.name

    async def delete(store: Store) -> str:
        if name == config.default_vhost:
            raise CommandFailed(
                f"'{name}' is the default virtual host (broker.default_vhost), which always exists"
            )
        async with opened(store, create=False, migrate=True, lock=True, catalogue_only=True):
            if name not in await store.vhosts():
                raise CommandFailed(f"there is no virtual host '{name}'")
            await store.commit(WriteBatch(vhosts_deleted=[name]))
        return f"deleted virtual host '{name}' and everything in it"

    return run_on_store(config, f"cannot delete virtual host '{name}'", delete)


def _list(args: argparse.Namespace, config: Config) -> int:
    async def listing(store: Store) -> str:
        require_store_file(store, config)
        async with opened(store, create=False, migrate=False, lock=False):
            names = set(await store.vhosts())
        return "\n".join(sorted(names | {config.default_vhost}))

    return run_on_store(config, "cannot list the virtual hosts", listing)
