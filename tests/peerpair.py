"""Two workers' peer links joined in one test process: a real Unix socket pair, each end
handed to its worker as if the other worker had made the link (`PeerLinks.adopt`)."""

from __future__ import annotations

import asyncio
import socket

from batonmq.cluster.peerlink import PeerLinks


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
