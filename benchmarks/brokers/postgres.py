"""A throwaway PostgreSQL server for the BatonMQ-postgres rows (tests/pgthrowaway.py, which
needs no pytest).

The tests run theirs with fsync=off; a benchmark that compares durable stores must not, so this
one starts with PostgreSQL's defaults (fsync on, synchronous_commit on), like RabbitMQ's message
store, which fsyncs before it confirms.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
from tests.pgthrowaway import ThrowawayServer, find_postgres_binaries

from benchmarks.brokers.base import BrokerError

DATABASE = "batonmq_bench"


class BenchPostgres:
    """A started server; each broker has a database of its own (`create_database`). `stop`
    removes it all."""

    def __init__(self, server: ThrowawayServer) -> None:
        self.server = server

    def postmaster_pid(self) -> int:
        return int((Path(self.server.data_dir) / "postmaster.pid").read_text().split()[0])

    def create_database(self, name: str, *, exist_ok: bool = False) -> str:
        """A new empty database (with `exist_ok`, the one of that name if there is one); its
        DSN."""
        try:
            asyncio.run(_create_database(self.server.admin_dsn, name))
        except asyncpg.DuplicateDatabaseError:
            if not exist_ok:
                raise BrokerError(f"the database {name} exists already") from None
        except (OSError, asyncpg.PostgresError) as error:
            raise BrokerError(f"cannot create the database {name}: {error}") from error
        return self.server.admin_dsn.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        try:
            self.server.stop()
        finally:
            self.server.remove()


def start_postgres() -> BenchPostgres:
    """Start a server with fsync on (PostgresUnavailable when there is none to start)."""
    server = ThrowawayServer(find_postgres_binaries())
    try:
        server.start(fsync=True)
    except BaseException:
        server.stop()
        server.remove()
        raise
    return BenchPostgres(server)


async def _create_database(admin_dsn: str, name: str) -> None:
    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
