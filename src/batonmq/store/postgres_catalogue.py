"""How a change to the catalogue (users, virtual hosts, permissions) that the members of an HA
cluster share in their PostgreSQL store reaches every running member (GlassFish MQ 4.5.2
Technical Overview, Table 4-1: in an enhanced cluster the configuration is in the shared store,
which every broker sees; each member keeps a copy in memory, so each must hear of a change).

Every commit that changes the catalogue also bumps its version, a row of `meta`, and notifies
the schema's channel (`channel`) with the new version and the committing member's id
(`announce`); so does a restore (`batonctl db restore`), which replaces the catalogue whole.
PostgreSQL delivers a notification at commit, and only then, so no member hears of a change that
may still roll back. Each member LISTENs on a session of its own (`CatalogueWatch`). A
notification is lost when that session is (PostgreSQL restarted, the network cut): so the watch
also reads the version every interval, and when it connects again, and a member that finds a
version it has not applied reads the catalogue again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from batonmq.store.base import StoreError
from batonmq.store.members import CatalogueChanged, changes_catalogue
from batonmq.store.pgerrors import DATABASE_ERRORS
from batonmq.store.pgsession import Connection

log = logging.getLogger(__name__)

__all__ = ["CatalogueWatch", "announce", "changes_catalogue", "channel", "notice", "parse_notice"]

_SUFFIX: Final = "_catalogue"
#: PostgreSQL's longest identifier (NAMEDATALEN - 1), which a channel name is.
_NAME_MAX: Final = 63
#: Seconds a reading of the version may take before the session is taken for lost and replaced
#: (a session cut off without a word from the server would otherwise wait forever).
_READ_TIMEOUT: Final = 10.0

#: Statements, "{s}" standing for the quoted schema.
SQL: Final = {
    "catalogue_bump": "INSERT INTO {s}.meta AS m (key, value) VALUES ('catalogue_version', '1')"
    " ON CONFLICT (key) DO UPDATE SET value = (m.value::bigint + 1)::text"
    " RETURNING value::bigint",
    "catalogue_version": "SELECT COALESCE((SELECT value::bigint FROM {s}.meta"
    " WHERE key = 'catalogue_version'), 0)",
    "catalogue_notify": "SELECT pg_notify($1, $2)",
}


def channel(schema: str) -> str:
    """The channel a schema's catalogue changes are notified on. Two long schema names that
    share their first 53 characters share it: a member then reads the catalogue once more for
    nothing, which is harmless."""
    return schema[: _NAME_MAX - len(_SUFFIX)] + _SUFFIX


async def announce(connection: Connection, sql: Mapping[str, str], schema: str, writer: str) -> int:
    """Inside a transaction that changed the catalogue: bump its version and notify it, as
    member `writer`'s change (the members hear of it at commit); the new version."""
    version: int = await connection.fetchval(sql["catalogue_bump"])
    await connection.execute(sql["catalogue_notify"], channel(schema), notice(version, writer))
    return version


def notice(version: int, writer: str) -> str:
    """A notification's payload: the version the commit made, and who committed it."""
    return f"{version} {writer}"


def parse_notice(payload: str) -> tuple[int, str] | None:
    version, _, writer = payload.partition(" ")
    return (int(version), writer) if version.isdigit() and writer else None


class CatalogueWatch:
    """A session of its own that LISTENs on the catalogue's channel and reads its version every
    `interval` (see the module docstring); run as a task until cancelled."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Connection]],
        channel_name: str,
        version_sql: str,
        on_change: CatalogueChanged,
        interval: float,
    ) -> None:
        self._connect = connect
        self._channel = channel_name
        self._version_sql = version_sql
        self._on_change = on_change
        self._interval = interval

    async def run(self) -> None:
        connection: Connection | None = None
        try:
            while True:
                try:
                    if connection is None or connection.is_closed():
                        connection = await self._connect()
                        await connection.add_listener(self._channel, self._notified)
                    version = await connection.fetchval(self._version_sql, timeout=_READ_TIMEOUT)
                except (StoreError, *DATABASE_ERRORS) as error:
                    # Caught up with once connected again: the version read then tells.
                    log.debug("catalogue watch: %s", error)
                    if connection is not None:
                        connection.terminate()
                        connection = None
                else:
                    self._on_change(version, None)
                await asyncio.sleep(self._interval)
        finally:
            if connection is not None:
                connection.terminate()

    def _notified(self, _connection: object, _pid: int, _channel: str, payload: object) -> None:
        parsed = parse_notice(payload) if isinstance(payload, str) else None
        if parsed is None:
            log.debug("catalogue watch: not a notice of this release: %r", payload)
            return
        self._on_change(*parsed)
