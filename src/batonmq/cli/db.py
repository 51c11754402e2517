"""``batonctl db``: the store's schema, backups and statistics.

The counterpart of Open MQ's Database Manager, imqdbmgr (MQ 4.1 HA guide Tables 8 and 9): ``create
[tbl]`` is its ``create tbl`` (the schema in an empty store), ``upgrade`` its ``upgrade``, ``backup
--dir`` and ``restore --dir`` its ``backup -dir`` and ``restore -dir``; ``stats`` is new. For an HA
cluster's shared store (`batonmq.store.hastore`), ``remove bkr -n ID`` is its ``remove bkr -n
brokerID`` and ``upgrade hastore`` its ``upgrade hastore``.

How each command opens the store (`Store.open`):

- create, upgrade and restore take the broker's lock, so they refuse while a broker runs on the
  store; none of them migrates as a side effect of opening (upgrade migrates when asked to),
  except restore, which needs the current schema to load a backup into (a broker migrates at
  start anyway);
- create and restore make a new store where one was lost (`Store.open`'s `replace_lost`: a
  broker refuses to start on it), which is what an operator runs them for there;
- backup and stats open without the lock and only read, so they work while a broker runs;
- remove bkr and upgrade hastore lock the broker's record in the store for their transaction and
  refuse while its lease runs.

A failure is one line on stderr, "batonctl: <what failed>: <reason>", and exit status 1; the
reason is the store's own text (which never holds a DSN's password), with a hint when the store
cannot know what to do about it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from batonmq.cli.live.confirm import confirm
from batonmq.cli.storecommand import (
    CommandFailed,
    missing_store_file,
    opened,
    require_store_file,
    run_on_store,
)
from batonmq.config import Config
from batonmq.store.backup import MANIFEST
from batonmq.store.base import (
    SCHEMA_VERSION,
    Store,
)
from batonmq.store.configured import postgres_schema, standalone_postgres_schema

if TYPE_CHECKING:
    from batonmq.store.hastore import SharedStoreAdmin


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``db`` group and its commands to `groups` (see `batonmq.cli.ctl`)."""
    group = groups.add_parser(
        "db",
        help="the persistent store: schema, backup, restore, statistics",
        description=(
            "Manage the persistent store that persist.store names (the SQLite file under the "
            "data directory, or a PostgreSQL database)."
        ),
    )
    commands = group.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    create = commands.add_parser(
        "create",
        help="create the schema in an empty store",
        description=(
            "Create the schema in an empty store (a store that already has the current schema "
            "is left as it is). Refused while a broker runs on the store."
        ),
    )
    create.add_argument("tbl", nargs="?", choices=["tbl"], help="imqdbmgr's spelling: create tbl")
    create.set_defaults(handler=_create)
    upgrade = commands.add_parser(
        "upgrade",
        help="migrate the schema to this BatonMQ's version",
        description=(
            f"Migrate the store's schema to version {SCHEMA_VERSION}, the one this BatonMQ "
            "writes. Refused while a broker runs on the store. `upgrade hastore` turns this "
            "broker's standalone PostgreSQL store into the shared store of the HA cluster that "
            "cluster.clusterid names, owned by cluster.brokerid: the other members join it empty."
        ),
    )
    upgrade.add_argument(
        "hastore",
        nargs="?",
        choices=["hastore"],
        help="hastore: make the standalone store the HA cluster's shared store",
    )
    upgrade.set_defaults(handler=_upgrade)
    remove = commands.add_parser(
        "remove",
        help="remove a broker from an HA cluster's shared store",
        description=(
            "Remove a broker's record from the HA cluster's shared store (imqdbmgr remove bkr). "
            "Refused while the broker runs (its lease in the store runs) or still owns records."
        ),
    )
    objects = remove.add_subparsers(title="objects", dest="object", metavar="OBJECT", required=True)
    remove_broker = objects.add_parser("bkr", help="a broker", description=remove.description)
    remove_broker.add_argument("-n", dest="broker", metavar="ID", required=True, help="its id")
    remove_broker.add_argument("-y", "--yes", action="store_true", help="do it without asking")
    remove_broker.set_defaults(handler=_remove_broker)
    backup = commands.add_parser(
        "backup",
        help="write a consistent snapshot to a directory",
        description=(
            "Write a consistent snapshot of the store to an empty (or new) directory. Works "
            "while a broker runs: the snapshot holds everything committed when it is taken."
        ),
    )
    backup.add_argument("--dir", metavar="DIR", type=Path, required=True, dest="directory")
    backup.set_defaults(handler=_backup)
    restore = commands.add_parser(
        "restore",
        help="replace the store's contents with a backup",
        description=(
            "Replace the store's contents with a backup that `batonctl db backup` wrote for the "
            "same broker (broker.name) and the same kind of store. The store is created when "
            "there is none. Refused while a broker runs on the store."
        ),
    )
    restore.add_argument("--dir", metavar="DIR", type=Path, required=True, dest="directory")
    restore.set_defaults(handler=_restore)
    stats = commands.add_parser(
        "stats",
        help="what the store holds",
        description="Print what the store holds. Works while a broker runs.",
    )
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(handler=_stats)


# -- the commands ------------------------------------------------------------------------------


def _create(args: argparse.Namespace, config: Config) -> int:
    async def create(store: Store) -> str:
        # Read first (without the lock, creating nothing) to tell "created" from "was there".
        found = 0
        if not missing_store_file(store, config):
            async with opened(store, create=False, migrate=False, lock=False, replace_lost=True):
                found = store.schema_version
        async with opened(store, create=True, migrate=False, lock=True, replace_lost=True):
            version = store.schema_version
        if version < SCHEMA_VERSION:
            raise CommandFailed(
                f"{store.location} already holds schema version {version}, older than "
                f"{SCHEMA_VERSION}: run `batonctl db upgrade`"
            )
        if found == 0:
            return f"created schema version {version} in {store.location}"
        return f"{store.location} already holds schema version {version}: nothing to do"

    return run_on_store(config, "cannot create the schema", create)


