"""exchange.declare, exchange.delete, exchange.bind, exchange.unbind."""

from __future__ import annotations

from collections.abc import Callable

from pamqp import base, commands

from batonmq.engine.channel import Channel
from batonmq.engine.dispatch import handles
from batonmq.engine.snapshots import BindingInfo

Exchange = commands.Exchange
_ExchangeBinding = commands.Exchange.Bind | commands.Exchange.Unbind


@handles(Exchange.Declare)
def declare(channel: Channel, method: commands.Exchange.Declare) -> None:
    session = channel.session
    change = session.api.plan_declare_exchange(
        session.username,
        session.vhost.name,
        method.exchange,
        method.exchange_type,
        passive=method.passive,
        durable=method.durable,
        auto_delete=method.auto_delete,
        internal=method.internal,
        arguments=method.arguments,
    )
    channel.carry_out(change, _reply(method.nowait, Exchange.DeclareOk()), Exchange.Declare)


def _reply(nowait: bool, reply: base.Frame) -> Callable[[object], base.Frame | None]:
    return lambda _: None if nowait else reply


@handles(Exchange.Delete)
def delete(channel: Channel, method: commands.Exchange.Delete) -> None:
    session = channel.session
    change = session.api.plan_delete_exchange(
        session.username, session.vhost.name, method.exchange, if_unused=method.if_unused
    )
    channel.carry_out(change, _reply(method.nowait, Exchange.DeleteOk()), Exchange.Delete)


def _binding(channel: Channel, method: _ExchangeBinding) -> BindingInfo:
    return BindingInfo(
        channel.session.vhost.name,
        method.source,
        method.destination,
        "exchange",
        method.routing_key,
        method.arguments or {},
    )


@handles(Exchange.Bind)
def bind(channel: Channel, method: commands.Exchange.Bind) -> None:
    session = channel.session
    change = session.api.plan_bind(session.username, _binding(channel, method))
    channel.carry_out(change, _reply(method.nowait, Exchange.BindOk()), Exchange.Bind)


@handles(Exchange.Unbind)
def unbind(channel: Channel, method: commands.Exchange.Unbind) -> None:
    session = channel.session
    change = session.api.plan_unbind(session.username, _binding(channel, method))
    channel.carry_out(change, _reply(method.nowait, Exchange.UnbindOk()), Exchange.Unbind)
