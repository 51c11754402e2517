"""exchange.declare, exchange.delete, exchange.bind, exchange.unbind."""

from __future__ import annotations

from collections.abc import Callable

from pamqp import base, commands

from batonmq.engine.access import (
    authorize,
    exchange_binding_properties,
    exchange_declare_properties,
    exchange_name,
)
from batonmq.engine.channel import Channel
from batonmq.engine.dispatch import handles
from batonmq.model.destination import Destination
from batonmq.security.acl import Action, ObjectType, Property

Exchange = commands.Exchange
_ExchangeBinding = commands.Exchange.Bind | commands.Exchange.Unbind


@handles(Exchange.Declare)
def declare(channel: Channel, method: commands.Exchange.Declare) -> None:
    session = channel.session
    name = exchange_name(method.exchange)
    if method.passive:
        # Qpid manual Table 2.3: ACCESS is "Applied when an object is read or accessed".
        authorize(
            session,
            Action.ACCESS,
            ObjectType.EXCHANGE,
            {Property.NAME: name, Property.PASSIVE: "true"},
        )
    else:
        properties = exchange_declare_properties(
            method.exchange,
            method.exchange_type,
            method.durable,
            method.auto_delete,
            method.arguments,
        )
        authorize(session, Action.CREATE, ObjectType.EXCHANGE, properties)
    change = session.vhost.declare_exchange(
        method.exchange,
        method.exchange_type,
        passive=method.passive,
        durable=method.durable,
        auto_delete=method.auto_delete,
        internal=method.internal,
        arguments=method.arguments,
    )
    channel.carry_out(change, _reply(method.nowait, Exchange.DeclareOk()), "exchange.declare")


def _reply(nowait: bool, reply: base.Frame) -> Callable[[object], base.Frame | None]:
    return lambda _: None if nowait else reply


@handles(Exchange.Delete)
def delete(channel: Channel, method: commands.Exchange.Delete) -> None:
    session = channel.session
    # Table 2.3: DELETE is "Applied when objects are deleted".
    authorize(
        session, Action.DELETE, ObjectType.EXCHANGE, {Property.NAME: exchange_name(method.exchange)}
    )
    change = session.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
    channel.carry_out(change, _reply(method.nowait, Exchange.DeleteOk()), "exchange.delete")


def _authorize_binding(channel: Channel, action: Action, method: _ExchangeBinding) -> None:
    session = channel.session
    properties = exchange_binding_properties(
        method.source,
        method.destination,
        method.routing_key,
        session.vhost.exchanges.get(method.destination),
    )
    authorize(session, action, ObjectType.EXCHANGE, properties)


@handles(Exchange.Bind)
def bind(channel: Channel, method: commands.Exchange.Bind) -> None:
    # Table 2.3: BIND is "Applied when queues are bound to exchanges"; an exchange bound to an
    # exchange is asked about the same way, the destination as queuename.
    _authorize_binding(channel, Action.BIND, method)
    change = channel.session.vhost.bind(
        method.source,
        Destination.exchange(method.destination),
        method.routing_key,
        method.arguments or {},
    )
    channel.carry_out(change, _reply(method.nowait, Exchange.BindOk()), "exchange.bind")


@handles(Exchange.Unbind)
def unbind(channel: Channel, method: commands.Exchange.Unbind) -> None:
    # Table 2.3: UNBIND is "Applied when queues are unbound from exchanges".
    _authorize_binding(channel, Action.UNBIND, method)
    change = channel.session.vhost.unbind(
        method.source,
        Destination.exchange(method.destination),
        method.routing_key,
        method.arguments or {},
    )
    channel.carry_out(change, _reply(method.nowait, Exchange.UnbindOk()), "exchange.unbind")
