"""PostgreSQL for the tests: a server for the session, and a fresh empty database per test.

With BATONMQ_TEST_POSTGRES_DSN set (CI sets it, see .ci/run), the tests use that server, which
must let its user CREATE DATABASE and must check passwords on TCP (as Debian's default
pg_hba.conf does). Otherwise the session starts a throwaway server of its own from the
PostgreSQL binaries on PATH or under /usr/lib/postgresql/*/bin, and stops it at the end. No
binaries is a failure, not a skip: the project runs every test or says why it cannot.

The throwaway server (tests/pgthrowaway.py) runs with fsync=off: the tests kill brokers, never
the machine, and a clean PostgreSQL shutdown (which the restart test does) writes everything to
the operating system.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import pytest

from tests.pgthrowaway import PostgresUnavailable, ThrowawayServer, find_postgres_binaries

DSN_VARIABLE = "BATONMQ_TEST_POSTGRES_DSN"


@dataclass(slots=True)
class PostgresServer:
    """A server the tests may create databases in; `admin_dsn` names its maintenance database."""

    admin_dsn: str
    #: Set when this session started the server (None for BATONMQ_TEST_POSTGRES_DSN).
    process: ThrowawayServer | None = None

    def dsn_for(self, database: str) -> str:
        """The admin DSN pointed at another database of the same server."""
        parts = urllib.parse.urlsplit(self.admin_dsn)
        return urllib.parse.urlunsplit(parts._replace(path="/" + database))


def start_throwaway_server() -> ThrowawayServer:
    """A started server; fails the test run (saying why) when there is none to start."""
    try:
        server = ThrowawayServer(find_postgres_binaries())
    except PostgresUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    try:
        server.start()
    except PostgresUnavailable as error:
        server.remove()
        pytest.fail(str(error), pytrace=False)
    except BaseException:
        server.remove()
        raise
    return server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server: BATONMQ_TEST_POSTGRES_DSN's, or a throwaway one."""
    external = os.environ.get(DSN_VARIABLE)
    if external:
        yield PostgresServer(admin_dsn=external)
        return
    process = start_throwaway_server()
    try:
        yield PostgresServer(admin_dsn=process.admin_dsn, process=process)
    finally:
        try:
            process.stop()
        finally:
            process.remove()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A DSN to a fresh, empty database of this test's own, dropped afterwards. (A plain fixture,
    so that sync tests and fixtures may use it as well as async ones, on any event loop.)"""
    database = f"batonmq_test_{secrets.token_hex(6)}"
    _administer(postgres_server, f'CREATE DATABASE "{database}"')
    try:
        yield postgres_server.dsn_for(database)
    finally:
        # FORCE ends sessions a failed test left open.
        _administer(postgres_server, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _administer(server: PostgresServer, statement: str) -> None:
    """Run `statement` on the server's maintenance database, on an event loop of its own in
    another thread (the test's loop may be running, or not exist)."""

    async def run() -> None:
        connection = await asyncpg.connect(server.admin_dsn)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, run()).result()


@pytest.fixture
def postgres_throwaway_server() -> Iterator[ThrowawayServer]:
    """A server of this test's own, for tests that stop and restart it (never the session's,
    which other tests share), even when BATONMQ_TEST_POSTGRES_DSN is set."""
    server = start_throwaway_server()
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            server.remove()