def _upgrade(args: argparse.Namespace, config: Config) -> int:
    if args.hastore:
        return _upgrade_hastore(config)

    async def upgrade(store: Store) -> str:
        require_store_file(store, config)
        async with opened(store, create=False, migrate=False, lock=True):
            if store.schema_version == 0:
                # The stores' upgrade would create the schema; that is `create`'s job.
                raise CommandFailed(
                    f"{store.location} holds no BatonMQ store: run `batonctl db create`"
                )
            found, current = await store.upgrade()
        if found == current:
            return f"schema is current ({current})"
        return f"schema upgraded from {found} to {current}"

    return run_on_store(config, "cannot upgrade the schema", upgrade)


def _upgrade_hastore(config: Config) -> int:
    async def upgrade(store: Store) -> str:
        admin = _shared_store_admin(store, config, "upgrade hastore")
        if not config.cluster.ha:
            raise CommandFailed(
                "upgrade hastore makes this broker's store the shared store of its HA cluster: "
                "set cluster.ha = true, cluster.clusterid and cluster.brokerid first"
            )
        standalone, shared = standalone_postgres_schema(config), postgres_schema(config)
        brokerid = config.cluster.brokerid
        moved = await admin.upgrade_to_shared(standalone, config.broker_name, shared, brokerid)
        return (
            f"upgraded the standalone store of broker '{config.broker_name}' (schema "
            f"{standalone}) to the shared store of HA cluster '{config.cluster.clusterid}' "
            f"(schema {shared}): {moved} records now owned by member '{brokerid}'"
        )

    return run_on_store(config, "cannot upgrade to the HA shared store", upgrade)


def _remove_broker(args: argparse.Namespace, config: Config) -> int:
    broker_id: str = args.broker

    async def remove(store: Store) -> str:
        admin = _shared_store_admin(store, config, "remove bkr")
        schema = postgres_schema(config)
        found = await admin.removable(schema, broker_id)
        # The guide's question before a takeover, asked of a removal.
        confirm(
            f"The broker associated with {broker_id} last accessed the database "
            f"{found.silent_for:.0f} seconds ago. Do you want to remove this broker from the "
            "shared store?",
            args.yes,
        )
        await admin.remove(schema, broker_id)
        return f"removed broker '{broker_id}' from the shared store (it was {found.state})"

    return run_on_store(config, f"cannot remove broker '{broker_id}'", remove)


def _backup(args: argparse.Namespace, config: Config) -> int:
    directory: Path = args.directory

    async def backup(store: Store) -> str:
        # Checked before the store is opened (the stores check too, each in its own words).
        _require_empty_directory(directory)
        require_store_file(store, config)
        async with opened(store, create=False, migrate=False, lock=False):
            await store.backup(directory)
        summary = _manifest_summary(directory)
        return f"backed up {store.location} to {directory}" + (f": {summary}" if summary else "")

    return run_on_store(config, "backup failed", backup)


def _restore(args: argparse.Namespace, config: Config) -> int:
    directory: Path = args.directory

    async def restore(store: Store) -> str:
        if not (directory / MANIFEST).is_file():
            raise CommandFailed(f"{directory} is not a BatonMQ backup (it has no {MANIFEST})")
        # create: a fresh data directory or database gets the schema the backup is loaded into.
        async with opened(store, create=True, migrate=True, lock=True, replace_lost=True):
            await store.restore(directory)
            stats = await store.stats()
        return (
            f"restored {store.location} from {directory}: {stats.messages} messages, "
            f"{stats.entries} queue entries"
        )

    return run_on_store(config, "restore failed", restore)


def _stats(args: argparse.Namespace, config: Config) -> int:
    as_json: bool = args.json

    async def stats(store: Store) -> str:
        require_store_file(store, config)
        async with opened(store, create=False, migrate=False, lock=False):
            fields = dataclasses.asdict(await store.stats())
        if as_json:
            return json.dumps(fields, indent=2)
        width = max(len(name) for name in fields) + 1
        return "\n".join(f"{name + ':':<{width}} {value}" for name, value in fields.items())

    return run_on_store(config, "cannot read the store's statistics", stats)


# -- helpers -----------------------------------------------------------------------------------


def _shared_store_admin(store: Store, config: Config, command: str) -> SharedStoreAdmin:
    """The administration of the PostgreSQL database an HA cluster shares; CommandFailed on
    SQLite, which no two brokers can share."""
    if store.kind != "postgres":
        raise CommandFailed(
            f"{command} works on an HA cluster's shared store, which is PostgreSQL "
            f"(persist.store = postgres); this broker's store is {store.kind}, one broker's own"
        )
    # Here, not at the top: batonctl loads without asyncpg (`batonmq.store.configured`).
    from batonmq.store.hastore import SharedStoreAdmin

    return SharedStoreAdmin(config.persist.postgres.dsn)


def _require_empty_directory(directory: Path) -> None:
    try:
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise CommandFailed(
                f"{directory} is not an empty directory: a backup needs an empty or new one"
            )
    except OSError as error:
        raise CommandFailed(f"cannot read {directory}: {error.strerror or error}") from error


def _manifest_summary(directory: Path) -> str:
    """What the backup's manifest says it holds ("" if it cannot be read: the backup itself
    was written, and the manifest is for restore to check)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        messages, entries = manifest["messages"], manifest["entries"]
        version = manifest["schema_version"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return f"{messages} messages, {entries} queue entries (schema version {version})"
