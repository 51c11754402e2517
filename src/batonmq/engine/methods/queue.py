"""queue.declare, queue.bind, queue.unbind, queue.purge, queue.delete."""

from __future__ import annotations

from pamqp import base, commands

from batonmq.amqp import outgoing
from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.engine.access import (
    authorize,
    binding_properties,
    flag,
    is_temporary,
    queue_properties,
)
from batonmq.engine.channel import Channel, Reply
from batonmq.engine.consumer import cancel_consumers_of
from batonmq.engine.dispatch import handles
from batonmq.model.destination import Destination
from batonmq.queues import protocol
from batonmq.security.acl import Action, ObjectType, Property

Queue = commands.Queue


def queue_name(channel: Channel, name: str) -> str:
    """Spec (queue.bind and others): "If the queue name is empty, the server uses the last queue
    declared on the channel"; with none declared that is 404 (rule queue-known, as RabbitMQ)."""
    if name:
        return name
    if channel.last_queue_name is None:
        raise amqp_error(ReplyCode.NOT_FOUND, "no previously declared queue")
    return channel.last_queue_name


@handles(Queue.Declare)
def declare(channel: Channel, method: commands.Queue.Declare) -> None:
    session = channel.session
    # A passive declare of "" names the channel's last declared queue, as queue.bind does.
    name = queue_name(channel, "") if method.passive and not method.queue else method.queue
    if method.passive:
        # Qpid manual Table 2.3: ACCESS is "Applied when an object is read or accessed".
        accessed = {Property.NAME: name, Property.PASSIVE: "true"}
        authorize(session, Action.ACCESS, ObjectType.QUEUE, accessed)
    else:
        # Table 2.3: CREATE is "Applied when an object is created, such as bindings, queues,
        # exchanges"; `temporary`: a queue that goes with its connection or last consumer.
        authorize(
            session,
            Action.CREATE,
            ObjectType.QUEUE,
            {
                Property.NAME: name,
                Property.DURABLE: flag(method.durable),
                Property.AUTO_DELETE: flag(method.auto_delete),
                Property.EXCLUSIVE: flag(method.exclusive),
                Property.TEMPORARY: flag(method.exclusive or method.auto_delete),
                Property.PASSIVE: "false",
            },
        )
    change = session.vhost.declare_queue(
        name,
        owner=session,
        passive=method.passive,
        durable=method.durable,
        exclusive=method.exclusive,
        auto_delete=method.auto_delete,
        arguments=method.arguments,
    )

    def declared(queue: protocol.Queue) -> Reply | None:
        if queue.exclusive_owner is session:
            session.exclusive_queues.add(queue)
        channel.last_queue_name = queue.name
        if method.nowait:
            return None
        return outgoing.queue_declare_ok(
            channel.number, queue.name, queue.message_count, queue.consumer_count
        )

    channel.carry_out(change, declared, "queue.declare")


@handles(Queue.Bind)
def bind(channel: Channel, method: commands.Queue.Bind) -> None:
    session = channel.session
    name = queue_name(channel, method.queue)
    queue = session.vhost.queue(name, session)
    # Spec (queue.bind routing-key): an empty key with an empty queue name means the queue's name.
    routing_key = method.routing_key or (name if not method.queue else "")
    # Table 2.3: BIND is "Applied when queues are bound to exchanges".
    authorize(
        session,
        Action.BIND,
        ObjectType.EXCHANGE,
        binding_properties(
            method.exchange,
            name,
            routing_key,
            durable=queue.durable,
            temporary=is_temporary(queue),
        ),
    )
    change = session.vhost.bind(
        method.exchange, Destination.queue(name), routing_key, method.arguments or {}
    )
    channel.carry_out(change, lambda _: None if method.nowait else Queue.BindOk(), "queue.bind")


@handles(Queue.Unbind)
def unbind(channel: Channel, method: commands.Queue.Unbind) -> None:
    session = channel.session
    name = queue_name(channel, method.queue)
    queue = session.vhost.queues.get(name)
    if queue is not None:
        session.vhost.check_owner(queue, session)
    # Table 2.3: UNBIND is "Applied when queues are unbound from exchanges". A queue that is not
    # there is judged as a durable, not temporary one: unbinding it changes nothing.
    authorize(
        session,
        Action.UNBIND,
        ObjectType.EXCHANGE,
        binding_properties(
            method.exchange,
            name,
            method.routing_key,
            durable=queue is None or queue.durable,
            temporary=queue is not None and is_temporary(queue),
        ),
    )
    change = session.vhost.unbind(
        method.exchange, Destination.queue(name), method.routing_key, method.arguments or {}
    )
    channel.carry_out(change, lambda _: Queue.UnbindOk(), "queue.unbind")


@handles(Queue.Purge)
def purge(channel: Channel, method: commands.Queue.Purge) -> None:
    session = channel.session
    queue = session.vhost.queue(queue_name(channel, method.queue), session)
    # Table 2.3: PURGE is "Applied when purge the contents of a queue".
    authorize(session, Action.PURGE, ObjectType.QUEUE, queue_properties(queue))
    session.vhost.wait_for_held(queue)  # what this channel published first is purged
    count = queue.purge()
    if not method.nowait:
        channel.reply_when_durable(Queue.PurgeOk(count), "queue.purge")


@handles(Queue.Delete)
def delete(channel: Channel, method: commands.Queue.Delete) -> None:
    session = channel.session
    name = queue_name(channel, method.queue)
    queue = session.vhost.queues.get(name)
    # Table 2.3: DELETE is "Applied when objects are deleted". A queue that is not there has
    # only its name to be judged by.
    properties = queue_properties(queue) if queue is not None else {Property.NAME: name}
    authorize(session, Action.DELETE, ObjectType.QUEUE, properties)
    # RabbitMQ sends queue.delete-ok before the basic.cancel notifications of the deleting
    # channel's own consumers (a client that saw the cancel first would tear down the reply it
    # waits for); those of other channels go at once.
    cancels: list[base.Frame] = []
    change = session.vhost.delete_queue(
        name,
        owner=session,
        if_unused=method.if_unused,
        if_empty=method.if_empty,
        on_delete=lambda going: cancels.extend(cancel_consumers_of(going, notify_later=channel)),
    )

    def deleted(count: int) -> list[base.Frame]:
        if queue is not None and queue.exclusive_owner is not None:
            session.exclusive_queues.discard(queue)
        return cancels if method.nowait else [Queue.DeleteOk(count), *cancels]

    channel.carry_out(change, deleted, "queue.delete")
