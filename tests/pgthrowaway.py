"""A throwaway PostgreSQL server: initdb in a temporary directory, started on a free loopback
port, stopped and removed at the end. Plain Python, no pytest: the tests' fixtures
(tests/pgserver.py) and the benchmark's PostgreSQL rows (benchmarks/brokers/postgres.py) both
run it.
"""

from __future__ import annotations

import asyncio
import glob
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg

from tests.ports import free_port

_INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH or under "
    "/usr/lib/postgresql/*/bin: install Debian's postgresql package "
    "(apt-get install postgresql), or set BATONMQ_TEST_POSTGRES_DSN to a server where the user "
    "may CREATE DATABASE"
)


class PostgresUnavailable(RuntimeError):
    """No server could be set up or started (the message says why, with the server's log)."""


class ThrowawayServer:
    """A PostgreSQL server in a temporary directory, on a free loopback port, with the unix
    socket in that directory. Run as the `postgres` system user when the tests run as root
    (PostgreSQL refuses to run as root). A watchdog process stops it and removes the directory
    if the process that made it dies without tearing down (killed, or out of time).

    Given a running `primary`, it is that server's streaming standby instead: a base backup of
    it (pg_basebackup -R), read-only until promoted, with the primary's users and password."""

    def __init__(self, bin_dir: Path, *, primary: ThrowawayServer | None = None) -> None:
        self.bin_dir = bin_dir
        # Not under pytest's tmp_path (private to root): the server may not run as root.
        self.directory = Path(tempfile.mkdtemp(prefix="batonmq-pg-"))
        self.data_dir = self.directory / "data"
        self.log_file = self.directory / "server.log"
        self.password = primary.password if primary else secrets.token_urlsafe(16)
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
            if primary is None:
                self._initdb()
            else:
                self._base_backup(primary)
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

    def _base_backup(self, primary: ThrowawayServer) -> None:
        if self._as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
        # -R writes standby.signal and a primary_conninfo with these settings (password too).
        self._run(
            "pg_basebackup",
            "--pgdata",
            str(self.data_dir),
            "--write-recovery-conf",
            "--wal-method=stream",
            "--no-sync",
            f"--dbname=host=127.0.0.1 port={primary.port} user=postgres "
            f"password={primary.password} application_name=standby",
        )

    def promote(self) -> None:
        """Make a standby a primary (pg_ctl promote), waiting until it takes writes."""
        self._run("pg_ctl", "--pgdata", str(self.data_dir), "--wait", "promote")

    def kill(self) -> None:
        """Stop at once, as a crash would: no checkpoint, sessions cut (immediate shutdown)."""
        if self.running:
            self._run("pg_ctl", "--pgdata", str(self.data_dir), "-m", "immediate", "stop")
            self.running = False

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    def start(self, *, fsync: bool = False) -> None:
        """Start on a free port (the same one again after a `stop`), waiting until it accepts
        connections. Without `fsync` (the tests': they kill brokers, never the machine) a
        crash of the machine may lose commits; a benchmark of durable stores wants it on."""
        if not self.port:
            self.port = free_port()
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.directory} -c fsync={'on' if fsync else 'off'}"
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

    def query(self, statement: str) -> object:
        """The first value `statement` returns, run as the server's superuser."""

        async def run() -> object:
            connection = await asyncpg.connect(self.admin_dsn)
            try:
                return await connection.fetchval(statement)
            finally:
                await connection.close()

        return asyncio.run(run())

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
            raise PostgresUnavailable(
                f"{' '.join(command)} failed ({finished.returncode}):\n"
                f"{finished.stdout}{finished.stderr}{log}"
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
    """The directory holding initdb and pg_ctl (PostgresUnavailable when there is none)."""
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
    raise PostgresUnavailable(_INSTALL_HINT)
