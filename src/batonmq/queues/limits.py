"""A classic queue's limits: x-max-message-size, x-max-length and x-max-length-bytes with their
x-overflow behaviour, and the flow-control capacities (Qpid manual §1.5.1).

The decisions are pure functions of the queue's options and its ready count and bytes:
- reject-publish(-dlx) refuses a message there is no room for (RabbitMQ counts ready messages);
- drop-head and remove-low-priority let it in and then drop from the head until the queue is
  within its limits (`over_limit`);
- flow-control keeps it and holds its publisher back while the queue is overfull
  (the QUE-1003 Overfull and QUE-1004 Underfull operational logs).

`Limits` applies them to one queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from batonmq.model.message import QueueEntry
from batonmq.queues.arguments import Overflow, QueueArguments
from batonmq.queues.held import HeldBack
from batonmq.queues.priority import PriorityReady
from batonmq.queues.ready import ReadyEntries

log = logging.getLogger(__name__)

#: The overflows that refuse a message when the queue is full.
_REFUSING = frozenset({Overflow.REJECT_PUBLISH, Overflow.REJECT_PUBLISH_DLX})


class Admission(Enum):
    """What a queue does with a message it is offered."""

    TAKE = "take"
    REFUSE = "refuse"
    #: Refuse it and dead-letter it (reject-publish-dlx, reason maxlen).
    REFUSE_DEAD_LETTER = "refuse-dead-letter"


def screens(options: QueueArguments) -> bool:
    """Whether a publish must be checked (`admission`) before it is taken: a size limit, or a
    full queue that refuses."""
    return options.max_message_size is not None or (
        options.limits_length and options.overflow in _REFUSING
    )


def admission(options: QueueArguments, size: int, count: int, body_bytes: int) -> Admission:
    """Whether a body of `size` may join a queue holding `count` messages of `body_bytes` (those
    held back for their commit included: they become ready as soon as it is done)."""
    if options.max_message_size is not None and size > options.max_message_size:
        return Admission.REFUSE
    if options.overflow not in _REFUSING or not _full_for(options, size, count, body_bytes):
        return Admission.TAKE
    if options.overflow is Overflow.REJECT_PUBLISH_DLX:
        return Admission.REFUSE_DEAD_LETTER
    return Admission.REFUSE


def _full_for(options: QueueArguments, size: int, count: int, body_bytes: int) -> bool:
    return (options.max_length is not None and count >= options.max_length) or (
        options.max_length_bytes is not None and body_bytes + size > options.max_length_bytes
    )


def drops_head(options: QueueArguments) -> bool:
    """Whether the queue is brought back within its length limits by dropping from its head:
    any overflow but flow-control (drop-head, remove-low-priority; reject-publish never lets
    it get over them)."""
    return options.limits_length and options.overflow is not Overflow.FLOW_CONTROL


def over_limit(options: QueueArguments, count: int, body_bytes: int) -> bool:
    """drop-head: the queue holds more than x-max-length or x-max-length-bytes allow."""
    return (options.max_length is not None and count > options.max_length) or (
        options.max_length_bytes is not None and body_bytes > options.max_length_bytes
    )


def over_capacity(options: QueueArguments, count: int, body_bytes: int) -> bool:
    """flow-control: over x-max-length or the capacity (QUE-1003 Overfull)."""
    return (options.max_length is not None and count > options.max_length) or (
        options.capacity is not None and body_bytes > options.capacity
    )


def under_resume_capacity(options: QueueArguments, count: int, body_bytes: int) -> bool:
    """QUE-1004 Underfull: "when its size becomes less than the flowResumeCapacity"."""
    return (options.max_length is None or count < options.max_length) and (
        options.flow_resume_capacity is None or body_bytes < options.flow_resume_capacity
    )


class Limits:
    """The limits of one queue, whose ready entries are `ready` and whose entries waiting for
    their commit are `held`. What goes over them is given to `drop` (the queue dead-letters it,
    reason maxlen); `page_in` is called when the next entry to drop is in the store.

    x-overflow flow-control: the queue is over its capacity (`overfull`), and whoever publishes
    to it is held back (`when_underfull`) until it is under its resume capacity again."""

    __slots__ = (
        "_drop",
        "_flow_control",
        "_held",
        "_log_fields",
        "_options",
        "_page_in",
        "_ready",
        "_waiters",
        "in_force",
        "overfull",
        "screens",
        "trims",
    )

    def __init__(
        self,
        options: QueueArguments,
        ready: ReadyEntries | PriorityReady,
        held: HeldBack,
        *,
        vhost: str,
        queue: str,
        drop: Callable[[QueueEntry], None],
        page_in: Callable[[], None],
    ) -> None:
        self._options = options
        self._ready = ready
        self._held = held
        self._drop = drop
        self._page_in = page_in
        self._log_fields = {"vhost": vhost, "queue": queue}
        #: Whether a publish must be checked (`refuses`) before it is taken.
        self.screens = screens(options)
        #: Whether the queue drops from its head to keep within its limits (`make_room`).
        self.trims = drops_head(options)
        self._flow_control = options.overflow is Overflow.FLOW_CONTROL
        #: Whether anything is to be checked when an entry becomes ready (`taken_in`).
        self.in_force = self._flow_control or self.trims
        self.overfull = False
        self._waiters: list[Callable[[], None]] = []

    def refuses(self, entry: QueueEntry) -> bool:
        """Whether `entry`, published, is refused (and dropped, with reject-publish-dlx)."""
        ready, held = self._ready, self._held
        decision = admission(
            self._options,
            entry.message.body_size,
            len(ready) + len(held),
            ready.bytes + held.bytes,
        )
        if decision is Admission.REFUSE_DEAD_LETTER:
            self._drop(entry)
        return decision is not Admission.TAKE

    def taken_in(self) -> None:
        """An entry became ready: the queue may be overfull, or over its length limits."""
        if self._flow_control:
            ready = self._ready
            if not self.overfull and over_capacity(self._options, len(ready), ready.bytes):
                self._become_overfull(len(ready), ready.bytes)
        elif self.trims:
            self.make_room()

    def make_room(self) -> None:
        """drop-head (remove-low-priority): drop the oldest entries (of the lowest priority)
        until the queue is within its limits; an entry to drop that is still in the store is
        dropped once it has been read back."""
        ready, options = self._ready, self._options
        lowest = options.overflow is Overflow.REMOVE_LOW_PRIORITY
        while over_limit(options, len(ready), ready.bytes):
            entry = ready.pop_lowest() if lowest else ready.pop()
            if entry is None:
                self._page_in()
                return
            self._drop(entry)

    def _become_overfull(self, count: int, body_bytes: int) -> None:
        self.overfull = True
        log.warning(
            "QUE-1003 : Overfull : Size : %d bytes, Capacity : %s",
            body_bytes,
            self._options.capacity,
            extra={**self._log_fields, "messages": count},
        )

    def check_under(self, *, deleted: bool = False) -> None:
        """Entries left (or the queue was `deleted`): an overfull queue may be underfull again,
        and its held-back publishers go on."""
        ready = self._ready
        if not self.overfull or not (
            deleted or under_resume_capacity(self._options, len(ready), ready.bytes)
        ):
            return
        self.overfull = False
        if not deleted:
            log.info(
                "QUE-1004 : Underfull : Size : %d bytes, Resume Capacity : %s",
                ready.bytes,
                self._options.flow_resume_capacity,
                extra=self._log_fields,
            )
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter()

    def when_underfull(self, callback: Callable[[], None]) -> None:
        """Call `callback` once this overfull queue is underfull again (or deleted)."""
        self._waiters.append(callback)
