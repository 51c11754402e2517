"""PostgreSQL for the tests: a server for the session, and a fresh empty database per test.

With BATONMQ_TEST_POSTGRES_DSN set (CI sets it, see .ci/run), the tests use that server, which
must let its user CREATE DATABASE and must check passwords on TCP (as Debian's default
pg_hba.conf does). Otherwise the session starts a throwaway server of its own from the
PostgreSQL binaries on PATH or under /usr/lib/postgresql/*/bin, and stops it at the end. No
binaries is a failure, not a skip: the project runs every test or says why it cannot.

The throwaway server runs with fsync=off: the tests kill brokers, never the machine, and a clean
PostgreSQL shutdown (which the restart test does) writes everything to the operating system.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

DSN_VARIABLE = "BATONMQ_TEST_POSTGRES_DSN"
_INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH or under "
    "/usr/lib/postgresql/*/bin: install Debian's postgresql package "
    "(apt-get install postgresql), or set BATONMQ_TEST_POSTGRES_DSN to a server where the user "
    "may CREATE DATABASE"
)


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


class ThrowawayServer:
    """A PostgreSQL server in a temporary directory, on a free loopback port, with the unix
    socket in that directory. Run as the `postgres` system user when the tests run as root
    (PostgreSQL refuses to run as root)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        # Not under pytest's tmp_path: that is private to root, and the server may not be root.
        self.directory = Path(tempfile.mkdtemp(prefix="batonmq-pg-"))
        self.data_dir = self.directory / "data"
        self.log_file = self.directory / "server.log"
        self.password = secrets.token_urlsafe(16)
        self.port = 0
        self.running = False
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
        password_file = self.directory / "password"
        password_file.write_text(self.password + "\n")
        if self._as_postgres:
            shutil.chown(password_file, "postgres", "postgres")
        self._run(
            "initdb",
            "--pgdata",
            str(self.data_dir),
            "--username=postgres",
            f"--pwfile={password_file}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        password_file.unlink()

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start on a free port (the same one again after a `stop`), waiting until it accepts
        connections."""
        if not self.port:
            self.port = _free_port()
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.directory} -c fsync=off"
        )
        self._run(
            "pg_ctl",
            "--pgdata",
            str(self.data_dir),
            "--log",
            str(self.log_file),
            "--wait",
            "--timeout=60",
            "-o",
            options,
            "start",
        )
        self.running = True

    def stop(self) -> None:
        """Fast shutdown: sessions are ended, data is written out."""
        if self.running:
            self._run("pg_ctl", "--pgdata", str(self.data_dir), "--wait", "-m", "fast", "stop")
            self.running = False

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def _run(self, program: str, *arguments: str) -> None:
        command = [str(self.bin_dir / program), *arguments]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        finished = subprocess.run(
            command, cwd=self.directory, capture_output=True, text=True, check=False
        )
        if finished.returncode != 0:
            log = self.log_file.read_text() if self.log_file.exists() else ""
            pytest.fail(
                f"{' '.join(command)} failed ({finished.returncode}):\n"
                f"{finished.stdout}{finished.stderr}{log}",
                pytrace=False,
            )


def find_postgres_binaries() -> Path:
    """The directory holding initdb and pg_ctl; fails the test run when there is none."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: (
            int(Path(path).parent.parent.name) if Path(path).parent.parent.name.isdigit() else 0
        ),
    )
    if versions:
        return Path(versions[-1]).parent
    pytest.fail(_INSTALL_HINT, pytrace=False)


def start_throwaway_server() -> ThrowawayServer:
    server = ThrowawayServer(find_postgres_binaries())
    try:
        server.start()
    except BaseException:
        server.remove()
        raise
    return server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
async def postgres_dsn(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A DSN to a fresh, empty database of this test's own, dropped afterwards."""
    database = f"batonmq_test_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(postgres_server.admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{database}"')
    finally:
        await admin.close()
    try:
        yield postgres_server.dsn_for(database)
    finally:
        admin = await asyncpg.connect(postgres_server.admin_dsn)
        try:
            # FORCE ends sessions a failed test left open.
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await admin.close()


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
