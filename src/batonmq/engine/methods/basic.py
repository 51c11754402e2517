"""basic.qos, consume, cancel, get, ack, nack, reject, recover (publish: engine/publish.py)."""

from __future__ import annotations

import base64
import os

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.engine.access import authorize, permit, queue_properties
from batonmq.engine.channel import Channel
from batonmq.engine.consumer import Consumer, consumer_priority, consumer_selector
from batonmq.engine.dispatch import handles
from batonmq.engine.methods.queue import queue_name
from batonmq.engine.outcome import Outcome
from batonmq.security.acl import Action, ObjectType
from batonmq.security.permissions import Permission, ResourceKind

Basic = commands.Basic


def consumer_tag() -> str:
    """A server-generated consumer tag, shaped like RabbitMQ's ("amq.ctag-" and 22 characters)."""
    return "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")


@handles(Basic.Qos)
def qos(channel: Channel, method: commands.Basic.Qos) -> None:
    if method.prefetch_size:
        # As RabbitMQ: a byte-size prefetch window is not implemented.
        raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "prefetch_size!=0")
    # RabbitMQ's per_consumer_qos: global=false limits each consumer created from now on,
    # global=true limits the channel's consumers together.
    if method.global_:
        channel.channel_prefetch = method.prefetch_count
        channel.resume()
    else:
        channel.consumer_prefetch = method.prefetch_count
    channel.reply(Basic.QosOk())


@handles(Basic.Consume)
def consume(channel: Channel, method: commands.Basic.Consume) -> None:
    session = channel.session
    queue = session.vhost.queue(queue_name(channel, method.queue), session)
    # Qpid manual Table 2.3: CONSUME is "Applied when subscriptions are created".
    authorize(session, Action.CONSUME, ObjectType.QUEUE, queue_properties(queue))
    # RabbitMQ's access control guide: basic.consume needs read on the queue.
    permit(session, Permission.READ, ResourceKind.QUEUE, queue.name)
    tag = method.consumer_tag or consumer_tag()
    if tag in channel.consumers:
        # Spec (basic.consume consumer-tag): reusing a tag on the channel is 530 NOT_ALLOWED.
        raise amqp_error(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
    limit = session.broker.settings.max_consumers_per_channel
    if limit and len(channel.consumers) >= limit:
        # The Overload requirements: "consumers per channel; each refusal names the limit".
        # RabbitMQ's consumer_max_per_channel: 530 "reached maximum (~B) of consumers per channel".
        raise amqp_error(
            ReplyCode.NOT_ALLOWED,
            f"reached maximum ({limit}) of consumers per channel "
            "(limits.max_consumers_per_channel)",
        )
    where = f"queue '{queue.name}' in vhost '{session.vhost.name}'"
    arguments = method.arguments or {}
    priority = consumer_priority(arguments, where)
    selector = consumer_selector(arguments, where)
    # RabbitMQ's "Single Active Consumer": "Trying to register a consumer with the exclusive
    # consume flag set to true will result in an error if single active consumer is enabled".
    exclusive_refused = queue.consumers or queue.consumers.single_active
    if (method.exclusive and exclusive_refused) or queue.has_exclusive_consumer():
        raise amqp_error(ReplyCode.ACCESS_REFUSED, f"{where} in exclusive use")
    options = queue.options
    if options.max_active_consumers is not None and options.max_backup_consumers is not None:
        # MQ 3.5 admin guide: "New consumers will be rejected if the number of consumers exceeds the
        # sum of these two attributes."
        limit = options.max_active_consumers + options.max_backup_consumers
        if len(queue.consumers) >= limit:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"{where} has reached its limit of {limit} consumers "
                "(x-max-active-consumers plus x-max-backup-consumers)",
            )
    queue.check_consume(
        no_ack=method.no_ack,
        prefetch_count=channel.consumer_prefetch,
        global_prefetch=channel.channel_prefetch,
        arguments=arguments,
    )
    consumer = Consumer(
        tag=tag,
        channel=channel,
        queue=queue,
        no_ack=method.no_ack,
        exclusive=method.exclusive,
        prefetch_count=channel.consumer_prefetch,
        arguments=arguments,
        priority=priority,
        selector=selector,
    )
    if not method.nowait:
        channel.reply(Basic.ConsumeOk(tag))
    channel.add_consumer(consumer)
    queue.dispatch()


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
    queue = session.vhost.queue(queue_name(channel, method.queue), session)
    # basic.get takes messages from the queue as a consumer does: CONSUME QUEUE.
    authorize(session, Action.CONSUME, ObjectType.QUEUE, queue_properties(queue))
    # RabbitMQ's access control guide: basic.get needs read on the queue.
    permit(session, Permission.READ, ResourceKind.QUEUE, queue.name, channel.read_permits)
    session.vhost.wait_for_held(queue)  # what this channel published first is found
    entry = queue.get()
    if entry is None and queue.waiting_for_page_in:
        # The next messages are in the store: answer once they are read back, in order.
        session.hold_input_until(
            lambda done: queue.when_paged_in(lambda: session.run_again(channel, method, done))
        )
        return
    if entry is None:
        channel.reply(Basic.GetEmpty())
    else:
        channel.deliver_get(queue, entry, method.no_ack)


def _settle(channel: Channel, delivery_tag: int, multiple: bool, outcome: Outcome) -> None:
    tags = channel.check_tags(delivery_tag, multiple)
    transaction = channel.transaction
    if transaction is None:
        channel.settle(tags, outcome)
        return
    if not multiple and delivery_tag in transaction.settled_tags:
        raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
    transaction.hold_settlement(
        [tag for tag in tags if tag not in transaction.settled_tags], outcome
    )


def _rejection(requeue: bool) -> Outcome:
    return Outcome.REQUEUE if requeue else Outcome.REJECT


@handles(Basic.Ack)
def ack(channel: Channel, method: commands.Basic.Ack) -> None:
    _settle(channel, method.delivery_tag, method.multiple, Outcome.ACK)


@handles(Basic.Nack)
def nack(channel: Channel, method: commands.Basic.Nack) -> None:
    _settle(channel, method.delivery_tag, method.multiple, _rejection(method.requeue))


@handles(Basic.Reject)
def reject(channel: Channel, method: commands.Basic.Reject) -> None:
    _settle(channel, method.delivery_tag or 0, False, _rejection(method.requeue))


@handles(Basic.Recover)
def recover(channel: Channel, method: commands.Basic.Recover) -> None:
    channel.recover(method.requeue)
    channel.reply(Basic.RecoverOk())


@handles(Basic.RecoverAsync)
def recover_async(channel: Channel, method: commands.Basic.RecoverAsync) -> None:
    channel.recover(method.requeue)
