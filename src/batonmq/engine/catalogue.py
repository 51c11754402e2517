"""A running broker takes in the catalogue (users, virtual hosts, permissions) as its store has
it now: in an HA cluster, another member changed it in the shared store (GlassFish MQ 4.5.2
Technical Overview, Table 4-1: an enhanced cluster's configuration is in the shared store).

`catalogue_changes` compares the broker's copy in memory with the store's and returns what
differs; `apply_catalogue` brings the copy in line, as the engine's own API applies a change made
on this broker once written (`batonmq.engine.api`, `batonmq.engine.permissionapi`):

- a new user, or a new password, is in force from the next login; a user deleted is refused at
  login and its connections are closed (320), as RabbitMQ closes a deleted user's connections;
- the permissions table is replaced when it differs, which clears every channel's cached
  permission checks (its generation changes): a revoke refuses the next operation;
- a new virtual host is usable at once; a deleted one goes as `EngineApi.delete_vhost` deletes
  it: its connections here are closed and this broker's queues and exchanges in it deleted
  (each written away: they are this broker's rows), then it goes.

Nothing here is written but those deletions: the change is in the store already. The event feed
of the member where a change was made tells it; this one tells only what it deletes itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.engine.api import EngineApi
from batonmq.engine.broker import Broker
from batonmq.security.passwords import Credential, MalformedHashError
from batonmq.security.permissions import UserPermission
from batonmq.store.members import Catalogue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CatalogueChanges:
    """What differs between a broker's copy of the catalogue and the store's."""

    #: Users new here, or with another credential: name -> the stored (encoded) credential.
    credentials: dict[str, str] = field(default_factory=dict)
    #: Users whose tags differ (new users included).
    tags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    users_gone: list[str] = field(default_factory=list)
    vhosts_new: list[str] = field(default_factory=list)
    vhosts_gone: list[str] = field(default_factory=list)
    #: The store's permissions when they differ from memory's (None: the same).
    permissions: list[UserPermission] | None = None

    def __bool__(self) -> bool:
        return bool(
            self.credentials
            or self.tags
            or self.users_gone
            or self.vhosts_new
            or self.vhosts_gone
            or self.permissions is not None
        )


def catalogue_changes(broker: Broker, catalogue: Catalogue) -> CatalogueChanges:
    """What `apply_catalogue` must change for `broker`'s copy to be `catalogue`. A virtual host
    being deleted here is left to that deletion."""
    users = broker.authenticator.users
    stored = {user.name: user for user in catalogue.users}
    credentials = {
        name: user.credential
        for name, user in stored.items()
        if name not in users or users[name].encode() != user.credential
    }
    tags = {
        name: user.tags for name, user in stored.items() if broker.user_tags.get(name) != user.tags
    }
    vhosts = set(catalogue.vhosts)
    permissions = set(catalogue.permissions)
    return CatalogueChanges(
        credentials=credentials,
        tags=tags,
        users_gone=sorted(set(users) - set(stored)),
        vhosts_new=sorted(vhosts - set(broker.vhosts)),
        vhosts_gone=sorted(set(broker.vhosts) - vhosts - broker.vhosts_deleting),
        permissions=(
            None if permissions == set(broker.permissions.records()) else catalogue.permissions
        ),
    )


def apply_users_and_permissions(broker: Broker, changes: CatalogueChanges) -> None:
    """Everything but the deletion of virtual hosts, at once (no await: nothing runs between
    the store's snapshot and its application)."""
    authenticator = broker.authenticator
    for name, encoded in changes.credentials.items():
        try:
            authenticator.set_user(name, Credential.decode(encoded))
        except MalformedHashError as error:
            # As at start (`batonmq.engine.recovery`): the user cannot log in.
            log.error("user cannot log in: bad stored credential: %s", error, extra={"user": name})
            authenticator.remove_user(name)
    broker.user_tags.update(changes.tags)
    for name in changes.users_gone:
        authenticator.remove_user(name)
        broker.user_tags.pop(name, None)
        deleted = HardError(ReplyCode.CONNECTION_FORCED, f"user '{name}' deleted")
        for session in list(broker.sessions):
            if session.username == name:
                session.close(deleted)
    for name in changes.vhosts_new:
        broker.add_vhost(name)
    if changes.permissions is not None:
        broker.permissions.replace(changes.permissions)


async def apply_catalogue(broker: Broker, changes: CatalogueChanges) -> None:
    """Bring `broker`'s copy in line with the store's (see the module docstring); ApiError
    when the deletion of a virtual host could not be written (it is tried again at the next
    change, or the next reading of the catalogue's version)."""
    apply_users_and_permissions(broker, changes)
    api = EngineApi(broker)
    for name in changes.vhosts_gone:
        if name in broker.vhosts and name not in broker.vhosts_deleting:
            await api.delete_vhost(name)
    if changes:
        log.info(
            "catalogue changed in the shared store: %d users set, %d deleted; virtual hosts "
            "%d added, %d deleted; permissions %s",
            len(changes.credentials),
            len(changes.users_gone),
            len(changes.vhosts_new),
            len(changes.vhosts_gone),
            "replaced" if changes.permissions is not None else "unchanged",
        )
