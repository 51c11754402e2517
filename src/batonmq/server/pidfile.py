"""The running broker's process id, in `batonmq.pid` under its data directory, so that
`batonctl acl reload` can signal it (SIGHUP) without a management connection."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

PID_FILE: Final = "batonmq.pid"


def write_pid_file(data_dir: Path) -> Path:
    path = data_dir / PID_FILE
    path.write_text(f"{os.getpid()}\n")
    return path


def remove_pid_file(path: Path) -> None:
    """Remove the file if it is still this process's (a broker started since may own it)."""
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text()) == os.getpid():
            path.unlink()


def running_broker_pid(data_dir: Path) -> int | None:
    """The pid of the broker running on `data_dir`, or None when none is."""
    try:
        pid = int((data_dir / PID_FILE).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid
