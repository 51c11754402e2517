"""exchange.declare, exchange.delete, exchange.bind, exchange.unbind."""

from __future__ import annotations

from pamqp import commands

from batonmq.engine.channel import Channel
from batonmq.engine.dispatch import handles
from batonmq.model.destination import Destination

Exchange = commands.Exchange


@handles(Exchange.Declare)
def declare(channel: Channel, method: commands.Exchange.Declare) -> None:
    channel.session.vhost.declare_exchange(
        method.exchange,
        method.exchange_type,
        passive=method.passive,
        durable=method.durable,
        auto_delete=method.auto_delete,
        internal=method.internal,
        arguments=method.arguments,
    )
    if not method.nowait:
        channel.reply_when_durable(Exchange.DeclareOk(), "exchange.declare")


@handles(Exchange.Delete)
def delete(channel: Channel, method: commands.Exchange.Delete) -> None:
    channel.session.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
    if not method.nowait:
        channel.reply_when_durable(Exchange.DeleteOk(), "exchange.delete")


@handles(Exchange.Bind)
def bind(channel: Channel, method: commands.Exchange.Bind) -> None:
    channel.session.vhost.bind(
        method.source,
        Destination.exchange(method.destination),
        method.routing_key,
        method.arguments or {},
    )
    if not method.nowait:
        channel.reply_when_durable(Exchange.BindOk(), "exchange.bind")


@handles(Exchange.Unbind)
def unbind(channel: Channel, method: commands.Exchange.Unbind) -> None:
    channel.session.vhost.unbind(
        method.source,
        Destination.exchange(method.destination),
        method.routing_key,
        method.arguments or {},
    )
    if not method.nowait:
        channel.reply_when_durable(Exchange.UnbindOk(), "exchange.unbind")
