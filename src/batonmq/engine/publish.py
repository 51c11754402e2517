"""basic.publish: check, route, enqueue, return unroutable mandatory messages, confirm; and the
same for the publishes a transaction held, at tx.commit."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from pamqp import base, commands

from batonmq.amqp import outgoing
from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.engine.access import exchange_name, require_permission
from batonmq.engine.channel import Channel
from batonmq.engine.exchange import Exchange
from batonmq.engine.transaction import HeldPublish, Transaction
from batonmq.model.message import FLAG_EXPIRATION, FLAG_USER_ID, Message
from batonmq.queues.expiry import InvalidExpiration, parse_expiration
from batonmq.queues.protocol import Enqueued, RoutedQueue
from batonmq.security.acl import Action, ObjectType, Property
from batonmq.security.permissions import Permission, PermitCache, ResourceKind
from batonmq.store.journal import Journal

if TYPE_CHECKING:
    from batonmq.engine.broker import Broker
    from batonmq.engine.vhost import VirtualHost


def publish(channel: Channel, method: base.Frame, message: Message) -> None:
    assert isinstance(method, commands.Basic.Publish)
    if method.immediate:
        # RabbitMQ dropped "immediate" (3.0); the spec lets a server refuse it with 540.
        raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
    session, vhost = channel.session, channel.vhost
    channel.counters.publish += 1
    exchange = checked_exchange(
        session.broker,
        session.username,
        vhost,
        method.exchange,
        method.routing_key,
        message,
        channel.write_permits,
    )
    if channel.transaction is not None:
        channel.transaction.publishes.append(HeldPublish(exchange, message, method.mandatory))
        return
    confirms = channel.confirms
    sequence = confirms.publish() if confirms is not None else 0
    queues = vhost.route(exchange, message)
    broker = session.broker
    after_write = broker.after_write
    batch = message_batch(broker.journal, message, queues)
    enqueued = enqueue(channel, message, queues, method.mandatory, batch)
    taken = enqueued is not Enqueued.REFUSED
    if batch is not None:
        # The queues show the message only after the commit; a failed one leaves it on none.
        after_write.release(batch, queues)
    for queue in queues:
        if queue.writes_itself:
            break
    else:  # no queue writes the message itself (a loop: this runs for every publish)
        if confirms is not None:
            # Confirms mean durable: the ack waits for the commit that holds the message; a
            # failed write nacks it. RabbitMQ (x-overflow reject-publish): a refused message
            # is nacked under confirms.
            if batch is None:
                confirms.settle(sequence, taken)
            else:
                after_write.confirm(batch, channel, sequence, taken)
        return
    # The queues that write the message themselves (streams, queues of other workers) are
    # waited for too.
    writers = [queue for queue in queues if queue.writes_itself]
    if confirms is None:
        written: Callable[[bool], None] = _ignore
    elif taken:
        written = partial(channel.settle_publish, sequence)
    else:
        written = partial(_nack, channel, sequence)
    written = all_done(len(writers) + (batch is not None), written)
    if batch is not None:
        after_write.call(batch, written)
    for queue in writers:
        queue.when_written(written)


def _ignore(ok: bool) -> None:
    pass


def _nack(channel: Channel, sequence: int, ok: bool) -> None:
    channel.settle_publish(sequence, False)


def all_done(count: int, then: Callable[[bool], None]) -> Callable[[bool], None]:
    """A callback to call `count` times with each write's outcome: `then` gets whether all
    of them succeeded, after the last."""
    if count == 1:
        return then
    outcomes: list[bool] = []

    def one_done(ok: bool) -> None:
        outcomes.append(ok)
        if len(outcomes) == count:
            then(all(outcomes))

    return one_done


def checked_exchange(
    broker: Broker,
    username: str,
    vhost: VirtualHost,
    name: str,
    routing_key: str,
    message: Message,
    permits: PermitCache | None = None,
) -> Exchange:
    """The exchange `name` of `vhost`, which `username` may publish `message` to, or the
    ProtocolError that refuses it: the checks of every publish, over AMQP or through the
    engine's API. `permits` remembers the exchanges a channel may write to."""
    access = broker.access
    if access.enabled:  # the one test the hot path pays when there is no ACL
        # Qpid manual Table 2.3: PUBLISH is "Applied on a per message basis on publish message
        # transfers"; the issue: "basic.publish (PUBLISH EXCHANGE with the routing key)".
        access.require(
            username,
            vhost.name,
            Action.PUBLISH,
            ObjectType.EXCHANGE,
            {Property.NAME: exchange_name(name), Property.ROUTING_KEY: routing_key},
        )
    # RabbitMQ's access control guide: basic.publish needs write on the exchange; a channel
    # asks once per exchange (while the permissions do not change), as RabbitMQ's does.
    permissions = broker.permissions
    if permits is None or permits.generation != permissions.generation or name not in permits.names:
        require_permission(
            permissions,
            username,
            vhost.name,
            Permission.WRITE,
            ResourceKind.EXCHANGE,
            name,
            permits,
        )
    exchange = vhost.exchange(name)
    if exchange.internal:
        raise amqp_error(
            ReplyCode.ACCESS_REFUSED, f"cannot publish to internal exchange '{exchange.name}'"
        )
    flags = message.property_flags
    if flags & FLAG_USER_ID:
        user_id = message.properties.user_id
        if user_id != username:
            # RabbitMQ's validated user-id: a publisher cannot claim to be someone else.
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"user_id property set to '{user_id}' but authenticated user was '{username}'",
            )
    if flags & FLAG_EXPIRATION:
        try:
            parse_expiration(message.properties.expiration or "")
        except InvalidExpiration as error:
            # RabbitMQ: 406 PRECONDITION_FAILED "invalid expiration ...", closing the channel.
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, str(error)) from error
    if broker.limited:
        refusal = broker.publish_refusal()
        if refusal is not None:
            # MQ 3.5 admin guide Table 2-4: "Additional messages will be rejected"; the issue:
            # "refused with an AMQP error that names the limit" (406, as for amqp.max_message_size).
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"message refused: {refusal}")
    return exchange


