"""Members of an HA cluster in tests: starting one as a broker process, and waiting on them as
the shared store records them or as their logs say."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from batonmq.store.postgres import PostgresStore
from tests.brokerproc import RunningBroker, free_port, start_broker, wait_until


def start_member(
    workdir: Path,
    postgres_dsn: str,
    broker_id: str,
    *,
    http: bool = False,
    environment: Mapping[str, str] | None = None,
) -> RunningBroker:
    """A member of cluster "test" with heartbeats every second and thresholds 2 (its data
    under workdir/broker_id), once it has joined; with `http`, its management API on;
    `environment` adds settings. Started again with the same `broker_id`, it is that member
    restarted (its log goes on in the same file: it has joined once the file says so once
    more)."""
    log_path = workdir / broker_id / "broker.log"
    joined_before = _joined(log_path.read_text(errors="replace") if log_path.exists() else "")
    broker = start_broker(
        workdir / broker_id,
        http=http,
        environment={
            "BATONMQ__PERSIST__STORE": "postgres",
            "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
            "BATONMQ__CLUSTER__HA": "true",
            "BATONMQ__CLUSTER__CLUSTERID": "test",
            "BATONMQ__CLUSTER__BROKERID": broker_id,
            "BATONMQ__CLUSTER__HEARTBEAT__PORT": str(free_port()),
            "BATONMQ__CLUSTER__HEARTBEAT__INTERVAL": "1",
            "BATONMQ__CLUSTER__HEARTBEAT__THRESHOLD": "2",
            "BATONMQ__CLUSTER__MONITOR__INTERVAL": "1",
            "BATONMQ__CLUSTER__MONITOR__THRESHOLD": "2",
            **(environment or {}),
        },
    )
    wait_until(lambda: _joined(broker.log()) > joined_before, f"{broker_id} joined")
    return broker


#: `start(broker_id)`: a member started (`start_member`), or the same one started again.
StartMember = Callable[[str], RunningBroker]


@contextlib.contextmanager
def members(workdir: Path, postgres_dsn: str, *, http: bool = False) -> Iterator[StartMember]:
    """Start members with `start_member`; every one is stopped when the block ends (in a
    fixture: before the database goes)."""
    started: list[RunningBroker] = []

    def start(broker_id: str) -> RunningBroker:
        broker = start_member(workdir, postgres_dsn, broker_id, http=http)
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.stop()


def _joined(log: str) -> int:
    return log.count("joined HA cluster")


#: A member's line saying it heard another's first heartbeat (BMQ-7023), and whose.
_HEARD = re.compile(r'msg="cluster member heard: its heartbeats are watched" .*?\bpeer=(\S+)')


def wait_heard(members: Mapping[str, RunningBroker], timeout: float = 30.0) -> None:
    """Wait until each of `members` (by broker id) has heard every other one's heartbeats
    since it last joined, as its log says."""

    def heard_all(broker_id: str, broker: RunningBroker) -> bool:
        since_joined = broker.log().rpartition("joined HA cluster")[2]
        return set(members) - {broker_id} <= set(_HEARD.findall(since_joined))

    wait_until(
        lambda: all(heard_all(*member) for member in members.items()),
        "the members heard each other",
        timeout,
    )


async def lease_run_out(store: PostgresStore, broker_id: str) -> int:
    """Wait until `broker_id`'s lease has run out on the database's clock; its epoch."""
    for _ in range(200):
        found = {m.broker_id: m for m in await store.members()}[broker_id]
        if not found.lease_live:
            return found.epoch
        await asyncio.sleep(0.02)
    raise AssertionError(f"the lease of {broker_id} never ran out")
