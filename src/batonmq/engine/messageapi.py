"""The message operations of the engine's service API (part of `EngineApi`): messages taken as
basic.get takes them, published as basic.publish publishes them, browsed, copied, moved and
removed in place, and a queue's delivery paused; each checked against the same ACL as over
AMQP, then carried out by `batonmq.engine.messages`.
"""

from __future__ import annotations

from collections.abc import Iterable

from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.engine import messages
from batonmq.engine.access import exchange_name, queue_properties
from batonmq.engine.apibase import ApiBase, refusals
from batonmq.engine.messages import AckMode
from batonmq.engine.publish import checked_exchange
from batonmq.engine.remotequeue import RemoteQueue
from batonmq.engine.snapshots import BrowsedInfo, GotMessage, MessagesChanged
from batonmq.engine.vhost import VirtualHost
from batonmq.model.message import Message
from batonmq.model.topology import ConnectionRef
from batonmq.queues.protocol import Queue, RoutedQueue
from batonmq.security.acl import Action, ObjectType, Property
from batonmq.security.permissions import Permission, PermitCache, ResourceKind


class MessageApi(ApiBase):
    """The message operations (see the module docstring)."""

    async def get_messages(
        self, user: str, vhost: str, name: str, count: int, mode: AckMode
    ) -> list[GotMessage]:
        """Take up to `count` messages as basic.get would (the same ACL check: CONSUME QUEUE),
        settled as `mode` says; returns once their settlement is committed."""
        queue = await self._checked(lambda: self.consumable_queue(user, vhost, name))
        with refusals():
            return await messages.take(queue, count, mode, self.broker.journal)

    async def publish(
        self,
        user: str,
        vhost: str,
        exchange: str,
        routing_key: str,
        properties: commands.Basic.Properties,
        body: bytes,
    ) -> bool:
        """Publish as basic.publish with confirms would (the same checks, PUBLISH EXCHANGE
        among them); returns once the message is durable where it must be, with whether any
        queue took it."""
        host = self._vhost(vhost)
        message = Message(exchange, routing_key, encode_header_payload(properties, len(body)), body)
        with refusals():
            target = checked_exchange(self.broker, user, host, exchange, routing_key, message)
            return await messages.publish(host, target, message, self.broker.journal)

    def watched(self, exchange: str) -> bool:
        """Whether anything is bound to `exchange` of the default virtual host: whether a
        message the broker publishes there (`publish_as_broker`) would reach anyone."""
        host = self.broker.vhosts.get(self.broker.settings.default_vhost)
        target = host.exchanges.get(exchange) if host is not None else None
        return target is not None and bool(len(target.router))

    async def publish_as_broker(
        self, exchange: str, routing_key: str, properties: commands.Basic.Properties, body: bytes
    ) -> bool:
        """Publish as the broker itself (no user, so no ACL) to `exchange` of the default
        virtual host, as `publish` does otherwise; whether any queue took it."""
        host = self._vhost(self.broker.settings.default_vhost)
        message = Message(exchange, routing_key, encode_header_payload(properties, len(body)), body)
        with refusals():
            return await messages.publish(
                host, host.exchanges[exchange], message, self.broker.journal
            )

    def browse(
        self, user: str, vhost: str, name: str, start: int = 0, count: int | None = None
    ) -> list[BrowsedInfo]:
        """Ready messages from position `start`, none consumed (the ACL's CONSUME QUEUE: it
        shows what a consumer would get)."""
        with refusals():
            queue = self.consumable_queue(user, vhost, name, wait=False)
        return messages.browse(queue, start, count)

    async def copy_messages(
        self, user: str, vhost: str, name: str, target: str, message_ids: Iterable[int]
    ) -> MessagesChanged:
        """Publish chosen ready messages of queue `name` to queue `target` too."""
        source = await self._checked(lambda: self.consumable_queue(user, vhost, name))
        host = self._vhost(vhost)
        with refusals():
            return await messages.copy(
                source, self._target(user, host, target), message_ids, self.broker.journal
            )

    async def move_messages(
        self, user: str, vhost: str, name: str, target: str, message_ids: Iterable[int]
    ) -> MessagesChanged:
        """Move chosen ready messages of queue `name` to queue `target`."""
        source = await self._checked(lambda: self.consumable_queue(user, vhost, name))
        host = self._vhost(vhost)
        with refusals():
            return await messages.move(
                source, self._target(user, host, target), message_ids, self.broker.journal
            )

    async def remove_messages(
        self, user: str, vhost: str, name: str, message_ids: Iterable[int]
    ) -> MessagesChanged:
        """Remove chosen ready messages, as queue.purge removes them all (PURGE QUEUE)."""
        host = self._vhost(vhost)
        queue = self._queue(host, name)
        with refusals():
            self._authorize(user, host, Action.PURGE, ObjectType.QUEUE, queue_properties(queue))
            self._permit(user, host, Permission.READ, ResourceKind.QUEUE, queue.name)
            return await messages.remove(queue, message_ids, self.broker.journal)

    def pause_queue(self, user: str, vhost: str, name: str, *, paused: bool) -> None:
        """Pause (or resume) the delivery of a queue's messages to its consumers, as imqcmd
        pause dst does: it still takes messages. Needs what consuming from it needs."""
        host = self._vhost(vhost)
        with refusals():
            queue = self.consumable_queue(user, vhost, name, wait=False)
        if paused:
            host.paused.add(queue)
        else:
            host.paused.discard(queue)
            queue.dispatch()

    def consumable_queue(
        self,
        user: str,
        vhost: str,
        name: str,
        *,
        connection: ConnectionRef | None = None,
        permits: PermitCache | None = None,
        wait: bool = True,
    ) -> Queue:
        """Queue `name` of `vhost`, if `user` may consume from it or get from it: what
        basic.consume, basic.get and every operation here that reads a queue's messages ask.

        404 NOT_FOUND when there is none (RabbitMQ's "no queue 'q' in vhost '/'"); 405
        RESOURCE_LOCKED when it is another connection's exclusive queue (`connection` is the
        one asking; None for management, to which every exclusive queue is another's); 403
        unless the ACL allows CONSUME QUEUE (Qpid manual Table 2.3: "Applied when
        subscriptions are created"; basic.get takes messages as a consumer does) and RabbitMQ's
        permissions give read on it (its access control guide: basic.consume and basic.get
        need read on the queue); `permits`, a channel's, remembers that. Raised as the AMQP
        error (`ProtocolError`), as the `plan_*` methods raise theirs; ChangePending while a
        change of the queue waits for the store, unless `wait` is false (`VirtualHost.queue`)."""
        host = self._vhost(vhost)
        queue = host.queue(name, connection, wait=wait)
        self._may_consume(user, host, queue, permits)
        return queue

    def consumed_queue(
        self,
        user: str,
        vhost: str,
        name: str,
        *,
        connection: ConnectionRef,
        permits: PermitCache,
    ) -> Queue | RemoteQueue:
        """What basic.consume and basic.get consume from: as `consumable_queue`, but a queue
        another worker of a spread virtual host runs is consumed here too (through the link
        with that worker, `RemoteQueue`)."""
        host = self._vhost(vhost)
        routed = host.routed_queue(name, connection)
        self._may_consume(user, host, routed, permits)
        local = host.queues.get(routed.name)
        if local is not None:
            return local
        assert isinstance(routed, RemoteQueue)
        return routed

    def _may_consume(
        self, user: str, host: VirtualHost, queue: RoutedQueue, permits: PermitCache | None
    ) -> None:
        """403 unless `user` may consume from `queue` (`consumable_queue` says by which rules)."""
        self._authorize(user, host, Action.CONSUME, ObjectType.QUEUE, queue_properties(queue))
        self._permit(user, host, Permission.READ, ResourceKind.QUEUE, queue.name, permits)

    def _target(self, user: str, host: VirtualHost, name: str) -> RoutedQueue:
        """Queue `name`, if `user` may publish to it through the default exchange (PUBLISH
        EXCHANGE, as a publish of the message to it would be checked); one another worker of a
        spread virtual host runs is published to through the link, as a publish would be."""
        published = {Property.NAME: exchange_name(""), Property.ROUTING_KEY: name}
        with refusals():
            # Management has no exclusive queue (405 for every one).
            queue = host.routed_queue(name, None, wait=False)
            self._authorize(user, host, Action.PUBLISH, ObjectType.EXCHANGE, published)
            self._permit(user, host, Permission.WRITE, ResourceKind.EXCHANGE, "")
        return queue
