"""Auto-created queues (MQ 3.5 admin guide Table 2-10 and "Auto-Created (vs. Admin-Created)
Destinations"): the default limits a policy gives the queues it matches, and their deletion
once unused."""

from __future__ import annotations

import logging

import pytest
from pamqp import commands

from batonmq.config import AutocreateConfig
from batonmq.engine.autocreate import AutocreatePolicy, IdleQueueSweep
from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.queues.arguments import Overflow
from tests.memclient import connect

Basic = commands.Basic
Queue = commands.Queue


def seed_defaults(pattern: str = r"^auto\.", delete_after: float = 120.0) -> AutocreatePolicy:
    """Table 2-10's defaults: 100,000 messages, 10 MB, REJECT_NEWEST, 10 KiB per message, 100
    producers, 1 active consumer and no backup."""
    return AutocreatePolicy.from_config(
        AutocreateConfig(
            pattern=pattern,
            max_messages=100_000,
            max_bytes=10 * 1024 * 1024,
            limit_behavior="REJECT_NEWEST",
            max_message_size=10_240,
            max_producers=100,
            max_active_consumers=1,
            max_backup_consumers=0,
            delete_after=delete_after,
        )
    )


def test_the_seed_table_maps_onto_queue_arguments() -> None:
    assert seed_defaults().defaults == {
        "x-max-length": 100_000,
        "x-max-length-bytes": 10 * 1024 * 1024,
        "x-overflow": "reject-publish",
        "x-max-message-size": 10_240,
        "x-max-producers": 100,
        "x-max-active-consumers": 1,
        "x-max-backup-consumers": 0,
    }
    # The default configuration matches no queue and gives nothing.
    assert AutocreatePolicy.from_config(AutocreateConfig()) == AutocreatePolicy(None, {}, 120.0)


def test_a_matching_queue_gets_the_defaults_under_its_own_arguments() -> None:
    broker = Broker(BrokerSettings(autocreate=seed_defaults()))
    client, _ = connect(broker)
    client.call(
        1, Queue.Declare(queue="auto.orders", arguments={"x-max-length": 5}), Queue.DeclareOk
    )
    client.call(1, Queue.Declare(queue="orders"), Queue.DeclareOk)

    queues = broker.vhosts["/"].queues
    options = queues["auto.orders"].options
    assert (options.max_length, options.overflow, options.max_message_size) == (
        5,
        Overflow.REJECT_PUBLISH,
        10_240,
    )
    assert queues["auto.orders"].arguments == {"x-max-length": 5}  # the defaults are not stored
    assert queues["orders"].options.max_length is None
    # Declared again as before: equivalent, since the defaults are not the client's.
    client.call(
        1, Queue.Declare(queue="auto.orders", arguments={"x-max-length": 5}), Queue.DeclareOk
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_unused_auto_created_queue_is_deleted_after_its_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MQ 3.5 admin guide: "an auto-created destination is automatically destroyed by the broker
    when it is no longer being used: that is, when it no longer has message consumer clients and no
    longer contains any messages"; the issue: "after ... a configurable time (default 2
    minutes)"."""
    policy = seed_defaults()
    broker = Broker(BrokerSettings(autocreate=policy))
    clock = Clock()
    sweep = IdleQueueSweep(broker, policy, clock)
    client, _ = connect(broker, channels=(1, 2))
    for name in ("auto.idle", "auto.consumed", "auto.holding", "kept"):
        client.call(1, Queue.Declare(queue=name), Queue.DeclareOk)
    client.consume(2, "auto.consumed", "c")
    client.publish(1, b"waiting", routing_key="auto.holding")
    assert sweep.interval == 5.0

    assert sweep.check() == 0
    clock.now += 119
    assert sweep.check() == 0
    clock.now += 1
    with caplog.at_level(logging.INFO, logger="batonmq.engine.autocreate"):
        assert sweep.check() == 1

    queues = broker.vhosts["/"].queues
    assert sorted(queues) == ["auto.consumed", "auto.holding", "kept"]
    assert "auto-created queue deleted: no consumers and no messages for 120 s" in caplog.messages
    # In use again before its time is up: the countdown starts over.
    assert client.get(1, "auto.holding", no_ack=True) is not None
    clock.now += 60
    assert sweep.check() == 0
    client.publish(1, b"again", routing_key="auto.holding")
    clock.now += 60
    assert sweep.check() == 0
    assert client.get(1, "auto.holding", no_ack=True) is not None
    assert sweep.check() == 0  # unused from this check on
    clock.now += 119
    assert sweep.check() == 0
    clock.now += 1
    assert sweep.check() == 1
    assert "auto.holding" not in queues
