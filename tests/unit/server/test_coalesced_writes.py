"""Deliveries queued for a connection during one loop turn go out in one socket write.

The rule pinned (the issue on per-connection costs): remove "small reads and writes (coalesce
per loop turn across connections)". `AMQPProtocol` asks for one flush per loop turn however many
frames the engine queues for it, and that flush hands the transport one `write` (or one
`writelines`). AMQP 0-9-1 (4.2.6) lets frames follow one another in a stream with nothing
between them, so one buffer carries them all.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika

from batonmq.engine.broker import Broker
from batonmq.server.protocol import AMQPProtocol
from tests.memclient import connect
from tests.ports import free_port

MESSAGES = 100
BUFFER = 1 << 20


class CountingTransport:
    """A real transport that counts the calls that send bytes."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self._transport.write(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self.writes += 1
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


async def test_deliveries_queued_in_one_turn_are_one_write() -> None:
    """A consumer connection over a real socket; another connection publishes 100 messages to
    its queue in one loop turn (the consumer client sends nothing meanwhile: no-ack, no
    heartbeat due); the consumer's connection flushes once, its transport is written to
    once, and the client gets all 100."""
    broker = Broker()
    protocols: list[AMQPProtocol] = []

    def new_protocol() -> AMQPProtocol:
        protocol = AMQPProtocol(broker, BUFFER, BUFFER // 2, lambda _protocol: None)
        protocols.append(protocol)
        return protocol

    loop = asyncio.get_running_loop()
    port = free_port()
    server = await loop.create_server(new_protocol, "127.0.0.1", port)
    consumer = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    try:
        channel = await consumer.channel()
        queue = await channel.declare_queue("q")
        received: list[bytes] = []
        all_received = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received.append(message.body)
            if len(received) == MESSAGES:
                all_received.set()

        await queue.consume(on_message, no_ack=True)
        [protocol] = protocols
        assert protocol.transport is not None
        counting = CountingTransport(protocol.transport)
        protocol.transport = counting  # type: ignore[assignment]
        flushes = 0
        real_flush = protocol._flush

        def counting_flush() -> None:
            nonlocal flushes
            flushes += 1
            real_flush()

        protocol._flush = counting_flush  # type: ignore[method-assign]

        publisher, _session = connect(broker)
        for number in range(MESSAGES):  # one loop turn: nothing here awaits
            publisher.publish(1, str(number).encode(), routing_key="q")
        await asyncio.wait_for(all_received.wait(), 10)

        assert received == [str(number).encode() for number in range(MESSAGES)]
        assert flushes == 1  # one flush scheduled, not one per delivery
        assert counting.writes == 1
    finally:
        await consumer.close()
        server.close()
        await server.wait_closed()
