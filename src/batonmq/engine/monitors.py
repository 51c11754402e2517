"""The periodic queue monitors a broker runs under overload (the Overload requirements): slow
consumer disconnect (`slowconsumers`), threshold alerts (`alerts`), and the checkpoints of queue
arrivals that both read the oldest message's age from (`batonmq.queues.arrivals`), each only when
configured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from batonmq.config import Config
from batonmq.engine.alerts import QueueAlerts
from batonmq.engine.broker import Broker
from batonmq.engine.slowconsumers import SlowConsumerDetector
from batonmq.queues.arrivals import QueueAges
from batonmq.timers import LoopTimers, Timers

#: Seconds between checkpoints of the queues' arrivals: the oldest message's age is known to
#: within this (or within the monitors' own interval, when shorter).
CHECKPOINT_INTERVAL: Final = 1.0

#: Seconds between runs, and what to run.
Periodic = tuple[float, Callable[[], None]]


def queue_monitors(broker: Broker, config: Config, timers: Timers | None = None) -> list[Periodic]:
    """The periodic work for `config`'s [slow_consumer] and [alerts] settings (none when both
    are off), to run with `BrokerServer.every`."""
    timers = timers or LoopTimers()
    slow, alerting = config.slow_consumer, config.alerts
    scd_on = slow.enabled and bool(slow.depth or slow.message_age or slow.message_count)
    alerts_on = bool(
        alerting.max_queue_depth
        or alerting.max_message_size
        or alerting.max_message_age
        or alerting.max_message_count
    )
    periodic: list[Periodic] = []
    intervals = [CHECKPOINT_INTERVAL]
    ages = QueueAges(timers)
    if scd_on:
        detector = SlowConsumerDetector(broker.vhosts, slow, ages if slow.message_age else None)

        def check_slow_consumers() -> None:
            detector.check()

        periodic.append((slow.delay, check_slow_consumers))
        intervals.append(slow.delay)
    if alerts_on:
        monitor = QueueAlerts(
            broker.vhosts, alerting, ages if alerting.max_message_age else None, timers
        )

        def check_queue_alerts() -> None:
            monitor.check()

        periodic.append((alerting.interval, check_queue_alerts))
        if alerting.max_message_size:
            # maximumMessageSize is checked per message too, as it is enqueued.
            broker.large_message_size = alerting.max_message_size
            broker.large_message = monitor.message_arrived
        intervals.append(alerting.interval)
    if (scd_on and slow.message_age) or (alerts_on and alerting.max_message_age):

        def checkpoint_arrivals() -> None:
            ages.checkpoint(
                queue for vhost in list(broker.vhosts.values()) for queue in vhost.queues.values()
            )

        periodic.insert(0, (min(intervals), checkpoint_arrivals))
    return periodic
