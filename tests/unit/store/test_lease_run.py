"""Which lease holders are processes of this run of the broker (`Lease.same_run`): the workers
whose lease names this run's token, which the `batonmq` process draws as it starts. Not the
host and the `batonmq` process's pid: in containers both come back with the next run (a pod
recreated under its name, its `batonmq` process pid 1), and a worker of an earlier run, still
holding its lease, must not be taken for a sibling that placed the member's rows
(docs/multi-core.md, "What the choice means for HA clusters")."""

from __future__ import annotations

import os
import socket

from batonmq.store.pglease import Lease
from batonmq.store.pgsession import Sessions

RUN, EARLIER_RUN = "0123456789abcdef", "fedcba9876543210"


def _lease(run: str | None) -> Lease:
    """A worker's lease of run `run` (None: a broker of one process's), never claimed."""
    sessions = Sessions(
        "postgresql://localhost/batonmq",
        broker_id="Aw0",
        schema="batonmq_c_x",
        synchronous_commit="on",
        lease_seconds=15.0,
    )
    return Lease(
        sessions,
        {},
        broker_id="Aw0",
        schema="batonmq_c_x",
        family=None,
        member_of=None if run is None else "A",
        lease_seconds=15.0,
        renew_every=5.0,
        run=run,
    )


def _worker(run: str, host: str = socket.gethostname(), batonmq: int = os.getppid()) -> str:
    return f"{host} pid {os.getpid()} (batonmq pid {batonmq}, run {run}) #0123abcd"


def test_a_worker_of_this_run_is_known_by_the_runs_token() -> None:
    lease = _lease(RUN)
    assert lease.same_run(_worker(RUN))
    # The token is what counts, wherever its process is said to be.
    assert lease.same_run(_worker(RUN, host="elsewhere", batonmq=1))


def test_the_same_host_and_batonmq_pid_with_another_runs_token_is_another_run() -> None:
    lease = _lease(RUN)
    assert not lease.same_run(_worker(EARLIER_RUN))
    assert not lease.same_run(_worker(RUN[:-1]))


def test_holders_that_name_no_run_are_of_no_run() -> None:
    """A broker of one process, a worker's of a release before run tokens, no holder at all;
    and a broker of one process counts no holder as of its run."""
    lease = _lease(RUN)
    host, pid, batonmq = socket.gethostname(), os.getpid(), os.getppid()
    assert not lease.same_run(f"{host} pid {pid} #0123abcd")
    assert not lease.same_run(f"{host} pid {pid} (batonmq pid {batonmq}) #0123abcd")
    assert not lease.same_run(f"{host} pid {pid} (batonmq pid {batonmq}, run ) #0123abcd")
    assert not lease.same_run(None)
    assert not _lease(None).same_run(_worker(RUN))
