"""Relaying a TLS client's connection to the worker that owns its virtual host
(`batonmq.server.relay`), over real sockets: the client's connection is a loopback TCP
connection here (the relay sees only a transport, TLS or not), the owner's a Unix socket pair."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from batonmq.server.relay import Relay


class _Accepted(asyncio.Protocol):
    """The accepting worker's protocol until the relay takes the transport over."""

    def __init__(self) -> None:
        self.transport: asyncio.Future[asyncio.Transport] = (
            asyncio.get_running_loop().create_future()
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport.set_result(transport)  # type: ignore[arg-type]


@dataclass
class Ends:
    #: The client's socket, and the owner's.
    client: socket.socket
    owner: socket.socket
    relay: Relay


@pytest.fixture
async def ends() -> AsyncIterator[Ends]:
    loop = asyncio.get_running_loop()
    accepted = _Accepted()
    server = await loop.create_server(lambda: accepted, "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    client.setblocking(False)
    transport = await accepted.transport
    near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    far.setblocking(False)
    near.setblocking(False)
    relay = Relay(transport, near)
    yield Ends(client, far, relay)
    relay.abort()
    client.close()
    far.close()
    server.close()


async def _read(sock: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < size:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, size - len(data)), 5)
        if not chunk:
            break
        data += chunk
    return data


async def test_bytes_pass_both_ways_in_order(ends: Ends) -> None:
    loop = asyncio.get_running_loop()
    for n in range(20):
        await loop.sock_sendall(ends.client, b"frame%02d" % n)
    assert await _read(ends.owner, 140) == b"".join(b"frame%02d" % n for n in range(20))
    await loop.sock_sendall(ends.owner, b"deliver" * 1000)
    assert await _read(ends.client, 7000) == b"deliver" * 1000


async def test_the_client_leaving_ends_the_owners_side(ends: Ends) -> None:
    """The owner's session ends as for a client that left."""
    ends.client.close()
    assert await _read(ends.owner, 1) == b""
    await asyncio.wait_for(ends.relay.ended.wait(), 5)


async def test_the_owner_closing_sends_what_it_wrote_then_ends_the_client(ends: Ends) -> None:
    """connection.close from the owner reaches the client before the connection ends."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(ends.owner, b"connection.close")
    ends.owner.close()
    assert await _read(ends.client, 100) == b"connection.close"
    await asyncio.wait_for(ends.relay.ended.wait(), 5)


async def test_a_client_the_owner_does_not_read_is_not_read_either(ends: Ends) -> None:
    """Backpressure passes through: while the owner's side is backed up, the client's is not
    read, so the relay buffers at most a transport's high-water mark."""
    loop = asyncio.get_running_loop()
    chunk = b"x" * 65536
    sent, blocked = 0, 0
    while blocked < 3:  # the client's socket stays full while the relay gets time to read
        try:
            sent += ends.client.send(chunk)
            blocked = 0
        except BlockingIOError:
            blocked += 1
            await asyncio.sleep(0.2)
        assert sent < 64 * 1024 * 1024, "the relay read everything the client sent"
    # Everything sent arrives once the owner reads.
    received = 0
    while received < sent:
        received += len(await asyncio.wait_for(loop.sock_recv(ends.owner, 1 << 20), 5))
    assert received == sent
