"""The `x-delivery-count` header a queue with a delivery limit puts on a message it delivers
again (RabbitMQ's quorum queues: "the x-delivery-count header ... the number of unsuccessful
delivery attempts")."""

from __future__ import annotations

from batonmq.amqp.properties import rewrite_headers
from batonmq.model.message import Message


def with_delivery_count(message: Message, count: int) -> Message:
    """`message` with its x-delivery-count header set to `count`, every other octet of its
    content header as received: the same message (same id, same body), so that settling it
    settles the stored one."""
    return Message(
        message.exchange,
        message.routing_key,
        rewrite_headers(message.header_payload, {"x-delivery-count": count}),
        message.body,
        id=message.id,
    )
