"""An HA cluster's shared store administered offline (MQ 4.1 HA guide, Table 8, imqdbmgr):

- ``remove bkr`` "Remove broker from HA shared store. The broker must not be running." Here the
  broker's record goes; refused while its lease in the store runs (it is running, or only just
  died and may yet be taken over), and while it still owns records (queues, messages, ...: a
  survivor must take them over first, or the broker, started again, must serve them), since
  removing it would strand them where no member looks;
- ``upgrade hastore`` "Upgrade standalone store to high-availability (HA) shared store". A
  standalone broker's PostgreSQL store is the schema of its own (suffix S<brokerID>, Table 8) whose
  rows its broker name owns; the cluster's shared store is the schema of the cluster (suffix
  C<clusterID>), whose rows each member's broker id owns. The upgrade renames the schema and gives
  the rows, with the broker's record (its fencing epoch and whether it stopped cleanly kept), to
  the member's broker id, in one transaction: the member then starts on its own messages, and the
  other members join the store empty. Refused while the standalone broker runs, on a schema older
  than this BatonMQ's (the guide: "the data store must first be upgraded"), and when the shared
  store exists already.

Each runs in one transaction on a session of its own, with the broker's record locked, so that
a broker starting meanwhile waits for it and then sees the outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import asyncpg

from batonmq.store.base import SCHEMA_VERSION, StoreError, StoreUnavailable
from batonmq.store.dsn import parse_dsn
from batonmq.store.pgerrors import DATABASE_ERRORS
from batonmq.store.placement import worker_id, worker_index
from batonmq.store.postgres_log import SQL as LOG_SQL
from batonmq.store.postgres_log import counts_with_log

#: The tables whose rows a broker owns (their broker_id), in the order a restore fills them.
OWNED_TABLES: Final = (
    "exchanges",
    "queues",
    "bindings",
    "messages",
    "entries",
    "quarantined_messages",
    "stream_segments",
    "stream_chunks",
    "appends",
)

_CONNECT_TIMEOUT: Final = 10.0
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Removable:
    """A broker record that `remove bkr` may remove."""

    broker_id: str
    state: str
    #: Seconds since it last updated the store, by the database's clock.
    silent_for: float


class SharedStoreAdmin:
    """The stores of one PostgreSQL database, by schema; `location` names it for messages."""

    def __init__(self, dsn: str) -> None:
        self._dsn, self.location, self._secrets = parse_dsn(dsn)

    # remove bkr -----------------------------------------------------------------------------------

    async def removable(self, schema: str, broker_id: str) -> Removable:
        """What `remove bkr -n broker_id` would remove; StoreError saying why it is refused."""

        async def work(connection: asyncpg.Connection[asyncpg.Record]) -> Removable:
            async with connection.transaction():
                return await self._removable(connection, schema, broker_id)

        return await self._run(work)

    async def remove(self, schema: str, broker_id: str) -> Removable:
        """Remove broker `broker_id`'s record from the shared store in `schema` (checked again,
        under the record's lock); StoreError saying why it is refused."""

        async def work(connection: asyncpg.Connection[asyncpg.Record]) -> Removable:
            async with connection.transaction():
                found = await self._removable(connection, schema, broker_id)
                await connection.execute(
                    f'DELETE FROM "{schema}".brokers WHERE broker_id = $1 OR member_of = $1',
                    broker_id,
                )
            return found

        return await self._run(work)

    async def _removable(
        self, connection: asyncpg.Connection[asyncpg.Record], schema: str, broker_id: str
    ) -> Removable:
        await self._require_current(connection, schema)
        # A broker with several workers: the record of each worker's store identity.
        rows = await connection.fetch(
            f"SELECT broker_id, member_of, state, COALESCE(lease_expires > now(), false),"
            " EXTRACT(EPOCH FROM now() - COALESCE(heartbeat_at, started_at))::float8"
            f' FROM "{schema}".brokers WHERE broker_id = $1 OR member_of = $1'
            " ORDER BY broker_id FOR UPDATE",
            broker_id,
        )
        if not rows:
            raise StoreError(f"there is no broker {broker_id!r} in {self._where(schema)}")
        for identity, member_of, *_ in rows:
            if identity == broker_id and member_of is not None:
                raise StoreError(
                    f"{broker_id!r} is the store identity of a worker of broker {member_of!r}: "
                    f"remove {member_of!r}"
                )
        state = rows[0][2]
        live = any(row[3] for row in rows)
        silent_for = min(row[4] for row in rows)
        if live:
            raise StoreError(
                f"broker {broker_id!r} is running: its lease in the store runs (it last updated "
                f"the store {silent_for:.0f} s ago); shut it down first"
            )
        counts = dict.fromkeys(OWNED_TABLES, 0)
        log_sql = {name: text.replace("{s}", f'"{schema}"') for name, text in LOG_SQL.items()}
        for identity, *_ in rows:
            own = {
                table: await connection.fetchval(
                    f'SELECT count(*) FROM "{schema}".{table} WHERE broker_id = $1', identity
                )
                for table in OWNED_TABLES
            }
            # Its messages and entries as they are once its append log is written to the
            # tables; the log's rows are named only when that leaves nothing else.
            own["messages"], own["entries"], _ = await counts_with_log(
                connection, log_sql, identity, (own["messages"], own["entries"], 0), quota=False
            )
            for table, count in own.items():
                counts[table] += count
        log_rows = counts.pop("appends")
        owned = [f"{count} {table.replace('_', ' ')}" for table, count in counts.items() if count]
        if log_rows and not owned:
            owned = [f"{log_rows} append log rows"]
        if owned:
            raise StoreError(
                f"broker {broker_id!r} still owns records ({', '.join(owned)}): take it over "
                "first, or start it and let its clients empty it"
            )
        return Removable(broker_id, state, silent_for)

    # upgrade hastore ------------------------------------------------------------------------------

    async def upgrade_to_shared(
        self, standalone: str, broker_name: str, shared: str, broker_id: str
    ) -> int:
        """Make the standalone store in schema `standalone`, owned by `broker_name`, the shared
        store in schema `shared` (the same schema: only the owner changes), owned by member
        `broker_id`; the number of records that changed owner. StoreError saying why not."""

        async def work(connection: asyncpg.Connection[asyncpg.Record]) -> int:
            async with connection.transaction():
                await self._require_current(connection, standalone)
                if shared != standalone and await _has_tables(connection, shared):
                    raise StoreError(
                        f"{self._where(shared)} exists already: only the first member's "
                        "standalone store can become the shared store, and the other members "
                        "join it empty"
                    )
                brokers = await connection.fetch(
                    f'SELECT broker_id, COALESCE(lease_expires > now(), false) FROM "{standalone}"'
                    ".brokers ORDER BY broker_id FOR UPDATE"
                )
                # A standalone broker that ran with several workers has a store identity per
                # worker: each becomes the same worker's identity of the member.
                renamed: dict[str, tuple[str, str | None]] = {}
                for identity, _live in brokers:
                    index = worker_index(broker_name, identity)
                    if identity == broker_name:
                        renamed[identity] = (broker_id, None)
                    elif index is not None:
                        renamed[identity] = (worker_id(broker_id, index), broker_id)
                others = [row[0] for row in brokers if row[0] not in renamed]
                if others:
                    raise StoreError(
                        f"{self._where(standalone)} is not broker {broker_name!r}'s standalone "
                        f"store: it records brokers {', '.join(map(repr, others))} too"
                    )
                if any(live for _, live in brokers):
                    raise StoreError(
                        f"broker {broker_name!r} is running on {self._where(standalone)}: its "
                        "lease in the store runs; shut it down first"
                    )
                moved = 0
                for old, (new, member_of) in renamed.items():
                    await connection.execute(
                        f'UPDATE "{standalone}".brokers SET broker_id = $2, member_of = $3 '
                        "WHERE broker_id = $1",
                        old,
                        new,
                        member_of,
                    )
                    if new == old:
                        continue
                    for table in OWNED_TABLES:
                        status = await connection.execute(
                            f'UPDATE "{standalone}".{table} SET broker_id = $2 '
                            "WHERE broker_id = $1",
                            old,
                            new,
                        )
                        moved += int(status.rpartition(" ")[2])
                if shared != standalone:
                    await connection.execute(f'ALTER SCHEMA "{standalone}" RENAME TO "{shared}"')
            return moved

        return await self._run(work)

    # helpers --------------------------------------------------------------------------------------

    def _where(self, schema: str) -> str:
        return f"{self.location} schema {schema}"

    async def _require_current(
        self, connection: asyncpg.Connection[asyncpg.Record], schema: str
    ) -> None:
        if not await _has_tables(connection, schema):
            raise StoreError(f"{self._where(schema)} holds no BatonMQ store")
        found = await connection.fetchval(
            f"SELECT value FROM \"{schema}\".meta WHERE key = 'schema_version'"
        )
        if found != str(SCHEMA_VERSION):
            raise StoreError(
                f"{self._where(schema)} has schema version {found}; this BatonMQ needs "
                f"{SCHEMA_VERSION}: run `batonctl db upgrade` with the BatonMQ that matches first"
            )

    async def _run(self, work: Callable[[asyncpg.Connection[asyncpg.Record]], Awaitable[_T]]) -> _T:
        try:
            connection = await asyncpg.connect(self._dsn, timeout=_CONNECT_TIMEOUT)
        except (*DATABASE_ERRORS, ValueError) as error:
            raise StoreUnavailable(
                f"cannot connect to {self.location}: {self._safe(error)}"
            ) from None
        try:
            return await work(connection)
        except DATABASE_ERRORS as error:
            raise StoreError(f"{self.location}: {self._safe(error)}") from None
        finally:
            await connection.close()

    def _safe(self, error: BaseException) -> str:
        """The error's text without the password, should the server or driver echo it."""
        text = str(error) or type(error).__name__
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


async def _has_tables(connection: asyncpg.Connection[asyncpg.Record], schema: str) -> bool:
    found = await connection.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_class AS c JOIN pg_namespace AS n "
        "ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r')",
        schema,
    )
    return bool(found)
