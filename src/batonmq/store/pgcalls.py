"""What every call of a PostgreSQL store stands on: its state, its statements rendered for its
schema, and the lane that runs its calls.

Calls go over a pool of asyncpg connections. Writes (commits, recovery, restore, upgrade) run
one at a time, in the order of the calls (an asyncio.Lock wakes its waiters first in, first out):
the journal hands batches one by one, and group commit wants one writer. Reads (a page of entries,
users, statistics) run on other connections of the pool, beside a commit, but each waits first
for the writes called before it, which is what the `Store` protocol promises: a read issued after
a commit sees it. A connection lost with PostgreSQL (restarted) fails the call under way with
StoreError; the pool connects again for the next call, and its first write checks the epoch again.
The lease is renewed on a connection of its own, outside the pool (`batonmq.store.pglease`).

The store is built in layers, one concept each: this one; an HA member's calls
(`batonmq.store.pgmember`); the `Store` protocol (`batonmq.store.postgres`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import asyncpg

from batonmq.store.base import SCHEMA_VERSION, SchemaTooOld, StoreError, StoreFenced
from batonmq.store.dialect import POSTGRES
from batonmq.store.pending import Pending
from batonmq.store.pgerrors import DATABASE_ERRORS
from batonmq.store.pgfamily import SQL as FAMILY_SQL
from batonmq.store.pgfamily import identities
from batonmq.store.pglease import LEASE_SECONDS, Lease
from batonmq.store.pglease import SQL as LEASE_SQL
from batonmq.store.pgsession import CONNECT_TIMEOUT, Connection, Sessions
from batonmq.store.placement import Placement, worker_index
from batonmq.store.plan import Plan
from batonmq.store.postgres_catalogue import SQL as CATALOGUE_SQL
from batonmq.store.postgres_log import MESSAGE_SIZE
from batonmq.store.postgres_log import SQL as LOG_SQL
from batonmq.store.takeover import SQL as TAKEOVER_SQL

_T = TypeVar("_T")

_SCHEMA_NAME: Final = re.compile(r"[a-z0-9_]{1,63}")

_CANDIDATES: Final = POSTGRES.candidates
_CANDIDATES_TABLE: Final = _CANDIDATES.removeprefix("pg_temp.")
# A page of entries: the message of each entry is looked up in a subquery fenced with OFFSET 0
# (see `batonmq.store.dialect.POSTGRES`), so that each is one probe of the index.
_READ_ENTRIES: Final = (
    "SELECT e.sequence, e.delivery_count, e.expires_at, e.priority, m.id, m.exchange, "
    "m.routing_key, m.header_payload, m.body, m.checksum FROM {s}.entries AS e "
    "CROSS JOIN LATERAL (SELECT * FROM "
    "{s}.messages AS m WHERE m.id = e.message_id OFFSET 0) AS m "
    "WHERE e.broker_id = $1 AND e.vhost = $2 AND e.queue = $3 AND e.sequence > $4"
)
_NEXT: Final = "ORDER BY e.sequence LIMIT $5"
_ORPHANS: Final = POSTGRES.orphans
#: The statements of this store's own, beside the plan's and those of the modules it runs (the
#: lease, the append log, the catalogue, the family, the takeover): reads of pages, the garbage
#: collection that ends a commit (ids as one array, the bytes freed returned), the bytes stored,
#: and the message id block a restore keeps.
_SQL: Final = {
    # Any level ($6 null) or level 0, through the primary key.
    "read_entries": f"{_READ_ENTRIES} AND ($6::integer IS NULL OR e.priority = $6) {_NEXT}",
    # A level above 0: `e.priority > 0` lets the planner prove the partial index applies.
    "read_level_entries": f"{_READ_ENTRIES} AND e.priority = $6 AND e.priority > 0 {_NEXT}",
    # Both return the bytes of the messages they delete (see `used_bytes`).
    "delete_orphans": "WITH gone AS (DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 "
    f"AND m.id = ANY($2::bigint[]) AND {_ORPHANS} RETURNING {MESSAGE_SIZE} AS size) "
    "SELECT COALESCE(sum(size), 0) FROM gone",
    "delete_orphans_too": "WITH gone AS (DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 "
    f"AND m.id IN (SELECT id FROM {_CANDIDATES} UNION ALL SELECT unnest($2::bigint[])) "
    f"AND {_ORPHANS} RETURNING {MESSAGE_SIZE} AS size) SELECT COALESCE(sum(size), 0) FROM gone",
    "message_bytes": f"SELECT COALESCE(sum({MESSAGE_SIZE}), 0) FROM {{s}}.messages AS m "
    "WHERE m.broker_id = $1",
    **TAKEOVER_SQL,
    **LOG_SQL,
    **CATALOGUE_SQL,
    **FAMILY_SQL,
    **LEASE_SQL,
    # Ids of restored messages must never be handed out again.
    "restore_block": "UPDATE {s}.counters SET value = GREATEST(value, $2::bigint, "
    "(SELECT COALESCE(max(id), 0) / $3::bigint FROM {s}.messages WHERE broker_id = $1)) "
    "WHERE name = 'message_id_block'",
}


class PostgresCalls:
    """The state of a broker's store in one schema of a PostgreSQL database, and the lane its
    calls run in (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        *,
        broker_id: str,
        schema: str,
        synchronous_commit: str = "on",
        lease_seconds: float = LEASE_SECONDS,
        renew_every: float | None = None,
        member_of: str | None = None,
        family: str | None = None,
        placement: Placement | None = None,
        run: str | None = None,
    ) -> None:
        """`lease_seconds`: how long the lease lasts unless renewed, every `renew_every` seconds
        (a third of it by default). An HA member renews it every monitor interval and for the
        monitor threshold's worth of them (`batonmq.store.configured`): its renewal is its
        update in the store, which the other members watch. `member_of`: the HA member whose
        worker this store's identity is (None: the identity is the broker's own), recorded
        when the lease is claimed (`batonmq.store.members.as_members`). `family`: the standalone
        broker whose identity (`broker_id` itself) or worker's identity this is (None for an HA
        member; see `batonmq.store.pgfamily`). `placement`: for the broker's own identity that
        starts (one process, or the supervisor of its workers), or any identity of an HA member,
        where each virtual host's rows go at open (`batonmq.store.pgfamily.place_rows` and
        `place_member`). `run`: for a worker's identity, the token of the broker's run
        (drawn by `batonmq.server.supervisor`), which its lease names (`batonmq.store.pglease`)."""
        if not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_"):
            raise StoreError(
                f"invalid PostgreSQL schema name {schema!r}: use 1 to 63 of a-z, 0-9 and _, "
                "not starting with pg_"
            )
        self._broker_id, self._schema = broker_id, schema
        self._member_of = member_of
        self._lease_seconds = lease_seconds
        self._renew_every = lease_seconds / 3 if renew_every is None else renew_every
        self._sessions = Sessions(
            dsn,
            broker_id=broker_id,
            schema=schema,
            synchronous_commit=synchronous_commit,
            lease_seconds=lease_seconds,
        )
        self._location = self._sessions.location
        self._plan = Plan(POSTGRES, schema)
        self._sql = {
            **self._plan.sql,
            **{name: text.replace("{s}", f'"{schema}"') for name, text in _SQL.items()},
        }
        self._family = family
        self._lease = Lease(
            self._sessions,
            self._sql,
            broker_id=broker_id,
            schema=schema,
            family=family,
            member_of=member_of,
            lease_seconds=lease_seconds,
            renew_every=self._renew_every,
            run=run,
        )
        #: Opened to write the catalogue alone (see `open`).
        self._catalogue_only = False
        self._placement = placement if family in (broker_id, None) else None
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        #: Writes run one at a time, in call order; `_last_write` is done once the last write
        #: called so far is, and the reads called after it wait for it.
        self._writes = asyncio.Lock()
        self._last_write: asyncio.Future[None] | None = None
        self._opened = self._locking = False
        self._version = 0
        #: The bytes of this broker's stored messages (`used_bytes`), kept up to date by each
        #: commit once counted; None when not known (before the first count, and after a
        #: failed commit, a recovery or a restore), when the next `used_bytes` counts again.
        self._message_bytes: int | None = None
        self._catalogue_writes = 0
        #: The append log (`batonmq.store.postgres_log`): the net effect of this broker's log
        #: rows, the sequence of the last, and their frames' bytes; changed by the writes only,
        #: once their transaction is committed.
        self._pending = Pending()
        self._log_seq = 0
        self._log_bytes = 0

    @property
    def kind(self) -> str:
        return "postgres"

    @property
    def location(self) -> str:
        return self._location

    @property
    def schema_version(self) -> int:
        return self._version

    @property
    def broker_id(self) -> str:
        return self._broker_id

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def epoch(self) -> int:
        """The fencing epoch this broker holds (0 before it claimed the store): every write of
        its streams checks it, as its commits do."""
        return self._lease.epoch

    @property
    def member_id(self) -> str:
        """The HA member this store's identity writes for: the member whose worker it is, or
        its own."""
        return self._member_of or self._broker_id

    @property
    def catalogue_writes(self) -> int:
        return self._catalogue_writes

    def on_fenced(self, handler: Callable[[StoreFenced], None]) -> None:
        self._lease.on_fenced = handler

    async def session(self) -> asyncpg.Connection[asyncpg.Record]:
        """A session of its own, outside the pool, set up as the pool's writing sessions are
        (the durability policy's synchronous_commit; a stalled transaction ended after a whole
        lease, and a statement of a client that died cancelled, so that a takeover's claim is
        not held up by either)."""
        return await self._sessions.session()

    def failure(self, what: str, error: BaseException) -> StoreError:
        """A database error of a session of this store as a StoreError for an operator."""
        return StoreError(self._sessions.failure(what, error))

    def fenced_elsewhere(self, why: str) -> None:
        """A write of this broker outside the store's own calls (a stream's) found its epoch
        superseded: the store is fenced, as if one of its own writes had found it (on the
        event loop)."""
        self._lease.fence(why)

    async def _call(
        self, what: str, work: Callable[[Connection], Awaitable[_T]], *, write: bool
    ) -> _T:
        """Run `work` on a connection of the pool: a write after the writes called before it,
        one at a time; a read once those writes are done, beside any write called after it. A
        database error becomes StoreError."""
        if not write:
            # Read synchronously, before the first await: the writes called before this read.
            pending = self._last_write
            if pending is not None and not pending.done():
                await asyncio.wait([pending])
            return await self._run(what, work)
        done = self._last_write = asyncio.get_running_loop().create_future()
        try:
            async with self._writes:
                return await self._run(what, work)
        finally:
            done.set_result(None)

    async def _run(self, what: str, work: Callable[[Connection], Awaitable[_T]]) -> _T:
        pool = self._pool
        if not self._opened or pool is None:
            raise StoreError(f"the store {self._location} is not open")
        if self._lease.fenced is not None:
            raise StoreFenced(str(self._lease.fenced))
        try:
            # A connection lost with the server is found closed here, and the pool replaces it.
            async with pool.acquire(timeout=CONNECT_TIMEOUT) as connection:
                return await work(connection)
        except DATABASE_ERRORS as error:
            raise StoreError(self._sessions.failure(f"{what} failed on", error)) from error

    async def _writes_called(self) -> None:
        """Wait for the writes called so far (as a read does)."""
        pending = self._last_write
        if pending is not None and not pending.done():
            await asyncio.wait([pending])

    @staticmethod
    async def _prepare_session(connection: Connection) -> None:
        await connection.execute(
            f"CREATE TEMPORARY TABLE {_CANDIDATES_TABLE} (id BIGINT NOT NULL) ON COMMIT DELETE ROWS"
        )

    def _require_current(self, *, write: bool) -> None:
        if write and not self._locking:
            raise StoreError(f"{self._location} was opened read-only (without the lock)")
        if self._version == 0:
            raise StoreError(f"{self._location} holds no BatonMQ store")
        if self._version < SCHEMA_VERSION:
            raise SchemaTooOld(
                f"{self._location} has schema version {self._version}; this BatonMQ needs "
                f"{SCHEMA_VERSION}: run `batonctl db upgrade`"
            )

    async def _identities(self, connection: Connection) -> list[str]:
        """Whose rows this store reads as its broker's: a worker's or an HA member's own; for
        a standalone broker's own identity, its workers' too (`batonmq.store.pgfamily`)."""
        if self._family != self._broker_id:
            return [self._broker_id]
        return await identities(connection, self._sql, self._broker_id)

    def _is_ours(self, owner: object) -> bool:
        """Whether `owner` is this store's identity or, for a broker's own, a worker's."""
        return owner == self._broker_id or (
            isinstance(owner, str)
            and self._family == self._broker_id
            and worker_index(self._broker_id, owner) is not None
        )
