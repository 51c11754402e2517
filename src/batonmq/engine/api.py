"""The engine's public service API: what management, batonctl and the cluster layer use to see
and change a running broker, without reaching into the engine's internals, and what the AMQP
method handlers ask (the topology operations of `batonmq.engine.topology`; who may open a
connection).

Reads return plain dataclasses (a snapshot: nothing of the engine's live objects leaks out).
Changes go through the same virtual-host methods and the same ACL as AMQP clients' (a user
refused queue deletion over AMQP is refused it here), and follow the store: they return once the
change is committed and applied, or raise ApiError with the AMQP reply code and text the client
of the same request over AMQP would have got.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from pamqp.commands import Connection
from pamqp.common import FieldTable

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.engine.apibase import ApiError
from batonmq.engine.consumer import cancel_consumers_of
from batonmq.engine.control import ServerControl
from batonmq.engine.counters import ChannelCounters, broker_totals
from batonmq.engine.events import EventKind
from batonmq.engine.membership import ClusterService, MemberInfo, member_info
from batonmq.engine.messageapi import MessageApi
from batonmq.engine.permissionapi import PermissionApi
from batonmq.engine.snapshots import (
    BindingInfo,
    ChannelInfo,
    ConnectionInfo,
    ConsumerInfo,
    ExchangeInfo,
    Overview,
    QueueInfo,
    StatisticsReading,
    UserCredential,
    UserInfo,
)
from batonmq.engine.takeover import TakeoverOutcome, adopt
from batonmq.engine.topology import TopologyApi
from batonmq.engine.vhost import RESERVED_PREFIX, VirtualHost
from batonmq.model.destination import DestinationKind
from batonmq.model.message import ENTRY_COST
from batonmq.queues.protocol import Queue
from batonmq.queues.types import declared_type
from batonmq.security.acl import AclError
from batonmq.security.authn import AuthenticationError, Decided, LoginAttempt
from batonmq.security.passwords import Credential, MalformedHashError
from batonmq.security.permissions import UserPermission, vhost_refusal
from batonmq.stats import REGISTRY, Scope
from batonmq.store.base import StoredUser, StoreError
from batonmq.store.members import SharedStore

__all__ = ["ApiError", "EngineApi"]


class EngineApi(TopologyApi, MessageApi, PermissionApi):
    """The service API of one broker (see the module docstring)."""

    # Reading ------------------------------------------------------------------------------

    def vhosts(self) -> list[str]:
        return sorted(self.broker.vhosts)

    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        unacknowledged = self._unacknowledged()
        rates = self.broker.queue_rates
        return [
            _queue_info(
                host,
                queue,
                unacknowledged.get((host.name, queue.name), _NONE_UNACKNOWLEDGED),
                rates.of(queue),
            )
            for host in self._vhosts(vhost)
            for queue in host.queues.values()
        ]

    def _unacknowledged(self) -> defaultdict[tuple[str, str], _Unacknowledged]:
        """Unacknowledged deliveries by (vhost, queue): the channels hold them, not the queues."""
        found: defaultdict[tuple[str, str], _Unacknowledged] = defaultdict(_Unacknowledged)
        for session in self._sessions():
            if session.vhost_or_none is None:
                continue
            for channel in session.channels.values():
                for unsettled in channel.unsettled.values():
                    held = found[session.vhost.name, unsettled.queue.name]
                    held.count += 1
                    held.body_bytes += unsettled.entry.message.body_size
        return found

    def queue(self, vhost: str, name: str) -> QueueInfo:
        """One queue; ApiError 404 when the virtual host or the queue does not exist."""
        host = self._vhost(vhost)
        queue = self._queue(host, name)
        unacknowledged = self._unacknowledged().get((host.name, name), _NONE_UNACKNOWLEDGED)
        return _queue_info(host, queue, unacknowledged, self.broker.queue_rates.of(queue))

    def exchange(self, vhost: str, name: str) -> ExchangeInfo:
        """One exchange ("" is the default exchange); ApiError 404 when there is none."""
        host = self._vhost(vhost)
        if name not in host.exchanges:
            raise ApiError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")
        return next(info for info in self.exchanges(vhost) if info.name == name)

    def bindings(self, vhost: str | None = None) -> list[BindingInfo]:
        """Every binding, the default exchange's implicit ones to each queue first (as
        RabbitMQ lists them: AMQP 0-9-1 spec, "The default exchange ... every queue is
        automatically bound to it with a routing key equal to the queue name")."""
        return [
            *(
                BindingInfo(host.name, "", queue, "queue", queue, {})
                for host in self._vhosts(vhost)
                for queue in (*host.queues, *host.remote)
            ),
            *(
                BindingInfo(
                    host.name,
                    exchange.name,
                    destination.name,
                    "queue" if destination.kind is DestinationKind.QUEUE else "exchange",
                    routing_key,
                    dict(arguments),
                )
                for host in self._vhosts(vhost)
                for exchange in host.exchanges.values()
                if not exchange.is_default
                for destination, routing_key, arguments in exchange.router.bindings()
            ),
        ]

    def known_queues(self, vhost: str) -> set[str]:
        """The names of `vhost`'s queues this worker knows: those it runs and, in a virtual host
        spread over the workers, those the others run."""
        host = self.broker.vhosts.get(vhost)
        return set() if host is None else {*host.queues, *host.remote}

    def exchanges(self, vhost: str | None = None) -> list[ExchangeInfo]:
        return [
            ExchangeInfo(
                host.name,
                exchange.name,
                exchange.type_name,
                exchange.durable,
                exchange.auto_delete,
                exchange.internal,
                dict(exchange.arguments),
            )
            for host in self._vhosts(vhost)
            for exchange in host.exchanges.values()
        ]

    def connections(self) -> list[ConnectionInfo]:
        return [
            ConnectionInfo(
                session.id,
                session.name,
                session.peer[0],
                session.peer[1],
                session.username,
                session.vhost_or_none.name if session.vhost_or_none else None,
                dict(session.client_properties),
                len(session.channels),
                session.counters.recv_oct,
                session.counters.send_oct,
            )
            for session in self._sessions()
        ]

    def channels(self) -> list[ChannelInfo]:
        return [
            ChannelInfo(
                channel.name,
                session.id,
                channel.number,
                session.username,
                session.vhost.name,
                len(channel.consumers),
                len(channel.unsettled),
                channel.consumer_prefetch,
                dataclasses.replace(channel.counters),
            )
            for session in self._sessions()
            if session.vhost_or_none is not None
            for channel in session.channels.values()
        ]

    def consumers(self) -> list[ConsumerInfo]:
        return [
            ConsumerInfo(
                session.vhost.name,
                consumer.queue.name,
                consumer.tag,
                channel.name,
                not consumer.no_ack,
                consumer.exclusive,
                consumer.prefetch_count,
                dict(consumer.arguments),
            )
            for session in self._sessions()
            if session.vhost_or_none is not None
            for channel in session.channels.values()
            for consumer in channel.consumers.values()
        ]

    def overview(self) -> Overview:
        broker = self.broker
        sessions = list(self._sessions())
        channels = [channel for session in sessions for channel in session.channels.values()]
        queues = [queue for host in broker.vhosts.values() for queue in host.queues.values()]
        return Overview(
            connections=len(sessions),
            channels=len(channels),
            queues=len(queues),
            exchanges=sum(len(host.exchanges) for host in broker.vhosts.values()),
            consumers=sum(len(channel.consumers) for channel in channels),
            messages_ready=sum(queue.message_count for queue in queues),
            messages_unacknowledged=sum(len(channel.unsettled) for channel in channels),
            alarms=dict(broker.alarms),
            message_totals=self._message_totals(),
            message_rates=dict(broker.rates.rates),
        )

    def sample_rates(self) -> None:
        """Take a sample of the broker's message totals and of each queue's counters for their
        message rates."""
        broker = self.broker
        broker.rates.sample(self._message_totals())
        broker.queue_rates.sample(
            queue for host in broker.vhosts.values() for queue in host.queues.values()
        )

    def _message_totals(self) -> ChannelCounters:
        return broker_totals(self.broker)

    def statistics(self) -> list[StatisticsReading]:
        """Every statistic of the registry (batonmq.stats), read now: the broker's, then each
        connection's, channel's and queue's, with labels naming them."""
        broker = self.broker
        readings = [
            StatisticsReading(scope, {}, REGISTRY.scope(scope).read(broker))
            for scope in (Scope.BROKER, Scope.GLOBAL, Scope.STORE)
        ]
        connection_statistics = REGISTRY.scope(Scope.CONNECTION)
        channel_statistics = REGISTRY.scope(Scope.CHANNEL)
        for session in self._sessions():
            readings.append(
                StatisticsReading(
                    Scope.CONNECTION,
                    {"connection": session.name},
                    connection_statistics.read(session),
                )
            )
            vhost = session.vhost_or_none
            readings.extend(
                StatisticsReading(
                    Scope.CHANNEL,
                    {"vhost": vhost.name if vhost else "", "channel": channel.name},
                    channel_statistics.read(channel),
                )
                for channel in session.channels.values()
            )
        queue_statistics = REGISTRY.scope(Scope.QUEUE)
        readings.extend(
            StatisticsReading(
                Scope.QUEUE, {"vhost": host.name, "queue": queue.name}, queue_statistics.read(queue)
            )
            for host in self._vhosts(None)
            for queue in host.queues.values()
        )
        return readings

    # Changing -----------------------------------------------------------------------------

    async def declare_queue(
        self,
        user: str,
        vhost: str,
        name: str,
        *,
        durable: bool = True,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> QueueInfo:
        """Declare a queue as queue.declare would (not exclusive: there is no connection)."""
        await self._carry_out(
            self._vhost(vhost),
            lambda: self.plan_declare_queue(
                user, vhost, name, durable=durable, auto_delete=auto_delete, arguments=arguments
            ),
        )
        return self.queue(vhost, name)

    async def delete_queue(
        self, user: str, vhost: str, name: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        """Delete a queue as queue.delete would, but ApiError 404 when there is none
        (queue.delete succeeds then; RabbitMQ's HTTP API answers 404); the number of messages
        it held."""
        host = self._vhost(vhost)
        self._queue(host, name)
        return await self._carry_out(
            host,
            lambda: self.plan_delete_queue(
                user, vhost, name, if_unused=if_unused, if_empty=if_empty
            ),
        )

    async def purge_queue(self, user: str, vhost: str, name: str) -> int:
        """Remove a queue's ready messages as queue.purge would; how many there were, once
        their removal is written."""
        count = await self._carry_out(
            self._vhost(vhost), lambda: self.plan_purge(user, vhost, name)
        )
        await self._durable(f"the purge of queue '{name}'")
        return count

    async def declare_exchange(
        self,
        user: str,
        vhost: str,
        name: str,
        type_name: str,
        *,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> ExchangeInfo:
        """Declare an exchange as exchange.declare would."""
        await self._carry_out(
            self._vhost(vhost),
            lambda: self.plan_declare_exchange(
                user,
                vhost,
                name,
                type_name,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
            ),
        )
        return self.exchange(vhost, name)

    async def delete_exchange(
        self, user: str, vhost: str, name: str, *, if_unused: bool = False
    ) -> None:
        """Delete an exchange as exchange.delete would, but ApiError 404 when there is none
        (exchange.delete succeeds then; RabbitMQ's HTTP API answers 404)."""
        self.exchange(vhost, name)
        await self._carry_out(
            self._vhost(vhost),
            lambda: self.plan_delete_exchange(user, vhost, name, if_unused=if_unused),
        )

    async def bind(self, user: str, binding: BindingInfo) -> None:
        """Bind as queue.bind (destination_type "queue") or exchange.bind would."""
        await self._carry_out(self._vhost(binding.vhost), lambda: self.plan_bind(user, binding))

    async def unbind(self, user: str, binding: BindingInfo) -> None:
        """Unbind as queue.unbind or exchange.unbind would, but ApiError 404 when the queue
        is not there (RabbitMQ's HTTP API answers 404)."""
        host = self._vhost(binding.vhost)
        if binding.destination_type == "queue":
            self._queue(host, binding.destination)
        await self._carry_out(host, lambda: self.plan_unbind(user, binding))

    # Connections --------------------------------------------------------------------------

    def open_connection(
        self,
        user: str,
        vhost: str,
        name: str,
        connection_id: int,
        decided: Callable[[VirtualHost | HardError], None],
    ) -> None:
        """connection.open of connection `name` (`connection_id`) by `user`: `decided` gets
        the virtual host it may open, with the connection counted against the limits until
        `connection_ended`, or the HardError that refuses it; at once, or when the first worker
        of a broker of several has answered (it counts the connections for the broker)."""
        broker = self.broker
        host = broker.vhosts.get(vhost)
        if host is None:
            decided(HardError(ReplyCode.NOT_ALLOWED, f"vhost '{vhost}' not found", Connection.Open))
            return
        # Qpid manual §2.2.4.3: "# Allow client and server to connect to the virtual host."
        refusal = broker.access.check_vhost(user, vhost)
        if refusal is not None:
            decided(HardError(ReplyCode.ACCESS_REFUSED, refusal, Connection.Open))
            return
        # RabbitMQ's access control guide: "A first level of access control is enforced at this
        # point, with the server checking whether the user has any permissions to access the
        # virtual hosts"; rabbit_access_control refuses with 530 NOT_ALLOWED.
        if not broker.permissions.may_access(user, vhost):
            decided(HardError(ReplyCode.NOT_ALLOWED, vhost_refusal(user, vhost), Connection.Open))
            return
        deleting = f"access to vhost '{vhost}' refused for user '{user}': it is being deleted"
        if vhost in broker.vhosts_deleting:
            decided(HardError(ReplyCode.NOT_ALLOWED, deleting, Connection.Open))
            return

        def admitted(refusal: str | None) -> None:
            if refusal is not None:
                decided(HardError(ReplyCode.NOT_ALLOWED, refusal, Connection.Open))
                return
            # The virtual host may have begun going, or gone, while the first worker answered:
            # one being deleted takes no new connection (`delete_vhost`).
            if broker.vhosts.get(vhost) is not host or vhost in broker.vhosts_deleting:
                broker.admission.ended(user, vhost)
                gone = deleting if vhost in broker.vhosts_deleting else f"vhost '{vhost}' not found"
                decided(HardError(ReplyCode.NOT_ALLOWED, gone, Connection.Open))
                return
            broker.events.publish(
                EventKind.CONNECTION_CREATED, name, vhost, id=connection_id, user=user
            )
            decided(host)

        # The Overload requirements: "connections per user and per virtual host ... each refusal
        # names the limit"; 530, as RabbitMQ. Checked after the ACL, so that only a user who may
        # use the virtual host learns its limits.
        broker.admission.admit(user, vhost, admitted)

    def connection_ended(self, user: str, vhost: str, name: str, connection_id: int) -> None:
        """A connection `open_connection` let in is over."""
        broker = self.broker
        broker.events.publish(EventKind.CONNECTION_CLOSED, name, vhost, id=connection_id)
        broker.admission.ended(user, vhost)

    def close_connection(self, connection_id: int, reason: str) -> None:
        """Close a client's connection with 320 CONNECTION_FORCED and `reason`, as RabbitMQ's
        management does; ApiError 404 when there is no such connection."""
        for session in self._sessions():
            if session.id == connection_id:
                session.close(HardError(ReplyCode.CONNECTION_FORCED, reason))
                return
        raise ApiError(ReplyCode.NOT_FOUND, f"no connection {connection_id}")

    # Users and virtual hosts, while the broker runs ----------------------------------------

    def users(self) -> list[str]:
        return sorted(self.broker.authenticator.users)

    def user(self, name: str) -> UserInfo:
        """A user and its tags; ApiError 404 when there is no such user."""
        if name not in self.broker.authenticator.users:
            raise ApiError(ReplyCode.NOT_FOUND, f"no user '{name}'")
        return UserInfo(name, self.broker.user_tags.get(name, ()))

    def user_credentials(self) -> list[UserCredential]:
        """Every user with its encoded credential (a password hash, never a password) and
        tags: what a definitions export carries."""
        authenticator = self.broker.authenticator
        return [
            UserCredential(
                name,
                authenticator.users[name].encode(),
                self.broker.user_tags.get(name, ()),
            )
            for name in self.users()
        ]

    async def put_user(
        self,
        name: str,
        password: str | None,
        tags: Iterable[str] | None = None,
        *,
        credential_hash: str | None = None,
    ) -> None:
        """Add a user, or change a user's password and tags: written to the store, then in
        force for the next login (connections already open stay). A password of None keeps
        the user's password (a new user needs one) unless `credential_hash` gives an encoded
        credential (as `user_credentials` has it) instead; tags of None keep its tags."""
        if not name:
            raise ApiError(ReplyCode.PRECONDITION_FAILED, "a user needs a name")
        authenticator = self.broker.authenticator
        existing = authenticator.users.get(name)
        if credential_hash is not None:
            try:
                credential = Credential.decode(credential_hash)
            except MalformedHashError as error:
                raise ApiError(
                    ReplyCode.PRECONDITION_FAILED, f"password_hash of user '{name}': {error}"
                ) from None
        elif password is not None:
            # scrypt is slow on purpose: off the event loop.
            credential = await asyncio.to_thread(Credential.from_password, password)
        elif existing is not None:
            credential = existing
        else:
            raise ApiError(ReplyCode.PRECONDITION_FAILED, f"new user '{name}' needs a password")
        kept_tags = self.broker.user_tags.get(name, ())
        new_tags = kept_tags if tags is None else tuple(dict.fromkeys(tags))
        self.broker.journal.put_user(StoredUser(name, credential.encode(), new_tags))
        await self._durable(f"user '{name}'")
        if credential is not existing:
            authenticator.set_user(name, credential)
        self.broker.user_tags[name] = new_tags
        self.broker.events.publish(EventKind.USER_CHANGED, name)

    def authenticate(self, attempt: LoginAttempt, decided: Decided) -> None:
        """Check a login, an AMQP client's (connection.start-ok) or management's, with the
        throttle and lockout of failed logins and the guest rule: `decided` gets the user's
        name or the refusal, once known (a password check runs off the event loop)."""
        self.broker.authenticator.authenticate(attempt, decided)

    async def login(self, name: str, password: str, peer_host: str) -> UserInfo:
        """Check a user's password as an AMQP PLAIN login is checked; ApiError 403 with the
        refusal when it fails."""
        decided: asyncio.Future[str | AuthenticationError] = (
            asyncio.get_running_loop().create_future()
        )
        response = b"\0" + name.encode() + b"\0" + password.encode()
        self.authenticate(LoginAttempt("PLAIN", response, peer_host), decided.set_result)
        outcome = await decided
        if isinstance(outcome, AuthenticationError):
            raise ApiError(ReplyCode.ACCESS_REFUSED, outcome.reason)
        return UserInfo(outcome, self.broker.user_tags.get(outcome, ()))

    def permitted_vhosts(self, user: str) -> list[str]:
        """The virtual hosts `user` may open: it has permissions there, and the ACL (when
        there is one) lets it in."""
        access = self.broker.access
        permissions = self.broker.permissions
        return [
            name
            for name in self.vhosts()
            if permissions.may_access(user, name)
            and (not access.enabled or access.check_vhost(user, name) is None)
        ]

    async def delete_user(self, name: str) -> None:
        """Delete a user: written to the store, then refused at login, and its connections
        closed (as RabbitMQ closes a deleted user's connections)."""
        if name not in self.broker.authenticator.users:
            raise ApiError(ReplyCode.NOT_FOUND, f"no user '{name}'")
        self.broker.journal.delete_user(name)  # its permissions go with it
        await self._durable(f"user '{name}'")
        self.broker.authenticator.remove_user(name)
        self.broker.user_tags.pop(name, None)
        self._forget_permissions(self.permissions(user=name))
        for session in list(self._sessions()):
            if session.username == name:
                session.close(HardError(ReplyCode.CONNECTION_FORCED, f"user '{name}' deleted"))
        self.broker.events.publish(EventKind.USER_DELETED, name)

    async def add_vhost(self, name: str, creator: str | None = None) -> None:
        """Create a virtual host (nothing to do when it exists): written, then usable. The user
        `creator` who asked for it (when it is a user) may do everything in it, as RabbitMQ's
        management grants the creating user full permissions; no one else may use it until
        given permissions."""
        broker = self.broker
        if name in broker.vhosts:
            return
        granted = None
        if creator is not None and creator in broker.authenticator.users:
            granted = UserPermission.full(creator, name)
        broker.journal.put_vhost(name)
        if granted is not None:
            broker.journal.put_permission(granted)
        await self._durable(f"virtual host '{name}'")
        broker.add_vhost(name)
        broker.events.publish(EventKind.VHOST_CREATED, name, name)
        if granted is not None:
            broker.permissions.set(granted)
            broker.events.publish(EventKind.PERMISSION_CREATED, granted.user, name)

    async def delete_vhost(self, name: str) -> None:
        """Delete a virtual host as RabbitMQ does: it takes no new connection, its connections
        are closed (320), its queues and exchanges are deleted as queue.delete and
        exchange.delete delete them (each written before it goes), then the virtual host
        itself is written away and goes. ApiError 404 when there is no such virtual host; a
        failed write leaves the virtual host, less what was deleted before it."""
        host = self._vhost(name)
        broker = self.broker
        broker.vhosts_deleting.add(name)
        try:
            deleted = HardError(ReplyCode.CONNECTION_FORCED, f"vhost '{name}' is deleted")
            for session in list(self._sessions()):
                if session.vhost_or_none is host:
                    session.close(deleted)
            spread = host.spread
            if spread is not None and not spread.is_home:
                # The home deleted the topology, and the queues the others run, first (the API
                # carries the deletion there): what is left here is this worker's own.
                spread.close()
                host.spread = None
                host.remote.clear()
            await asyncio.gather(
                *(
                    self._carry_out(
                        host,
                        functools.partial(
                            host.delete_queue, queue, owner=None, on_delete=cancel_consumers_of
                        ),
                    )
                    # In a spread virtual host also those another worker runs (via its home).
                    for queue in [*host.queues, *host.remote]
                )
            )
            await asyncio.gather(
                *(
                    self._carry_out(host, functools.partial(host.delete_exchange, exchange.name))
                    for exchange in list(host.exchanges.values())
                    if not exchange.is_default and not exchange.name.startswith(RESERVED_PREFIX)
                )
            )
            broker.journal.delete_vhost(name)  # its permissions go with it
            await self._durable(f"the deletion of virtual host '{name}'")
            del broker.vhosts[name]
            if host.spread is not None:
                host.spread.close()
            self._forget_permissions(self.permissions(vhost=name))
        finally:
            broker.vhosts_deleting.discard(name)
        broker.events.publish(EventKind.VHOST_DELETED, name, name)

    # An HA cluster (`batonctl list bkr`, `query bkr`, `takeover bkr`; /api/nodes) ----------

    def _cluster(self) -> ClusterService:
        cluster = self.broker.cluster
        if cluster is None:
            raise ApiError(
                ReplyCode.NOT_FOUND, "this broker is not a member of an HA cluster (cluster.ha)"
            )
        return cluster

    async def cluster_members(self) -> list[MemberInfo]:
        """Every member of this broker's HA cluster as the shared store records it, with the
        messages each holds there (MQ 4.1 HA guide, Example 1); this broker's own state as it
        is now."""
        cluster = self._cluster()
        try:
            listed = await cluster.listed_members()
        except StoreError as error:
            raise ApiError(ReplyCode.INTERNAL_ERROR, str(error)) from error
        return [member_info(member, cluster) for member in listed]

    async def take_over_broker(self, broker_id: str, *, force: bool = False) -> TakeoverOutcome:
        """Take member `broker_id` over now (`imqcmd takeover bkr -n ID`): once its store lease
        has run out, or at once with `force` (`-f`), which fences it if it still runs. The
        outcome says whether this broker won the claim; 404 for a broker the store does not
        record; 406 for this broker itself."""
        cluster = self._cluster()
        if broker_id == cluster.broker_id:
            raise ApiError(ReplyCode.PRECONDITION_FAILED, "a broker cannot take itself over")
        listed = {member.broker_id for member in await self.cluster_members()}
        if broker_id not in listed:
            raise ApiError(ReplyCode.NOT_FOUND, f"no broker {broker_id!r} in this cluster")
        return await cluster.take_over(broker_id, force=force)

    async def adopt_taken_over(self, owns: Callable[[str], bool]) -> int:
        """Serve the state of the virtual hosts this worker `owns` that a takeover by a sibling
        worker left to it (`batonmq.engine.takeover.adopt`); the messages it took."""
        store = self.broker.store
        assert isinstance(store, SharedStore)  # a worker of an HA member
        try:
            taken = await adopt(self.broker, store, owns)
        except StoreError as error:
            raise ApiError(ReplyCode.INTERNAL_ERROR, str(error)) from error
        return 0 if taken is None else taken.messages

    def in_cluster(self) -> bool:
        """Whether this broker is a member of an HA cluster (cluster.ha)."""
        return self.broker.cluster is not None

    async def cluster_member(self, broker_id: str) -> MemberInfo:
        """One member of this broker's HA cluster (`imqcmd query bkr`); 404 for a broker the
        store does not record."""
        for member in await self.cluster_members():
            if member.broker_id == broker_id:
                return member
        raise ApiError(ReplyCode.NOT_FOUND, f"no broker {broker_id!r} in this cluster")

    def _control(self) -> ServerControl:
        control = self.broker.control
        if control is None:
            raise ApiError(ReplyCode.PRECONDITION_FAILED, "this broker runs without a server")
        return control

    def quiesce(self) -> None:
        """Refuse new client connections and keep serving the open ones (`imqcmd quiesce bkr`;
        MQ 4.1 HA guide, Table 7), "allowing the broker's operation to wind down normally
        without triggering a takeover by another broker"."""
        self._control().quiesce()

    def unquiesce(self) -> None:
        """Accept new client connections again (`imqcmd unquiesce bkr`)."""
        self._control().unquiesce()

    async def shut_down(self, *, nofailover: bool = False) -> None:
        """Stop the broker as SIGTERM does (`imqcmd shutdown bkr`). With `nofailover` (HA
        members only, 406 otherwise), its record in the shared store says so first, and no other
        member takes its persistent state over (Table 7: "no other broker is to take over the
        persistent data of the one being shut down") until it starts again."""
        control = self._control()
        if nofailover:
            cluster = self.broker.cluster
            if cluster is None:
                raise ApiError(
                    ReplyCode.PRECONDITION_FAILED, "nofailover applies to HA cluster members only"
                )
            try:
                await cluster.refuse_failover()
            except StoreError as error:
                raise ApiError(ReplyCode.INTERNAL_ERROR, str(error)) from error
        control.shut_down()

    def reload_acl(self) -> None:
        """Read the ACL files again (as SIGHUP does): in force from the next access check of
        every client, connected ones included; a file that cannot be used keeps the old rules
        and is an ApiError 406 saying why."""
        try:
            self.broker.access.reload()
        except AclError as error:
            raise ApiError(ReplyCode.PRECONDITION_FAILED, str(error)) from None

    @staticmethod
    def set_log_level(level: str) -> None:
        """Change the broker's log level while it runs (debug, info, warning, error)."""
        number = logging.getLevelName(level.upper())
        if not isinstance(number, int):
            raise ApiError(ReplyCode.PRECONDITION_FAILED, f"unknown log level '{level}'")
        logging.getLogger("batonmq").setLevel(number)


@dataclass(slots=True)
class _Unacknowledged:
    count: int = 0
    body_bytes: int = 0


#: A queue's when no channel holds any of its deliveries (never changed).
_NONE_UNACKNOWLEDGED: Final = _Unacknowledged()


def _queue_info(
    host: VirtualHost, queue: Queue, unacknowledged: _Unacknowledged, rates: Mapping[str, float]
) -> QueueInfo:
    return QueueInfo(
        host.name,
        queue.name,
        declared_type(queue.arguments),
        queue.durable,
        queue.auto_delete,
        queue.exclusive,
        dict(queue.arguments),
        queue.message_count,
        queue.consumer_count,
        unacknowledged.count,
        queue in host.paused,
        memory=queue.memory + unacknowledged.count * ENTRY_COST + unacknowledged.body_bytes,
        message_totals=queue.counters.copy(),
        message_rates=dict(rates),
    )
