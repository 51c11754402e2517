"""Disk quota-based flow control (Qpid manual §1.5.1.2.2) and the free-disk alarm: the decisions,
without IO, then `DiskGuard` acting on a real engine with an in-memory client."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pamqp import commands

from batonmq.config import DiskConfig
from batonmq.engine.broker import Broker
from batonmq.engine.diskguard import (
    FREE_DISK_ALARM,
    STORE_OVERFULL,
    STORE_OVERFULL_CLEARED,
    STORE_QUOTA_ALARM,
    DiskGuard,
    disk_low,
    free_disk_reason,
    quota_reason,
    store_overfull,
)
from tests.memclient import connect

QUOTA = DiskConfig(store_overfull=1000, store_underfull=800, free_limit=0)


# The decisions -----------------------------------------------------------------------------


def test_producers_are_held_over_the_overfull_limit_only():
    """ "overfull limit - the maximum space on disk (in bytes) which can be used by store":
    using exactly that much is allowed, one byte more is not."""
    assert not store_overfull(999, QUOTA, blocked=False)
    assert not store_overfull(1000, QUOTA, blocked=False)
    assert store_overfull(1001, QUOTA, blocked=False)


def test_held_producers_stay_held_until_the_store_drops_below_the_underfull_limit():
    """ "underfull limit - when the space on disk drops below this limit, producers are allowed
    to resume publishing": between the two limits, held producers stay held."""
    assert store_overfull(1001, QUOTA, blocked=True)
    assert store_overfull(900, QUOTA, blocked=True)
    assert store_overfull(800, QUOTA, blocked=True)
    assert not store_overfull(799, QUOTA, blocked=True)


def test_no_underfull_limit_releases_below_the_overfull_one():
    config = DiskConfig(store_overfull=1000, store_underfull=0)
    assert store_overfull(1000, config, blocked=True)
    assert not store_overfull(999, config, blocked=True)


def test_no_quota_holds_nobody():
    config = DiskConfig(store_overfull=0)
    assert not store_overfull(10**15, config, blocked=False)
    assert not store_overfull(10**15, config, blocked=True)


def test_free_disk_below_the_limit_holds_producers_and_no_limit_never_does():
    """RabbitMQ's disk_free_limit: an alarm below the limit, none at or above it."""
    config = DiskConfig(free_limit=50_000_000)
    assert disk_low(49_999_999, config)
    assert not disk_low(50_000_000, config)
    assert not disk_low(0, DiskConfig(free_limit=0))


def test_the_reasons_say_what_is_low_and_which_setting_limits_it():
    assert quota_reason(1001, QUOTA) == (
        "store overfull: 1001 bytes used, over disk.store_overfull (1000)"
    )
    assert free_disk_reason(10, DiskConfig(free_limit=50)) == (
        "low on free disk space: 10 bytes free, below disk.free_limit (50)"
    )


# DiskGuard on an engine --------------------------------------------------------------------


def test_the_quota_alarm_blocks_and_releases_clients_and_logs_mst_1008_and_1009(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
):
    """Qpid manual §1.5.1.2.2.1: "MST-1008 : Store overfull, flow control will be enforced" when
    producers are blocked, "MST-1009 : Store overfull condition cleared" when they are not."""
    broker = Broker()
    client, _session = connect(broker, capabilities={"connection.blocked": True})
    guard = DiskGuard(broker, QUOTA, tmp_path)
    caplog.set_level(logging.INFO, logger="batonmq.engine.diskguard")

    guard.apply_store_usage(1000)
    assert broker.alarms == {}
    client.expect_nothing()

    guard.apply_store_usage(1500)
    assert broker.alarms == {STORE_QUOTA_ALARM: quota_reason(1500, QUOTA)}
    blocked = client.expect(commands.Connection.Blocked, channel=0)
    assert blocked.reason == quota_reason(1500, QUOTA)
    [overfull] = [record for record in caplog.records if record.getMessage() == STORE_OVERFULL]
    assert overfull.levelno == logging.WARNING
    fields = ("used_bytes", "store_overfull", "store_underfull")
    assert [getattr(overfull, name) for name in fields] == [1500, 1000, 800]

    guard.apply_store_usage(900)  # between the limits: still held, nothing logged
    guard.apply_store_usage(2000)
    client.expect_nothing()
    assert STORE_QUOTA_ALARM in broker.alarms

    guard.apply_store_usage(799)
    assert broker.alarms == {}
    client.expect(commands.Connection.Unblocked, channel=0)
    messages = [record.getMessage() for record in caplog.records]
    assert messages.count(STORE_OVERFULL) == 1
    assert messages.count(STORE_OVERFULL_CLEARED) == 1


def test_the_free_disk_and_quota_alarms_clear_each_on_its_own(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
):
    """A producer is held while either alarm is raised: clearing one leaves the other."""
    config = DiskConfig(store_overfull=1000, free_limit=5000)
    broker = Broker()
    client, _session = connect(broker, capabilities={"connection.blocked": True})
    guard = DiskGuard(broker, config, tmp_path)
    caplog.set_level(logging.INFO, logger="batonmq.engine.diskguard")

    guard.apply_free_space(4999)
    client.expect(commands.Connection.Blocked, channel=0)
    assert FREE_DISK_ALARM in broker.alarms
    assert "free disk space alarm set: 4999 bytes free, below disk.free_limit 5000" in [
        record.getMessage() for record in caplog.records
    ]
    guard.apply_store_usage(1001)
    assert set(broker.alarms) == {FREE_DISK_ALARM, STORE_QUOTA_ALARM}

    guard.apply_free_space(5000)
    assert set(broker.alarms) == {STORE_QUOTA_ALARM}
    client.expect_nothing()  # still held by the quota
    assert "free disk space alarm cleared" in [record.getMessage() for record in caplog.records]

    guard.apply_store_usage(10)
    client.expect(commands.Connection.Unblocked, channel=0)
    assert broker.alarms == {}


def test_a_client_connecting_during_an_alarm_is_blocked_at_once(tmp_path: Path):
    broker = Broker()
    DiskGuard(broker, DiskConfig(free_limit=5000), tmp_path).apply_free_space(0)
    client, _session = connect(broker, channels=(), capabilities={"connection.blocked": True})
    blocked = client.expect(commands.Connection.Blocked, channel=0)
    assert blocked.reason == free_disk_reason(0, DiskConfig(free_limit=5000))
