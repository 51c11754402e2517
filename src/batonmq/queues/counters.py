"""A queue's message counters (RabbitMQ's queue `message_stats`), declared once with the
statistics registry's `counter` (see batonmq.stats) and registered by `batonmq.engine.counters`.

The queue carries them; the engine counts into them where it routes, delivers and settles, each
a plain attribute increment. RabbitMQ's names: `deliver` and `get` are those that must be
acknowledged, `deliver_no_ack` and `get_no_ack` those sent with no-ack; its `deliver_get` (all
four together) is a sum, computed when read.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Final

from batonmq.stats import counter


@dataclass(slots=True)
class QueueCounters:
    publish: int = counter("messages", "Messages routed to the queue")
    deliver: int = counter("messages", "Messages delivered to consumers that acknowledge")
    deliver_no_ack: int = counter("messages", "Messages delivered to no-ack consumers")
    get: int = counter("messages", "Messages fetched with basic.get that must be acknowledged")
    get_no_ack: int = counter("messages", "Messages fetched with basic.get no-ack")
    ack: int = counter("messages", "Deliveries acknowledged")
    redeliver: int = counter("messages", "Deliveries and gets that carried the redelivered flag")

    def copy(self) -> QueueCounters:
        """The counts as they are now (a snapshot's; dataclasses.replace is ten times slower,
        and the API copies every queue's counters for a list of 10,000)."""
        return QueueCounters(*_COUNTS(self))


_COUNTS: Final = operator.attrgetter(*(item.name for item in dataclasses.fields(QueueCounters)))
