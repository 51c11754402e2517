"""Whose lease on the PostgreSQL store need not be waited out (`Lease.holder_gone`): a holder on
this host whose process has ended, reaped or not, writes nothing more. A member restarted
after a SIGKILL finds the leases of its killed workers still running, their processes ended and
maybe not reaped yet, and must not take them for running siblings (docs/multi-core.md, "What
the choice means for HA clusters": the first process of a member to start places its rows)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from batonmq.store.pglease import Lease


def _holder(pid: int) -> str:
    return f"{socket.gethostname()} pid {pid} #0123abcd"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_a_running_process_holds_its_lease_and_an_ended_one_does_not() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert not Lease.holder_gone(_holder(child.pid))
        assert child.stdin is not None
        child.stdin.close()
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z":  # ended, not reaped: nobody waited for it yet
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert Lease.holder_gone(_holder(child.pid))
    finally:
        child.wait()
    assert Lease.holder_gone(_holder(child.pid))
