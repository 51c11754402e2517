"""The open connections counted against the connection limits (`ConnectionCount`), one count
for every worker of a broker: the Overload requirements' "connections per user and per virtual
host ... each refusal names the limit", as RabbitMQ's user and vhost `max-connections`, which
hold for the broker, not for each of its processes."""

from __future__ import annotations

from collections import Counter

from batonmq.engine.connectioncount import ConnectionCount

VHOST_LIMIT = (
    "access to vhost '/' refused for user 'bob': connection limit (2) is reached "
    "(limits.max_connections_per_vhost)"
)
USER_LIMIT = (
    "Connection refused for user 'alice': user connection limit (2) is reached "
    "(limits.max_connections_per_user)"
)


def test_connections_of_every_worker_count_against_one_vhost_limit():
    """RabbitMQ (vhost max-connections): "access to vhost '~s' refused for user '~s':
    connection limit (~p) is reached", whichever worker holds the connections."""
    count = ConnectionCount(max_per_vhost=2)
    assert count.admit(0, "alice", "/") is None
    assert count.admit(1, "alice", "/") is None

    assert count.admit(1, "bob", "/") == VHOST_LIMIT
    assert count.admit(0, "bob", "/") == VHOST_LIMIT
    assert count.admit(1, "bob", "other") is None
    assert count.by_vhost == {"/": 2, "other": 1}


def test_connections_of_every_worker_count_against_one_user_limit():
    """RabbitMQ (user max-connections): "Connection refused for user '~s': user connection limit
    (~p) is reached", across virtual hosts, which may live on different workers."""
    count = ConnectionCount(max_per_user=2)
    assert count.admit(0, "alice", "/") is None
    assert count.admit(1, "alice", "other") is None

    assert count.admit(2, "alice", "third") == USER_LIMIT
    assert count.admit(2, "bob", "third") is None


def test_an_ended_connection_makes_room_and_unknown_ends_count_for_nothing():
    """The limit is on open connections; an end the count never saw (a connection let in while
    a worker counted apart) takes nothing from the others."""
    count = ConnectionCount(max_per_vhost=2)
    count.admit(0, "alice", "/")
    count.admit(1, "alice", "/")
    count.ended(1, "bob", "/")
    count.ended(2, "alice", "/")
    assert count.admit(0, "bob", "/") == VHOST_LIMIT

    count.ended(1, "alice", "/")
    assert count.admit(0, "bob", "/") is None
    assert count.held_by(1) == Counter()
    assert count.by_user == {"alice": 1, "bob": 1}


def test_the_connections_of_a_worker_that_ended_leave_the_count():
    """A worker's connections end with it (the supervisor says so): they no longer hold slots."""
    count = ConnectionCount(max_per_user=2, max_per_vhost=2)
    count.admit(1, "alice", "/")
    count.admit(1, "alice", "/")
    count.admit(0, "bob", "other")
    assert count.admit(0, "alice", "other") == USER_LIMIT

    count.worker_ended(1)

    assert count.admit(0, "alice", "/") is None
    assert count.by_user == {"alice": 1, "bob": 1}
    assert count.by_vhost == {"/": 1, "other": 1}


def test_connections_given_again_after_the_count_started_afresh_are_counted():
    """The first worker started again counts nothing; each other worker gives it the
    connections it holds, which replace what it had counted for that worker."""
    before = ConnectionCount(max_per_vhost=2)
    before.admit(1, "alice", "/")
    before.admit(1, "bob", "/")
    held = before.held_by(1)
    assert held == Counter({("alice", "/"): 1, ("bob", "/"): 1})

    again = ConnectionCount(max_per_vhost=2)
    again.admit(1, "alice", "/")  # let in before the worker gave what it holds
    again.replace(1, held)

    assert again.admit(0, "carol", "/") == VHOST_LIMIT.replace("bob", "carol")
    again.ended(1, "bob", "/")
    assert again.admit(0, "carol", "/") is None
    assert again.by_user == {"alice": 1, "carol": 1}


def test_without_limits_nothing_is_refused():
    """0, the default, is "no limit"."""
    count = ConnectionCount()
    assert not count.limited
    assert all(count.admit(0, "alice", "/") is None for _ in range(50))