def held_batch(
    journal: Journal, routed: Sequence[tuple[Message, Sequence[RoutedQueue]]]
) -> int | None:
    """The journal batch that routed messages must wait for before any queue shows them: the
    one being gathered when one of them is persistent and goes to a queue that persists it
    (then all of them wait, so that a failed write leaves none behind); None when nothing is
    written."""
    for message, queues in routed:
        batch = message_batch(journal, message, queues)
        if batch is not None:
            return batch
    return None


def message_batch(journal: Journal, message: Message, queues: Sequence[RoutedQueue]) -> int | None:
    """`held_batch` of one routed message."""
    if journal.enabled:
        for queue in queues:
            if queue.persists and not queue.writes_itself:
                return journal.batch if message.persistent else None
    return None


def release_held(queues: Sequence[RoutedQueue], batch: int, committed: bool) -> None:
    for queue in queues:
        queue.release_held(batch, committed)


def commit_transaction(channel: Channel, transaction: Transaction) -> list[RoutedQueue]:
    """tx.commit: carry out the publishes and settlements `transaction` held, and clear it; the
    queues that write their messages themselves (streams), which the commit waits for too."""
    vhost = channel.session.vhost
    # Route everything before changing anything: routing is where a held publish can still fail
    # (a headers exchange decoding malformed properties), and a commit is all or nothing.
    routed = [(held, vhost.route(held.exchange, held.message)) for held in transaction.publishes]
    journal = channel.session.broker.journal
    # Nothing of a transaction is visible before its commit: if anything of it is written,
    # every publish waits for that write, and a failed one leaves none of them behind.
    batch = held_batch(journal, [(held.message, queues) for held, queues in routed])
    spread = vhost.spread
    # In a spread virtual host, each worker owning queues takes its share of the commit at
    # once (RabbitMQ "Broker Semantics": a transaction is atomic per queue, not across them).
    with spread.tx_group() if spread is not None else contextlib.nullcontext():
        for held, queues in routed:
            enqueue(channel, held.message, queues, held.mandatory, batch)
    if batch is not None:
        channel.session.broker.after_write.release(
            batch, (queue for _held, queues in routed for queue in queues)
        )
    for settlement in transaction.settlements:
        channel.settle(settlement.delivery_tags, settlement.outcome)
    transaction.clear()
    return list({queue for _held, queues in routed for queue in queues if queue.writes_itself})


def enqueue(
    channel: Channel,
    message: Message,
    queues: Sequence[RoutedQueue],
    mandatory: bool,
    until_batch: int | None,
) -> Enqueued:
    """Put a routed message on its queues (held until journal batch `until_batch` commits, if
    given), or return it if it is mandatory and went nowhere. REFUSED when a queue refused it
    (full, reject-publish), else STORED when a queue wrote it to the store."""
    if not queues and mandatory:
        channel.session.send_content(
            channel.number,
            outgoing.basic_return(
                channel.number,
                ReplyCode.NO_ROUTE,
                "NO_ROUTE",
                message.exchange,
                message.routing_key,
            ),
            message,
        )
    for queue in queues:
        if queue.options.max_producers is not None:
            channel.become_producer_of(queue)  # before any queue takes the message
    refused = stored = False
    for queue in queues:
        enqueued = queue.publish(message, until_batch=until_batch)
        refused |= enqueued is Enqueued.REFUSED
        stored |= enqueued is Enqueued.STORED
        if queue.overfull:
            channel.hold_for(queue)
    broker = channel.session.broker
    if broker.large_message_size and message.body_size > broker.large_message_size:
        _report_large(channel, message, queues)
    if refused:
        return Enqueued.REFUSED
    return Enqueued.STORED if stored else Enqueued.KEPT


def _report_large(channel: Channel, message: Message, queues: Sequence[RoutedQueue]) -> None:
    """maximumMessageSize (Qpid manual): the alert monitor hears of a message over it, per queue."""
    report = channel.session.broker.large_message
    if report is not None:
        vhost = channel.session.vhost.name
        for queue in queues:
            report(vhost, queue, message.body_size)
