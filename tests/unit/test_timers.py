"""`LoopTimers`, the engine's timers on the asyncio loop: a callback that fails is contained."""

from __future__ import annotations

import asyncio
import logging

import pytest

from batonmq.timers import LoopTimers


async def test_a_timer_that_fails_is_logged_with_its_owner_and_the_others_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hardening: "a fault inside one queue's work is contained to that queue and logged, never
    delays others". A queue's timer (head expiry, x-expires) that raises is logged with the
    owner of the timers, its vhost and queue, and reaches neither the loop's exception handler
    nor the timers due after it."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    other_ran = asyncio.Event()

    def fails() -> None:
        raise RuntimeError("injected fault")

    broken = LoopTimers("queue 'broken' in vhost '/'")
    other = LoopTimers("queue 'other' in vhost '/'")
    with caplog.at_level(logging.ERROR, logger="batonmq.timers"):
        broken.call_later(0, fails)
        other.call_later(0, other_ran.set)
        await asyncio.wait_for(other_ran.wait(), 5)

    assert unhandled == []
    [record] = caplog.records
    assert record.getMessage().endswith("of queue 'broken' in vhost '/' failed")
    assert record.exc_info is not None


async def test_a_cancelled_timer_does_not_run() -> None:
    """`Timer.cancel` still cancels: the wrapping does not detach the handle from the loop."""
    ran: list[int] = []
    LoopTimers().call_later(0, lambda: ran.append(1)).cancel()
    await asyncio.sleep(0.02)
    assert ran == []
