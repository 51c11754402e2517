"""RabbitMQ's permissions in the engine's service API (part of `EngineApi`): list, set and clear
a user's configure, write and read patterns in a virtual host while the broker runs.

A change is written to the store first and applied to memory once the write committed (a failed
write changes nothing and is an ApiError 541); it is in force from the next access check of
every client, connected ones included (a channel's cached publish checks see the table's
generation change), and told on the event feed as RabbitMQ's events name it
("permission.created", "permission.deleted").
"""

from __future__ import annotations

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.apibase import ApiBase, ApiError
from batonmq.engine.events import EventKind
from batonmq.security.permissions import InvalidPattern, UserPermission, validate


class PermissionApi(ApiBase):
    """The permission operations (see the module docstring)."""

    def permissions(
        self, *, user: str | None = None, vhost: str | None = None
    ) -> list[UserPermission]:
        """Every permission record, or a user's, or a virtual host's; by user, then vhost."""
        return [
            record
            for record in self.broker.permissions.records()
            if (user is None or record.user == user) and (vhost is None or record.vhost == vhost)
        ]

    def permission(self, user: str, vhost: str) -> UserPermission:
        """`user`'s permissions in `vhost`; ApiError 404 when it has none there."""
        record = self.broker.permissions.get(user, vhost)
        if record is None:
            raise ApiError(
                ReplyCode.NOT_FOUND, f"user '{user}' has no permissions in vhost '{vhost}'"
            )
        return record

    async def set_permissions(self, record: UserPermission) -> None:
        """Give `record.user` the record's patterns in `record.vhost` (replacing any it had):
        404 for a user or virtual host that does not exist, 406 for a pattern that is not a
        regular expression (RabbitMQ refuses both)."""
        broker = self.broker
        if record.user not in broker.authenticator.users:
            raise ApiError(ReplyCode.NOT_FOUND, f"no user '{record.user}'")
        self._vhost(record.vhost)
        try:
            validate(record)
        except InvalidPattern as error:
            raise ApiError(ReplyCode.PRECONDITION_FAILED, str(error)) from None
        broker.journal.put_permission(record)
        await self._durable(f"the permissions of user '{record.user}'")
        broker.permissions.set(record)
        broker.events.publish(EventKind.PERMISSION_CREATED, record.user, record.vhost)

    async def clear_permissions(self, user: str, vhost: str) -> None:
        """Take all of `user`'s permissions in `vhost` away (its open connections there stay
        open, as in RabbitMQ, and are refused what they try next); 404 when it had none."""
        self.permission(user, vhost)
        broker = self.broker
        broker.journal.delete_permission(user, vhost)
        await self._durable(f"the permissions of user '{user}'")
        broker.permissions.clear(user, vhost)
        broker.events.publish(EventKind.PERMISSION_DELETED, user, vhost)

    def _forget_permissions(self, records: list[UserPermission]) -> None:
        """After a user's or a virtual host's deletion was written: its permissions are gone
        from the store with it, and go from memory now."""
        for record in records:
            self.broker.permissions.clear(record.user, record.vhost)
            self.broker.events.publish(EventKind.PERMISSION_DELETED, record.user, record.vhost)
