"""Slow consumer disconnect (Qpid manual §2.11, §1.5.2): "a configurable mechanism to prevent a
single slow consumer from causing a back up of unconsumed messages on the broker".

The seed's "topic subscription" is, in AMQP, a queue bound to a topic (or fanout) exchange; its
"topic name" is the binding key, compared as a plain string (§1.5.2.3: "limited to straight
string matching"), and its "subscriptionName" is the queue's name. Every `slow_consumer.delay`
seconds each such queue that has consumers is checked against the thresholds (§2.11.5.3-5: the
oldest message's age, the depth in bytes, the message count, each "greater than" its setting);
on a breach the policy is applied (§2.11.5.6, Qpid's TopicDeletePolicy):

- every connection consuming from the queue is closed with 506 RESOURCE_ERROR ("the offending
  client will be disconnected from the broker with a 506 error code"), its text starting with
  the seed's "Consuming to slow" and saying which threshold the queue went over; where the
  connection is another worker's (a spread virtual host), that worker closes it, told as its
  consumer is cancelled here (`batonmq.engine.linkedconsumers`);
- a temporary queue (exclusive, or auto-delete) goes with its consumers' connections as AMQP
  has it; with `delete_persistent` (<topicDelete><delete-persistent/>) any other subscription
  queue, a durable subscription's, is deleted too, so that its backlog stops growing.

A queue with no consumer is not checked: there is nobody to disconnect (Qpid acts on the queue's
owning session, and does nothing without one).

The decisions (`breach`, `subscription_keys`, `slow_subscriptions`) are pure and return what
should happen; `SlowConsumerDetector` does it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.cluster.consumerecords import OverThreshold
from batonmq.config import SlowConsumerConfig
from batonmq.engine.consumer import Consumer, cancel_consumers_of
from batonmq.engine.linkedconsumers import LinkedConsumer
from batonmq.engine.session import Session
from batonmq.engine.vhost import VirtualHost
from batonmq.model.destination import DestinationKind
from batonmq.queues.arrivals import QueueAges
from batonmq.queues.protocol import Queue
from batonmq.queues.readings import QueueReading, read_queue

log = logging.getLogger(__name__)

#: Qpid manual §2.11.3.2: the operational log line for each queue checked.
CHECKING_STATUS: Final = "SCD-1003 : Checking Status of Queue"
#: The client's error text begins with the seed's (§2.11.4: "Error: Consuming to slow.").
CONSUMING_TOO_SLOW: Final = "Consuming to slow"
#: The exchange types whose queues are subscriptions (§2.11.2: "only applicable to topics").
SUBSCRIPTION_EXCHANGE_TYPES: Final = frozenset({"topic", "fanout"})


@dataclass(frozen=True, slots=True)
class Breach:
    """A threshold a queue went over: the setting, its limit, the queue's value."""

    setting: str
    limit: int
    value: int

    def describe(self, queue: str) -> str:
        """E.g. "queue 'q' holds 5000 bytes, over slow_consumer.depth (4096)"."""
        if self.setting.endswith(".depth"):
            held = f"holds {self.value} bytes"
        elif self.setting.endswith(".message_count"):
            held = f"holds {self.value} messages"
        else:
            held = f"has held its oldest message for {self.value} ms"
        return f"queue '{queue}' {held}, over {self.setting} ({self.limit})"

    def reason(self, queue: str) -> str:
        """The reply text of the connection.close its slow consumers get."""
        return f"{CONSUMING_TOO_SLOW}: {self.describe(queue)}"


def breach(reading: QueueReading, config: SlowConsumerConfig) -> Breach | None:
    """The first threshold (in the seed's order: depth, message age, message count) that
    `reading` is over; None when it is over none. A threshold of 0 is not checked."""
    for setting, limit, value in (
        ("slow_consumer.depth", config.depth, reading.depth),
        ("slow_consumer.message_age", config.message_age, reading.oldest_age_ms),
        ("slow_consumer.message_count", config.message_count, reading.count),
    ):
        if limit and value > limit:
            return Breach(setting, limit, value)
    return None


def subscription_keys(vhost: VirtualHost) -> dict[str, set[str]]:
    """The queues of `vhost` that are subscriptions (bound to a topic or fanout exchange), with
    the binding keys ("topic names") they are bound with."""
    keys: defaultdict[str, set[str]] = defaultdict(set)
    for exchange in vhost.exchanges.values():
        if exchange.type_name not in SUBSCRIPTION_EXCHANGE_TYPES:
            continue
        for destination, routing_key, _arguments in exchange.router.bindings():
            if destination.kind is DestinationKind.QUEUE:
                keys[destination.name].add(routing_key)
    return keys


