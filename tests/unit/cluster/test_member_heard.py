"""A member says, once, when it first hears another: the fault tests (and an operator) read in
its log that the members hear each other's heartbeats, rather than guessing how long that takes.

MQ 4.1 HA guide: "Brokers within an HA cluster periodically inform each other that they are
still in operation by exchanging heartbeat packets"; a member that joins again (after a restart
or a takeover) claims a new fencing epoch and is heard anew.
"""

from __future__ import annotations

import logging

import pytest

from batonmq.cluster.member import ClusterMember
from batonmq.config.schema import ClusterConfig, Config
from batonmq.engine.broker import Broker
from batonmq.store.postgres import PostgresStore


def heard_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int]]:
    return [
        (vars(record)["peer"], vars(record)["epoch"])
        for record in caplog.records
        if record.getMessage() == "cluster member heard: its heartbeats are watched"
        and record.levelno == logging.INFO
    ]


def test_a_member_is_heard_once_per_epoch_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """The heartbeats a member's heartbeat service hears go through its failure detector: the
    first one of member B as epoch 7 logs one line, the next ones none; B listed with epoch 8
    (it joined again) is heard anew. The store is never opened: hearing does no IO."""
    config = Config(cluster=ClusterConfig(ha=True, clusterid="test", brokerid="A"))
    store = PostgresStore("postgresql://unused/none", broker_id="A", schema="batonmq_c_test")
    member = ClusterMember(config, Broker(), store)
    hear = member.heartbeats.on_heartbeat

    with caplog.at_level(logging.INFO, logger="batonmq.cluster.member"):
        member.detector.members({"B": 7}, now=0.0)
        hear("B")
        hear("B")
        hear("B")
        assert heard_lines(caplog) == [("B", 7)]
        member.detector.members({"B": 8}, now=0.0)
        hear("B")
        hear("B")

    assert heard_lines(caplog) == [("B", 7), ("B", 8)]
