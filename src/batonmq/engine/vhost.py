"""A virtual host: its exchanges, queues and bindings, and the AMQP rules for changing them.

Every method raises the `ProtocolError` the spec (or, where the spec leaves it open, RabbitMQ)
gives a violation; the caller names the failing method and closes the channel or connection.
"""

from __future__ import annotations

import base64
import logging
import os
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar, cast

from pamqp.common import FieldTable

import batonmq.routing  # noqa: F401 - registers the exchange types
from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.amqp.shortstr import fits_short_string, not_short_string
from batonmq.engine.autocreate import AutocreatePolicy
from batonmq.engine.change import Change, ChangePending, Outcome, applied
from batonmq.engine.consumer import cancel_consumers_of
from batonmq.engine.deadletter import republish
from batonmq.engine.events import EventFeed, EventKind
from batonmq.engine.exchange import (
    ALTERNATE_EXCHANGE,
    Exchange,
    alternate_exchange_change,
    alternate_exchange_name,
)
from batonmq.engine.spreading import Declared
from batonmq.model.destination import Destination, DestinationKind
from batonmq.model.message import Message, QueueEntry
from batonmq.model.topology import (
    Bound,
    ConnectionRef,
    ExchangeDeclared,
    ExchangeDeleted,
    QueueDeclared,
    QueueDeleted,
    TopologyOp,
    Unbound,
)
from batonmq.queues.arguments import (
    QUEUE_TYPE_ARGUMENT,
    InvalidArgument,
    Overflow,
    QueueArguments,
    inequivalent,
)
from batonmq.queues.deadletter import Reason
from batonmq.queues.paging import Paging
from batonmq.queues.protocol import Queue, RoutedQueue
from batonmq.queues.streams.arguments import STREAM_TYPE
from batonmq.queues.types import declared_type, queue_type
from batonmq.routing.base import BindingArgumentError, exchange_type
from batonmq.routing.router import Router
from batonmq.store.base import StoredBinding, StoredExchange, StoredQueue
from batonmq.store.journal import Journal
from batonmq.timers import LoopTimers

if TYPE_CHECKING:
    from batonmq.engine.spreading import Spreading

log = logging.getLogger(__name__)

#: The exchanges every virtual host has (spec 3.1.3.1 and 3.1.3.4: amq.match for headers).
STANDARD_EXCHANGES: Final = (
    ("", "direct"),
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)
RESERVED_PREFIX: Final = "amq."
#: How many server-generated names per worker `VirtualHost.new_queue_name` draws at most.
NAME_DRAWS: Final = 64

T = TypeVar("T")
#: Called with a queue that is being deleted, before it goes (to cancel its consumers).
QueueDeletedHook = Callable[[Queue], object]


def _key_of(destination: Destination) -> tuple[str, str]:
    return (destination.kind.value, destination.name)


def _declared(queue: Queue) -> Declared:
    """What queue.declare answers of a queue this process runs."""
    return Declared(queue.name, queue.message_count, queue.consumer_count, queue)


def _check_name(what: str, name: str) -> None:
    """A name that came in some other way than AMQP (the management API, definitions) must be
    one AMQP can carry (a short string): 406 if it is not."""
    if not fits_short_string(name):
        raise amqp_error(ReplyCode.PRECONDITION_FAILED, not_short_string(what))


def server_queue_name() -> str:
    """A server-generated queue name, as RabbitMQ makes them ("amq.gen-" and 22 random chars)."""
    return "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")


