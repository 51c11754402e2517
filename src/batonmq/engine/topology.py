"""The topology operations of the engine's service API (part of `EngineApi`): declare, delete and
purge queues, declare and delete exchanges, bind and unbind; one path for every caller.

Each `plan_*` method checks a request as AMQP has it checked (the virtual host's rules, the
caller's exclusive access, the ACL of the Qpid manual, Table 2.3) and returns the `Change` that
carries it out, or raises the AMQP error a client of the same request gets (`ProtocolError`;
`ChangePending` when the request names something still waiting for the store: ask again once it
is done). An AMQP method handler carries the change out on its channel and turns the result into
its -ok frame; management awaits `EngineApi`'s async form of the same plan, which raises the
error as `ApiError`. A purge is no plan: `purge_now` removes the messages at once, as queue.purge
always has, and its caller answers once their removal is written.

Beside the ACL, RabbitMQ's permissions (its access control guide, "which permissions are needed
for which AMQP 0-9-1 operations"; the default exchange is named "amq.default"):

==========================  =====================  ====================  ==================
operation                   configure              write                 read
==========================  =====================  ====================  ==================
exchange.declare            exchange               exchange (AE)         exchange (with AE)
exchange.declare passive    -                      -                     -
exchange.delete             exchange               -                     -
queue.declare               queue                  exchange (DLX)        queue (with DLX)
queue.declare passive       -                      -                     -
queue.delete                queue                  -                     -
exchange.bind / unbind      -                      exchange (dest.)      exchange (source)
queue.bind / unbind         -                      queue                 exchange
queue.purge                 -                      -                     queue
basic.publish               -                      exchange              -
basic.consume / get         -                      -                     queue
==========================  =====================  ====================  ==================

A server-named queue is judged by the name it will have ("amq.gen-..."), as RabbitMQ names it
before asking.

`user` is whom the ACL and the permissions judge; `connection` the connection asking, which its
exclusive queues belong to (None for management, which has none: another connection's exclusive
queue is 405 to it, as to any other connection).
"""

from __future__ import annotations

from pamqp.common import FieldTable

from batonmq.engine.access import (
    binding_properties,
    exchange_binding_properties,
    exchange_declare_properties,
    exchange_name,
    flag,
    is_temporary,
    queue_properties,
)
from batonmq.engine.apibase import ApiBase
from batonmq.engine.change import Change
from batonmq.engine.consumer import cancel_consumers_of
from batonmq.engine.exchange import Exchange
from batonmq.engine.snapshots import BindingInfo
from batonmq.engine.spreading import Declared
from batonmq.engine.vhost import QueueDeletedHook, VirtualHost
from batonmq.model.destination import Destination
from batonmq.model.topology import ConnectionRef
from batonmq.queues.protocol import RoutedQueue
from batonmq.security.acl import Action, ObjectType, Property
from batonmq.security.permissions import Permission, ResourceKind


