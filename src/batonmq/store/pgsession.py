"""How the PostgreSQL store reaches its server: the sessions it opens, their settings, and how
they are closed.

Calls go over a pool of asyncpg connections (`Sessions.create_pool`); the lease, a backup and a
stream's writes each use a session of their own outside it (`connect`, `session`). Every session
runs with the `synchronous_commit` of the configuration's durability policy
(`batonmq.config.durability`). A session that writes also ends a transaction left idle for a
whole lease and cancels the statement of a client that died, so that a takeover's claim is held
up by neither. An error names the server and schema, never the password.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Coroutine
from typing import Final, TypeAlias

import asyncpg

from batonmq.store.base import StoreUnavailable
from batonmq.store.dsn import parse_dsn
from batonmq.store.pgerrors import DATABASE_ERRORS

#: A session of the store: one of the pool's, or one of its own.
Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)

CONNECT_TIMEOUT: Final = 10.0
CLOSE_TIMEOUT: Final = 5.0
#: How often PostgreSQL checks that a client running a statement is still there (14 and later).
_CLIENT_CHECK_MS: Final = 1000
#: Pool connections: one writer at a time, and reads beside it.
_POOL_SIZE: Final = 4


class Sessions:
    """The sessions of one store, at `dsn`, for broker `broker_id`, in schema `schema`."""

    def __init__(
        self,
        dsn: str,
        *,
        broker_id: str,
        schema: str,
        synchronous_commit: str,
        lease_seconds: float,
    ) -> None:
        self._dsn, safe_dsn, self._secrets = parse_dsn(dsn)
        self._broker_id = broker_id
        self._synchronous_commit = synchronous_commit
        self._lease_seconds = lease_seconds
        #: Where the store is, for an operator: the DSN without its password, and the schema.
        self.location = f"{safe_dsn} schema {schema}"

    async def connect(self) -> asyncpg.Connection[asyncpg.Record]:
        """A new session outside the pool (the lease's, a backup's)."""
        return await self._connect(self._server_settings())

    async def session(self) -> asyncpg.Connection[asyncpg.Record]:
        """A new session outside the pool, set up as the pool's writing sessions are (a
        stream's)."""
        return await self._connect(self._writing_settings())

    async def create_pool(
        self, init: Callable[[Connection], Coroutine[object, object, None]] | None
    ) -> asyncpg.Pool[asyncpg.Record]:
        """The pool, each new session set up by `init`. None is kept open when idle
        (`min_size` 0): a pool that keeps a floor connects again on its own after an outage,
        logging a traceback per attempt; this one connects when a call needs it, and the
        store's open makes the first connection, so a wrong DSN or a server down is found
        there."""
        try:
            return await asyncpg.create_pool(
                self._dsn,
                min_size=0,
                max_size=_POOL_SIZE,
                init=init,
                reset=_keep_session,
                timeout=CONNECT_TIMEOUT,
                server_settings=self._writing_settings(),
            )
        except (*DATABASE_ERRORS, ValueError) as error:
            raise StoreUnavailable(self.failure("cannot connect to", error)) from error

    def failure(self, what: str, error: BaseException) -> str:
        """Text for an operator: what failed where, and why; never the password."""
        reason = str(error) or type(error).__name__
        for secret in self._secrets:
            reason = reason.replace(secret, "***")
        return f"{what} PostgreSQL at {self.location}: {reason}"

    async def _connect(self, settings: dict[str, str]) -> asyncpg.Connection[asyncpg.Record]:
        try:
            return await asyncpg.connect(
                self._dsn, timeout=CONNECT_TIMEOUT, server_settings=settings
            )
        except (*DATABASE_ERRORS, ValueError) as error:
            raise StoreUnavailable(self.failure("cannot connect to", error)) from error

    def _server_settings(self) -> dict[str, str]:
        return {
            "application_name": f"batonmq {self._broker_id}"[:63],
            "synchronous_commit": self._synchronous_commit,
        }

    def _writing_settings(self) -> dict[str, str]:
        return {
            **self._server_settings(),
            # A broker stalled inside a write (paused, SIGSTOP) holds the share lock of its
            # epoch check on its record, which a takeover's claim must update: once it has been
            # idle in the transaction for a whole lease, the time after which it may be taken
            # over, PostgreSQL ends its session and the claim goes on.
            "idle_in_transaction_session_timeout": str(max(1, round(self._lease_seconds * 1000))),
            # A broker that died inside a long statement (a commit deleting the messages of a
            # large backlog) would hold the same lock until the statement ends, minutes later:
            # PostgreSQL looks for the vanished client every second and cancels its statement.
            "client_connection_check_interval": str(_CLIENT_CHECK_MS),
        }


async def _keep_session(connection: Connection) -> None:
    """Nothing to reset when a connection goes back to the pool: the store changes no session
    setting (SET LOCAL only), and its temporary table is emptied at each commit. The default
    reset (RESET ALL, CLOSE ALL, ...) would cost a round trip per call."""


async def close(closing: Connection | asyncpg.Pool[asyncpg.Record]) -> None:
    """Close a session or the pool gracefully, or abort it (the server then ends the sessions,
    and with them anything they held), also when the close is cancelled."""
    try:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result of a close
        # that completes as its task is cancelled and drops the cancellation, so the task that
        # cancelled the closing one would wait for it forever.
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await closing.close()
    except DATABASE_ERRORS:
        closing.terminate()
    except asyncio.CancelledError:
        closing.terminate()
        raise


async def fetch_row(connection: Connection, query: str, *arguments: object) -> asyncpg.Record:
    """The one row of a query that always returns one (an aggregate)."""
    row = await connection.fetchrow(query, *arguments)
    assert row is not None  # an aggregate query always returns a row
    return row


def row_count(status: str) -> int:
    """The row count of a command status such as "DELETE 3"."""
    return int(status.rsplit(" ", 1)[-1])


def advisory_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key for `parts` (the lock space is per database)."""
    digest = hashlib.blake2b("\0".join(("batonmq", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
