"""Auto-created queues (MQ 3.5 admin guide, "Auto-Created (vs. Admin-Created) Destinations" and
Table 2-10): the queues clients declare whose names match `[autocreate] pattern` get the configured
default limits, and are deleted once unused: "when it no longer has message consumer clients
and no longer contains any messages", after `delete_after` seconds of that.

In AMQP every queue is declared by a client, and RabbitMQ users expect no limits and no
deletion they did not ask for; so the policy applies only to the names its pattern matches (a
regular expression, as a RabbitMQ policy's, searched in the name; empty matches no queue). The
defaults fill in the queue arguments a declare leaves out; they are not stored with the queue
and not compared when it is declared again, so that a client that declares without them keeps
working. Exclusive queues are left alone: they go with their connection.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from pamqp.common import FieldTable

from batonmq.config import AutocreateConfig

if TYPE_CHECKING:
    from batonmq.engine.broker import Broker
    from batonmq.queues.protocol import Queue

log = logging.getLogger(__name__)

#: MQ 3.5 admin guide limitBehavior -> x-overflow.
OVERFLOW_OF: Final = {
    "FLOW_CONTROL": "flow-control",
    "REMOVE_OLDEST": "drop-head",
    "REMOVE_LOW_PRIORITY": "remove-low-priority",
    "REJECT_NEWEST": "reject-publish",
}


@dataclass(frozen=True, slots=True)
class AutocreatePolicy:
    #: None matches no queue.
    pattern: re.Pattern[str] | None = None
    #: The queue arguments the policy gives (the declare's own win).
    defaults: FieldTable = field(default_factory=dict)
    #: Seconds unused before deletion; 0 keeps the queues.
    delete_after: float = 0.0

    @classmethod
    def from_config(cls, config: AutocreateConfig) -> AutocreatePolicy:
        limits = {
            "x-max-length": config.max_messages,
            "x-max-length-bytes": config.max_bytes,
            "x-max-message-size": config.max_message_size,
            "x-max-producers": config.max_producers,
            "x-max-active-consumers": config.max_active_consumers,
        }
        defaults: FieldTable = {name: value for name, value in limits.items() if value}
        if config.max_messages or config.max_bytes:
            defaults["x-overflow"] = OVERFLOW_OF[config.limit_behavior]
        if config.max_active_consumers:
            defaults["x-max-backup-consumers"] = config.max_backup_consumers
        return cls(
            re.compile(config.pattern) if config.pattern else None,
            defaults,
            config.delete_after,
        )

    def applies_to(self, name: str) -> bool:
        return self.pattern is not None and self.pattern.search(name) is not None

    def arguments_for(self, name: str, arguments: FieldTable) -> FieldTable:
        """The arguments a queue named `name` works by: the declare's `arguments` over the
        policy's defaults, where the policy applies."""
        if not self.defaults or not self.applies_to(name):
            return arguments
        return {**self.defaults, **arguments}


def unused(queue: Queue) -> bool:
    """MQ 3.5 admin guide: "it no longer has message consumer clients and no longer contains any
    messages"."""
    return not queue.consumer_count and not queue.message_count


class IdleQueueSweep:
    """Deletes auto-created queues that stayed unused for the policy's `delete_after`; `check`
    runs periodically."""

    def __init__(
        self,
        broker: Broker,
        policy: AutocreatePolicy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.policy = policy
        self._clock = clock
        #: When each unused queue was first seen unused.
        self._unused_since: dict[Queue, float] = {}

    @property
    def interval(self) -> float:
        """How often to check: often enough that a queue goes within a quarter of its time."""
        return max(0.1, min(5.0, self.policy.delete_after / 4))

    def check(self) -> int:
        """Delete the queues unused for long enough; how many went."""
        now, policy, deleted = self._clock(), self.policy, 0
        seen: dict[Queue, float] = {}
        for vhost in self.broker.vhosts.values():
            for queue in list(vhost.queues.values()):
                if queue.exclusive or not policy.applies_to(queue.name) or not unused(queue):
                    continue
                since = self._unused_since.get(queue, now)
                if now - since < policy.delete_after:
                    seen[queue] = since
                    continue
                vhost.remove_queue(queue)
                deleted += 1
                log.info(
                    "auto-created queue deleted: no consumers and no messages for %.0f s",
                    now - since,
                    extra={"vhost": vhost.name, "queue": queue.name},
                )
        self._unused_since = seen
        return deleted
