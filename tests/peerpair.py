"""Two workers' peer links joined in one test process: a real Unix socket pair, each end
handed to its worker as if the other worker had made the link (`PeerLinks.adopt`); and a
worker that publishes to and consumes from the other's queues over them (`linked_worker`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from batonmq.cluster.peerlink import PeerLink, PeerLinks
from batonmq.engine.broker import Broker
from batonmq.engine.recovery import restore
from batonmq.engine.remoteconsumers import ConsumeLinks
from batonmq.engine.remotequeue import PublishLinks, RemoteQueue
from batonmq.model.topology import QueueDeclared
from batonmq.queues.classic import ClassicQueue
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
    broker.worker_ref = (index, links.start_id)  # as a spread worker names its connections
    try:
        yield broker, links
    finally:
        links.close()
        await broker.journal.stop()
        await store.close()


def records_seen(links: PeerLinks, kind: int) -> list[int]:
    """The payload length of every record of `kind` that `links` handles from now on."""
    seen: list[int] = []
    handler = links.handlers[kind]

    def counting(link: PeerLink, payload: bytes) -> None:
        seen.append(len(payload))
        handler(link, payload)

    links.handlers[kind] = counting
    return seen


@dataclass
class LinkedWorker:
    """A worker of two, publishing to and consuming from the other's queues over its links."""

    broker: Broker
    links: PeerLinks
    publishing: PublishLinks
    consuming: ConsumeLinks

    def know(self, owner: Broker, name: str) -> ClassicQueue:
        """Queue `name` of vhost "/" that `owner` (the other worker) runs, known here as a
        `RemoteQueue` (what a spread virtual host's declaration does); the owner's queue."""
        queue = owner.vhosts["/"].queues[name]
        assert isinstance(queue, ClassicQueue)
        declared = QueueDeclared(name, queue.durable, queue.auto_delete, None, queue.arguments)
        peer = 1 - self.links.index
        self.broker.vhosts["/"].remote[name] = RemoteQueue(
            "/", declared, queue.options, self.publishing.outbound(peer), self.consuming.to(peer)
        )
        return queue


@contextlib.asynccontextmanager
async def linked_worker(directory: Path, index: int) -> AsyncIterator[LinkedWorker]:
    """`linked_broker` with publishing and consuming across installed on its links."""
    async with linked_broker(directory, index) as (broker, links):
        publishing = PublishLinks(broker, links)
        publishing.install()
        consuming = ConsumeLinks(broker, links, publishing)
        consuming.install()
        yield LinkedWorker(broker, links, publishing, consuming)
