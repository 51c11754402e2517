"""Closing a PostgreSQL session (`batonmq.store.pgsession.close`) when the task closing it is
cancelled: the cancellation is never lost, and the session is aborted.

The session here is a stand-in with asyncpg's `close` and `terminate`: the case is a close that
completes in the very turn of the event loop in which its task is cancelled, which a real
server cannot be made to hit on purpose.
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from batonmq.store.pgsession import Connection, close


class _Session:
    """A session whose close completes when the test says so."""

    def __init__(self) -> None:
        self.closed = asyncio.get_running_loop().create_future()
        self.terminated = False

    async def close(self) -> None:
        await self.closed

    def terminate(self) -> None:
        self.terminated = True


async def test_a_close_cancelled_as_it_completes_stays_cancelled() -> None:
    """Python 3.11's asyncio.wait_for returns the result of an awaitable that completes in the
    turn its task is cancelled and drops the cancellation: a store's close cancelled at that
    moment (a broker stopping) would have gone on as if never cancelled. asyncpg's pool
    (cancellation-safe resource handling): a cancelled release aborts the connection."""
    session = _Session()
    closing = asyncio.create_task(close(cast(Connection, session)))
    await asyncio.sleep(0)  # the task now waits for the close
    session.closed.set_result(None)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert session.terminated


async def test_a_close_that_completes_leaves_the_session_alone() -> None:
    """The graceful path: a close that completes ends the call, and nothing is aborted."""
    session = _Session()
    closing = asyncio.create_task(close(cast(Connection, session)))
    await asyncio.sleep(0)
    session.closed.set_result(None)
    await closing
    assert not session.terminated
