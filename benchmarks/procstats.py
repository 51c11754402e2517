"""What a broker costs the machine, read from /proc: the CPU time and resident memory of its
process tree (RabbitMQ: the start script, beam.smp and its helpers; BatonMQ: the Python process
and its threads; with PostgreSQL, the postmaster and its backends too).

CPU is utime + stime of every process (all its threads included), read before and after the
measured window. Memory is VmRSS summed over the tree, sampled by a thread every 100 ms; its
maximum is the row's peak (VmHWM would be the peak since the process started, which spans rows).
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants alive now."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            # After the name: state (0), ppid (1).
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree = [root]
    for pid in tree:
        tree.extend(children.get(pid, ()))
    return tree


def listening_pids(host: str, port: int) -> list[int]:
    """The processes holding the socket that listens on TCP `port`, when `host` is an address
    of this machine; [] when it is not, or /proc does not show them (a user who is not root
    sees only their own processes' sockets)."""
    if not _is_local(host):
        return []
    sockets = set()
    for table in ("net/tcp", "net/tcp6"):
        with contextlib.suppress(OSError):
            for line in (PROC / table).read_text().splitlines()[1:]:
                # sl, local_address, rem_address, st (0A: LISTEN), ..., inode (9th)
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    sockets.add(f"socket:[{fields[9]}]")
    holders = []
    for entry in PROC.iterdir() if sockets else ():
        if entry.name.isdigit() and _holds(entry / "fd", sockets):
            holders.append(int(entry.name))
    return holders


def _holds(fd_directory: Path, sockets: set[str]) -> bool:
    with contextlib.suppress(OSError):  # gone, or not ours to read
        for fd in fd_directory.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in sockets:
                    return True
    return False


def _is_local(host: str) -> bool:
    """Whether `host` resolves to an address of this machine (one a socket can bind to)."""
    try:
        addresses = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, _, _, address in addresses:
        with socket.socket(family, kind) as probe, contextlib.suppress(OSError):
            probe.bind((address[0], 0))
            return True
    return False


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time of `pids` (a process gone since counts nothing)."""
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            # utime and stime are fields 14 and 15 of stat, 11 and 12 after the name.
            ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores), from /proc/stat."""
    fields = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def rss_bytes(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            status = (PROC / str(pid) / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
                break
    return total


def steady_rss(pids: Callable[[], list[int]], samples: int = 5, interval: float = 0.1) -> int:
    """The median of a few samples, for before/after comparisons."""
    values = []
    for _ in range(samples):
        values.append(rss_bytes(pids()))
        time.sleep(interval)
    return int(statistics.median(values))


class RssSampler:
    """Samples the RSS of `pids()` every `interval` seconds in a thread; `peak` is the largest."""

    def __init__(self, pids: Callable[[], list[int]], interval: float = 0.1) -> None:
        self._pids = pids
        self._interval = interval
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        samples = 0
        while True:
            if samples % 10 == 0:  # a process tree may grow (PostgreSQL backends)
                pids = self._pids()
            self.peak = max(self.peak, rss_bytes(pids))
            samples += 1
            if self._stop.wait(self._interval):
                return
