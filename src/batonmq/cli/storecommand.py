"""Running one `batonctl` command against the configured store: open it, do the work, print the
result, and turn a failure into `CommandFailed`, which `batonmq.cli.ctl` reports as one line on
stderr and exit status 1. Shared by the command groups that work on the store (db, user, vhost)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final

from batonmq.cli.broker import EXIT_USAGE
from batonmq.config import Config
from batonmq.store.base import SchemaTooNew, Store, StoreError, StoreLocked, StoreUnavailable
from batonmq.store.configured import configured_store, sqlite_path

PROG: Final = "batonctl"
EXIT_FAILURE: Final = 1

#: What to do about an error, where the store's own text does not say (both stores name the
#: running broker that holds a lock; a schema too new is worded differently by each).
_HINTS: Final[dict[type[StoreError], str]] = {
    StoreLocked: "stop the broker first",
    SchemaTooNew: "upgrade BatonMQ to use this store",
}


class CommandFailed(Exception):
    """A command cannot go on (bad input, a store error, a missing file). `batonmq.cli.ctl`
    prints it as one line on stderr, "batonctl: <message>", and exits with `status`: 1 when the
    command failed, 2 for a usage or configuration error."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


def run_on_store(
    config: Config, what: str, command: Callable[[Store], Coroutine[Any, Any, str]]
) -> int:
    """Run `command` on the configured store and print what it returns; a failure is raised as
    CommandFailed("<what>: <reason>") (with status 2 when the configuration does not describe a
    store at all)."""
    try:
        store = configured_store(config)
    except ValueError as error:  # a DSN that is not even a URI; its text never holds the DSN
        raise CommandFailed(f"persist.postgres.dsn: {error}", EXIT_USAGE) from None
    except StoreError as error:  # a store the configuration names wrongly (a schema name)
        raise CommandFailed(str(error), EXIT_USAGE) from None
    try:
        output = asyncio.run(command(store))
    except (StoreError, CommandFailed) as error:
        reason = str(error) or type(error).__name__
        hint = next((text for kind, text in _HINTS.items() if isinstance(error, kind)), None)
        raise CommandFailed(f"{what}: {reason}" + (f"; {hint}" if hint else "")) from None
    except OSError as error:  # a file of the backup that cannot be written or read
        reason = error.strerror or str(error)
        where = f"{error.filename}: " if error.filename else ""
        raise CommandFailed(f"{what}: {where}{reason}") from None
    print(output)
    return 0


@contextlib.asynccontextmanager
async def opened(
    store: Store,
    *,
    create: bool,
    migrate: bool,
    lock: bool,
    replace_lost: bool = False,
    catalogue_only: bool = False,
) -> AsyncIterator[None]:
    """The store open for the block, closed after it (a failed open leaves nothing open)."""
    await store.open(
        create=create,
        migrate=migrate,
        lock=lock,
        replace_lost=replace_lost,
        catalogue_only=catalogue_only,
    )
    try:
        yield
    finally:
        await store.close()


def missing_store_file(store: Store, config: Config) -> bool:
    """Whether `store` is an SQLite store whose file does not exist yet (opened without the
    lock, the file is opened read-only, and SQLite's error for a missing one is vague)."""
    return store.kind == "sqlite" and not sqlite_path(config.data_dir).exists()


def require_store_file(store: Store, config: Config) -> None:
    if missing_store_file(store, config):
        raise StoreUnavailable(
            f"there is no store at {sqlite_path(config.data_dir)}: check --data-dir, or run "
            "`batonctl db create`"
        )
