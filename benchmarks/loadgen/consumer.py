"""A consumer connection: basic.qos prefetch, basic.consume with manual acks, and one
basic.ack(multiple=true) for everything delivered, after each read from the socket. On a stream
queue the acks only return credit, as RabbitMQ's streams (which need the prefetch) do.

Acknowledging per read (not per message, and not no-ack) is the same for both brokers: the ack
path of the broker is exercised and measured, but the client writes one small frame per 64-256 KiB
it reads when the broker is busy, and one per message when it is idle (the latency rows).
"""

from __future__ import annotations

from pamqp import commands

from benchmarks.loadgen.backlog import Backlog
from benchmarks.loadgen.client import CHANNEL, AmqpClient
from benchmarks.loadgen.frames import encode_ack


class Consumer:
    def __init__(
        self,
        client: AmqpClient,
        queue: str,
        prefetch: int,
        backlog: Backlog | None,
        stream_offset: str = "",
    ) -> None:
        """`stream_offset`: consume a stream queue from there (`x-stream-offset`: first, last,
        next, an offset); "": a classic queue."""
        self.client = client
        self.queue = queue
        self.prefetch = prefetch
        self.backlog = backlog
        self.stream_offset = stream_offset
        self._acked_deliveries = 0

    async def start(self, consume: bool = True) -> None:
        """basic.qos, then basic.consume (unless `consume` is false: `consume` later)."""
        client = self.client
        await client.call(commands.Basic.Qos(prefetch_count=self.prefetch), commands.Basic.QosOk)
        client.on_data = self._on_data
        if consume:
            await self.consume()

    async def consume(self) -> None:
        await self.client.call(
            commands.Basic.Consume(
                queue=self.queue,
                consumer_tag="bench",
                arguments={"x-stream-offset": _offset(self.stream_offset)}
                if self.stream_offset
                else {},
            ),
            commands.Basic.ConsumeOk,
        )

    @property
    def deliveries(self) -> int:
        return self.client.scanner.deliveries

    def _on_data(self) -> None:
        scanner = self.client.scanner
        delivered = scanner.deliveries - self._acked_deliveries
        if delivered:
            self._acked_deliveries = scanner.deliveries
            transport = self.client.transport
            if transport is not None and not transport.is_closing():
                transport.write(encode_ack(CHANNEL, scanner.last_delivery_tag, True))
            if self.backlog is not None:
                self.backlog.add_delivered(delivered)


def _offset(text: str) -> str | int:
    """x-stream-offset as RabbitMQ reads it: a number is a long, a name (first, ...) a string."""
    return int(text) if text.isdigit() else text
