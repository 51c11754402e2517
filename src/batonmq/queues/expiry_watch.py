"""A classic queue's clocks: when each entry expires (x-message-ttl and the `expiration`
property, decided by `batonmq.queues.expiry`), a timer on the head entry's expiry, so that it is
dead-lettered then even with no consumer about (RabbitMQ does the same), and the x-expires
countdown to deleting a queue while it is unused (no consumers, no basic.get, no
redeclaration).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from batonmq.model.message import FLAG_EXPIRATION, Message, QueueEntry
from batonmq.queues.expiry import InvalidExpiration, expires_at, is_expired, parse_expiration
from batonmq.queues.priority import PriorityReady
from batonmq.queues.protocol import Queue
from batonmq.queues.ready import ReadyEntries
from batonmq.timers import Timer, Timers


class ExpiryWatch:
    """The clocks of `queue`, whose ready entries are `ready`: `expired` is called for each
    entry found expired (the queue dead-letters it); an unused queue is deleted through its
    hooks (`QueueHooks.expire_queue`)."""

    __slots__ = (
        "_expired",
        "_expires",
        "_head_timer",
        "_head_timer_at",
        "_message_ttl",
        "_queue",
        "_unused_timer",
        "expiring",
        "ready",
        "timers",
    )

    def __init__(
        self,
        queue: Queue,
        ready: ReadyEntries | PriorityReady,
        timers: Timers,
        *,
        expired: Callable[[QueueEntry], None],
    ) -> None:
        self._queue = queue
        self.ready = ready
        self.timers = timers
        self._expired = expired
        self._message_ttl = queue.options.message_ttl
        self._expires = queue.options.expires
        #: Entries may carry an expiry (a queue TTL, or one seen on a message): while False,
        #: nothing is checked.
        self.expiring = self._message_ttl is not None
        self._head_timer: Timer | None = None
        self._head_timer_at = 0
        self._unused_timer: Timer | None = None

    def expiry_of(self, message: Message) -> int | None:
        """When `message`, entering the queue now, expires; None for never."""
        queue_ttl = self._message_ttl
        has_expiration = message.property_flags & FLAG_EXPIRATION
        if queue_ttl is None and not has_expiration:
            return None  # the common case: nothing to parse (this runs for every message)
        message_ttl = None
        if has_expiration:
            # An invalid expiration is refused at publish; one from the store was checked then.
            with contextlib.suppress(InvalidExpiration):
                message_ttl = parse_expiration(message.properties.expiration or "")
            self.expiring = True
        if queue_ttl is None and message_ttl is None:
            return None
        return expires_at(self.timers.now_ms(), queue_ttl, message_ttl)

    def saw_expiry(self) -> None:
        """An entry with an expiry time came back from the store."""
        self.expiring = True

    def take(self) -> QueueEntry | None:
        """The next ready entry that has not expired; expired ones on the way go to `expired`
        (RabbitMQ: an expired message is never delivered)."""
        ready = self.ready
        entry = ready.pop()
        if not self.expiring:
            return entry
        now = self.timers.now_ms()
        while entry is not None and is_expired(entry.expires_at, now):
            self._expired(entry)
            entry = ready.pop()
        return entry

    def sweep(self) -> int:
        """Every expired entry in memory, wherever it is, goes to `expired` (paged entries are
        checked when they are read back); how many went."""
        if not self.expiring:
            return 0
        now = self.timers.now_ms()
        expired = self.ready.take_where(lambda entry: is_expired(entry.expires_at, now))
        for entry in expired:
            self._expired(entry)
        return len(expired)

    def watch_head(self) -> None:
        """Have the timer fire when the next entry out expires, unless it fires earlier
        already: it is dead-lettered then even with no consumer about."""
        if not self.expiring or self._queue.deleted:
            return
        head = self.ready.peek()
        if head is None or head.expires_at is None:
            return
        if self._head_timer is not None:
            if self._head_timer_at <= head.expires_at:
                return
            self._head_timer.cancel()
        timers = self.timers
        self._head_timer_at = head.expires_at
        self._head_timer = timers.call_later(head.expires_at - timers.now_ms() + 1, self._fire_head)

    def _fire_head(self) -> None:
        self._head_timer = None
        if self._queue.deleted:
            return
        entry = self.take()
        if entry is not None:
            self.ready.put_back(entry)
        self.watch_head()

    def restart_unused(self) -> None:
        """x-expires: (re)start the countdown to deleting the queue, or stop it while the
        queue has consumers (it was used: redeclared, read with basic.get, consumed from)."""
        queue = self._queue
        if self._expires is None or queue.deleted:
            return
        if self._unused_timer is not None:
            self._unused_timer.cancel()
            self._unused_timer = None
        if not queue.consumers:
            self._unused_timer = self.timers.call_later(self._expires, self._fire_unused)

    def _fire_unused(self) -> None:
        self._unused_timer = None
        queue = self._queue
        if not queue.deleted and not queue.consumers and queue.hooks is not None:
            queue.hooks.expire_queue(queue)

    def stop(self) -> None:
        for timer in (self._head_timer, self._unused_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._unused_timer = None
