"""A queue with a message TTL keeps one timer, on its head entry, however many messages wait.

The rule pinned (the issue on per-connection costs): remove "per-delivery timers or
futures". RabbitMQ (docs/ttl) dead-letters expired messages at the head of the queue even
with no consumer about; one timer on the head entry does that, since entries behind it in a
queue with one TTL expire no earlier.
"""

from __future__ import annotations

from collections.abc import Callable

from batonmq.model.message import Message
from batonmq.queues.classic import ClassicQueue
from tests.manualtimers import ManualTimer, ManualTimers

MESSAGES = 1000
TTL_MS = 60_000


class CountingTimers(ManualTimers):
    """Manual timers that count how many were scheduled."""

    scheduled = 0

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> ManualTimer:
        self.scheduled += 1
        return super().call_later(delay_ms, callback)


def message(body: str) -> Message:
    return Message("", "q", b"\x00" * 14, body.encode())


def test_a_thousand_publishes_to_a_ttl_queue_schedule_one_timer():
    """1,000 messages into a queue with x-message-ttl: one timer, for the head, not 1,000."""
    timers = CountingTimers()
    queue = ClassicQueue("q", arguments={"x-message-ttl": TTL_MS}, timers=timers)
    for number in range(MESSAGES):
        queue.publish(message(str(number)))
        timers.advance(1)  # each message expires a millisecond after the one before
    assert queue.message_count == MESSAGES
    assert timers.scheduled == 1
    assert timers.pending == 1


def test_expiry_walks_the_queue_with_one_timer_at_a_time():
    """When the head expires, every entry that expired with it goes in the same firing and
    one timer is set for the next head: never more than one pending."""
    timers = CountingTimers()
    queue = ClassicQueue("q", arguments={"x-message-ttl": TTL_MS}, timers=timers)
    for number in range(MESSAGES):
        queue.publish(message(str(number)))
    timers.advance(TTL_MS + 1)
    assert queue.message_count == 0
    assert timers.scheduled == 1
    assert timers.pending == 0
