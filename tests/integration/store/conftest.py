"""The stores under test: every contract test runs once against SQLite and once against
PostgreSQL (a fresh empty database per test, from the `postgres_dsn` fixture of tests/pgserver.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

import asyncpg
import pytest

from batonmq.store.base import Store
from batonmq.store.postgres import PostgresStore
from batonmq.store.sqlite import SQLiteStore

#: (broker_id, sync, store name) -> an unopened store.
StoreBuilder = Callable[[str, bool, str], Store]


class StoreFactory(Protocol):
    async def __call__(
        self, broker_id: str = "b1", sync: bool = True, *, store: str | None = None
    ) -> Store:
        """An opened store. Stores of one name are the same data (a file, or a schema): the
        name defaults to the broker id, so `make("b1")` after closing reopens b1's store, and
        `store="shared"` lets two broker ids share one."""
        ...


@pytest.fixture(params=["sqlite", "postgres"], ids=["sqlite", "postgres"])
def store_builder(request: pytest.FixtureRequest, tmp_path: Path) -> StoreBuilder:
    # A sync fixture, so that it may ask for `postgres_dsn` (maybe an async fixture) only when
    # the postgres parameter needs it.
    if request.param == "sqlite":

        def build_sqlite(broker_id: str, sync: bool, name: str) -> Store:
            path = tmp_path / name / "batonmq.sqlite3"
            return SQLiteStore(path, broker_id=broker_id, sync=sync)

        return build_sqlite

    from batonmq.store.postgres import PostgresStore

    dsn: str = request.getfixturevalue("postgres_dsn")

    def build_postgres(broker_id: str, sync: bool, name: str) -> Store:
        store: Store = PostgresStore(
            dsn,
            broker_id=broker_id,
            schema=f"batonmq_s_{name}",
            synchronous_commit="on" if sync else "off",
        )
        return store

    return build_postgres


@pytest.fixture
async def store_factory(store_builder: StoreBuilder) -> AsyncIterator[StoreFactory]:
    """`make(broker_id="b1", sync=True, *, store=None)`: an opened store; all are closed after
    the test (closing twice is allowed, so a test may close one itself)."""
    made: list[Store] = []

    async def make(broker_id: str = "b1", sync: bool = True, *, store: str | None = None) -> Store:
        opened = store_builder(broker_id, sync, store or broker_id)
        made.append(opened)
        await opened.open()
        return opened

    try:
        yield make
    finally:
        for opened in reversed(made):
            await opened.close()


class Tamper(Protocol):
    async def __call__(self, store: Store, message_id: int, *, checksum: bool = False) -> None:
        """Change a stored message behind the store's back, as a failing disk or a hand edit
        would: flip every bit of its body's first byte, or with `checksum` set its checksum to
        NULL (a row written before schema version 6)."""
        ...


@pytest.fixture
def tamper(request: pytest.FixtureRequest) -> Tamper:
    """See `Tamper`; `store` is one that `store_factory` made (named after its broker id)."""

    async def tamper_with(store: Store, message_id: int, *, checksum: bool = False) -> None:
        if store.kind == "sqlite":
            connection = sqlite3.connect(store.location)
            try:
                with connection:
                    if checksum:
                        connection.execute(
                            "UPDATE messages SET checksum = NULL WHERE id = ?", (message_id,)
                        )
                    else:
                        (body,) = connection.execute(
                            "SELECT body FROM messages WHERE id = ?", (message_id,)
                        ).fetchone()
                        connection.execute(
                            "UPDATE messages SET body = ? WHERE id = ?",
                            (bytes([body[0] ^ 0xFF]) + body[1:], message_id),
                        )
            finally:
                connection.close()
            return
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = store.location.rsplit(" schema ", 1)[1]
        change = (
            "checksum = NULL" if checksum else "body = set_byte(body, 0, get_byte(body, 0) # 255)"
        )
        connection = await asyncpg.connect(dsn)
        try:
            status = await connection.execute(
                f'UPDATE "{schema}".messages SET {change} WHERE id = $1', message_id
            )
        finally:
            await connection.close()
        assert status == "UPDATE 1"

    return tamper_with


#: The schema of the test cluster "test" in the shared store.
CLUSTER_SCHEMA = "batonmq_c_test"
MakeMember = Callable[..., PostgresStore]


@pytest.fixture
async def make_member(postgres_dsn: str) -> AsyncIterator[MakeMember]:
    """`make(broker_id, lease_seconds=15.0, renew_every=3600.0)`: an unopened store of
    `broker_id` in the cluster's schema; a short lease that is never renewed stands for a broker
    that stopped updating its record (killed)."""
    made: list[PostgresStore] = []

    def make(
        broker_id: str, lease_seconds: float = 15.0, renew_every: float = 3600.0
    ) -> PostgresStore:
        store = PostgresStore(
            postgres_dsn,
            broker_id=broker_id,
            schema=CLUSTER_SCHEMA,
            lease_seconds=lease_seconds,
            renew_every=renew_every,
        )
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()
