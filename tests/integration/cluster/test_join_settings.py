"""A broker joining an HA cluster with a heartbeat or monitor setting unlike a running member's
does not start, and says which setting (MQ 4.1 HA guide, Table 6: "Must have the same value for
all brokers in a cluster")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.brokerproc import failed_start, free_port
from tests.members import start_member

pytestmark = pytest.mark.integration


def test_a_member_with_another_heartbeat_interval_is_refused(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with start_member(tmp_path, postgres_dsn, "brokerA"):
        output = failed_start(
            tmp_path / "brokerB",
            {
                "BATONMQ__PERSIST__STORE": "postgres",
                "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
                "BATONMQ__CLUSTER__HA": "true",
                "BATONMQ__CLUSTER__CLUSTERID": "test",
                "BATONMQ__CLUSTER__BROKERID": "brokerB",
                "BATONMQ__CLUSTER__HEARTBEAT__PORT": str(free_port()),
                "BATONMQ__CLUSTER__HEARTBEAT__INTERVAL": "2",
                "BATONMQ__CLUSTER__HEARTBEAT__THRESHOLD": "2",
                "BATONMQ__CLUSTER__MONITOR__INTERVAL": "1",
                "BATONMQ__CLUSTER__MONITOR__THRESHOLD": "2",
            },
        )
    assert "cannot start: cluster.heartbeat.interval: is 2 here but 1" in output
    assert "running member brokerA" in output
    assert "Traceback" not in output
