"""A throwaway PostgreSQL server for the BatonMQ-postgres rows, from tests/pgserver.py.

The tests run theirs with fsync=off; a benchmark that compares durable stores must not, so this
one starts with PostgreSQL's defaults (fsync on, synchronous_commit on), like RabbitMQ's message
store, which fsyncs before it confirms.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from benchmarks.brokers.base import BrokerError, free_port

if TYPE_CHECKING:
    from tests.pgserver import ThrowawayServer

DATABASE = "batonmq_bench"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL to run the postgres rows on (the message says why)."""


class BenchPostgres:
    """A started server; each broker has a database of its own (`create_database`). `stop`
    removes it all."""

    def __init__(self, server: ThrowawayServer) -> None:
        self.server = server

    def postmaster_pid(self) -> int:
        return int((Path(self.server.data_dir) / "postmaster.pid").read_text().split()[0])

    def create_database(self, name: str) -> str:
        """A new empty database; its DSN."""
        try:
            asyncio.run(_create_database(self.server.admin_dsn, name))
        except (OSError, asyncpg.PostgresError) as error:
            raise BrokerError(f"cannot create the database {name}: {error}") from error
        return self.server.admin_dsn.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        try:
            self.server.stop()
        finally:
            self.server.remove()


def start_postgres() -> BenchPostgres:
    """Start a server (PostgresUnavailable when there is none to start)."""
    try:
        import pytest
        from tests import pgserver
    except ImportError as error:
        raise PostgresUnavailable(f"tests/pgserver.py cannot be imported: {error}") from error
    try:
        server = pgserver.ThrowawayServer(pgserver.find_postgres_binaries())
    except pytest.fail.Exception as failure:  # pgserver reports with pytest.fail
        raise PostgresUnavailable(str(failure)) from None
    try:
        _start_durable(server)
    except pytest.fail.Exception as failure:
        server.stop()
        server.remove()
        raise PostgresUnavailable(str(failure)) from None
    except BaseException:
        server.stop()
        server.remove()
        raise
    return BenchPostgres(server)


def _start_durable(server: ThrowawayServer) -> None:
    """ThrowawayServer.start, without its fsync=off."""
    server.port = free_port()
    options = (
        f"-c port={server.port} -c listen_addresses=127.0.0.1 "
        f"-c unix_socket_directories={server.directory}"
    )
    server._run(
        "pg_ctl",
        "--pgdata",
        str(server.data_dir),
        "--log",
        str(server.log_file),
        "--wait",
        "--timeout=60",
        "-o",
        options,
        "start",
    )
    server.running = True


async def _create_database(admin_dsn: str, name: str) -> None:
    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
