"""Disk quota-based flow control (Qpid manual §1.5.1.2.2) and the free-disk alarm.

The seed: "This functionality blocks all producers on reaching the disk overflow limit. When
consumers consume the messages, causing disk space usage to falls below the underflow limit, the
producers are unblocked and continue working as normal." Every `disk.check_interval` seconds the
store says how many bytes it uses (`Store.used_bytes`; what each store counts is in its module);
over `disk.store_overfull` every producer is held (`Broker.raise_alarm`: connection.blocked, and
a publishing client's input is no longer read) and the seed's MST-1008 line is logged; back under
`disk.store_underfull` (the overfull size when that is 0) they are released, with MST-1009. The
quota is "best effort", as the seed says: messages committed between two checks go over it.

Free disk space is watched as RabbitMQ's disk_free_limit is: when the disk holding the data
directory has less than `disk.free_limit` bytes free, every producer is held until it has that
much again, whatever the store (a full disk would fail every commit: Qpid manual §1.6, the Durable
messaging requirements).

The two are separate alarms, each cleared on its own; a producer is held while either is raised.
The decisions (`store_overfull`, `disk_low`) are pure; `DiskGuard` measures and acts.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Final

from batonmq.config import DiskConfig
from batonmq.engine.broker import Broker

log = logging.getLogger(__name__)

#: The broker alarms (`Broker.alarms`) this module raises.
STORE_QUOTA_ALARM: Final = "store quota"
FREE_DISK_ALARM: Final = "free disk"
#: Qpid manual §1.5.1.2.2.1, the broker log messages for quota flow control.
STORE_OVERFULL: Final = "MST-1008 : Store overfull, flow control will be enforced"
STORE_OVERFULL_CLEARED: Final = "MST-1009 : Store overfull condition cleared"


def store_overfull(used: int, config: DiskConfig, *, blocked: bool) -> bool:
    """Whether producers are to be held, now that the store uses `used` bytes and they are held
    (`blocked`) or not. Over the overfull limit ("the maximum space on disk ... which can be used
    by store") they are; once held, they stay so until the store "drops below" the underfull
    limit (the overfull one when that is 0), so that a store hovering at the limit does not
    block and release producers at every check. No quota (overfull 0) holds nobody."""
    if not config.store_overfull:
        return False
    if blocked:
        return used >= (config.store_underfull or config.store_overfull)
    return used > config.store_overfull


def disk_low(free: int, config: DiskConfig) -> bool:
    """Whether producers are to be held with `free` bytes free on the data directory's disk:
    below `free_limit` (RabbitMQ's disk_free_limit, which has no hysteresis either); a limit of
    0 is no alarm."""
    return free < config.free_limit


def quota_reason(used: int, config: DiskConfig) -> str:
    """What a held client is told (connection.blocked), e.g. "store overfull: 5000 bytes used,
    over disk.store_overfull (4096)"."""
    return f"store overfull: {used} bytes used, over disk.store_overfull ({config.store_overfull})"


def free_disk_reason(free: int, config: DiskConfig) -> str:
    """E.g. "low on free disk space: 1000 bytes free, below disk.free_limit (50000000)"."""
    return f"low on free disk space: {free} bytes free, below disk.free_limit ({config.free_limit})"


class DiskGuard:
    """Measures the store and the data directory's disk (`check`, every `disk.check_interval`
    seconds) and raises or clears the broker's two disk alarms."""

    def __init__(self, broker: Broker, config: DiskConfig, data_dir: Path) -> None:
        self._broker = broker
        self._config = config
        self._data_dir = data_dir
        #: The store measurement under way: at most one at a time, however slow the store.
        self._measuring: asyncio.Task[None] | None = None
        #: Whether the last attempt at each measurement failed (logged once, not every check).
        self._store_unmeasured = False
        self._disk_unmeasured = False

    @property
    def store_blocked(self) -> bool:
        return STORE_QUOTA_ALARM in self._broker.alarms

    @property
    def disk_blocked(self) -> bool:
        return FREE_DISK_ALARM in self._broker.alarms

    def check(self) -> None:
        """Check free disk space now, and start measuring the store (unless a measurement is
        still under way)."""
        if self._config.free_limit:
            self._check_free_disk()
        idle = self._measuring is None or self._measuring.done()
        if self._config.store_overfull and self._broker.store is not None and idle:
            self._measuring = asyncio.get_running_loop().create_task(self._check_store())

    async def _check_store(self) -> None:
        store = self._broker.store
        assert store is not None
        try:
            used = await store.used_bytes()
        except Exception as error:  # a lost database: measured again at the next check
            if not self._store_unmeasured:
                log.warning(
                    "cannot measure the store for disk.store_overfull: %s",
                    error,
                    extra={"store": store.kind, "location": store.location},
                )
            self._store_unmeasured = True
            return
        self._store_unmeasured = False
        self.apply_store_usage(used)

    def apply_store_usage(self, used: int) -> None:
        """Raise or clear the quota alarm for a store using `used` bytes."""
        config = self._config
        blocked = self.store_blocked
        if store_overfull(used, config, blocked=blocked) == blocked:
            return
        fields = {
            "used_bytes": used,
            "store_overfull": config.store_overfull,
            "store_underfull": config.store_underfull or config.store_overfull,
        }
        if blocked:
            self._broker.clear_alarm(STORE_QUOTA_ALARM)
            log.info(STORE_OVERFULL_CLEARED, extra=fields)
        else:
            log.warning(STORE_OVERFULL, extra=fields)
            self._broker.raise_alarm(STORE_QUOTA_ALARM, quota_reason(used, config))

    def _check_free_disk(self) -> None:
        try:
            # statvfs: one system call, no IO to speak of, so it runs on the event loop.
            free = shutil.disk_usage(self._data_dir).free
        except OSError as error:
            if not self._disk_unmeasured:
                log.warning(
                    "cannot measure free disk space for disk.free_limit: %s",
                    error.strerror or error,
                    extra={"data_dir": str(self._data_dir)},
                )
            self._disk_unmeasured = True
            return
        self._disk_unmeasured = False
        self.apply_free_space(free)

    def apply_free_space(self, free: int) -> None:
        """Raise or clear the free-disk alarm for a disk with `free` bytes free."""
        config = self._config
        blocked = self.disk_blocked
        if disk_low(free, config) == blocked:
            return
        fields = {
            "free_bytes": free,
            "free_limit": config.free_limit,
            "data_dir": str(self._data_dir),
        }
        if blocked:
            self._broker.clear_alarm(FREE_DISK_ALARM)
            log.info("free disk space alarm cleared", extra=fields)
        else:
            log.warning(
                "free disk space alarm set: %d bytes free, below disk.free_limit %d",
                free,
                config.free_limit,
                extra=fields,
            )
            self._broker.raise_alarm(FREE_DISK_ALARM, free_disk_reason(free, config))
