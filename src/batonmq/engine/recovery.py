"""Bring a broker's durable state back from its store at start (MQ 3.5 admin guide, Persistence
Manager: "When a broker restarts, it recreates destinations and durable subscriptions, recovers
persistent messages ... and recreates its routing table")."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pamqp.common import FieldTable

from batonmq.engine.broker import Broker
from batonmq.model.destination import Destination, DestinationKind
from batonmq.model.message import set_message_id_base
from batonmq.model.topology import QueueDeclared
from batonmq.queues.arguments import InvalidArgument
from batonmq.queues.types import queue_type
from batonmq.routing.base import BindingArgumentError
from batonmq.security.passwords import Credential, MalformedHashError
from batonmq.security.permissions import default_grants
from batonmq.store.base import (
    Recovery,
    StoredBinding,
    StoredDefinitions,
    StoredExchange,
    StoredQueue,
    StoredUser,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Recovered:
    exchanges: int
    queues: int
    bindings: int
    messages: int


def restore(
    broker: Broker, recovery: Recovery, peers: Mapping[str, StoredDefinitions] | None = None
) -> Recovered:
    """Recreate durable exchanges, queues and bindings; queues get their backlogs, which they
    read from the store as they need them. `peers`: the definitions the other workers'
    identities hold (`Store.definitions_of`), whose queues of a spread virtual host this
    worker does not run come back as its stand-ins for them (`VirtualHost.apply`), before the
    bindings, so that the home's bindings to them come back too."""
    set_message_id_base(recovery.message_id_base)
    _restore_users(broker, recovery.users)
    for name in recovery.vhosts:
        if name not in broker.vhosts:
            broker.add_vhost(name)
    broker.permissions.replace(recovery.permissions)
    default_vhost = broker.settings.default_vhost
    if default_vhost not in recovery.vhosts:
        # Created now, in a new store, with the default user's permissions.
        broker.journal.put_vhost(default_vhost)
        for granted in default_grants(default_vhost, broker.authenticator.users):
            broker.journal.put_permission(granted)
            broker.permissions.set(granted)
    for definitions in (peers or {}).values():
        _restore_remote_queues(broker, definitions.queues)
    bindings = restore_definitions(broker, recovery.exchanges, recovery.queues, recovery.bindings)
    broker.streams.remove_leftovers()  # every stream the store holds asked for its medium
    messages = 0
    for (vhost, name), backlogs in itertools.groupby(
        recovery.backlogs, key=lambda backlog: (backlog.vhost, backlog.queue)
    ):
        queue = broker.vhosts[vhost].queues.get(name)
        if queue is not None:
            levels = list(backlogs)
            queue.recover(levels)
            messages += sum(level.count for level in levels)
    return Recovered(len(recovery.exchanges), len(recovery.queues), bindings, messages)


def restore_definitions(
    broker: Broker,
    exchanges: Iterable[StoredExchange],
    queues: Iterable[StoredQueue],
    bindings: Iterable[StoredBinding],
) -> int:
    """Recreate stored exchanges, queues and bindings that the broker does not have (at start,
    none; after a takeover, those the failed broker alone had), without writing them again;
    returns the number of bindings restored."""
    for stored_exchange in exchanges:
        vhost = broker.vhosts.get(stored_exchange.vhost) or broker.add_vhost(stored_exchange.vhost)
        if stored_exchange.name not in vhost.exchanges:
            vhost.restore_exchange(stored_exchange)
    for stored_queue in queues:
        vhost = broker.vhosts.get(stored_queue.vhost) or broker.add_vhost(stored_queue.vhost)
        if vhost.known_queue(stored_queue.name) is not None:
            continue
        vhost.add_queue(
            stored_queue.name,
            durable=True,
            auto_delete=stored_queue.auto_delete,
            arguments=_usable_arguments(stored_queue),
        )
    restored = 0
    for binding in bindings:
        vhost = broker.vhosts[binding.vhost]
        if binding.destination_kind == DestinationKind.QUEUE.value:
            destination = Destination.queue(binding.destination)
            present = vhost.known_queue(binding.destination) is not None
        else:
            destination = Destination.exchange(binding.destination)
            present = binding.destination in vhost.exchanges
        if not present or binding.source not in vhost.exchanges:
            log.warning(
                "binding not restored: one of its ends is missing",
                extra={"source": binding.source, "destination": binding.destination},
            )
            continue
        try:
            vhost.restore_binding(
                binding.source, destination, binding.routing_key, binding.arguments
            )
        except BindingArgumentError as error:
            # Accepted when it was bound, refused now (a newer BatonMQ's rules): one binding
            # must not stop the broker from starting.
            log.error(
                "binding not restored: %s",
                error,
                extra={"source": binding.source, "destination": binding.destination},
            )
            continue
        restored += 1
    return restored


def _restore_remote_queues(broker: Broker, queues: Iterable[StoredQueue]) -> None:
    """Another worker's stored queues of the spread virtual hosts, as this worker knows them:
    declared, durable, run by their owner. A queue of a virtual host that is not spread, or
    that this worker owns, is not this worker's to know from another's rows."""
    for stored_queue in queues:
        vhost = broker.vhosts.get(stored_queue.vhost)  # another's rows make no virtual host
        spread = None if vhost is None else vhost.spread
        if vhost is None or spread is None or spread.owns(stored_queue.name):
            continue
        if vhost.known_queue(stored_queue.name) is None:
            declared = QueueDeclared(
                stored_queue.name,
                durable=True,
                auto_delete=stored_queue.auto_delete,
                exclusive_owner=None,
                arguments=_usable_arguments(stored_queue),
            )
            vhost.apply(declared)


def _restore_users(broker: Broker, stored: list[StoredUser]) -> None:
    """The store's users log in from now on; a credential upgraded at login is written back."""
    users: dict[str, Credential] = {}
    for user in stored:
        try:
            users[user.name] = Credential.decode(user.credential)
        except MalformedHashError as error:
            log.error(
                "user cannot log in: bad stored credential: %s", error, extra={"user": user.name}
            )
    authenticator = broker.authenticator
    authenticator.replace_users(users)
    broker.user_tags = {user.name: user.tags for user in stored if user.name in users}
    journal = broker.journal
    authenticator.on_upgrade = lambda name, credential: journal.put_user(
        StoredUser(name, credential.encode(), broker.user_tags.get(name, ()))
    )


def _usable_arguments(stored: StoredQueue) -> FieldTable:
    """The queue's arguments without any that this BatonMQ refuses (checked when it was
    declared, so only a change of rules gets here): the queue and its messages come back, the
    refused argument is logged and left out."""
    arguments: FieldTable = dict(stored.arguments)
    while True:
        try:
            queue_type(arguments).parse_arguments(arguments)
        except InvalidArgument as error:
            log.error(
                "queue argument ignored: %s",
                error,
                extra={"vhost": stored.vhost, "queue": stored.name},
            )
            del arguments[error.name]
        else:
            return arguments
