"""LoginThrottle: delays after failed logins, lockout of the failing pair of user and address,
slowing down of user-name spraying, bounded memory. The rules are numbered in
batonmq.security.lockout's docstring. Hardening, defect 7: "Count failures per user and address,
slow down the failing pair (growing delay) rather than refuse others, never refuse correct
credentials because someone else failed ... Keep the protection against password guessing"."""

from __future__ import annotations

from typing import Any

import pytest

from batonmq.security.lockout import LoginThrottle

HOST = "192.0.2.1"
OTHER_HOST = "192.0.2.2"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return FakeClock()


def make_throttle(clock, **overrides) -> LoginThrottle:
    settings: dict[str, Any] = {"max_failures": 5, "window_seconds": 60.0, "lockout_seconds": 300.0}
    settings.update(overrides)
    return LoginThrottle(clock=clock, **settings)


def fail(throttle, times, user="alice", address=HOST) -> list[bool]:
    return [throttle.record_failure(user, address) for _ in range(times)]


def test_a_clean_pair_is_neither_delayed_nor_locked(clock):
    throttle = make_throttle(clock)
    assert throttle.delay_for("alice", HOST) == 0.0
    assert throttle.locked_out_for("alice", HOST) == 0.0


def test_the_delay_doubles_with_each_failure_of_the_pair_only(clock):
    """Rule 2: 0.25 s, 0.5 s, 1 s, 2 s with the defaults; "slow down the failing pair"."""
    throttle = make_throttle(clock)
    delays = []
    for _ in range(4):
        throttle.record_failure("alice", HOST)
        delays.append(throttle.delay_for("alice", HOST))
    assert delays == [0.25, 0.5, 1.0, 2.0]
    assert throttle.delay_for("bob", HOST) == 0.0, "another user from the same address"
    assert throttle.delay_for("alice", OTHER_HOST) == 0.0, "the same user from elsewhere"


def test_the_delay_is_capped(clock):
    throttle = make_throttle(clock, max_failures=2000, max_delay_seconds=8.0)
    fail(throttle, 1500)
    assert throttle.delay_for("alice", HOST) == 8.0


def test_failures_are_forgotten_after_the_window(clock):
    """Rule 1: a failure is remembered for window_seconds."""
    throttle = make_throttle(clock)
    throttle.record_failure("alice", HOST)
    clock.advance(30)
    throttle.record_failure("alice", HOST)
    assert throttle.delay_for("alice", HOST) == 0.5
    clock.advance(30)
    assert throttle.delay_for("alice", HOST) == 0.25, "the first failure left the window"
    clock.advance(30)
    assert throttle.delay_for("alice", HOST) == 0.0


def test_max_failures_lock_out_that_user_from_that_address_only(clock):
    """Rule 3; hardening: "Five failed logins from one address lock that *address* out for
    300 s: every user behind it, with correct credentials, is refused" no more: the pair is
    locked out, others are neither refused nor delayed; the lockout is reported once."""
    throttle = make_throttle(clock)
    assert fail(throttle, 4) == [False] * 4
    assert throttle.locked_out_for("alice", HOST) == 0.0
    assert throttle.record_failure("alice", HOST), "this failure started the lockout"
    assert throttle.locked_out_for("alice", HOST) == 300.0
    assert throttle.delay_for("alice", HOST) == 0.0, "refused at once, not delayed"
    assert (throttle.locked_out_for("bob", HOST), throttle.delay_for("bob", HOST)) == (0.0, 0.0)
    assert throttle.locked_out_for("alice", OTHER_HOST) == 0.0
    assert fail(throttle, 3) == [False] * 3, "a lockout is reported once"
    clock.advance(299)
    assert throttle.locked_out_for("alice", HOST) == 1.0


def test_failures_spread_wider_than_the_window_never_lock_out(clock):
    throttle = make_throttle(clock)
    for _ in range(20):
        throttle.record_failure("alice", HOST)
        clock.advance(15)
    assert throttle.locked_out_for("alice", HOST) == 0.0


def test_failures_during_a_lockout_do_not_extend_it(clock):
    throttle = make_throttle(clock)
    fail(throttle, 5)
    clock.advance(100)
    fail(throttle, 10)
    assert throttle.locked_out_for("alice", HOST) == 200.0


def test_a_success_does_not_unlock(clock):
    """Rule 3: a correct password does not unlock, or the lockout would not stop guessing."""
    throttle = make_throttle(clock)
    fail(throttle, 5)
    throttle.record_success("alice", HOST)
    assert throttle.locked_out_for("alice", HOST) == 300.0


def test_after_the_lockout_the_pair_starts_afresh(clock):
    throttle = make_throttle(clock, window_seconds=600.0)
    fail(throttle, 5)
    clock.advance(300)
    assert throttle.locked_out_for("alice", HOST) == 0.0
    assert throttle.delay_for("alice", HOST) == 0.0
    fail(throttle, 4)
    assert throttle.locked_out_for("alice", HOST) == 0.0, "failures before the lockout are gone"
    throttle.record_failure("alice", HOST)
    assert throttle.locked_out_for("alice", HOST) == 300.0


