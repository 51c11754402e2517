"""The loss checker (tests/losscheck.py) run against an HA cluster: two members sharing one
PostgreSQL store, clients that publish numbered persistent messages with confirms and consume
them with manual acks, reconnecting through a list of both members tried in order (the README's
failover pattern), and a nemesis that takes down the member the clients use, in turn:

- SIGKILL: the survivor takes the killed member over, the clients fail over to it;
- SIGSTOP past the member's lease: the other takes it over; SIGCONT: the paused member finds its
  epoch superseded, writes nothing more and exits, and the clients fail over.

After each fault the member taken down is started again and rejoins as a fresh member.

The HA issue's checker: "Lost must be 0 and unexpected 0; duplicates are allowed only as
redeliveries flagged `redelivered`". MQ 4.1 HA guide: "When a broker fails, another broker in
the cluster takes over its persistent data"; a paused broker taken over "can write nothing".
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

import pytest

from batonmq.server.app import EXIT_FENCED
from tests.brokerproc import RunningBroker, wait_until
from tests.fault.conftest import StartMember
from tests.losscheck import Workload, analyse, check

pytestmark = pytest.mark.integration

#: Seconds of faults: each takes 4-10 s (a takeover with thresholds 2 at 1 s intervals, and a
#: restart), so at least one of each kind runs, with room for a slow machine; about 35 s a run.
DURATION = 20.0


class Cluster:
    """Members A and B; `order` is the list of hosts the clients try, the member they use
    first: after a fault the survivor leads it, and the restarted member follows."""

    def __init__(self, start_member: StartMember) -> None:
        self.start_member = start_member
        self.members = {broker_id: start_member(broker_id) for broker_id in ("A", "B")}
        self.order = ["A", "B"]
        self.faults = 0

    def urls(self) -> list[str]:
        return [self.members[broker_id].url for broker_id in self.order]

    def fail_over(self) -> str:
        """Take down the member the clients use, SIGKILL and SIGSTOP in turn; once the other
        has taken it over, start it again. What was done."""
        self.faults += 1
        used, other = self.order
        kill = self.faults % 2 == 1
        broker = self.members[used]
        taken = _takeovers(self.members[other])
        started = time.monotonic()
        broker.signal(signal.SIGKILL if kill else signal.SIGSTOP)
        wait_until(lambda: _takeovers(self.members[other]) > taken, f"{other} took {used} over", 30)
        took = time.monotonic() - started
        self.order = [other, used]
        if kill:
            broker.wait()
            done = f"SIGKILL {used}, taken over in {took:.1f} s"
        else:
            broker.signal(signal.SIGCONT)
            assert broker.wait(20) == EXIT_FENCED, f"{used} resumed after its takeover"
            done = f"SIGSTOP {used}, taken over in {took:.1f} s, SIGCONT: exited fenced"
        self.members[used] = self.start_member(used)
        return done


def _takeovers(broker: RunningBroker) -> int:
    return broker.last_log().count("takeover complete")


@pytest.mark.timeout(180)
@pytest.mark.expected_log_errors(
    r"no longer owns its store",
    r"store write failed",
    reason="the paused member finds, when it resumes, that the other took its store over",
)
def test_nothing_confirmed_is_lost_when_the_clients_member_fails_over(
    tmp_path: Path, start_member: StartMember
) -> None:
    cluster = Cluster(start_member)
    seed = random.randrange(1 << 30)
    started = time.monotonic()

    history = asyncio.run(
        check(cluster.urls, [cluster.fail_over], duration=DURATION, workload=Workload(), seed=seed)
    )

    report = analyse(history)
    print(f"seed {seed}, {time.monotonic() - started:.0f} s: {report}")
    assert any(fault.startswith("SIGKILL") for fault in report.faults), report
    assert any(fault.startswith("SIGSTOP") for fault in report.faults), report
    assert report.confirmed > 500, report
    assert report.problems() == [], report
