"""A running broker takes in the catalogue as its store has it (`batonmq.engine.catalogue`): in an
HA cluster, users, virtual hosts and permissions changed on another member.

GlassFish MQ 4.5.2 Technical Overview, Table 4-1: in an enhanced cluster the configuration is
kept in the shared store. RabbitMQ's access control guide: permissions are checked at each
operation, so a revoke refuses the next one; a deleted user's connections are closed.
"""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from batonmq.engine.catalogue import (
    CatalogueChanges,
    apply_catalogue,
    apply_users_and_permissions,
    catalogue_changes,
)
from batonmq.security.permissions import UserPermission
from batonmq.store.base import StoredUser
from batonmq.store.members import Catalogue
from tests.unit.engine.test_access import login, refusal, user_credential

FULL_GUEST = UserPermission.full("guest", "/")
FULL_GUEST_V1 = UserPermission.full("guest", "v1")


def _broker_with_bob() -> Broker:
    broker = Broker()
    broker.authenticator.users["bob"] = user_credential()
    broker.user_tags = {"guest": ("administrator",), "bob": ()}
    broker.permissions.set(UserPermission.full("bob", "/"))
    return broker


def _as_stored(broker: Broker) -> Catalogue:
    """The broker's own copy, as the store would give it."""
    return Catalogue(
        users=[
            StoredUser(name, credential.encode(), broker.user_tags.get(name, ()))
            for name, credential in sorted(broker.authenticator.users.items())
        ],
        vhosts=sorted(broker.vhosts),
        permissions=broker.permissions.records(),
        version=7,
    )


def test_a_copy_in_line_with_the_store_has_nothing_to_change() -> None:
    broker = _broker_with_bob()

    changes = catalogue_changes(broker, _as_stored(broker))

    assert not changes, changes


def test_each_kind_of_difference_is_found() -> None:
    broker = _broker_with_bob()
    alice = StoredUser("alice", user_credential().encode(), ("monitoring",))
    stored = _as_stored(broker)
    stored = Catalogue(
        users=[alice, *(user for user in stored.users if user.name != "bob")],
        vhosts=[*stored.vhosts, "v1"],
        permissions=[FULL_GUEST, UserPermission("alice", "v1", "", ".*", ".*")],
        version=8,
    )

    changes = catalogue_changes(broker, stored)

    assert changes == CatalogueChanges(
        credentials={"alice": alice.credential},
        tags={"alice": ("monitoring",)},
        users_gone=["bob"],
        vhosts_new=["v1"],
        vhosts_gone=[],
        permissions=stored.permissions,
    )


def test_a_revoke_refuses_the_next_operation_of_a_connected_client() -> None:
    """The permissions table is replaced, so the channel's cached checks are dropped."""
    broker = _broker_with_bob()
    bob = login(broker, "bob")
    bob.declare_queue(1, "q1")  # allowed, and remembered by the channel
    stored = _as_stored(broker)
    revoked = Catalogue(stored.users, stored.vhosts, [FULL_GUEST], 8)

    apply_users_and_permissions(broker, catalogue_changes(broker, revoked))

    bob.send(1, commands.Queue.Declare(queue="q1"))
    assert "configure access to queue 'q1' in vhost '/' refused for user 'bob'" in refusal(bob)


def test_a_user_deleted_elsewhere_is_closed_out_and_cannot_log_in() -> None:
    broker = _broker_with_bob()
    bob = login(broker, "bob")
    stored = _as_stored(broker)
    without_bob = Catalogue(
        [user for user in stored.users if user.name != "bob"], stored.vhosts, [FULL_GUEST], 8
    )

    apply_users_and_permissions(broker, catalogue_changes(broker, without_bob))

    close = bob.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.CONNECTION_FORCED
    assert close.reply_text.endswith("user 'bob' deleted")
    assert "bob" not in broker.authenticator.users and "bob" not in broker.user_tags


def test_a_bad_stored_credential_makes_the_user_unable_to_log_in() -> None:
    broker = _broker_with_bob()
    stored = _as_stored(broker)
    broken = Catalogue(
        [StoredUser("bob", "not a credential", ()), *stored.users[1:]],
        stored.vhosts,
        stored.permissions,
        8,
    )
    assert stored.users[0].name == "bob"

    apply_users_and_permissions(broker, catalogue_changes(broker, broken))

    assert "bob" not in broker.authenticator.users


async def test_a_virtual_host_added_elsewhere_is_usable_and_one_deleted_is_gone() -> None:
    """A deleted virtual host goes as `delete_vhost` deletes it: its connections here closed
    (320), its queues deleted."""
    broker = _broker_with_bob()
    stored = _as_stored(broker)
    with_v1 = Catalogue(
        stored.users, [*stored.vhosts, "v1"], [*stored.permissions, FULL_GUEST_V1], 8
    )

    await apply_catalogue(broker, catalogue_changes(broker, with_v1))
    guest = login(broker, "guest", vhost="v1")
    guest.declare_queue(1, "q")
    assert "q" in broker.vhosts["v1"].queues

    await apply_catalogue(broker, catalogue_changes(broker, stored))

    assert "v1" not in broker.vhosts
    close = guest.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.CONNECTION_FORCED
    assert close.reply_text.endswith("vhost 'v1' is deleted")
    assert broker.permissions.get("guest", "v1") is None


def test_a_virtual_host_being_deleted_here_is_left_to_that_deletion() -> None:
    broker = _broker_with_bob()
    without_v1 = _as_stored(broker)
    broker.add_vhost("v1")
    broker.vhosts_deleting.add("v1")

    changes = catalogue_changes(broker, without_v1)

    assert changes.vhosts_gone == [], changes


def test_adding_a_virtual_host_that_exists_keeps_it() -> None:
    """Another member's change may bring a virtual host in while this broker's own API adds
    it: the second add must not replace the first (and what was declared in it)."""
    broker = Broker()
    first = broker.add_vhost("v1")

    assert broker.add_vhost("v1") is first
