"""The exchanges, queues and bindings of one row, declared fresh before it and deleted after."""

from __future__ import annotations

from dataclasses import dataclass

from pamqp import commands

from benchmarks.loadgen.client import AmqpClient


@dataclass(frozen=True, slots=True)
class Topology:
    queues: tuple[str, ...]
    #: Durable queues (and exchange): the persistent rows.
    durable: bool = False
    #: "" is the default exchange (routing key = queue name); else declared with `exchange_type`.
    exchange: str = ""
    exchange_type: str = "direct"
    #: (queue, binding key) pairs on `exchange`.
    bindings: tuple[tuple[str, str], ...] = ()
    #: Stream queues (`x-queue-type: stream`; RabbitMQ's streams are durable only).
    stream: bool = False

    @property
    def queue_arguments(self) -> dict[str, object]:
        return {"x-queue-type": "stream"} if self.stream else {}


async def declare(client: AmqpClient, topology: Topology) -> None:
    if topology.exchange:
        await client.call(
            commands.Exchange.Declare(
                exchange=topology.exchange,
                exchange_type=topology.exchange_type,
                durable=topology.durable,
            ),
            commands.Exchange.DeclareOk,
        )
    await client.call_many(
        [
            commands.Queue.Declare(
                queue=name, durable=topology.durable, arguments=topology.queue_arguments
            )
            for name in topology.queues
        ],
        commands.Queue.DeclareOk,
    )
    # Pipelined in slices: 10,000 binds in one write would be 10,000 replies to buffer at once.
    for start in range(0, len(topology.bindings), 1000):
        await client.call_many(
            [
                commands.Queue.Bind(queue=queue, exchange=topology.exchange, routing_key=key)
                for queue, key in topology.bindings[start : start + 1000]
            ],
            commands.Queue.BindOk,
        )


async def delete(client: AmqpClient, topology: Topology) -> None:
    await client.call_many(
        [commands.Queue.Delete(queue=name) for name in topology.queues], commands.Queue.DeleteOk
    )
    if topology.exchange:
        await client.call(
            commands.Exchange.Delete(exchange=topology.exchange), commands.Exchange.DeleteOk
        )


async def message_count(client: AmqpClient, queue: str) -> int:
    reply = await client.call(
        commands.Queue.Declare(queue=queue, passive=True), commands.Queue.DeclareOk
    )
    return int(reply.message_count or 0)
