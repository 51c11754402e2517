"""queue.declare, queue.bind, queue.unbind, queue.purge, queue.delete."""

from __future__ import annotations

from pamqp import base, commands
from pamqp.common import FieldTable

from batonmq.amqp import outgoing
from batonmq.engine.channel import Channel, Reply
from batonmq.engine.dispatch import handles
from batonmq.engine.snapshots import BindingInfo
from batonmq.engine.spreading import Declared

Queue = commands.Queue


@handles(Queue.Declare)
def declare(channel: Channel, method: commands.Queue.Declare) -> None:
    session = channel.session
    # A passive declare of "" names the channel's last declared queue, as queue.bind does.
    name = channel.queue_name("") if method.passive and not method.queue else method.queue
    change = session.api.plan_declare_queue(
        session.username,
        session.vhost.name,
        name,
        connection=session.ref,
        passive=method.passive,
        durable=method.durable,
        exclusive=method.exclusive,
        auto_delete=method.auto_delete,
        arguments=method.arguments,
    )

    def declared(answer: Declared) -> Reply | None:
        channel.declared(answer.queue)
        if method.nowait:
            return None
        return outgoing.queue_declare_ok(
            channel.number, answer.name, answer.message_count, answer.consumer_count
        )

    channel.carry_out(change, declared, Queue.Declare)


@handles(Queue.Bind)
def bind(channel: Channel, method: commands.Queue.Bind) -> None:
    session = channel.session
    name = channel.queue_name(method.queue)
    # Spec (queue.bind routing-key): an empty key with an empty queue name means the queue's name.
    routing_key = method.routing_key or (name if not method.queue else "")
    binding = _binding(channel, method.exchange, name, routing_key, method.arguments)
    change = session.api.plan_bind(session.username, binding, connection=session.ref)
    channel.carry_out(change, lambda _: None if method.nowait else Queue.BindOk(), Queue.Bind)


def _binding(
    channel: Channel, exchange: str, queue: str, routing_key: str, arguments: FieldTable | None
) -> BindingInfo:
    vhost = channel.session.vhost.name
    return BindingInfo(vhost, exchange, queue, "queue", routing_key, arguments or {})


@handles(Queue.Unbind)
def unbind(channel: Channel, method: commands.Queue.Unbind) -> None:
    session = channel.session
    binding = _binding(
        channel,
        method.exchange,
        channel.queue_name(method.queue),
        method.routing_key,
        method.arguments,
    )
    change = session.api.plan_unbind(session.username, binding, connection=session.ref)
    channel.carry_out(change, lambda _: Queue.UnbindOk(), Queue.Unbind)


@handles(Queue.Purge)
def purge(channel: Channel, method: commands.Queue.Purge) -> None:
    session = channel.session
    name = channel.queue_name(method.queue)
    change = session.api.plan_purge(
        session.username, session.vhost.name, name, connection=session.ref
    )
    channel.carry_out(
        change, lambda count: None if method.nowait else Queue.PurgeOk(count), Queue.Purge
    )


@handles(Queue.Delete)
def delete(channel: Channel, method: commands.Queue.Delete) -> None:
    session = channel.session
    name = channel.queue_name(method.queue)
    # RabbitMQ sends queue.delete-ok before the basic.cancel notifications of the deleting
    # channel's own consumers (a client that saw the cancel first would tear down the reply it
    # waits for); those of other channels go at once. Another worker that runs the queue
    # cancels its consumers across before this worker has the reply: they wait here too.
    cancels: list[base.Frame] = []
    change = session.api.plan_delete_queue(
        session.username,
        session.vhost.name,
        name,
        connection=session.ref,
        if_unused=method.if_unused,
        if_empty=method.if_empty,
        on_delete=channel.deleting,
    )
    channel.cancels_after_delete[name] = cancels

    def deleted(count: int) -> list[base.Frame]:
        del channel.cancels_after_delete[name]
        return cancels if method.nowait else [Queue.DeleteOk(count), *cancels]

    channel.carry_out(change, deleted, Queue.Delete)
