"""Two workers' peer links joined in one test process: a real Unix socket pair, each end
handed to its worker as if the other worker had made the link (`PeerLinks.adopt`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from batonmq.cluster.peerlink import PeerLinks
from batonmq.engine.broker import Broker
from batonmq.engine.recovery import restore
from batonmq.store.sqlite import SQLiteStore


def join(first: PeerLinks, second: PeerLinks) -> None:
    """Link worker 0 (`first`) and worker 1 (`second`); the link is up once both HELLOs came."""
    near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    first.adopt(near, (1, second.start_id))
    second.adopt(far, (0, first.start_id))


async def joined(first: PeerLinks, second: PeerLinks, timeout: float = 5.0) -> None:
    """`join` them and wait until the link is up on both sides."""
    join(first, second)
    async with asyncio.timeout(timeout):
        while first.link(1) is None or second.link(0) is None:
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def linked_broker(directory: Path, index: int) -> AsyncIterator[tuple[Broker, PeerLinks]]:
    """Worker `index` of two: a Broker on a SQLite file of its own in `directory` (made here),
    recovered and writing, and its peer links, closed in order when the block ends."""
    directory.mkdir()
    store = SQLiteStore(directory / "batonmq.sqlite3", broker_id=f"w{index}", sync=False)
    await store.open()
    broker = Broker(store=store)
    restore(broker, await store.recover())
    broker.journal.start()
    links = PeerLinks(index, 2, [], started_again=False)
    try:
        yield broker, links
    finally:
        links.close()
        await broker.journal.stop()
        await store.close()
