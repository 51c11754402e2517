"""Threshold alerts (Qpid manual, virtualhosts.xml: "Set threshold values for queue monitor
alerting to log": maximumQueueDepth, maximumMessageSize, maximumMessageAge, and Qpid's
maximumMessageCount): a warning line in the log when a queue goes over one.

Every `alerts.interval` seconds each queue is read (`read_queue`: depth in bytes, message count,
oldest message's age, head message's size) and compared with the thresholds; the lines are
Qpid's (AMQQueueMBean: "MESSAGE_COUNT_ALERT On Queue q - 101: Maximum count on queue threshold
(100) breached."), with the unit and the setting named. As in Qpid, whose monitor logs an alert
again only after ``minimumAlertRepeatGap`` (30 s), an alert is not repeated at every check while
the queue stays over: it is logged when the queue crosses the threshold (it was under, or
unchecked, at the previous check), and again only once `alerts.repeat_gap` seconds have passed
since its last line. Message size is checked on the head message at each interval and, where
the publish path calls `QueueAlerts.message_arrived`, on each arriving message.

`alerts_for` and `AlertRepeats` decide; `QueueAlerts` reads the queues and logs.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from batonmq.config import AlertsConfig
from batonmq.engine.vhost import VirtualHost
from batonmq.queues.arrivals import QueueAges
from batonmq.queues.protocol import Queue, RoutedQueue
from batonmq.queues.readings import QueueReading, read_queue
from batonmq.timers import Timers

log = logging.getLogger(__name__)


class AlertKind(enum.Enum):
    """Qpid's notification names, with the description and unit of what each measures."""

    QUEUE_DEPTH_ALERT = ("Maximum queue depth threshold", " bytes", "alerts.max_queue_depth")
    MESSAGE_SIZE_ALERT = ("Maximum message size threshold", " bytes", "alerts.max_message_size")
    MESSAGE_AGE_ALERT = ("Maximum age on queue threshold", " ms", "alerts.max_message_age")
    MESSAGE_COUNT_ALERT = ("Maximum count on queue threshold", "", "alerts.max_message_count")

    def __init__(self, description: str, unit: str, setting: str) -> None:
        self.description = description
        self.unit = unit
        self.setting = setting


@dataclass(frozen=True, slots=True)
class Alert:
    kind: AlertKind
    value: int
    limit: int

    def text(self, queue: str) -> str:
        kind = self.kind
        return (
            f"{kind.name} On Queue {queue} - {self.value}{kind.unit}: {kind.description} "
            f"({self.limit}{kind.unit}, {kind.setting}) breached."
        )


def alerts_for(reading: QueueReading, config: AlertsConfig) -> list[Alert]:
    """The thresholds `reading` is over (each "over" is greater than; 0 is not checked)."""
    head_size = reading.head_size or 0
    return [
        Alert(kind, value, limit)
        for kind, limit, value in (
            (AlertKind.QUEUE_DEPTH_ALERT, config.max_queue_depth, reading.depth),
            (AlertKind.MESSAGE_SIZE_ALERT, config.max_message_size, head_size),
            (AlertKind.MESSAGE_AGE_ALERT, config.max_message_age, reading.oldest_age_ms),
            (AlertKind.MESSAGE_COUNT_ALERT, config.max_message_count, reading.count),
        )
        if limit and value > limit
    ]


class AlertRepeats:
    """Which alerts to log now: those that are new (the subject was not over at the previous
    check) and those last logged at least `repeat_gap_ms` ago. `subject` is anything hashable
    (the monitor uses the queue)."""

    def __init__(self, repeat_gap_ms: int) -> None:
        self._repeat_gap_ms = repeat_gap_ms
        #: When each alert that holds was last logged, by subject and kind.
        self._logged: dict[object, dict[AlertKind, int]] = {}

    def checked(self, subject: object, alerts: list[Alert], now_ms: int) -> list[Alert]:
        """`subject` was checked and is over `alerts` (and no others): the ones to log."""
        before = self._logged.get(subject, {})
        now_logged: dict[AlertKind, int] = {}
        due = []
        for alert in alerts:
            last = before.get(alert.kind)
            if last is None or now_ms - last >= self._repeat_gap_ms:
                due.append(alert)
                last = now_ms
            now_logged[alert.kind] = last
        if now_logged:
            self._logged[subject] = now_logged
        else:
            self._logged.pop(subject, None)
        return due

    def event(self, subject: object, alert: Alert, now_ms: int) -> bool:
        """One event over a threshold (a message too large, on arrival): whether to log it (none
        of its kind was logged for `subject` within the repeat gap)."""
        logged = self._logged.setdefault(subject, {})
        last = logged.get(alert.kind)
        if last is not None and now_ms - last < self._repeat_gap_ms:
            return False
        logged[alert.kind] = now_ms
        return True

    def keep_only(self, subjects: Iterable[object]) -> None:
        """Forget every subject but `subjects` (the queues that still exist)."""
        present = set(subjects)
        for subject in [subject for subject in self._logged if subject not in present]:
            del self._logged[subject]


class QueueAlerts:
    """The threshold monitor of a broker's queues: `check` every `config.interval`."""

    def __init__(
        self,
        vhosts: Mapping[str, VirtualHost],
        config: AlertsConfig,
        ages: QueueAges | None,
        timers: Timers,
    ) -> None:
        """`ages` tracks the queues' oldest messages; None when `config.max_message_age` is 0."""
        self._vhosts = vhosts
        self._config = config
        self._ages = ages
        self._timers = timers
        self._repeats = AlertRepeats(round(config.repeat_gap * 1000))

    def check(self) -> list[tuple[Queue, Alert]]:
        """Check every queue and log the alerts due; those alerts."""
        now = self._timers.now_ms()
        logged: list[tuple[Queue, Alert]] = []
        seen: list[Queue] = []
        for vhost in list(self._vhosts.values()):
            for queue in list(vhost.queues.values()):
                seen.append(queue)
                alerts = alerts_for(read_queue(queue, self._ages), self._config)
                for alert in self._repeats.checked(queue, alerts, now):
                    self._log(vhost.name, queue, alert)
                    logged.append((queue, alert))
        self._repeats.keep_only(seen)
        return logged

    def message_arrived(self, vhost: str, queue: RoutedQueue, body_size: int) -> None:
        """A message of `body_size` bytes was enqueued on `queue` (maximumMessageSize, checked
        per message: the caller calls this only when `config.max_message_size` is set and the
        message is larger)."""
        limit = self._config.max_message_size
        if not limit or body_size <= limit:
            return
        alert = Alert(AlertKind.MESSAGE_SIZE_ALERT, body_size, limit)
        if self._repeats.event(queue, alert, self._timers.now_ms()):
            self._log(vhost, queue, alert)

    @staticmethod
    def _log(vhost: str, queue: RoutedQueue, alert: Alert) -> None:
        log.warning(
            alert.text(queue.name),
            extra={
                "vhost": vhost,
                "queue": queue.name,
                "alert": alert.kind.name,
                "threshold": alert.kind.setting,
                "limit": alert.limit,
                "value": alert.value,
            },
        )
