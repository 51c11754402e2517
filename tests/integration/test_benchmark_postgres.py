"""The benchmark's PostgreSQL rows run with what the `bench` extra installs: no pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Starts the benchmark's server where pytest cannot be imported, makes a database, checks
#: that the server runs with fsync on (a benchmark of durable stores), and stops it.
WITHOUT_PYTEST = """
import asyncio, sys
sys.modules["pytest"] = None  # import pytest now raises ImportError
import asyncpg
from benchmarks.brokers.postgres import start_postgres

async def fsync(dsn):
    connection = await asyncpg.connect(dsn)
    try:
        return await connection.fetchval("SHOW fsync")
    finally:
        await connection.close()

postgres = start_postgres()
try:
    print(asyncio.run(fsync(postgres.create_database("without_pytest"))))
finally:
    postgres.stop()
"""


def test_the_postgres_rows_start_their_server_without_pytest() -> None:
    """The Hardening requirements: "The benchmark extra installs what every row needs (the
    PostgreSQL rows fail without pytest today)"."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYTEST],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert (done.returncode, done.stdout) == (0, "on\n"), done.stderr
