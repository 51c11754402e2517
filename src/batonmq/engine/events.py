"""The engine's event feed: what happened to connections, channels, consumers, queues, exchanges
and alarms, told to whoever subscribed (the management API, the event exchange, a cluster
member), as the JMX notifications of the Sun MQ HA guide are.

A subscriber is called synchronously, in the order events happen, and must not block. One that
raises is logged and stays subscribed; it never breaks the engine or the other subscribers. With
no subscriber, publishing an event costs one test.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class EventKind(enum.StrEnum):
    CONNECTION_CREATED = "connection.created"
    CONNECTION_CLOSED = "connection.closed"
    CHANNEL_CREATED = "channel.created"
    CHANNEL_CLOSED = "channel.closed"
    CONSUMER_CREATED = "consumer.created"
    CONSUMER_DELETED = "consumer.deleted"
    QUEUE_CREATED = "queue.created"
    QUEUE_DELETED = "queue.deleted"
    EXCHANGE_CREATED = "exchange.created"
    EXCHANGE_DELETED = "exchange.deleted"
    ALARM_RAISED = "alarm.raised"
    ALARM_CLEARED = "alarm.cleared"
    USER_CHANGED = "user.changed"
    USER_DELETED = "user.deleted"
    VHOST_CREATED = "vhost.created"
    VHOST_DELETED = "vhost.deleted"
    #: A user's permissions in a virtual host set or cleared (RabbitMQ's event names; the
    #: event's name is the user, its vhost the virtual host).
    PERMISSION_CREATED = "permission.created"
    PERMISSION_DELETED = "permission.deleted"
    #: An HA cluster member began taking over a failed member (its id is the event's name), and
    #: finished, or failed to (MQ 4.1 HA guide: mq.broker.takeover.start, .complete, .fail).
    TAKEOVER_START = "takeover.start"
    TAKEOVER_COMPLETE = "takeover.complete"
    TAKEOVER_FAIL = "takeover.fail"


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    #: What it is about: a connection's or channel's name, a queue's, an exchange's, an alarm's.
    name: str
    #: The virtual host, for what lives in one.
    vhost: str | None = None
    details: Mapping[str, object] = field(default_factory=dict)


Subscriber = Callable[[Event], None]


class EventFeed:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber` with every event from now on; returns what unsubscribes it."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def publish(
        self, kind: EventKind, name: str, vhost: str | None = None, **details: object
    ) -> None:
        if not self._subscribers:
            return
        event = Event(kind, name, vhost, details)
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception(
                    "event subscriber failed", extra={"event": str(kind), "subject": name}
                )
