"""Which periodic queue monitors a configuration asks for (`queue_monitors`): none by default,
so that a broker with [slow_consumer] and [alerts] untouched pays nothing for them."""

from __future__ import annotations

from batonmq.config import AlertsConfig, Config, SlowConsumerConfig
from batonmq.engine.broker import Broker
from batonmq.engine.monitors import CHECKPOINT_INTERVAL, queue_monitors
from tests.manualtimers import ManualTimers


def names(config: Config) -> list[tuple[float, str]]:
    return [
        (interval, work.__name__)
        for interval, work in queue_monitors(Broker(), config, ManualTimers())
    ]


def test_nothing_runs_by_default() -> None:
    assert names(Config()) == []
    # Enabled without a threshold: nothing to check either.
    assert names(Config(slow_consumer=SlowConsumerConfig(enabled=True))) == []
    # A threshold without `enabled`: off, as the seed's slow-consumer-detection element.
    assert names(Config(slow_consumer=SlowConsumerConfig(message_count=5))) == []


def test_checks_run_at_their_intervals() -> None:
    config = Config(
        slow_consumer=SlowConsumerConfig(enabled=True, delay=60.0, depth=4235264),
        alerts=AlertsConfig(max_message_count=50, interval=30.0),
    )

    assert names(config) == [(60.0, "check_slow_consumers"), (30.0, "check_queue_alerts")]


def test_arrivals_are_checkpointed_only_for_an_age_threshold() -> None:
    config = Config(
        slow_consumer=SlowConsumerConfig(enabled=True, delay=0.5, message_age=600000),
    )

    assert names(config) == [(0.5, "checkpoint_arrivals"), (0.5, "check_slow_consumers")]
    assert names(Config(alerts=AlertsConfig(max_message_age=600000))) == [
        (CHECKPOINT_INTERVAL, "checkpoint_arrivals"),
        (30.0, "check_queue_alerts"),
    ]
