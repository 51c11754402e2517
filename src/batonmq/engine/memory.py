"""Memory thresholds (MQ 3.5 admin guide, "Managing Memory Resources and Message Flow" and Table
2-4): the broker's resident memory, as a share of its budget, puts it in one of four states, "green
(plenty of memory is available), yellow (broker memory is running low), orange (broker is low on
memory), red (broker is out of memory)", and each state throttles publishers harder.

How the seed's actions map onto AMQP:

- imq.<state>.count, "the maximum number of incoming messages allowed in a batch": a publishing
  connection runs at most that many publishes before its input waits for the next turn of the
  event loop, so that consumers and acknowledgements get their share (`Broker.publish_batch`).
- red (count 0): every publishing connection is blocked, with connection.blocked, until memory
  falls below red again (the "memory" alarm, `Broker.raise_alarm`).
- From yellow on, queues keep fewer entries in memory and page the rest out to the store (a
  tenth of the page window at yellow, a hundredth from orange on), so that memory falls before
  red is reached.

The state is decided from one reading by `state_for`, a pure function; `MemoryGuard.check` runs
it periodically (`memory.check_interval`) and applies a change of state.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from batonmq.engine.broker import Broker

log = logging.getLogger(__name__)

#: The fewest entries a queue keeps in memory, however short memory is.
MIN_WINDOW: Final = 16
#: The alarm that blocks publishers in the red state.
ALARM: Final = "memory"


class MemoryState(enum.Enum):
    GREEN = "green"
    YELLOW = "yellow"
    ORANGE = "orange"
    RED = "red"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """config.MemoryConfig: percentages of the budget at which each state begins (green at 0),
    and the batch each state allows."""

    yellow: int = 80
    orange: int = 90
    red: int = 98
    green_count: int = 5000
    yellow_count: int = 500
    orange_count: int = 50

    def batch(self, state: MemoryState) -> int:
        """Publishes per turn in `state`; red blocks publishers altogether (its count is 0),
        which the alarm does, so its batch is orange's."""
        if state is MemoryState.GREEN:
            return self.green_count
        if state is MemoryState.YELLOW:
            return self.yellow_count
        return self.orange_count


def state_for(used: int, budget: int, thresholds: Thresholds) -> MemoryState:
    """The memory state of a broker using `used` bytes of its `budget`."""
    percent = 100 * used / budget
    if percent >= thresholds.red:
        return MemoryState.RED
    if percent >= thresholds.orange:
        return MemoryState.ORANGE
    if percent >= thresholds.yellow:
        return MemoryState.YELLOW
    return MemoryState.GREEN


def window_for(state: MemoryState, window: int) -> int:
    """The page window queues keep in `state`, of `window` in green."""
    if state is MemoryState.GREEN:
        return window
    divisor = 10 if state is MemoryState.YELLOW else 100
    return max(MIN_WINDOW, window // divisor)


def default_budget() -> int:
    """40% of the machine's RAM (RabbitMQ's default vm_memory_high_watermark)."""
    return int(0.4 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def resident_bytes(pid: int | None = None) -> int:
    """The resident memory of process `pid`, this one when None (Linux /proc/PID/statm)."""
    with open(f"/proc/{pid or 'self'}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def broker_resident_bytes(supervisor: int) -> int:
    """The resident memory of a broker with workers: its supervisor's and each of its children's
    (the workers), as a broker in one process has its own. Each worker holds the whole budget
    against this sum, so that N workers do not use N budgets."""
    with open(f"/proc/{supervisor}/task/{supervisor}/children", "rb") as children:
        pids = [supervisor, *map(int, children.read().split())]
    used = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a worker just ended
            used += resident_bytes(pid)
    return used


def _malloc_trim() -> Callable[[], None]:
    """glibc's malloc_trim(0): hand freed heap memory back to the operating system, so that
    resident memory falls when queues drain (a no-op where there is no glibc)."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        return lambda: None

    def trim_heap() -> None:
        trim(0)

    return trim_heap


class MemoryGuard:
    def __init__(
        self,
        broker: Broker,
        budget: int,
        thresholds: Thresholds,
        read_memory: Callable[[], int] = resident_bytes,
    ) -> None:
        self.broker = broker
        self.budget = budget or default_budget()
        self.thresholds = thresholds
        self.state = MemoryState.GREEN
        self._read_memory = read_memory
        self._trim = _malloc_trim()

    def check(self) -> MemoryState:
        """Read the memory and apply the state it puts the broker in."""
        used = self._read_memory()
        if self.state is not MemoryState.GREEN:
            # Freed memory stays with the process until it is handed back: do so before
            # deciding whether memory is still short.
            self._trim()
            used = self._read_memory()
        state = state_for(used, self.budget, self.thresholds)
        if state is not self.state:
            self._enter(state, used)
        return state

    def _enter(self, state: MemoryState, used: int) -> None:
        previous, self.state = self.state, state
        worse = list(MemoryState).index(state) > list(MemoryState).index(previous)
        log.log(
            logging.WARNING if worse else logging.INFO,
            "memory state %s: %d of %d bytes (%.0f%%)",
            state.value,
            used,
            self.budget,
            100 * used / self.budget,
            extra={"previous": previous.value, "batch": self.thresholds.batch(state)},
        )
        broker = self.broker
        broker.publish_batch = self.thresholds.batch(state)
        if state is MemoryState.RED:
            broker.raise_alarm(
                ALARM, f"memory alarm: {used} of {self.budget} bytes in use (memory.budget)"
            )
        else:
            broker.clear_alarm(ALARM)
        window = window_for(state, broker.settings.page_window)
        window_bytes = window_for(state, broker.settings.page_window_bytes)
        for vhost in broker.vhosts.values():
            vhost.paging.window = window
            vhost.paging.window_bytes = window_bytes
            if worse:
                for queue in vhost.queues.values():
                    queue.page_out()
