"""The loss checker (tests/losscheck.py) run against an HA cluster: two members sharing one
PostgreSQL store, clients that publish numbered persistent messages with confirms and consume
them with manual acks, reconnecting through a list of both members tried in order (the README's
failover pattern), each member reached through a TCP fault proxy (tests/faultproxy.py), and a
nemesis that does, in turn:

- SIGKILL the member the clients use: the survivor takes the killed member over, the clients
  fail over to it;
- cut the clients' connections to their member in the middle of a stream, through its proxy:
  they reconnect, to it again;
- SIGSTOP the clients' member past its lease: the other takes it over; SIGCONT: the paused
  member finds its epoch superseded, writes nothing more and exits, and the clients fail over;
- restart PostgreSQL under both members: their writes fail while it is down (publishes are
  nacked or not confirmed, never confirmed and lost), and nobody is taken over, since the
  members still hear each other's heartbeats.

After a SIGKILL or SIGSTOP the member taken down is started again and rejoins as a fresh member.

The HA issue's checker: "Lost must be 0 and unexpected 0; duplicates are allowed only as
redeliveries flagged `redelivered`". MQ 4.1 HA guide: "When a broker fails, another broker in
the cluster takes over its persistent data"; a paused broker taken over "can write nothing".
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from batonmq.server.app import EXIT_FENCED
from tests.brokerproc import RunningBroker, wait_until
from tests.faultproxy import Cut, FaultProxy, Forward
from tests.losscheck import Workload, analyse, check
from tests.members import start_member
from tests.pgthrowaway import ThrowawayServer

pytestmark = pytest.mark.integration

#: Seconds of faults: a takeover takes 4-10 s (thresholds 2 at 1 s intervals, and a restart), a
#: cut about 1 s, a restart of PostgreSQL about 2 s, so each kind runs at least once; on a slow
#: machine the nemesis goes on past it until each has. About 45 s a run.
DURATION = 24.0
#: Seconds the proxy keeps cutting the connections it carries (new ones included).
CUT_FOR = 1.0


class Cluster:
    """Members A and B, each behind a fault proxy; `order` is the list of hosts the clients
    try, the member they use first: after a takeover the survivor leads it, and the restarted
    member follows."""

    #: The faults `next_fault` does in turn, as each names itself.
    KINDS = ("SIGKILL", "cut", "SIGSTOP", "PostgreSQL restart")

    def __init__(self, workdir: Path, server: ThrowawayServer, seed: int) -> None:
        self.workdir, self.server = workdir, server
        self.chance = random.Random(seed)
        self.members: dict[str, RunningBroker] = {}
        self.proxies: dict[str, FaultProxy] = {}
        for broker_id in ("A", "B"):
            self._start(broker_id)
        self.order = ["A", "B"]
        self.faults = 0
        #: Connections the cuts ended in the middle of a stream, in all.
        self.connections_cut = 0

    def _start(self, broker_id: str) -> None:
        broker = start_member(self.workdir, self.server.admin_dsn, broker_id)
        self.members[broker_id] = broker
        proxy = self.proxies.get(broker_id)
        if proxy is None:
            proxy = self.proxies[broker_id] = FaultProxy(broker.host, broker.port).__enter__()
        proxy.target = (broker.host, broker.port)  # the restarted member's new port

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.__exit__(None, None, None)
        for broker in self.members.values():
            broker.stop()

    def urls(self) -> list[str]:
        return [self.proxies[broker_id].url(self.members[broker_id]) for broker_id in self.order]

    def next_fault(self) -> str:
        """SIGKILL, a cut, SIGSTOP, a restart of PostgreSQL, and again. What was done."""
        fault = (self.fail_over, self.cut, self.fail_over, self.restart_postgres)[self.faults % 4]
        self.faults += 1
        return fault()

    def fail_over(self) -> str:
        """Take down the member the clients use, SIGKILL and SIGSTOP in turn; once the other
        has taken it over, start it again."""
        used, other = self.order
        kill = self.faults % 4 == 1
        broker = self.members[used]
        taken = _takeovers(self.members[other])
        started = time.monotonic()
        if kill:
            broker.kill()
        else:
            broker.pause()
        try:
            wait_until(
                lambda: _takeovers(self.members[other]) > taken, f"{other} took {used} over", 30
            )
        except AssertionError as error:
            raise AssertionError(
                f"{error}; {other}'s cluster log:\n{self._cluster_lines(other)}"
            ) from None
        took = time.monotonic() - started
        self.order = [other, used]
        if kill:
            done = f"SIGKILL {used}, taken over in {took:.1f} s"
        else:
            broker.resume()
            assert broker.wait(20) == EXIT_FENCED, f"{used} resumed after its takeover"
            done = f"SIGSTOP {used}, taken over in {took:.1f} s, SIGCONT: exited fenced"
        self._start(used)
        return done

    def _cluster_lines(self, broker_id: str) -> str:
        """What member `broker_id` logged of the cluster and its takeovers, its last 40 lines."""
        lines = self.members[broker_id].last_log().splitlines()
        return "\n".join(
            [line for line in lines if "batonmq.cluster" in line or "takeover" in line][-40:]
        )

    def cut(self) -> str:
        """Cut every connection to the clients' member after a few more bytes, one way or the
        other: mid-frame, mid-publish or mid-delivery."""
        used = self.order[0]
        cut = Cut(after_bytes=self.chance.randrange(4096), to_client=self.chance.random() < 0.5)
        proxy = self.proxies[used]
        before = sum(connection.cut_at is not None for connection in proxy.connections)
        proxy.set_mode(cut)
        time.sleep(CUT_FOR)
        proxy.set_mode(Forward())
        ended = sum(connection.cut_at is not None for connection in proxy.connections) - before
        self.connections_cut += ended
        way = "to the client" if cut.to_client else "to the broker"
        return f"cut {ended} of {used}'s connections {cut.after_bytes} bytes on, {way}"

    def restart_postgres(self) -> str:
        taken = {broker_id: _takeovers(broker) for broker_id, broker in self.members.items()}
        self.server.stop()
        time.sleep(1.0)
        self.server.start()
        after = {broker_id: _takeovers(broker) for broker_id, broker in self.members.items()}
        assert after == taken, "a member was taken over while PostgreSQL restarted"
        return "PostgreSQL restart"


def _takeovers(broker: RunningBroker) -> int:
    return broker.last_log().count("takeover complete")


@pytest.fixture
def cluster(tmp_path: Path, postgres_throwaway_server: ThrowawayServer) -> Iterator[Cluster]:
    made = Cluster(tmp_path, postgres_throwaway_server, random.randrange(1 << 30))
    try:
        yield made
    finally:
        if not postgres_throwaway_server.running:
            postgres_throwaway_server.start()
        made.close()


@pytest.mark.timeout(240)
@pytest.mark.expected_log_errors(
    r"no longer owns its store",
    r"was fenced off its store",
    r"store \w+ failed",
    reason="the paused member finds, when it resumes, that the other took its store over; "
    "the nemesis restarts PostgreSQL under the members",
)
def test_nothing_confirmed_is_lost_when_the_clients_member_fails_over(cluster: Cluster) -> None:
    seed = random.randrange(1 << 30)
    started = time.monotonic()

    history = asyncio.run(
        check(
            cluster.urls,
            [cluster.next_fault],
            duration=DURATION,
            workload=Workload(),
            seed=seed,
            at_least=len(Cluster.KINDS),
        )
    )

    report = analyse(history)
    print(f"seed {seed}, {time.monotonic() - started:.0f} s: {report}")
    for kind in Cluster.KINDS:
        assert any(fault.startswith(kind) for fault in report.faults), (kind, report)
    assert cluster.connections_cut > 0, report
    assert report.confirmed > 500, report
    assert report.problems() == [], report