class VirtualHost:
    """Durable exchanges, durable queues (not exclusive: those end with their connection) and the
    bindings between durable ends are written through `paging.journal` as they change."""

    def __init__(
        self,
        name: str,
        paging: Paging | None = None,
        autocreate: AutocreatePolicy | None = None,
        events: EventFeed | None = None,
    ) -> None:
        self.name = name
        self.events = events or EventFeed()
        self.paging = paging or Paging(vhost=name)
        #: The limits auto-created queues get (MQ 3.5 admin guide Table 2-10).
        self.autocreate = autocreate or AutocreatePolicy()
        self.exchanges: dict[str, Exchange] = {}
        #: The queues this process runs.
        self.queues: dict[str, Queue] = {}
        #: In a virtual host spread over workers, the queues other workers run, which this one
        #: routes to; empty otherwise.
        self.remote: dict[str, RoutedQueue] = {}
        #: The links to the other workers of a spread virtual host; None when it is not spread.
        self.spread: Spreading | None = None
        #: Queues whose delivery to consumers is paused (imqcmd pause dst): they take messages
        #: and answer basic.get, but their consumers have no room until resumed. Not stored.
        self.paused: set[Queue] = set()
        #: Which exchanges may hold bindings to a destination (a superset; for deletion).
        self._sources: defaultdict[Destination, set[str]] = defaultdict(set)
        #: The objects whose change waits for the store, and who waits for it.
        self._pending: dict[tuple[str, str], list[Callable[[], None]]] = {}
        for exchange_name, type_name in STANDARD_EXCHANGES:
            self._create_exchange(exchange_name, type_name, durable=True)

    # Exchanges ----------------------------------------------------------------------------

    def add_builtin_exchange(self, name: str, type_name: str) -> None:
        """Add an exchange of the broker's own (as the standard ones: durable, made at every
        start, never stored), before the store's bindings to it are recovered."""
        self._create_exchange(name, type_name, durable=True)

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> Change[Exchange | None]:
        """exchange.declare: the exchange, or None when another worker made it (a spread
        virtual host's home)."""
        if passive:
            existing = self._existing_exchange(name)
            if existing is None:
                raise self._not_found("exchange", name)
            return applied(existing)
        checked = self.check_exchange_declare(
            name,
            type_name,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        if isinstance(checked, Exchange):
            return applied(checked)
        if self.spread is not None:
            return cast("Change[Exchange | None]", self.spread.request(checked, owner=None))
        return Change(
            lambda: self._declare_exchange(checked),
            written=self.write(checked),
            keys=(("exchange", name),),
        )

    def check_exchange_declare(
        self,
        name: str,
        type_name: str,
        *,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable | None,
    ) -> ExchangeDeclared | Exchange:
        """The exchange.declare (not passive) of an exchange: the existing one if it is
        equivalent, else the declaration that makes it; raises what refuses it."""
        _check_name("an exchange name", name)
        existing = self._existing_exchange(name)
        if exchange_type(type_name) is None:
            # Spec (exchange.declare, type): an unsupported type is connection error 503.
            raise amqp_error(ReplyCode.COMMAND_INVALID, f"unknown exchange type '{type_name}'")
        if existing is not None:
            self._check_equivalent(
                "exchange",
                name,
                {
                    "type": (type_name, existing.type_name),
                    "durable": (durable, existing.durable),
                    "auto_delete": (auto_delete, existing.auto_delete),
                    "internal": (internal, existing.internal),
                },
            )
            # RabbitMQ compares one argument only: "The only arg we care about is
            # alternate-exchange" (rabbit_exchange:assert_args_equivalence).
            change = alternate_exchange_change(
                self._alternate_exchange(name, arguments), existing.alternate_exchange
            )
            if change is not None:
                raise amqp_error(
                    ReplyCode.PRECONDITION_FAILED,
                    f"inequivalent arg '{ALTERNATE_EXCHANGE}' for exchange '{name}' in vhost "
                    f"'{self.name}': {change}",
                )
            return existing
        if name.startswith(RESERVED_PREFIX):
            # Only creating one is refused: an equivalent redeclare of amq.direct is fine.
            raise amqp_error(
                ReplyCode.ACCESS_REFUSED,
                f"exchange name '{name}' contains reserved prefix '{RESERVED_PREFIX}*'",
            )
        self._alternate_exchange(name, arguments)
        return ExchangeDeclared(
            name, type_name, durable, auto_delete, internal, dict(arguments or {})
        )

    def _existing_exchange(self, name: str) -> Exchange | None:
        """Exchange `name` as a declaration finds it (403 for the default exchange, which
        cannot be declared; ChangePending while a change of it waits)."""
        if name == "":
            raise amqp_error(
                ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange"
            )
        self._wait_for(("exchange", name))
        return self.exchanges.get(name)

    def _declare_exchange(self, op: ExchangeDeclared) -> Exchange:
        return self._create_exchange(
            op.name,
            op.type_name,
            durable=op.durable,
            auto_delete=op.auto_delete,
            internal=op.internal,
            arguments=op.arguments,
        )

    @property
    def _journal(self) -> Journal:
        return self.paging.journal

    def _alternate_exchange(self, name: str, arguments: FieldTable | None) -> str | None:
        try:
            return alternate_exchange_name(arguments or {})
        except TypeError as error:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid type '{error}' for arg '{ALTERNATE_EXCHANGE}' in exchange '{name}' in "
                f"vhost '{self.name}'",
            ) from error

    def _create_exchange(
        self,
        name: str,
        type_name: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> Exchange:
        factory = exchange_type(type_name)
        assert factory is not None, type_name
        arguments = dict(arguments or {})
        exchange = Exchange(
            name,
            type_name,
            Router(factory),
            durable,
            auto_delete,
            internal,
            arguments,
            alternate_exchange_name(arguments),
        )
        self.exchanges[name] = exchange
        if self.writes_topology:  # one event per change, by the worker that writes its row
            self.events.publish(EventKind.EXCHANGE_CREATED, name, self.name, type=type_name)
        return exchange

    def exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise self._not_found("exchange", name)
        return exchange

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> Change[None]:
        checked = self.check_exchange_delete(name, if_unused=if_unused)
        if checked is None:
            return applied(None)  # RabbitMQ: deleting an exchange that does not exist succeeds.
        if self.spread is not None:
            return cast(
                "Change[None]", self.spread.request(checked, owner=None, if_unused=if_unused)
            )
        exchange = self.exchanges[name]

        def remove() -> None:
            if self.exchanges.get(name) is exchange:
                self._delete_exchange(checked)

        return Change(remove, written=self.write(checked), keys=(("exchange", name),))

    def check_exchange_delete(self, name: str, *, if_unused: bool) -> ExchangeDeleted | None:
        """exchange.delete: None when there is no such exchange; raises what refuses it."""
        if name == "" or name.startswith(RESERVED_PREFIX):
            raise amqp_error(ReplyCode.ACCESS_REFUSED, f"cannot delete exchange '{name}'")
        self._wait_for(("exchange", name))
        exchange = self.exchanges.get(name)
        if exchange is None:
            return None
        if if_unused and len(exchange.router):
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"exchange '{name}' in use")
        return ExchangeDeleted(name)

    def _delete_exchange(self, op: ExchangeDeleted) -> None:
        exchange = self.exchanges.get(op.name)
        if exchange is not None:
            # Its row's deletion was written by whoever writes the topology (`write`).
            self._remove_exchange(exchange, written=True)

    def _remove_exchange(self, exchange: Exchange, *, written: bool = False) -> None:
        """Remove `exchange` and the bindings to and from it; `written`: its deletion is in
        the store already."""
        del self.exchanges[exchange.name]
        if self.writes_topology:  # a replica writes nothing and leaves the event to the home
            self.events.publish(EventKind.EXCHANGE_DELETED, exchange.name, self.name)
            if exchange.durable and not written:
                self._journal.delete_exchange(self.name, exchange.name)
        for destination, _key, _arguments in list(exchange.router.bindings()):
            self._sources[destination].discard(exchange.name)
        self._remove_bindings_to(Destination.exchange(exchange.name))

    # Bindings -----------------------------------------------------------------------------

    def bind(
        self, source: str, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> Change[None]:
        checked = self.check_bind(source, destination, routing_key, arguments)
        if self.spread is not None:
            return cast("Change[None]", self.spread.request(checked, owner=None))
        exchange = self.exchanges[source]

        def add() -> None:
            # An end may have gone meanwhile (an auto-delete exchange, an exclusive queue).
            if self.exchanges.get(source) is exchange:
                self._bind(checked)

        return Change(add, written=self.write(checked))

    def check_bind(
        self, source: str, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> Bound:
        """queue.bind or exchange.bind: the binding to make; raises what refuses it."""
        self._wait_for(("exchange", source), _key_of(destination))
        exchange = self._bindable_source(source)
        self._check_destination(destination)
        try:
            exchange.router.check(routing_key, arguments)
        except BindingArgumentError as error:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, str(error)) from error
        return Bound(source, destination, routing_key, arguments)

    def _bind(self, op: Bound) -> None:
        exchange = self.exchanges.get(op.source)
        if exchange is not None and self._exists(op.destination):
            exchange.router.bind(op.destination, op.routing_key, op.arguments)
            self._sources[op.destination].add(op.source)

    def unbind(
        self, source: str, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> Change[None]:
        """RabbitMQ: unbinding what is not bound, from an exchange or to a destination that does
        not exist, succeeds (rabbit_binding:remove is idempotent)."""
        checked = self.check_unbind(source, destination, routing_key, arguments)
        if checked is None:
            return applied(None)
        if self.spread is not None:
            return cast("Change[None]", self.spread.request(checked, owner=None))
        exchange = self.exchanges[source]

        def remove() -> None:
            if self.exchanges.get(source) is exchange:
                self._unbind(checked)

        return Change(remove, written=self.write(checked))

    def check_unbind(
        self, source: str, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> Unbound | None:
        """queue.unbind or exchange.unbind: None when an end is missing (nothing to do)."""
        if source == "":
            raise amqp_error(
                ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange"
            )
        self._wait_for(("exchange", source), _key_of(destination))
        if source not in self.exchanges or not self._exists(destination):
            return None
        return Unbound(source, destination, routing_key, arguments)

    def _unbind(self, op: Unbound) -> None:
        exchange = self.exchanges.get(op.source)
        if exchange is not None and exchange.router.unbind(
            op.destination, op.routing_key, op.arguments
        ):
            self._after_unbind(exchange)

    def restore_binding(
        self, source: str, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> None:
        """A binding read back from the store (both ends exist): bind without writing it again.
        Its arguments come back as declared, so a selector binding gets its selector again."""
        self.exchanges[source].router.bind(destination, routing_key, arguments)
        self._sources[destination].add(source)

    def restore_exchange(self, stored: StoredExchange) -> None:
        self._create_exchange(
            stored.name,
            stored.type_name,
            durable=True,
            auto_delete=stored.auto_delete,
            internal=stored.internal,
            arguments=stored.arguments,
        )

    def _binding_persists(self, source: Exchange, destination: Destination) -> bool:
        """AMQP: a binding survives a restart when both of its ends do."""
        if not source.durable or source.is_default or not self._journal.enabled:
            return False
        if destination.kind is DestinationKind.QUEUE:
            # A queue's persistent messages survive where it runs; its declaration is what
            # every worker knows of it.
            queue = self.known_queue(destination.name)
            assert queue is not None, destination
            return queue.durable and queue.exclusive_owner is None
        return self.exchanges[destination.name].durable

    def stored_binding(
        self, source: str, destination: Destination, routing_key: str, arguments: FieldTable
    ) -> StoredBinding:
        return StoredBinding(
            self.name, source, destination.kind.value, destination.name, routing_key, arguments
        )

    def _bindable_source(self, source: str) -> Exchange:
        if source == "":
            raise amqp_error(
                ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange"
            )
        return self.exchange(source)

    def _exists(self, destination: Destination) -> bool:
        if destination.kind is DestinationKind.QUEUE:
            return self.known_queue(destination.name) is not None
        return destination.name in self.exchanges

    def _check_destination(self, destination: Destination) -> None:
        if destination.kind is DestinationKind.QUEUE:
            if self.known_queue(destination.name) is None:
                raise self._not_found("queue", destination.name)
        elif destination.name == "":
            raise amqp_error(
                ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange"
            )
        else:
            self.exchange(destination.name)

    def _remove_bindings_to(self, destination: Destination) -> None:
        for source in self._sources.pop(destination, ()):
            exchange = self.exchanges.get(source)
            if exchange is not None and exchange.router.unbind_destination(destination):
                self._after_unbind(exchange)

    def _after_unbind(self, exchange: Exchange) -> None:
        # An auto-delete exchange goes when its last binding goes (RabbitMQ semantics).
        if exchange.auto_delete and not len(exchange.router) and exchange.name in self.exchanges:
            self._remove_exchange(exchange)

    # Queues -------------------------------------------------------------------------------

    def declare_queue(
        self,
        name: str,
        *,
        generated_name: str | None = None,
        owner: ConnectionRef | None,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> Change[Declared]:
        checked = self.check_queue_declare(
            name,
            generated_name=generated_name,
            owner=owner,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        if isinstance(checked, QueueDeclared):
            if self.spread is not None:
                return cast("Change[Declared]", self.spread.request(checked, owner=owner))
            return Change(
                lambda: _declared(self._make_queue(checked)),
                written=self.write(checked),
                keys=(("queue", checked.name),),
            )
        local = self.queues.get(checked.name)
        if local is not checked:
            # Another worker runs it: that worker counts its messages and consumers (and, for
            # a redeclaration, restarts its x-expires).
            assert self.spread is not None, checked.name
            return self.spread.counts(checked, touch=not passive)
        return applied(_declared(local))

    def check_queue_declare(
        self,
        name: str,
        *,
        generated_name: str | None,
        owner: ConnectionRef | None,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: FieldTable | None,
    ) -> QueueDeclared | RoutedQueue:
        """queue.declare: the existing queue (passive, or an equivalent redeclaration, which
        restarts the x-expires of a queue this process runs), else the declaration that makes
        it; raises what refuses it. `generated_name`: a server-named queue's name."""
        _check_name("a queue name", name)
        if name:
            self._wait_for(("queue", name))
        existing = self.known_queue(name) if name else None
        local = self.queues.get(name) if name else None
        if existing is not None:
            # Spec (queue.declare exclusive): "If the queue already exists ... and is exclusive to
            # another connection, the server MUST raise a channel exception 405": before any
            # equivalence check, as RabbitMQ does.
            self.check_owner(existing, owner)
            if local is not None:
                self.wait_for_held(local)  # its message count includes what was published
        if passive:
            if existing is None:
                raise self._not_found("queue", name)
            return existing
        if existing is not None:
            # RabbitMQ (rabbit_amqqueue:assert_equivalence) checks exclusive access strictly,
            # before any argument: the declaring connection must be the queue's owner if it
            # asks for an exclusive queue, and the queue must have none if it does not; else
            # 405 "... or the exclusive property value does not match".
            if existing.exclusive_owner != (owner if exclusive else None):
                raise self._locked(existing)
            self._check_equivalent(
                "queue",
                name,
                {
                    "durable": (durable, existing.durable),
                    "auto_delete": (auto_delete, existing.auto_delete),
                },
            )
            changed = inequivalent(arguments or {}, existing.arguments)
            if changed is not None:
                argument, received, current = changed
                raise amqp_error(
                    ReplyCode.PRECONDITION_FAILED,
                    f"inequivalent arg '{argument}' for queue '{name}' in vhost '{self.name}': "
                    f"received {received} but current is {current}",
                )
            if local is not None:
                local.touched()
            return existing
        if name.startswith(RESERVED_PREFIX):
            raise amqp_error(
                ReplyCode.ACCESS_REFUSED,
                f"queue name '{name}' contains reserved prefix '{RESERVED_PREFIX}*'",
            )
        # A server-named queue: the name its declarer's permissions were checked against.
        name = name or generated_name or self.new_queue_name()
        arguments = dict(arguments or {})
        try:
            kind = queue_type(arguments)
            kind.parse_arguments(self.autocreate.arguments_for(name, arguments))
            if self.spread is not None:
                # Judged of what the client asked for, not of an auto-create policy's defaults.
                self._refuse_unspread(name, arguments, kind.parse_arguments(arguments))
        except InvalidArgument as error:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid arg '{error.name}' for queue '{name}' in vhost '{self.name}': "
                f"{error.problem}",
            ) from error
        refused = kind.refused_property(
            durable=durable, exclusive=exclusive, auto_delete=auto_delete
        )
        if refused is not None:
            # RabbitMQ (rabbit_queue_type_util), e.g. a stream: "invalid property 'non-durable'
            # for queue 'q' in vhost '/'".
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid property '{refused}' for queue '{name}' in vhost '{self.name}'",
            )
        return QueueDeclared(name, durable, auto_delete, owner if exclusive else None, arguments)

    def new_queue_name(self) -> str:
        """A server-generated name for a new queue; in a spread virtual host one that this
        worker owns (the spreading plan: a server-named queue, such as an exclusive reply
        queue, runs where its connection is), drawn again until it is (as many draws as
        workers, on average); 541 INTERNAL_ERROR if none is after `NAME_DRAWS` per worker."""
        draws = NAME_DRAWS * (1 if self.spread is None else self.spread.workers)
        for _draw in range(draws):
            name = server_queue_name()
            if self._runs(name):
                return name
        raise amqp_error(
            ReplyCode.INTERNAL_ERROR,
            f"no server-generated queue name in vhost '{self.name}' falls to this worker",
        )

    def _refuse_unspread(self, name: str, arguments: FieldTable, options: QueueArguments) -> None:
        """406 for what a queue of a spread virtual host cannot have yet: a stream (its log is
        read through one worker's consumers), x-max-producers (its producers are counted by
        each worker that publishes) and x-overflow flow-control (its publishers are held by
        other workers)."""
        refused: tuple[str, str] | None = None
        if declared_type(arguments) == STREAM_TYPE:
            refused = (QUEUE_TYPE_ARGUMENT, "stream queues")
        elif options.max_producers is not None:
            refused = ("x-max-producers", "producer limits")
        elif options.overflow is Overflow.FLOW_CONTROL:
            refused = ("x-overflow", "flow-control")
        if refused is not None:
            argument, what = refused
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid arg '{argument}' for queue '{name}' in vhost '{self.name}': {what} "
                "are not available in a virtual host spread over workers yet",
            )

    def _make_queue(self, op: QueueDeclared) -> Queue:
        return self.add_queue(
            op.name,
            durable=op.durable,
            exclusive_owner=op.exclusive_owner,
            auto_delete=op.auto_delete,
            arguments=op.arguments,
        )

    def _add_declared(self, op: QueueDeclared) -> RoutedQueue:
        """The queue `op` declares: run here, or by the worker that owns it; the one there is
        already when `op` is applied again."""
        existing = self.known_queue(op.name)
        if existing is not None:
            return existing
        if self.spread is None or self.spread.owns(op.name):
            return self._make_queue(op)
        queue = self.spread.remote_queue(op)
        self.remote[op.name] = queue
        return queue

    def add_queue(
        self,
        name: str,
        *,
        durable: bool,
        exclusive_owner: ConnectionRef | None = None,
        auto_delete: bool = False,
        arguments: FieldTable,
    ) -> Queue:
        kind = queue_type(arguments)
        queue = kind(
            name,
            durable=durable,
            exclusive_owner=exclusive_owner,
            auto_delete=auto_delete,
            arguments=arguments,
            paging=self.paging,
            # A timer of the queue that raises is logged naming it.
            timers=LoopTimers(f"queue '{name}' in vhost '{self.name}'"),
            options=kind.parse_arguments(self.autocreate.arguments_for(name, arguments)),
        )
        queue.hooks = self
        self.queues[name] = queue
        self.events.publish(EventKind.QUEUE_CREATED, name, self.name, durable=durable)
        return queue

    def known_queue(self, name: str) -> RoutedQueue | None:
        """The queue named `name`, whether this process runs it or another worker does."""
        queue = self.queues.get(name)
        return queue if queue is not None else self.remote.get(name)

    def routed_queue(
        self, name: str, owner: ConnectionRef | None, *, wait: bool = True
    ) -> RoutedQueue:
        """The queue `owner` may route to or bind (404 if missing, 405 if another connection's
        exclusive); ChangePending while a change of it waits for the store, unless `wait` is
        false (a caller that cannot wait is answered from the queues as they are now)."""
        if wait:
            self._wait_for(("queue", name))
        queue = self.known_queue(name)
        if queue is None:
            raise self._not_found("queue", name)
        self.check_owner(queue, owner)
        return queue

    def queue(self, name: str, owner: ConnectionRef | None, *, wait: bool = True) -> Queue:
        """The queue `owner` may use (as `routed_queue`), which must run in this process: what
        reads or changes a queue's messages in place (the management API sends requests about
        a queue another worker runs to that worker; basic.consume and basic.get reach it through
        the link, `RemoteQueue`)."""
        self.routed_queue(name, owner, wait=wait)
        self._refuse_remote(name)
        return self.queues[name]

    def _refuse_remote(self, name: str) -> None:
        """540 NOT_IMPLEMENTED if another worker runs queue `name` (as basic.qos refuses a
        prefetch size it does not implement)."""
        if name in self.remote and self.spread is not None:
            raise amqp_error(
                ReplyCode.NOT_IMPLEMENTED,
                f"queue '{name}' in vhost '{self.name}' is run by worker "
                f"{self.spread.owner_of(name)}: ask that worker",
            )

    def delete_queue(
        self,
        name: str,
        *,
        owner: ConnectionRef | None,
        if_unused: bool = False,
        if_empty: bool = False,
        on_delete: QueueDeletedHook | None = None,
    ) -> Change[int]:
        checked = self.check_queue_delete(name, owner=owner, if_unused=if_unused, if_empty=if_empty)
        if checked is None:
            return applied(0)  # RabbitMQ: deleting a queue that does not exist succeeds.
        if self.spread is not None:
            return cast(
                "Change[int]",
                self.spread.request(
                    checked,
                    owner=owner,
                    if_unused=if_unused,
                    if_empty=if_empty,
                    on_delete=on_delete,
                ),
            )
        return Change(
            lambda: self._delete_queue(checked, on_delete),
            written=self.write(checked),
            keys=(("queue", name),),
        )

    def check_queue_delete(
        self,
        name: str,
        *,
        owner: ConnectionRef | None,
        if_unused: bool,
        if_empty: bool,
        wait: bool = True,
    ) -> QueueDeleted | None:
        """queue.delete: None when there is no such queue; raises what refuses it. Whether it
        is unused or empty is judged here only of a queue this process runs. `wait`: false for
        the owner step of a deletion the home ordered already (the change that waits for it
        may be this worker's own, holding the queue's key)."""
        if wait:
            self._wait_for(("queue", name))
        queue = self.known_queue(name)
        if queue is None:
            return None
        self.check_owner(queue, owner)
        local = self.queues.get(name)
        if local is not None:
            self.wait_for_held(local)
            if if_unused and local.consumer_count:
                raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"queue '{name}' in use")
            if if_empty and local.message_count:
                raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"queue '{name}' not empty")
        return QueueDeleted(name)

    def _delete_queue(self, op: QueueDeleted, on_delete: QueueDeletedHook | None) -> int:
        """Remove queue `op.name`; the ready count of one this process ran."""
        local = self.queues.get(op.name)
        if local is not None:
            # Its rows' deletion was written (`write`) if it ever had any.
            return self._remove_local(local, on_delete, written=local.ever_stored) or 0
        if self.remote.pop(op.name, None) is not None:
            self._remove_bindings_to(Destination.queue(op.name))
        return 0

    def remove_queue(
        self,
        queue: Queue,
        on_delete: QueueDeletedHook | None = None,
        *,
        written: bool = False,
    ) -> int:
        """Delete `queue` with no checks (auto-delete, exclusive owner gone); its ready count.
        `written`: its deletion is committed already. The other workers of a spread virtual
        host are told that it went (`Spreading.gone`)."""
        count = self._remove_local(queue, on_delete, written=written)
        if count is None:
            return 0
        if self.spread is not None:
            self.spread.gone(queue)
        return count

    def remove_remote(self, queue: RoutedQueue, owner: ConnectionRef) -> None:
        """Connection `owner`, whose exclusive queue `queue` another worker runs, ended: have
        that worker delete it (spec queue.declare exclusive: deleted "when that connection
        closes"), without waiting for it."""
        if self.spread is None or self.remote.get(queue.name) is not queue:
            return  # deleted meanwhile

        def failed(error: ProtocolError | None) -> None:
            reason = "the store could not write it" if error is None else error.reply_text
            log.warning(
                "an exclusive queue another worker runs was not deleted: %s",
                reason,
                extra={"vhost": self.name, "queue": queue.name},
            )

        change = self.spread.request(QueueDeleted(queue.name), owner=owner)
        self.carry_out(change, lambda _count: None, failed)

    def _remove_local(
        self, queue: Queue, on_delete: QueueDeletedHook | None, *, written: bool
    ) -> int | None:
        """`remove_queue` without telling anyone; None when `queue` is not here any more."""
        if self.queues.get(queue.name) is not queue:
            return None
        if on_delete is not None:
            on_delete(queue)
        del self.queues[queue.name]
        self.paused.discard(queue)
        count = queue.delete()
        self.events.publish(EventKind.QUEUE_DELETED, queue.name, self.name)
        if written:
            # What was recorded for it while its deletion was being written goes too.
            self._journal.forget_queue(self.name, queue.name)
        elif queue.ever_stored:
            self._journal.delete_queue(self.name, queue.name)  # its entries and bindings go too
        self._remove_bindings_to(Destination.queue(queue.name))
        return count

    # Topology changes as values (batonmq.model.topology) ----------------------------------

    @property
    def writes_topology(self) -> bool:
        """Whether this process writes the exchanges and bindings of this virtual host: it is
        not spread, or this is its home."""
        return self.spread is None or self.spread.is_home

    def _runs(self, queue: str) -> bool:
        """Whether this process runs queue `queue` (and writes its rows)."""
        return self.spread is None or self.spread.owns(queue)

    def write(self, op: TopologyOp) -> bool:
        """Record for the store the rows of checked change `op` that this process owns (the
        exchanges and bindings if it `writes_topology`, a queue's if it runs the queue), and
        nothing else; whether it recorded any, which `apply` must then wait for."""
        journal = self._journal
        if isinstance(op, QueueDeclared):
            if not (op.durable and op.exclusive_owner is None and journal.enabled):
                return False
            if not self._runs(op.name):
                return False
            journal.put_queue(StoredQueue(self.name, op.name, op.auto_delete, op.arguments))
            return True
        if isinstance(op, QueueDeleted):
            local = self.queues.get(op.name)
            if local is None or not local.ever_stored:
                return False
            journal.delete_queue(self.name, op.name)  # its entries and bindings go too
            return True
        if not self.writes_topology:
            return False
        if isinstance(op, ExchangeDeclared):
            if not op.durable:
                return False
            journal.put_exchange(
                StoredExchange(
                    self.name, op.name, op.type_name, op.auto_delete, op.internal, op.arguments
                )
            )
            return journal.enabled
        if isinstance(op, ExchangeDeleted):
            exchange = self.exchanges.get(op.name)
            if exchange is None or not exchange.durable:
                return False
            journal.delete_exchange(self.name, op.name)
            return journal.enabled
        if not self._binding_persists(self.exchanges[op.source], op.destination):
            return False
        stored = self.stored_binding(op.source, op.destination, op.routing_key, op.arguments)
        if isinstance(op, Bound):
            journal.put_binding(stored)
        else:
            journal.delete_binding(stored)
        return True

    def apply(
        self, op: TopologyOp, *, on_delete: QueueDeletedHook = cancel_consumers_of
    ) -> RoutedQueue | Exchange | int | None:
        """Make checked change `op` in memory, writing nothing: the exchange or queue declared
        (a queue another worker runs is a stand-in in `remote`), a deleted queue's ready count
        (`on_delete` is given a queue this process runs just before it goes: by default its
        consumers are sent basic.cancel, as queue.delete does), else None."""
        if isinstance(op, ExchangeDeclared):
            # Applied again (a change the home resends, a copy taken twice): the same exchange.
            existing = self.exchanges.get(op.name)
            return existing if existing is not None else self._declare_exchange(op)
        if isinstance(op, ExchangeDeleted):
            self._delete_exchange(op)
        elif isinstance(op, QueueDeclared):
            return self._add_declared(op)
        elif isinstance(op, QueueDeleted):
            return self._delete_queue(op, on_delete)
        elif isinstance(op, Bound):
            self._bind(op)
        else:
            self._unbind(op)
        return None

    # Changes that wait for the store (batonmq.engine.change) -------------------------------

    def carry_out(
        self,
        change: Change[T],
        done: Callable[[T], None],
        failed: Callable[[ProtocolError | None], None],
    ) -> None:
        """Apply `change` once its writes are committed or its `after` said yes (at once when
        it waits for nothing), then call `done` with what it returned; when the write failed or
        the change was refused, nothing is applied and `failed` is called with the refusal
        (None: the store could not write it). The methods that waited for it run again
        afterwards, whatever happened."""
        if not change.waits:
            done(change.apply())
            return
        pending = self._pending
        for key in change.keys:
            pending.setdefault(key, [])

        def completed(outcome: Outcome) -> None:
            try:
                if outcome is True:
                    done(change.apply())
                else:
                    failed(None if outcome is False else outcome)
            finally:
                for waiter in [waiter for key in change.keys for waiter in pending.pop(key, ())]:
                    waiter()

        (change.after or self._journal.when_durable)(completed)

    def _wait_for(self, *keys: tuple[str, str]) -> None:
        """ChangePending if a change of one of `keys` is waiting for the store."""
        for key in keys:
            waiters = self._pending.get(key)
            if waiters is not None:
                raise ChangePending(waiters.append)

    @staticmethod
    def wait_for_held(queue: Queue) -> None:
        """ChangePending while `queue` holds messages waiting for their commit, so that a method
        reading it after a publish on the same channel sees that publish."""
        if queue.holds_back:
            raise ChangePending(queue.when_released)

    # What queues ask of their virtual host (QueueHooks) -------------------------------------

    def dead_letter(self, queue: Queue, entry: QueueEntry, reason: Reason) -> None:
        republish(self, queue, entry, reason)

    def expire_queue(self, queue: Queue) -> None:
        self.remove_queue(queue)

    def expire_messages(self) -> int:
        """The periodic sweep: dead-letter every expired message held in memory. A queue whose
        expiry fails is logged and the sweep goes on with the others (hardening: "a fault inside
        one queue's work is contained to that queue and logged, never delays others")."""
        expired = 0
        for queue in list(self.queues.values()):
            try:
                expired += queue.expire()
            except Exception:
                log.exception("expiry of queue '%s' in vhost '%s' failed", queue.name, self.name)
        return expired

    # Routing ------------------------------------------------------------------------------

    def route(self, exchange: Exchange, message: Message) -> list[RoutedQueue]:
        """The queues `message` goes to through `exchange`, the exchanges bound to it, and the
        alternate exchange of each exchange whose bindings match nothing.

        RabbitMQ (rabbit_exchange:route/2): an exchange's alternate exchange is used when its
        own bindings match no destination, queue or exchange ("process_alternate"); it is
        routed through like a bound exchange, so alternates chain, an exchange already routed
        through is not routed through again (cycles end), and a missing one drops the message.
        """
        if exchange.is_default:
            named = self.known_queue(message.routing_key)
            if named is None:
                return []
            named.counters.publish += 1
            return [named]
        queues: dict[str, RoutedQueue] = {}
        seen = {exchange.name}
        pending = [exchange]
        while pending:
            current = pending.pop()
            destinations = current.router.route(message)
            if not destinations and current.alternate_exchange is not None:
                destinations = {Destination.exchange(current.alternate_exchange)}
            for destination in destinations:
                if destination.kind is DestinationKind.QUEUE:
                    target = self.known_queue(destination.name)
                    if target is not None:
                        queues[target.name] = target
                elif destination.name not in seen:
                    seen.add(destination.name)
                    bound = self.exchanges.get(destination.name)
                    if bound is not None:
                        pending.append(bound)
        routed = list(queues.values())
        for queue in routed:
            # Counted where routed, as RabbitMQ counts a queue's publishes (its channel does,
            # delivering to the queues a message was routed to).
            queue.counters.publish += 1
        return routed

    # Checks -------------------------------------------------------------------------------

    def _not_found(self, kind: str, name: str) -> Exception:
        return amqp_error(ReplyCode.NOT_FOUND, f"no {kind} '{name}' in vhost '{self.name}'")

    def check_owner(self, queue: RoutedQueue, owner: ConnectionRef | None) -> None:
        """405 if `queue` is another connection's exclusive queue."""
        if queue.exclusive_owner is not None and queue.exclusive_owner != owner:
            raise self._locked(queue)

    def _locked(self, queue: RoutedQueue) -> Exception:
        return amqp_error(
            ReplyCode.RESOURCE_LOCKED,
            f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost "
            f"'{self.name}'. It could be originally declared on another connection or the "
            "exclusive property value does not match that of the original declaration.",
        )

    def _check_equivalent(
        self, kind: str, name: str, attributes: dict[str, tuple[object, object]]
    ) -> None:
        for attribute, (received, current) in attributes.items():
            if received != current:
                raise amqp_error(
                    ReplyCode.PRECONDITION_FAILED,
                    f"inequivalent arg '{attribute}' for {kind} '{name}' in vhost '{self.name}': "
                    f"received '{received}' but current is '{current}'",
                )
