"""MQ 4.1 HA guide, Table 6: the heartbeat and monitor settings "Must have the same value for
all brokers in a cluster": a broker joining is refused, naming the setting, when one of its own
differs from a running member's."""

from __future__ import annotations

import json

from batonmq.cluster.agreement import disagreement, shared_settings
from batonmq.config.cluster import ClusterConfig, HeartbeatConfig
from batonmq.config.schema import Config
from batonmq.config.storage import PersistConfig, PostgresConfig
from batonmq.store.members import Member

MINE = shared_settings(Config())


def member(broker_id: str, *, live: bool = True, **settings: object) -> Member:
    recorded = json.dumps({**MINE, **{k.replace("_", "."): v for k, v in settings.items()}})
    return Member(broker_id, "running", None, None, None, 1, None, None, 0.0, live, False, recorded)


def test_the_shared_settings_are_the_heartbeat_monitor_and_durability_ones():
    """Qpid broker manual, HA configuration: durability and coalescingSync — "It is important
    that all nodes use the same value for this property"."""
    config = Config(
        cluster=ClusterConfig(heartbeat=HeartbeatConfig(interval=5)),
        persist=PersistConfig(postgres=PostgresConfig(durability="NO_SYNC,SYNC,ALL")),
    )
    assert shared_settings(config) == {
        "cluster.heartbeat.interval": 5,
        "cluster.heartbeat.threshold": 3,
        "cluster.monitor.interval": 30,
        "cluster.monitor.threshold": 2,
        "persist.postgres.durability": "NO_SYNC,SYNC,ALL",
        "persist.postgres.coalescing_sync": True,
    }


def test_a_running_member_with_another_value_refuses_the_join_naming_the_setting():
    refused = disagreement(MINE, [member("A"), member("B", cluster_monitor_threshold=4)], "C")
    assert refused is not None
    assert refused.key == "cluster.monitor.threshold"
    assert "is 2 here but 4 on the running member B" in str(refused)


def test_a_running_member_with_another_durability_policy_refuses_the_join():
    refused = disagreement(MINE, [member("B", persist_postgres_durability="NO_SYNC,SYNC,ALL")], "C")
    assert refused is not None
    assert refused.key == "persist.postgres.durability"
    assert "is '' here but 'NO_SYNC,SYNC,ALL' on the running member B" in str(refused)


def test_members_that_agree_stopped_ones_and_this_broker_itself_do_not():
    members = [
        member("A"),
        member("B", live=False, cluster_heartbeat_interval=9),
        member("C", cluster_heartbeat_interval=9),
    ]
    assert disagreement(MINE, members, "C") is None


def test_a_member_without_recorded_settings_is_not_compared():
    unregistered = Member("A", "running", None, None, None, 1, None, None, 0.0, True, False, None)
    garbled = Member("B", "running", None, None, None, 1, None, None, 0.0, True, False, "{oops")
    assert disagreement(MINE, [unregistered, garbled], "C") is None
