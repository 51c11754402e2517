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

import asyncio
import concurrent.futures
import glob
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
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
    (PostgreSQL refuses to run as root). A watchdog process stops it and removes the directory
    if pytest dies without tearing down (killed, or out of time)."""

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
        stop = self._command("pg_ctl", "--pgdata", str(self.data_dir), "-m", "immediate", "stop")
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self.directory), *stop],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives a Ctrl-C to pytest's process group
        )
        try:
            self._initdb()
        except BaseException:
            self.remove()
            raise

    def _initdb(self) -> None:
        password_file = self.directory / "password"
        password_file.write_text(self.password + "\n")
        if self._as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
            shutil.chown(password_file, "postgres", "postgres")
        # Passwords are checked on TCP, as on Debian's default cluster: a test relies on it.
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
        """Remove the directory of a stopped server; the watchdog, seeing it gone, ends."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self._watchdog.wait(10)

    def _command(self, program: str, *arguments: str) -> list[str]:
        command = [str(self.bin_dir / program), *arguments]
        if self._as_postgres:
            return ["runuser", "-u", "postgres", "--", *command]
        return command

    def _run(self, program: str, *arguments: str) -> None:
        command = self._command(program, *arguments)
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


#: argv: pytest's pid, the server's directory, the command that stops the server. Ends when the
#: directory goes (a normal teardown); stops the server and removes it when pytest goes first.
_WATCHDOG = """
import os, shutil, subprocess, sys, time
parent, directory, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while os.path.isdir(directory):
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(directory, ignore_errors=True)
        break
    time.sleep(0.5)
"""


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
