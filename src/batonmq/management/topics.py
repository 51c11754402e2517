"""The broker tells about itself on two topic exchanges of the default virtual host, which any
AMQP client can watch by binding a queue to them.

- `amq.batonmq.metrics`: a snapshot at an interval, as the Sun MQ 3.5 admin guide's "Metrics
  Message Producer": "These messages are produced only if there is one or more subscribers to
  the corresponding metrics topic destination", and "the header of each message has two
  properties: one which specifies the metrics message type and one which records a timestamp"
  (here the AMQP `type` and `timestamp` properties). Routing keys `broker` (the broker's totals),
  `connection` (every connection) and `queue.VHOST.NAME` (one queue, whose headers `vhost` and
  `name` name it exactly, as the events exchange's do: either name may hold dots, which a topic
  binding reads as word breaks; `queue` alone where the key would pass 255 octets); JSON
  bodies with the management API's field names.
  [metrics.topic] sets the interval, persistence and time to live. With workers, one snapshot
  of each kind for the whole broker: the worker that owns the default virtual host, where the
  queues bound to the exchange are, publishes the figures of every worker merged as the
  management API merges them (`batonmq.management.workers`); the others have nothing bound
  there, so publish nothing.
- `amq.batonmq.events`: the engine's event feed, as RabbitMQ's event exchange publishes it: the
  routing key is the event's kind (`queue.created`, `connection.closed`, ...), the headers carry
  what it is about (`name`, `vhost`) and its details, the body is empty; transient.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from collections import deque

from pamqp import commands

from batonmq.amqp.shortstr import fits_short_string
from batonmq.config.telemetry import MetricsTopicConfig
from batonmq.engine.api import EngineApi
from batonmq.engine.apibase import ApiError
from batonmq.engine.broker import EVENTS_EXCHANGE, METRICS_EXCHANGE
from batonmq.engine.events import Event
from batonmq.management import render
from batonmq.management.listing import Json
from batonmq.management.merge import concatenated, summed_overview
from batonmq.management.perworker import held_connections, owned_overview, owned_queues
from batonmq.management.render import Node
from batonmq.management.workers import Workers

log = logging.getLogger(__name__)

TRANSIENT, PERSISTENT = 1, 2


def queue_key(vhost: str, name: str) -> str:
    """The routing key of a queue's snapshot: `queue.VHOST.NAME`, or `queue` alone where that
    would not fit in a routing key (the headers `vhost` and `name` still say which queue)."""
    key = f"queue.{vhost}.{name}"
    return key if fits_short_string(key) else "queue"


class BrokerTopics:
    """Publishes metrics snapshots (`publish_metrics`, run at the configured interval) and the
    event feed (from `start` to `close`) on the broker's own exchanges."""

    def __init__(self, workers: Workers, node: Node, settings: MetricsTopicConfig) -> None:
        """`workers`: this worker and its siblings, whose figures a snapshot merges (with one
        process, only this one)."""
        self._workers = workers
        self._api: EngineApi = workers.api
        self._node = node
        self._settings = settings
        self._events: deque[Event] = deque()
        self._flushing: asyncio.Task[None] | None = None
        self._unsubscribe = self._api.broker.events.subscribe(self._event)

    def close(self) -> None:
        self._unsubscribe()
        if self._flushing is not None:
            self._flushing.cancel()

    async def publish_metrics(self) -> None:
        """One snapshot of each kind, each only if someone is bound to receive it."""
        if not self._api.watched(METRICS_EXCHANGE):
            return
        workers, node = self._workers, self._node
        queues = concatenated((await workers.gather(owned_queues)).answers.values())
        overview = summed_overview((await workers.gather(owned_overview)).answers.values())
        connections = concatenated((await workers.gather(held_connections)).answers.values())
        snapshots: list[tuple[str, Json, dict[str, Json] | None]] = [
            (
                "broker",
                {
                    "connections": overview.connections,
                    "channels": overview.channels,
                    "queues": overview.queues,
                    "exchanges": overview.exchanges,
                    "consumers": overview.consumers,
                    "messages_ready": overview.messages_ready,
                    "messages_unacknowledged": overview.messages_unacknowledged,
                    "message_stats": render.message_stats(overview.message_totals),
                    "alarms": [name for name in sorted(overview.alarms)],
                },
                None,
            ),
            ("connection", [render.connection(info, node) for info in connections], None),
        ]
        snapshots += [
            (
                queue_key(info.vhost, info.name),
                render.queue(info, node),
                {"vhost": info.vhost, "name": info.name},
            )
            for info in queues
        ]
        settings = self._settings
        for routing_key, snapshot, about in snapshots:
            properties = commands.Basic.Properties(
                content_type="application/json",
                delivery_mode=PERSISTENT if settings.persist else TRANSIENT,
                expiration=str(settings.timetolive * 1000),
                message_type=f"metrics.{routing_key.partition('.')[0]}",
                timestamp=_now(),
                headers=None if about is None else render.field_table(about),
            )
            body = json.dumps(snapshot, separators=(",", ":")).encode()
            await self._publish(METRICS_EXCHANGE, routing_key, properties, body)

    def _event(self, event: Event) -> None:
        """Called by the event feed in the middle of the engine's work: publish later."""
        if not self._api.watched(EVENTS_EXCHANGE):
            return
        self._events.append(event)
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        while self._events:
            event = self._events.popleft()
            details = {"name": event.name, "vhost": event.vhost or "", **event.details}
            properties = commands.Basic.Properties(
                delivery_mode=TRANSIENT,
                headers=render.field_table(
                    {key: render.json_value(value) for key, value in details.items()}
                ),
                timestamp=_now(),
            )
            await self._publish(EVENTS_EXCHANGE, str(event.kind), properties, b"")

    async def _publish(
        self, exchange: str, routing_key: str, properties: commands.Basic.Properties, body: bytes
    ) -> None:
        try:
            await self._api.publish_as_broker(exchange, routing_key, properties, body)
        except ApiError as error:
            # A watching queue at its limits, or a store that could not write a persistent
            # snapshot: this one is lost, as a metrics message past its time to live would be.
            log.warning(
                "broker message not published",
                extra={"exchange": exchange, "routing_key": routing_key, "reason": error.text},
            )


def _now() -> datetime.datetime:
    return datetime.datetime.fromtimestamp(int(time.time()), datetime.UTC)