def test_guessing_one_password_is_locked_out_whatever_the_pace(clock):
    """Keep the protection against password guessing: a guesser who waits out each delay still
    reaches the lockout, and then gets max_failures guesses per lockout period at most."""
    throttle = make_throttle(clock)
    guesses = 0
    while not throttle.locked_out_for("alice", HOST):
        clock.advance(throttle.delay_for("alice", HOST))
        throttle.record_failure("alice", HOST)
        guesses += 1
    assert guesses == 5
    clock.advance(299.9)
    assert throttle.locked_out_for("alice", HOST) > 0


def test_a_success_forgets_the_pairs_failures(clock):
    """Rule 5: a client that mistypes now and then, between good logins, is never locked out
    (a client library's tests of a wrong password, hardening)."""
    throttle = make_throttle(clock)
    for _ in range(20):
        fail(throttle, 2, user="guest")
        throttle.record_success("guest", HOST)
        assert throttle.delay_for("guest", HOST) == 0.0
    assert throttle.locked_out_for("guest", HOST) == 0.0


def test_spraying_user_names_from_one_address_is_slowed_down_not_refused(clock):
    """Rule 4: beyond max_failures distinct failing users, every attempt from the address
    waits, growing with the spraying; nothing is refused, and other addresses are unaffected."""
    throttle = make_throttle(clock)
    for number in range(5):
        throttle.record_failure(f"user{number}", HOST)
    assert throttle.delay_for("guest", HOST) == 0.0, "up to max_failures users: no delay"
    delays = []
    for number in range(5, 11):
        throttle.record_failure(f"user{number}", HOST)
        delays.append(throttle.delay_for("guest", HOST))
    assert delays == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
    assert throttle.locked_out_for("guest", HOST) == 0.0, "slowed down, never refused"
    assert throttle.delay_for("guest", OTHER_HOST) == 0.0
    clock.advance(60)
    assert throttle.delay_for("guest", HOST) == 0.0, "the spraying left the window"


def test_a_valid_account_does_not_reset_the_spraying_count(clock):
    """Rule 5: a guesser holding one valid account cannot reset the address's count with it."""
    throttle = make_throttle(clock)
    for number in range(7):
        throttle.record_failure(f"user{number}", HOST)
        throttle.record_success("mallory", HOST)
    assert throttle.delay_for("mallory", HOST) == 0.5


def test_quiet_pairs_are_forgotten(clock):
    """Rule 6: a pair with no remembered failure and no lockout is dropped."""
    throttle = make_throttle(clock)
    throttle.record_failure("alice", HOST)
    fail(throttle, 5, address=OTHER_HOST)
    clock.advance(61)
    throttle.record_failure("alice", "192.0.2.3")
    assert throttle.tracked_pairs == 2, "alice@HOST forgotten; alice@OTHER_HOST is locked out"
    clock.advance(300)
    throttle.record_failure("alice", "192.0.2.4")
    assert throttle.tracked_pairs == 1, "the lockout is over, 192.0.2.3's window too"


def test_the_number_of_tracked_pairs_is_capped(clock):
    """Rule 6: when full, the pair whose last failure is oldest goes first."""
    throttle = make_throttle(clock, max_tracked_pairs=3)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        throttle.record_failure("alice", address)
        clock.advance(1)
    throttle.record_failure("alice", "10.0.0.1")
    throttle.record_failure("alice", "10.0.0.4")
    assert throttle.tracked_pairs == 3
    assert throttle.delay_for("alice", "10.0.0.2") == 0.0, "evicted"
    assert throttle.delay_for("alice", "10.0.0.1") == 0.5, "kept: its last failure was recent"
    assert throttle.delay_for("alice", "10.0.0.3") == 0.25


def test_a_sprayer_evicts_only_its_own_addresss_unlocked_pairs(clock):
    """Rule 6: at most max_users_per_address users per address; more evict that address's own
    oldest unlocked pair, so spraying neither ends a lockout nor pushes out other addresses."""
    throttle = make_throttle(clock, max_users_per_address=4)
    fail(throttle, 5, user="alice")
    throttle.record_failure("bob", OTHER_HOST)
    for number in range(10):
        throttle.record_failure(f"user{number}", HOST)
    assert throttle.tracked_pairs == 5
    assert throttle.locked_out_for("alice", HOST) == 300.0
    assert throttle.delay_for("bob", OTHER_HOST) == 0.25


@pytest.mark.parametrize(
    "overrides",
    [
        {"max_failures": 0},
        {"window_seconds": 0.0},
        {"lockout_seconds": -1.0},
        {"max_tracked_pairs": 0},
        {"max_users_per_address": 0},
        {"first_delay_seconds": -0.1},
        {"first_delay_seconds": 2.0, "max_delay_seconds": 1.0},
    ],
)
def test_nonsense_settings_are_refused(clock, overrides):
    with pytest.raises(ValueError, match="must"):
        make_throttle(clock, **overrides)
