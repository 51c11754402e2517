"""Dead-lettering, the effect: republish a dead message through its queue's dead-letter exchange.

The decisions (the new headers, the routing keys, cycles) are `batonmq.queues.deadletter`'s.
As in RabbitMQ's classic queues, the republish is not confirmed: the message is in its new
queues (and, if persistent and they are durable, in the same store commit as its removal from
the old queue) before the old queue lets it go. A dead-letter exchange that does not exist drops
the message, as RabbitMQ does.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from batonmq.amqp.properties import rewrite_headers
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.deadletter import Reason, dead_letter, is_cycle
from batonmq.queues.protocol import Queue, RoutedQueue

if TYPE_CHECKING:
    from batonmq.engine.vhost import VirtualHost

log = logging.getLogger(__name__)


def republish(vhost: VirtualHost, queue: Queue, entry: QueueEntry, reason: Reason) -> None:
    """Republish `entry`'s message; a fault on the way is logged and the message dropped.

    Dead-lettering runs inside whatever let the message go: a consumer's reject, the expiry
    sweep, a timer, a publish that overflowed. Hardening: "no message the broker holds can make
    a consumer, a dead-letter path or a timer fail" and "a fault inside one queue's work is
    contained to that queue and logged, never delays others"."""
    try:
        _republish(vhost, queue, entry, reason)
    except Exception:
        log.exception(
            "dead-lettering message %d of queue '%s' in vhost '%s' failed; the message is dropped",
            entry.message.id,
            queue.name,
            vhost.name,
        )


def _republish(vhost: VirtualHost, queue: Queue, entry: QueueEntry, reason: Reason) -> None:
    exchange_name = queue.options.dead_letter_exchange
    assert exchange_name is not None
    exchange = vhost.exchanges.get(exchange_name)
    if exchange is None:
        log.debug("dead letter dropped: no exchange '%s' in vhost '%s'", exchange_name, vhost.name)
        return
    message = entry.message
    dead = dead_letter(
        message.properties,
        reason=reason,
        queue=queue.name,
        exchange=message.exchange,
        routing_key=message.routing_key,
        dead_letter_routing_key=queue.options.dead_letter_routing_key,
        now=datetime.datetime.now(datetime.UTC),
    )
    # Only what dead-lettering changes is encoded again; every other octet stays as received.
    before = message.properties.headers or {}
    after = dead.properties.headers or {}
    header_payload = rewrite_headers(
        message.header_payload,
        {name: value for name, value in after.items() if before.get(name) is not value},
        remove_fields=[name for name in before if name not in after],
        remove_properties=("expiration",),
    )
    republished = Message(exchange_name, dead.routing_keys[0], header_payload, message.body)
    targets: dict[str, RoutedQueue] = {}
    for routing_key in dead.routing_keys:
        routed = republished
        if routing_key != republished.routing_key:
            routed = Message(
                exchange_name, routing_key, header_payload, message.body, id=republished.id
            )
        for target in vhost.route(exchange, routed):
            targets[target.name] = target
    for target in targets.values():
        if not is_cycle(dead.properties.headers, target.name):
            target.publish(republished)
