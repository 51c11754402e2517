"""RabbitMQ's permissions as patterns: how one is matched against a resource's name."""

from __future__ import annotations

import pytest

from batonmq.security.permissions import (
    DECIDED_PER_GRANT,
    Grant,
    InvalidPattern,
    Permission,
    Permissions,
    PermitCache,
    ResourceKind,
    UserPermission,
    validate,
)

QUEUE = ResourceKind.QUEUE
EXCHANGE = ResourceKind.EXCHANGE


def table(configure: str = ".*", write: str = ".*", read: str = ".*") -> Permissions:
    return Permissions([UserPermission("bob", "/", configure, write, read)])


def test_a_pattern_is_searched_for_anywhere_in_the_name():
    """rabbit_auth_backend_internal: `re:run(Name, PermRegexp, [{capture, none}])`, which is
    not anchored: "^" and "$" say where a name must start and end."""
    permissions = table(configure="orders", read="^orders$")
    assert permissions.allows("bob", "/", Permission.CONFIGURE, QUEUE, "eu.orders.placed")
    assert not permissions.allows("bob", "/", Permission.CONFIGURE, QUEUE, "invoices")
    assert permissions.allows("bob", "/", Permission.READ, QUEUE, "orders")
    assert not permissions.allows("bob", "/", Permission.READ, QUEUE, "orders.eu")


def test_an_empty_pattern_matches_nothing_and_dot_star_everything():
    """rabbit_auth_backend_internal: an empty pattern is "^$" (no resource has an empty name:
    the default exchange is "amq.default")."""
    permissions = table(write="")
    assert not permissions.allows("bob", "/", Permission.WRITE, EXCHANGE, "")
    assert not permissions.allows("bob", "/", Permission.WRITE, QUEUE, "q")
    assert permissions.allows("bob", "/", Permission.READ, QUEUE, "any.thing")


def test_the_default_exchange_is_checked_as_amq_default():
    """rabbit_access_control: a resource named "" of kind exchange is checked as
    "amq.default"."""
    permissions = table(write=r"^amq\.default$")
    assert permissions.allows("bob", "/", Permission.WRITE, EXCHANGE, "")
    assert permissions.refusal("bob", "/", Permission.WRITE, QUEUE, "") is not None


def test_refusals_read_as_rabbitmq_writes_them():
    """rabbit_access_control: "~s access to ~ts refused for user '~ts'", the resource as
    rabbit_misc:rs prints it."""
    permissions = table(configure="^$")
    assert permissions.refusal("bob", "/", Permission.CONFIGURE, QUEUE, "q") == (
        "configure access to queue 'q' in vhost '/' refused for user 'bob'"
    )
    assert permissions.refusal("bob", "other", Permission.WRITE, EXCHANGE, "") == (
        "write access to exchange 'amq.default' in vhost 'other' refused for user 'bob'"
    )


def test_no_record_means_no_access_at_all():
    """RabbitMQ's access control guide: a user without permissions on a virtual host cannot
    connect to it, nor use anything in it."""
    permissions = table()
    assert permissions.may_access("bob", "/")
    assert not permissions.may_access("bob", "other")
    assert not permissions.may_access("alice", "/")
    assert not permissions.allows("alice", "/", Permission.READ, QUEUE, "q")


def test_a_pattern_that_does_not_compile_is_refused_naming_it():
    with pytest.raises(InvalidPattern, match="write pattern '\\(unclosed'"):
        validate(UserPermission("bob", "/", ".*", "(unclosed", ".*"))


def test_changes_replace_records_and_move_the_generation():
    permissions = table()
    first = permissions.generation
    permissions.set(UserPermission("bob", "/", "", "", ""))
    assert not permissions.allows("bob", "/", Permission.READ, QUEUE, "q")
    assert permissions.generation > first
    permissions.set(UserPermission.full("alice", "/"))
    permissions.set(UserPermission.full("alice", "x"))
    permissions.clear_vhost("x")
    assert [(r.user, r.vhost) for r in permissions.records()] == [("alice", "/"), ("bob", "/")]
    permissions.clear_user("alice")
    assert not permissions.clear("alice", "/")
    assert permissions.clear("bob", "/")
    assert permissions.records() == []


def test_a_grant_forgets_its_answers_past_its_bound():
    """Clients that make a fresh name per queue must not grow the cache without end."""
    grant = Grant(UserPermission.full("bob", "/"))
    for number in range(DECIDED_PER_GRANT + 10):
        assert grant.allows(Permission.READ, f"q{number}")
    assert len(grant.decided) <= DECIDED_PER_GRANT


def test_a_channel_cache_is_dropped_when_the_table_changes():
    """As RabbitMQ's channel remembers the exchanges it may write to; a change of permissions
    is in force at the next publish all the same."""
    permissions = table()
    cache = PermitCache()
    assert cache.refusal(permissions, "bob", "/", Permission.WRITE, EXCHANGE, "x") is None
    permissions.set(UserPermission("bob", "/", ".*", "^y$", ".*"))
    refusal = cache.refusal(permissions, "bob", "/", Permission.WRITE, EXCHANGE, "x")
    assert refusal == "write access to exchange 'x' in vhost '/' refused for user 'bob'"
