"""The listener's sockets, seen from inside a BrokerServer running in this process."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from batonmq.config import load_config
from batonmq.server.app import BrokerServer


async def test_accepted_sockets_have_nagle_off(tmp_path: Path) -> None:
    """TCP_NODELAY on every client socket: the broker already coalesces its output per loop
    turn, so Nagle's algorithm would only add delay (up to 40 ms against delayed ACKs) to
    confirms and deliveries. asyncio and uvloop both set it on TCP transports already, and the
    protocol sets it again explicitly; this test guards the requirement whichever layer meets
    it (with another event loop, for one)."""
    config = load_config(
        overrides={
            "listeners.amqp.bind": "127.0.0.1",
            "listeners.amqp.port": 0,
            "broker.data_dir": str(tmp_path),
            "listeners.http.enabled": False,
        },
        environ={},
    )
    server = BrokerServer(config)
    [(host, port)] = await server.start()
    try:
        _reader, writer = await asyncio.open_connection(host, port)
        try:
            for _ in range(100):
                if server.protocols:
                    break
                await asyncio.sleep(0.01)
            [protocol] = server.protocols
            assert protocol.transport is not None
            accepted = protocol.transport.get_extra_info("socket")
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            writer.close()
            await writer.wait_closed()
    finally:
        await server.shutdown()
