"""The supervisor's back-off before it starts a dead worker again, as a pure decision.

README, "Worker processes": the `batonmq` process "starts again a worker that died ... after
1 s, doubled for each death in a row within 60 s of its start, at most 30 s"."""

from __future__ import annotations

from batonmq.server.supervisor import (
    RESTART_DELAY,
    RESTART_DELAY_MAX,
    STABLE_AFTER,
    restart_backoff,
)


def test_each_quick_death_in_a_row_doubles_the_wait_up_to_its_maximum() -> None:
    """1 s, 2 s, 4 s, ... 30 s, and 30 s from then on."""
    failures, delays = 0, []
    for _ in range(8):
        failures, delay = restart_backoff(1.0, failures)
        delays.append(delay)
    assert (RESTART_DELAY, RESTART_DELAY_MAX) == (1.0, 30.0)
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert failures == 8


def test_a_worker_that_ran_long_enough_starts_again_after_the_first_wait() -> None:
    """A death after STABLE_AFTER (60 s) of running is not one in a row: the count starts
    again, so the next quick death waits 1 s, not twice the last wait."""
    assert STABLE_AFTER == 60.0
    assert restart_backoff(STABLE_AFTER, 5) == (0, RESTART_DELAY)
    assert restart_backoff(STABLE_AFTER - 0.1, 5) == (6, RESTART_DELAY_MAX)
    assert restart_backoff(1.0, 0) == (1, RESTART_DELAY)
