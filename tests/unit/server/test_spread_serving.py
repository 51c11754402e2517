"""A connection to a spread virtual host stays in the worker that accepted it.

The rule pinned (docs/multi-core.md, step 6): every worker serves a virtual host named in
`broker.spread_vhosts` (each of its queues has one owner, and the workers carry messages to it
between them), so connection.open for one is answered where the connection was accepted; a
connection to a virtual host another worker owns whole is still handed to its owner. Real
sockets, the real `AMQPProtocol` and the real hand-off inboxes; the client is the blocking
raw-frame client, run in a thread beside the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator

import pytest
from pamqp import commands

from batonmq.engine.broker import Broker
from batonmq.server.placement import WorkerSeat, inbox_pairs, owner_of
from batonmq.server.protocol import AMQPProtocol
from tests.ports import free_port
from tests.rawclient import RawClient
from tests.wire import plain_response

BUFFER = 1 << 20
#: The worker that does not own "/" among two.
NOT_THE_OWNER = 1 - owner_of("/", 2)


def _open(client: RawClient) -> None:
    """The handshake up to connection.open, with no wait for its answer."""
    client.start()
    tune = client.login("PLAIN", plain_response("guest", "guest"))
    client.tune_ok(tune.channel_max, tune.frame_max, 0)
    client.send_frame(commands.Connection.Open(virtual_host="/"))


@pytest.fixture
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A broker whose log shows a traceback fails the test."""
    caplog.set_level(logging.INFO)
    yield
    assert [record for record in caplog.records if record.exc_info] == []


async def _serve(spread: frozenset[str]) -> AsyncIterator[tuple[int, list[AMQPProtocol]]]:
    """A listener of worker NOT_THE_OWNER among two, with `spread` virtual hosts."""
    broker = Broker()
    inboxes = inbox_pairs(2)
    seat = WorkerSeat(NOT_THE_OWNER, 2, {}, inboxes, -1, [], "run", spread=spread)
    protocols: list[AMQPProtocol] = []
    port = free_port()

    def new_protocol() -> AMQPProtocol:
        protocol = AMQPProtocol(broker, BUFFER, BUFFER // 2, lambda _protocol: None, seat=seat)
        protocols.append(protocol)
        return protocol

    listener = await asyncio.get_running_loop().create_server(new_protocol, "127.0.0.1", port)
    try:
        yield port, protocols
    finally:
        listener.close()
        for protocol in protocols:
            if protocol.transport is not None:
                protocol.transport.abort()
        await listener.wait_closed()
        for ends in inboxes:
            for end in ends:
                end.close()


@pytest.fixture
async def spread_server(no_tracebacks: None) -> AsyncIterator[tuple[int, list[AMQPProtocol]]]:
    async for served in _serve(frozenset({"/"})):
        yield served


@pytest.fixture
async def whole_server(no_tracebacks: None) -> AsyncIterator[tuple[int, list[AMQPProtocol]]]:
    async for served in _serve(frozenset()):
        yield served


async def test_a_spread_virtual_hosts_connection_stays_where_it_was_accepted(
    spread_server: tuple[int, list[AMQPProtocol]],
) -> None:
    port, protocols = spread_server
    with RawClient.connect("127.0.0.1", port) as client:
        await asyncio.to_thread(client.handshake, vhost="/")
        await asyncio.to_thread(client.open_channel, 1)
        [protocol] = protocols
        assert not protocol.handed_off
        client.send_frame(commands.Connection.Close(200, "bye", 0, 0))
        await asyncio.to_thread(client.expect, commands.Connection.CloseOk)


async def test_a_connection_to_a_virtual_host_run_whole_goes_to_its_owner(
    whole_server: tuple[int, list[AMQPProtocol]],
) -> None:
    port, protocols = whole_server
    with RawClient.connect("127.0.0.1", port) as client:
        await asyncio.to_thread(_open, client)
        [protocol] = protocols
        for _ in range(100):
            if protocol.handed_off:
                break
            await asyncio.sleep(0.05)
        assert protocol.handed_off
