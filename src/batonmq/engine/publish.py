"""basic.publish: check, route, enqueue, return unroutable mandatory messages, confirm."""

from __future__ import annotations

from pamqp import base, commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.engine.channel import Channel
from batonmq.engine.exchange import Exchange
from batonmq.engine.transaction import HeldPublish
from batonmq.model.message import FLAG_USER_ID, Message


def publish(channel: Channel, method: base.Frame, message: Message) -> None:
    assert isinstance(method, commands.Basic.Publish)
    if method.immediate:
        # RabbitMQ dropped "immediate" (3.0); the spec lets a server refuse it with 540.
        raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
    session = channel.session
    exchange = session.vhost.exchange(method.exchange)
    if exchange.internal:
        raise amqp_error(
            ReplyCode.ACCESS_REFUSED, f"cannot publish to internal exchange '{exchange.name}'"
        )
    if message.has_property(FLAG_USER_ID):
        user_id = message.properties.user_id
        if user_id != session.username:
            # RabbitMQ's validated user-id: a publisher cannot claim to be someone else.
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"user_id property set to '{user_id}' but authenticated user was "
                f"'{session.username}'",
            )
    if channel.transaction is not None:
        channel.transaction.publishes.append(HeldPublish(exchange, message, method.mandatory))
        return
    confirms = channel.confirms
    sequence = confirms.publish() if confirms is not None else 0
    route_and_enqueue(channel, exchange, message, method.mandatory)
    if confirms is not None:
        confirms.settle(sequence, True)


def route_and_enqueue(
    channel: Channel, exchange: Exchange, message: Message, mandatory: bool
) -> None:
    queues = channel.session.vhost.route(exchange, message)
    if not queues and mandatory:
        channel.session.send_content(
            channel.number,
            commands.Basic.Return(
                reply_code=ReplyCode.NO_ROUTE,
                reply_text="NO_ROUTE",
                exchange=message.exchange,
                routing_key=message.routing_key,
            ),
            message,
        )
    for queue in queues:
        queue.publish(message)