def is_temporary(queue: Queue) -> bool:
    """A queue that goes when its consumers' connections do (§2.11.5.6 "temporary queues")."""
    return queue.exclusive or queue.auto_delete


@dataclass(frozen=True, slots=True)
class Disconnect:
    """What to do about one slow subscription: close its consumers' connections, and delete it
    when `delete_queue`."""

    queue: Queue
    breach: Breach
    delete_queue: bool


def slow_subscriptions(
    readings: Mapping[Queue, QueueReading], config: SlowConsumerConfig
) -> list[Disconnect]:
    """The subscription queues whose consumers are slow, by their `readings`."""
    disconnects = []
    for queue, reading in readings.items():
        over = breach(reading, config)
        if over is not None:
            delete = config.delete_persistent and not is_temporary(queue)
            disconnects.append(Disconnect(queue, over, delete))
    return disconnects


def watched(
    queues: Iterable[Queue], keys: Mapping[str, set[str]], topics: frozenset[str]
) -> list[Queue]:
    """The subscription queues to check: those with consumers, bound with a key among `topics`
    (with any key when `topics` is empty)."""
    return [
        queue
        for queue in queues
        if queue.consumers
        and queue.name in keys
        and (not topics or not topics.isdisjoint(keys[queue.name]))
    ]


def disconnect_slow(session: Session, queue: str, breach: Breach) -> None:
    """Close the connection of `session`, a consumer of `queue`, slow by `breach`, with 506
    RESOURCE_ERROR (§2.11.2: "the offending client will be disconnected from the broker with a
    506 error code"), and log it: here, or on the worker that holds the connection of a
    consumer of a queue another worker runs (`batonmq.engine.remoteconsumers`)."""
    log.warning(
        "slow consumer disconnected: %s",
        breach.describe(queue),
        extra={
            **session.log_fields(),
            "queue": queue,
            "threshold": breach.setting,
            "limit": breach.limit,
            "value": breach.value,
        },
    )
    session.close(HardError(ReplyCode.RESOURCE_ERROR, breach.reason(queue)))


class SlowConsumerDetector:
    """Runs the check over every virtual host of a broker (`check`, every `config.delay`)."""

    def __init__(
        self,
        vhosts: Mapping[str, VirtualHost],
        config: SlowConsumerConfig,
        ages: QueueAges | None,
    ) -> None:
        """`ages` tracks the queues' oldest messages; None when `config.message_age` is 0."""
        self._vhosts = vhosts
        self._config = config
        self._topics = frozenset(config.topics.split())
        self._ages = ages

    def check(self) -> list[Disconnect]:
        """Check every subscription queue and disconnect the slow consumers; what was done."""
        done: list[Disconnect] = []
        for vhost in list(self._vhosts.values()):
            keys = subscription_keys(vhost)
            queues = watched(list(vhost.queues.values()), keys, self._topics)
            readings = {}
            for queue in queues:
                log.debug(CHECKING_STATUS, extra={"vhost": vhost.name, "queue": queue.name})
                readings[queue] = read_queue(queue, self._ages)
            for disconnect in slow_subscriptions(readings, self._config):
                self._apply(vhost, disconnect)
                done.append(disconnect)
        return done

    def _apply(self, vhost: VirtualHost, disconnect: Disconnect) -> None:
        queue = disconnect.queue
        sessions: dict[Session, None] = {}
        linked: list[LinkedConsumer] = []
        for consumer in queue.consumers:
            if isinstance(consumer, LinkedConsumer):
                linked.append(consumer)
            else:
                assert isinstance(consumer, Consumer)
                if not consumer.channel.session.ended:
                    sessions[consumer.channel.session] = None
        over = disconnect.breach
        for linked_consumer in linked:
            # Its connection is another worker's (a spread virtual host): that worker closes it
            # (`disconnect_slow`), told as the consumer is cancelled here.
            linked_consumer.cancel(OverThreshold(over.setting, over.limit, over.value))
        for session in sessions:
            disconnect_slow(session, queue.name, over)
        if disconnect.delete_queue and not queue.deleted:
            vhost.remove_queue(queue, on_delete=cancel_consumers_of)
            log.warning(
                "slow consumer's subscription queue deleted (slow_consumer.delete_persistent)",
                extra={"vhost": vhost.name, "queue": queue.name},
            )
