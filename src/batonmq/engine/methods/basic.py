"""basic.qos, consume, cancel, get, ack, nack, reject, recover (publish: engine/publish.py)."""

from __future__ import annotations

from pamqp import commands

from batonmq.engine.channel import Channel
from batonmq.engine.dispatch import handles
from batonmq.engine.outcome import Outcome
from batonmq.engine.remotequeue import RemoteQueue

Basic = commands.Basic


@handles(Basic.Qos)
def qos(channel: Channel, method: commands.Basic.Qos) -> None:
    channel.set_qos(method.prefetch_size, method.prefetch_count, method.global_)
    channel.reply(Basic.QosOk())


@handles(Basic.Consume)
def consume(channel: Channel, method: commands.Basic.Consume) -> None:
    session = channel.session
    queue = session.api.consumed_queue(
        session.username,
        session.vhost.name,
        channel.queue_name(method.queue),
        connection=session.ref,
        permits=channel.read_permits,
    )
    if isinstance(queue, RemoteQueue):  # another worker runs it
        queue.consume(
            channel,
            method.consumer_tag,
            no_ack=method.no_ack,
            exclusive=method.exclusive,
            arguments=method.arguments or {},
            nowait=method.nowait,
        )
        return
    consumer = channel.new_consumer(
        queue,
        method.consumer_tag,
        no_ack=method.no_ack,
        exclusive=method.exclusive,
        arguments=method.arguments or {},
    )
    if not method.nowait:
        channel.reply(Basic.ConsumeOk(consumer.tag))
    channel.add_consumer(consumer)


@handles(Basic.Cancel)
def cancel(channel: Channel, method: commands.Basic.Cancel) -> None:
    # Spec (basic.cancel): unknown tags are not an error; unsettled deliveries stay unsettled,
    # except a single active consumer's, which go to the consumer taking over from it.
    channel.remove_consumer(method.consumer_tag or "")
    if not method.nowait:
        channel.reply(Basic.CancelOk(method.consumer_tag))


@handles(Basic.Get)
def get(channel: Channel, method: commands.Basic.Get) -> None:
    session = channel.session
    queue = session.api.consumed_queue(
        session.username,
        session.vhost.name,
        channel.queue_name(method.queue),
        connection=session.ref,
        permits=channel.read_permits,
    )
    if isinstance(queue, RemoteQueue):
        queue.get(channel, no_ack=method.no_ack)
    elif not channel.get(queue, method.no_ack):
        channel.reply(Basic.GetEmpty())


def _rejection(requeue: bool) -> Outcome:
    return Outcome.REQUEUE if requeue else Outcome.REJECT


@handles(Basic.Ack)
def ack(channel: Channel, method: commands.Basic.Ack) -> None:
    channel.settle_named(method.delivery_tag, method.multiple, Outcome.ACK)


@handles(Basic.Nack)
def nack(channel: Channel, method: commands.Basic.Nack) -> None:
    channel.settle_named(method.delivery_tag, method.multiple, _rejection(method.requeue))


@handles(Basic.Reject)
def reject(channel: Channel, method: commands.Basic.Reject) -> None:
    channel.settle_named(method.delivery_tag or 0, False, _rejection(method.requeue))


@handles(Basic.Recover)
def recover(channel: Channel, method: commands.Basic.Recover) -> None:
    channel.recover(method.requeue)
    channel.reply(Basic.RecoverOk())


@handles(Basic.RecoverAsync)
def recover_async(channel: Channel, method: commands.Basic.RecoverAsync) -> None:
    channel.recover(method.requeue)
