"""The stores under test: every contract test runs once against SQLite and once against
PostgreSQL (a fresh empty database per test, from the `postgres_dsn` fixture of tests/pgserver.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

import pytest

from batonmq.store.base import Store
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
            dsn, broker_id=broker_id, schema=f"batonmq_s_{name}", sync=sync
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
