"""Entries coming back to a queue to be delivered again (requeued by basic.reject, basic.nack,
basic.recover or a closed channel, or taken back on their way to a client), and the
`x-delivery-count` header a queue with a delivery limit puts on them (RabbitMQ's quorum queues:
"the x-delivery-count header ... the number of unsuccessful delivery attempts")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from batonmq.amqp.properties import rewrite_headers
from batonmq.model.message import Message, QueueEntry


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


def requeued(
    entries: Iterable[QueueEntry],
    delivery_limit: int | None,
    over_limit: Callable[[QueueEntry], None],
) -> Iterator[QueueEntry]:
    """`entries` to put back, marked redelivered if they were delivered before (AMQP 0-9-1
    basic.deliver redelivered: "the message may have been previously delivered to this or
    another client"): one taken back on its way to a client, before it reached it, goes back
    as it was. With a delivery limit (x-delivery-limit: "the number of allowed unsuccessful
    delivery attempts"), each carries its delivery count, and one delivered more often than
    that goes to `over_limit` instead (dead-lettered)."""
    for entry in entries:
        if not entry.delivery_count:
            yield entry
            continue
        if delivery_limit is not None:
            if entry.delivery_count > delivery_limit:
                over_limit(entry)
                continue
            entry.message = with_delivery_count(entry.message, entry.delivery_count)
        entry.redelivered = True
        yield entry
