"""What every part of the engine's service API (`batonmq.engine.api`) stands on: its error
(`ApiError`, an AMQP reply code and text), and the lookups, ACL check and store waits each of
its methods starts from.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError
from batonmq.engine.access import require_permission
from batonmq.engine.broker import Broker
from batonmq.engine.change import Change, ChangePending
from batonmq.engine.vhost import VirtualHost
from batonmq.queues.protocol import Queue
from batonmq.security.acl import Action, ObjectType, Property
from batonmq.security.permissions import Permission, PermitCache, ResourceKind

if TYPE_CHECKING:
    from batonmq.engine.session import Session

T = TypeVar("T")


class ApiError(Exception):
    """A request the engine refused: `reply_code` as AMQP would have it (404 not found, 403
    access refused, 405 locked, 406 precondition failed, 541 for a failed store write)."""

    def __init__(self, reply_code: int, text: str) -> None:
        super().__init__(text)
        self.reply_code = reply_code
        self.text = text


class ApiBase:
    """The broker an API serves, and the helpers its methods share."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def _durable(self, what: str) -> None:
        if not await self.broker.journal.durable():
            raise ApiError(ReplyCode.INTERNAL_ERROR, f"the store could not write {what}")

    def _sessions(self) -> Iterator[Session]:
        return iter(sorted(self.broker.sessions, key=lambda session: session.id))

    def _vhosts(self, name: str | None) -> list[VirtualHost]:
        if name is None:
            return [self.broker.vhosts[host] for host in sorted(self.broker.vhosts)]
        return [self._vhost(name)]

    def _vhost(self, name: str) -> VirtualHost:
        host = self.broker.vhosts.get(name)
        if host is None:
            raise ApiError(ReplyCode.NOT_FOUND, f"no virtual host '{name}'")
        return host

    @staticmethod
    def _queue(host: VirtualHost, name: str) -> Queue:
        queue = host.queues.get(name)
        if queue is None:
            raise ApiError(ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{host.name}'")
        return queue

    def _authorize(
        self,
        user: str,
        host: VirtualHost,
        action: Action,
        object_type: ObjectType,
        properties: dict[Property, str],
    ) -> None:
        """403 ACCESS_REFUSED (a `ProtocolError`, as AMQP has it) unless the ACL lets `user`
        do this in `host` (at once when there is no ACL)."""
        access = self.broker.access
        if access.enabled:
            access.require(user, host.name, action, object_type, properties)

    def _permit(
        self,
        user: str,
        host: VirtualHost,
        permission: Permission,
        kind: ResourceKind,
        name: str,
        permits: PermitCache | None = None,
    ) -> None:
        """403 ACCESS_REFUSED (a `ProtocolError`) unless `user`'s permissions in `host` give it
        `permission` on the exchange or queue `name` (RabbitMQ's access control guide);
        `permits`, a channel's, remembers what was allowed."""
        permissions = self.broker.permissions
        require_permission(permissions, user, host.name, permission, kind, name, permits)

    @staticmethod
    async def _checked(check: Callable[[], T]) -> T:
        """Run `check` as an AMQP method runs: again once what it waits for (a change of the
        same object under way) is done; its AMQP error raised as ApiError."""
        while True:
            try:
                return check()
            except ChangePending as pending:
                await _waited_for(pending)
            except ProtocolError as error:
                raise ApiError(error.reply_code, error.reply_text) from None

    async def _carry_out(self, host: VirtualHost, plan: Callable[[], Change[T]]) -> T:
        """Check and carry out a change as an AMQP method would (`_checked`), returning once it
        is committed and applied."""
        return await _applied(host, await self._checked(plan))


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """An AMQP refusal raised inside, as the ApiError the API raises."""
    try:
        yield
    except ProtocolError as error:
        raise ApiError(error.reply_code, error.reply_text) from None


async def _waited_for(pending: ChangePending) -> None:
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done() -> None:
        if not ready.done():
            ready.set_result(None)

    pending.wait(done)
    await ready


async def _applied(host: VirtualHost, change: Change[T]) -> T:
    outcome: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def failed(refusal: ProtocolError | None) -> None:
        if refusal is not None:
            outcome.set_exception(ApiError(refusal.reply_code, refusal.reply_text))
        else:
            outcome.set_exception(
                ApiError(ReplyCode.INTERNAL_ERROR, "the store could not write the change")
            )

    host.carry_out(change, outcome.set_result, failed)
    return await outcome
