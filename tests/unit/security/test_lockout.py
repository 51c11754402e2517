"""LoginThrottle: delays after failed logins, lockout after too many, bounded memory. The rules
are numbered in batonmq.security.lockout's docstring."""

from __future__ import annotations

from typing import Any

import pytest

from batonmq.security.lockout import LoginThrottle

ALICE = "192.0.2.1"
BOB = "192.0.2.2"


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


def fail(throttle, address, times):
    for _ in range(times):
        throttle.record_failure(address)


def test_a_clean_address_is_neither_delayed_nor_locked(clock):
    throttle = make_throttle(clock)
    assert throttle.delay_for(ALICE) == 0.0
    assert throttle.locked_out_for(ALICE) == 0.0


def test_the_delay_doubles_with_each_failure(clock):
    """Rule 2: 0.25 s, 0.5 s, 1 s, 2 s with the defaults."""
    throttle = make_throttle(clock)
    delays = []
    for _ in range(4):
        throttle.record_failure(ALICE)
        delays.append(throttle.delay_for(ALICE))
    assert delays == [0.25, 0.5, 1.0, 2.0]
    assert throttle.delay_for(BOB) == 0.0, "per address"


def test_the_delay_is_capped(clock):
    throttle = make_throttle(clock, max_failures=2000, max_delay_seconds=8.0)
    fail(throttle, ALICE, 1500)
    assert throttle.delay_for(ALICE) == 8.0


def test_failures_are_forgotten_after_the_window(clock):
    """Rule 1: a failure is remembered for window_seconds."""
    throttle = make_throttle(clock)
    throttle.record_failure(ALICE)
    clock.advance(30)
    throttle.record_failure(ALICE)
    assert throttle.delay_for(ALICE) == 0.5
    clock.advance(30)
    assert throttle.delay_for(ALICE) == 0.25, "the first failure left the window"
    clock.advance(30)
    assert throttle.delay_for(ALICE) == 0.0


def test_max_failures_within_the_window_locks_out(clock):
    """Rule 3: the max_failures-th remembered failure locks out for lockout_seconds."""
    throttle = make_throttle(clock)
    fail(throttle, ALICE, 4)
    assert throttle.locked_out_for(ALICE) == 0.0
    throttle.record_failure(ALICE)
    assert throttle.locked_out_for(ALICE) == 300.0
    assert throttle.delay_for(ALICE) == 0.0, "refused at once, not delayed"
    assert throttle.locked_out_for(BOB) == 0.0
    clock.advance(299)
    assert throttle.locked_out_for(ALICE) == 1.0


def test_failures_spread_wider_than_the_window_never_lock_out(clock):
    throttle = make_throttle(clock)
    for _ in range(20):
        throttle.record_failure(ALICE)
        clock.advance(15)
    assert throttle.locked_out_for(ALICE) == 0.0


def test_failures_during_a_lockout_do_not_extend_it(clock):
    throttle = make_throttle(clock)
    fail(throttle, ALICE, 5)
    clock.advance(100)
    fail(throttle, ALICE, 10)
    assert throttle.locked_out_for(ALICE) == 200.0


def test_a_success_does_not_unlock(clock):
    """Rule 3: a correct password does not unlock, or the lockout would not stop guessing."""
    throttle = make_throttle(clock)
    fail(throttle, ALICE, 5)
    throttle.record_success(ALICE)
    assert throttle.locked_out_for(ALICE) == 300.0


def test_after_the_lockout_the_address_starts_afresh(clock):
    throttle = make_throttle(clock, window_seconds=600.0)
    fail(throttle, ALICE, 5)
    clock.advance(300)
    assert throttle.locked_out_for(ALICE) == 0.0
    assert throttle.delay_for(ALICE) == 0.0
    fail(throttle, ALICE, 4)
    assert throttle.locked_out_for(ALICE) == 0.0, "the failures before the lockout do not count"
    throttle.record_failure(ALICE)
    assert throttle.locked_out_for(ALICE) == 300.0


def test_a_success_ends_the_delay_but_not_the_count_toward_lockout(clock):
    """Rule 4: else a guesser with one valid account could log in with it between guesses."""
    throttle = make_throttle(clock)
    for _ in range(4):
        throttle.record_failure(ALICE)
        throttle.record_success(ALICE)
        assert throttle.delay_for(ALICE) == 0.0
    throttle.record_failure(ALICE)
    assert throttle.locked_out_for(ALICE) == 300.0


def test_the_delay_counts_only_failures_since_the_last_success(clock):
    throttle = make_throttle(clock)
    fail(throttle, ALICE, 3)
    throttle.record_success(ALICE)
    throttle.record_failure(ALICE)
    assert throttle.delay_for(ALICE) == 0.25


def test_a_success_from_an_unknown_address_tracks_nothing(clock):
    throttle = make_throttle(clock)
    throttle.record_success(ALICE)
    assert throttle.tracked_addresses == 0


def test_quiet_addresses_are_forgotten(clock):
    """Rule 5: an address with no remembered failure and no lockout is dropped."""
    throttle = make_throttle(clock)
    throttle.record_failure(ALICE)
    fail(throttle, BOB, 5)
    clock.advance(61)
    throttle.record_failure("192.0.2.3")
    assert throttle.tracked_addresses == 2, "ALICE forgotten; BOB is still locked out"
    clock.advance(300)
    throttle.record_failure("192.0.2.4")
    assert throttle.tracked_addresses == 1, "BOB's lockout is over, 192.0.2.3's window too"


def test_the_number_of_tracked_addresses_is_capped(clock):
    """Rule 5: when full, the address whose last failure is oldest goes first."""
    throttle = make_throttle(clock, max_tracked_addresses=3)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        throttle.record_failure(address)
        clock.advance(1)
    throttle.record_failure("10.0.0.1")
    throttle.record_failure("10.0.0.4")
    assert throttle.tracked_addresses == 3
    assert throttle.delay_for("10.0.0.2") == 0.0, "evicted"
    assert throttle.delay_for("10.0.0.1") == 0.5, "kept: its last failure was recent"
    assert throttle.delay_for("10.0.0.3") == 0.25


@pytest.mark.parametrize(
    "overrides",
    [
        {"max_failures": 0},
        {"window_seconds": 0.0},
        {"lockout_seconds": -1.0},
        {"max_tracked_addresses": 0},
        {"first_delay_seconds": -0.1},
        {"first_delay_seconds": 2.0, "max_delay_seconds": 1.0},
    ],
)
def test_nonsense_settings_are_refused(clock, overrides):
    with pytest.raises(ValueError, match="must"):
        make_throttle(clock, **overrides)
