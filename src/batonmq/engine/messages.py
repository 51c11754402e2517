"""Messages handled through the engine's service API (`batonmq.engine.api`): taken as basic.get
takes them, published as a confirmed basic.publish publishes them, and browsed, copied, moved
and removed in place, as the management console of the Qpid broker manual lets an operator do.

These are the effects; `EngineApi` checks the ACL before it calls them. Every one returns once
what it changed is committed to the store (the journal is durable), as a publisher confirm or
the reply to a basic.ack on a transaction would wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import NamedTuple

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.engine.exchange import Exchange
from batonmq.engine.publish import held_batch, release_held
from batonmq.engine.snapshots import BrowsedInfo, GotMessage, MessageInfo, MessagesChanged
from batonmq.engine.vhost import VirtualHost
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.protocol import Enqueued, Queue, RoutedQueue
from batonmq.store.journal import Journal


class AckMode(Enum):
    """How messages taken through the API are settled (RabbitMQ management's `ackmode`)."""

    #: Taken with basic.get, then nacked with requeue: back in place, marked redelivered.
    ACK_REQUEUE_TRUE = "ack_requeue_true"
    #: Taken with basic.get no-ack: gone.
    ACK_REQUEUE_FALSE = "ack_requeue_false"
    #: Taken, then rejected with requeue: as ACK_REQUEUE_TRUE.
    REJECT_REQUEUE_TRUE = "reject_requeue_true"
    #: Taken, then rejected without requeue: dead-lettered where the queue says so.
    REJECT_REQUEUE_FALSE = "reject_requeue_false"


def message_info(message: Message, redelivered: bool) -> MessageInfo:
    return MessageInfo(
        message.id,
        message.exchange,
        message.routing_key,
        redelivered,
        message.properties,
        bytes(message.body),
    )


async def take(queue: Queue, count: int, mode: AckMode, journal: Journal) -> list[GotMessage]:
    """Up to `count` messages from `queue`, as that many basic.get would take them, then
    settled by `mode`. RabbitMQ's management plugin takes them all before it returns any,
    "because we get always the same message if the messages are requeued"."""
    got: list[GotMessage] = []
    taken: list[QueueEntry] = []
    try:
        while len(got) < count:
            entry = queue.get()
            if entry is None:
                if not queue.waiting_for_page_in:
                    break
                await _paged_in(queue)
                continue
            got.append(
                GotMessage(message_info(entry.message, entry.redelivered), queue.message_count)
            )
            # Counted as RabbitMQ's management counts its gets (they are basic.gets).
            queue.counters.redeliver += entry.redelivered
            if mode is AckMode.ACK_REQUEUE_FALSE:
                queue.counters.get_no_ack += 1
                entry.delivery_count += 1
                queue.settled(entry)
            else:
                queue.counters.get += 1
                queue.delivered(entry)
                taken.append(entry)
    except BaseException:
        # Cancelled while waiting for a page-in (the request went): what was taken and not
        # yet settled goes back, as a closed channel's unsettled deliveries do.
        queue.requeue(taken)
        raise
    if mode is AckMode.REJECT_REQUEUE_FALSE:
        for entry in taken:
            queue.rejected(entry)
    elif taken:
        queue.requeue(taken)
    await _durable(journal, "the settlement of the messages taken")
    return got


async def publish(
    host: VirtualHost, exchange: Exchange, message: Message, journal: Journal
) -> bool:
    """Publish `message` as basic.publish with confirms would: answered once it is durable
    where it must be. Whether any queue took it (RabbitMQ's `routed`); a queue that refused it
    (its limits) is a 406, as the nack RabbitMQ's management turns into "Unable to publish
    message. Check queue limits."."""
    queues = host.route(exchange, message)
    [placed] = await _placed(journal, [(message, queues)], "the message")
    if not placed.written:
        raise _not_written("the message")
    if not placed.kept:
        raise amqp_error(
            ReplyCode.PRECONDITION_FAILED, "Unable to publish message. Check queue limits."
        )
    return bool(queues)


def browse(queue: Queue, start: int, count: int | None) -> list[BrowsedInfo]:
    return [
        BrowsedInfo(seen.position, message_info(seen.message, seen.redelivered))
        for seen in queue.browse(start, count)
    ]


async def copy(
    source: Queue, target: RoutedQueue, message_ids: Iterable[int], journal: Journal
) -> MessagesChanged:
    """Publish the ready messages of `source` with these ids to `target` too (the same
    message: it is stored once), in the order they are in `source`; durable once it returns.
    One `target` did not take (its limits refused it, or its own write failed) is missing.
    `target` must be another queue: a message is once in a queue (a copy in place would be
    a second entry of the same message, and a move would then remove both)."""
    if target is source:
        raise amqp_error(
            ReplyCode.PRECONDITION_FAILED, f"queue '{source.name}' holds the messages already"
        )
    found, missing = _ready(source, message_ids)
    placed = await _placed(journal, [(message, [target]) for message in found], "the copies")
    done = tuple(
        message.id for message, outcome in zip(found, placed, strict=True) if outcome.taken
    )
    refused = tuple(message.id for message in found if message.id not in done)
    return MessagesChanged(done, (*missing, *refused))


async def move(
    source: Queue, target: RoutedQueue, message_ids: Iterable[int], journal: Journal
) -> MessagesChanged:
    """Copy, then remove from `source` what was copied: each step committed before the next,
    so that a failed write leaves the message where it was (at worst in both queues, never in
    neither). One consumed from `source` between the two steps stays copied."""
    copied = await copy(source, target, message_ids, journal)
    removed = await remove(source, copied.done, journal)
    return MessagesChanged(copied.done, (*copied.missing, *removed.missing))


async def remove(queue: Queue, message_ids: Iterable[int], journal: Journal) -> MessagesChanged:
    """Remove the ready messages with these ids, as a purge removes them all."""
    found, missing = _ready(queue, message_ids)
    queue.remove(message.id for message in found)
    await _durable(journal, "the removal of the messages")
    return MessagesChanged(tuple(message.id for message in found), missing)


class _Placed(NamedTuple):
    """What became of one message published to its queues (`_placed`)."""

    #: No queue here refused it (its limits).
    kept: bool
    #: Every queue that writes its messages itself (a stream, a queue another worker runs)
    #: has it durable: not when that write failed, nor when the other worker's queue refused
    #: it (its answer does not say which).
    written: bool

    @property
    def taken(self) -> bool:
        """Every queue has it, durable where it must be."""
        return self.kept and self.written


async def _placed(
    journal: Journal, routed: Sequence[tuple[Message, Sequence[RoutedQueue]]], what: str
) -> list[_Placed]:
    """Publish each message to its queues as a confirmed basic.publish would, and wait until
    it is durable everywhere: the journal's write (none of them is shown before it commits; a
    failed one raises, leaving none of them behind) and each write of a queue that writes
    itself, whose outcome is each message's own."""
    batch = held_batch(journal, routed)
    kept: list[bool] = []
    written: list[list[asyncio.Future[bool]]] = []
    for message, queues in routed:
        outcomes = [queue.publish(message, until_batch=batch) for queue in queues]
        kept.append(Enqueued.REFUSED not in outcomes)
        # Asked at once: `when_written` answers for the last message published to the queue.
        written.append([_written(queue) for queue in queues if queue.writes_itself])
    if batch is not None:
        committed = await journal.durable()
        release_held(
            list(dict.fromkeys(q for _m, queues in routed for q in queues)), batch, committed
        )
        if not committed:
            raise _not_written(what)
    placed = []
    for message_kept, writes in zip(kept, written, strict=True):
        placed.append(_Placed(message_kept, all(await asyncio.gather(*writes))))
    return placed


def _ready(queue: Queue, message_ids: Iterable[int]) -> tuple[list[Message], tuple[int, ...]]:
    """The ready messages of `queue` with these ids, in queue order, and the ids not found."""
    wanted = dict.fromkeys(message_ids)
    found = [seen.message for seen in queue.browse() if seen.message_id in wanted]
    present = {message.id for message in found}
    return found, tuple(message_id for message_id in wanted if message_id not in present)


async def _durable(journal: Journal, what: str) -> None:
    if not await journal.durable():
        raise _not_written(what)


async def _paged_in(queue: Queue) -> None:
    arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done() -> None:
        if not arrived.done():
            arrived.set_result(None)

    queue.when_paged_in(done)
    await arrived


def _written(queue: RoutedQueue) -> asyncio.Future[bool]:
    """Whether the message just published to `queue`, which writes itself, is durable."""
    outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    queue.when_written(lambda ok: None if outcome.done() else outcome.set_result(ok))
    return outcome


def _not_written(what: str) -> ProtocolError:
    return amqp_error(ReplyCode.INTERNAL_ERROR, f"the store could not write {what}")