class TopologyApi(ApiBase):
    """The topology operations (see the module docstring)."""

    # Queues -------------------------------------------------------------------------------

    def plan_declare_queue(
        self,
        user: str,
        vhost: str,
        name: str,
        *,
        connection: ConnectionRef | None = None,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> Change[Declared]:
        """queue.declare; an exclusive queue belongs to `connection`, which it needs."""
        assert connection is not None or not exclusive, "an exclusive queue needs a connection"
        host = self._vhost(vhost)
        generated = None if name or passive else host.new_queue_name()
        if passive:
            # Qpid manual Table 2.3: ACCESS is "Applied when an object is read or accessed".
            accessed = {Property.NAME: name, Property.PASSIVE: "true"}
            self._authorize(user, host, Action.ACCESS, ObjectType.QUEUE, accessed)
        else:
            # Table 2.3: CREATE is "Applied when an object is created, such as bindings, queues,
            # exchanges"; `temporary`: a queue that goes with its connection or last consumer.
            created = {
                Property.NAME: name,
                Property.DURABLE: flag(durable),
                Property.AUTO_DELETE: flag(auto_delete),
                Property.EXCLUSIVE: flag(exclusive),
                Property.TEMPORARY: flag(exclusive or auto_delete),
                Property.PASSIVE: "false",
            }
            self._authorize(user, host, Action.CREATE, ObjectType.QUEUE, created)
            self._permit_declare(
                user, host, ResourceKind.QUEUE, name or generated or "", arguments,
                "x-dead-letter-exchange",
            )  # fmt: skip
        return host.declare_queue(
            name,
            generated_name=generated,
            owner=connection,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
        )

    def plan_delete_queue(
        self,
        user: str,
        vhost: str,
        name: str,
        *,
        connection: ConnectionRef | None = None,
        if_unused: bool = False,
        if_empty: bool = False,
        on_delete: QueueDeletedHook = cancel_consumers_of,
    ) -> Change[int]:
        """queue.delete (a queue that is not there is deleted already: 0 messages); the number
        of messages it held. `on_delete` is given the queue just before it goes (by default
        its consumers are sent basic.cancel at once)."""
        host = self._vhost(vhost)
        queue = host.known_queue(name)
        # Table 2.3: DELETE is "Applied when objects are deleted". A queue that is not there has
        # only its name to be judged by.
        properties = queue_properties(queue) if queue is not None else {Property.NAME: name}
        self._authorize(user, host, Action.DELETE, ObjectType.QUEUE, properties)
        self._permit(user, host, Permission.CONFIGURE, ResourceKind.QUEUE, name)
        return host.delete_queue(
            name, owner=connection, if_unused=if_unused, if_empty=if_empty, on_delete=on_delete
        )

    def purge_now(
        self, user: str, vhost: str, name: str, *, connection: ConnectionRef | None = None
    ) -> int:
        """queue.purge: remove the queue's ready messages now; how many there were. Their
        removal is recorded for the store: the caller answers once it is durable."""
        host = self._vhost(vhost)
        queue = host.queue(name, connection)
        # Table 2.3: PURGE is "Applied when purge the contents of a queue".
        self._authorize(user, host, Action.PURGE, ObjectType.QUEUE, queue_properties(queue))
        self._permit(user, host, Permission.READ, ResourceKind.QUEUE, queue.name)
        host.wait_for_held(queue)  # what the caller published to it first is purged too
        return queue.purge()

    # Exchanges ----------------------------------------------------------------------------

    def plan_declare_exchange(
        self,
        user: str,
        vhost: str,
        name: str,
        type_name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> Change[Exchange | None]:
        """exchange.declare (None: another worker made the exchange)."""
        host = self._vhost(vhost)
        if passive:
            # Table 2.3: ACCESS is "Applied when an object is read or accessed".
            accessed = {Property.NAME: exchange_name(name), Property.PASSIVE: "true"}
            self._authorize(user, host, Action.ACCESS, ObjectType.EXCHANGE, accessed)
        else:
            created = exchange_declare_properties(name, type_name, durable, auto_delete, arguments)
            self._authorize(user, host, Action.CREATE, ObjectType.EXCHANGE, created)
            self._permit_declare(
                user, host, ResourceKind.EXCHANGE, name, arguments, "alternate-exchange"
            )
        return host.declare_exchange(
            name,
            type_name,
            passive=passive,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )

    def plan_delete_exchange(
        self, user: str, vhost: str, name: str, *, if_unused: bool = False
    ) -> Change[None]:
        """exchange.delete (an exchange that is not there is deleted already)."""
        host = self._vhost(vhost)
        # Table 2.3: DELETE is "Applied when objects are deleted".
        deleted = {Property.NAME: exchange_name(name)}
        self._authorize(user, host, Action.DELETE, ObjectType.EXCHANGE, deleted)
        self._permit(user, host, Permission.CONFIGURE, ResourceKind.EXCHANGE, name)
        return host.delete_exchange(name, if_unused=if_unused)

    def _permit_declare(
        self,
        user: str,
        host: VirtualHost,
        kind: ResourceKind,
        name: str,
        arguments: FieldTable | None,
        target_argument: str,
    ) -> None:
        """configure on what is declared; with an alternate (or dead-letter) exchange, write on
        that exchange and read on what is declared, which sends messages there."""
        self._permit(user, host, Permission.CONFIGURE, kind, name)
        target = (arguments or {}).get(target_argument)
        if isinstance(target, str):  # anything else: the virtual host refuses it with 406
            self._permit(user, host, Permission.WRITE, ResourceKind.EXCHANGE, target)
            self._permit(user, host, Permission.READ, kind, name)

    # Bindings -----------------------------------------------------------------------------

    def plan_bind(
        self, user: str, binding: BindingInfo, *, connection: ConnectionRef | None = None
    ) -> Change[None]:
        """queue.bind (destination_type "queue") or exchange.bind."""
        host = self._vhost(binding.vhost)
        destination = self._destination(user, host, binding, Action.BIND, connection)
        return host.bind(binding.source, destination, binding.routing_key, binding.arguments)

    def plan_unbind(
        self, user: str, binding: BindingInfo, *, connection: ConnectionRef | None = None
    ) -> Change[None]:
        """queue.unbind or exchange.unbind (unbinding what is not bound changes nothing)."""
        host = self._vhost(binding.vhost)
        destination = self._destination(user, host, binding, Action.UNBIND, connection)
        return host.unbind(binding.source, destination, binding.routing_key, binding.arguments)

    def _destination(
        self,
        user: str,
        host: VirtualHost,
        binding: BindingInfo,
        action: Action,
        connection: ConnectionRef | None,
    ) -> Destination:
        """The binding's destination, once the caller may bind (or unbind) it there.

        Table 2.3: BIND is "Applied when queues are bound to exchanges", UNBIND "when queues
        are unbound from exchanges"; an exchange destination is asked about the same way, as
        the queue name."""
        name = binding.destination
        if binding.destination_type != "queue":
            properties = exchange_binding_properties(
                binding.source, name, binding.routing_key, host.exchanges.get(name)
            )
            self._authorize(user, host, action, ObjectType.EXCHANGE, properties)
            self._permit_binding(user, host, ResourceKind.EXCHANGE, binding)
            return Destination.exchange(name)
        queue: RoutedQueue | None
        if action is Action.BIND:
            queue = host.routed_queue(name, connection)
        else:
            # A queue that is not there is judged as a durable, not temporary one: unbinding
            # it changes nothing.
            queue = host.known_queue(name)
            if queue is not None:
                host.check_owner(queue, connection)
        properties = binding_properties(
            binding.source,
            name,
            binding.routing_key,
            durable=queue is None or queue.durable,
            temporary=queue is not None and is_temporary(queue),
        )
        self._authorize(user, host, action, ObjectType.EXCHANGE, properties)
        self._permit_binding(user, host, ResourceKind.QUEUE, binding)
        return Destination.queue(name)

    def _permit_binding(
        self, user: str, host: VirtualHost, kind: ResourceKind, binding: BindingInfo
    ) -> None:
        """write on the destination (queue or exchange), read on the source exchange."""
        self._permit(user, host, Permission.WRITE, kind, binding.destination)
        self._permit(user, host, Permission.READ, ResourceKind.EXCHANGE, binding.source)
