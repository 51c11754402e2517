"""A broker's lease on its PostgreSQL store, and the fencing epoch that comes with it.

The broker's row in `brokers` names the holder (host, pid and a token of this process's store;
for a worker, the pid of its `batonmq` process too, the one an operator signals, and the token
of the broker's run) and when the lease expires, on the database's clock, and carries a
fencing epoch that each claim bumps. The lease is renewed on a session of its own every third
of its length (by default); a second broker is refused while it runs, with the holder and the
expiry named. Every write
transaction first reads the epoch, FOR SHARE (`Lease.check_epoch`), and goes on only while it is
still the one this broker was given: a takeover that bumps it waits for a commit under way, and
every write after it fails with StoreFenced, whatever became of the sessions in between (a
session advisory lock, used before, vanished when PostgreSQL restarted, and a second broker
could then open the store while the first kept serving). A holder on this host whose process is
gone is not waited for: a broker restarted after a crash takes its store back at once.

A standalone broker's identities are a family (`batonmq.store.pgfamily`): a claim checks its
rivals' leases under the family's advisory lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from batonmq.store.base import StoreError, StoreFenced, StoreLocked
from batonmq.store.members import SERVING_STATES
from batonmq.store.pgerrors import DATABASE_ERRORS
from batonmq.store.pgfamily import rival_lease
from batonmq.store.pgsession import (
    CLOSE_TIMEOUT,
    Connection,
    Sessions,
    advisory_key,
    close,
    fetch_row,
    row_count,
)

log = logging.getLogger(__name__)

#: How long a claim waits for another holder's lease to be released before StoreLocked (a
#: broker stopping while its successor starts).
LOCK_WAIT: Final = 5.0
_LOCK_RETRY: Final = 0.1
#: Seconds a lease lasts unless renewed; it is renewed every third of that.
LEASE_SECONDS: Final = 15.0
#: Seconds after a renewal that failed (the server out of reach) before the next try.
RENEW_RETRY: Final = 1.0

#: Statements, with {s} for the quoted schema.
SQL: Final = {
    "enrol": "INSERT INTO {s}.brokers (broker_id, epoch, state, started_at) "
    "VALUES ($1, 0, 'stopped', now()) ON CONFLICT (broker_id) DO NOTHING",
    "lease": "SELECT state, holder, lease_expires, lease_expires > now() FROM {s}.brokers "
    "WHERE broker_id = $1 FOR UPDATE",
    "claim": "UPDATE {s}.brokers SET epoch = epoch + 1, state = 'running', started_at = now(), "
    "holder = $2, lease_expires = now() + $3::float8 * interval '1 second', heartbeat_at = now(), "
    "no_failover = false, member_of = $4 WHERE broker_id = $1 RETURNING epoch",
    "renew": "UPDATE {s}.brokers SET lease_expires = now() + $3::float8 * interval '1 second', "
    "heartbeat_at = now() WHERE broker_id = $1 AND epoch = $2",
    "epoch": "SELECT epoch FROM {s}.brokers WHERE broker_id = $1 FOR SHARE",
    "stop": "UPDATE {s}.brokers SET state = 'stopped', holder = NULL, lease_expires = NULL "
    "WHERE broker_id = $1 AND epoch = $2",
    "give_back": "UPDATE {s}.brokers SET holder = NULL, lease_expires = NULL "
    "WHERE broker_id = $1 AND epoch = $2",
}


class Lease:
    """The lease of identity `broker_id` in `schema` (see the module docstring). `family`: the
    standalone broker whose identity this is (None for an HA member); `member_of`: the HA member
    whose worker it is, recorded at each claim; `run`: for a worker's identity, the token of the
    broker's run that started the worker (`batonmq.server.supervisor`), else None."""

    def __init__(
        self,
        sessions: Sessions,
        sql: Mapping[str, str],
        *,
        broker_id: str,
        schema: str,
        family: str | None,
        member_of: str | None,
        lease_seconds: float,
        renew_every: float,
        run: str | None,
    ) -> None:
        self._sessions, self._sql = sessions, sql
        self._broker_id, self._family, self._member_of = broker_id, family, member_of
        self._family_key = advisory_key("family", schema, family or broker_id)
        self._lease_seconds, self._renew_every = lease_seconds, renew_every
        #: Who holds the lease when this store does: this host, process, and store object;
        #: "host pid N #token", or for a worker's identity "host pid N (batonmq pid P, run R)
        #: #token", P the `batonmq` process that forked it (`batonmq.server.supervisor`), which
        #: ends it, and R the token of that process's run.
        batonmq = "" if run is None else f" (batonmq pid {os.getppid()}, run {run})"
        self._holder = f"{socket.gethostname()} pid {os.getpid()}{batonmq} #{secrets.token_hex(4)}"
        self._run = run
        #: The fencing epoch this broker was given when it claimed the store (0: not claimed).
        self.epoch = 0
        #: Whether the previous holder stopped without releasing the lease (a crash).
        self.unclean_stop = False
        #: Whether a worker of the broker held its lease at the claim (whose rows this identity
        #: then leaves alone).
        self.workers_run = False
        self.fenced: StoreFenced | None = None
        self.on_fenced: Callable[[StoreFenced], None] | None = None
        self._renewal: asyncio.Task[None] | None = None

    async def claim(self, connection: Connection, *, catalogue_only: bool) -> None:
        """Take the lease and a new fencing epoch, waiting a little for a holder that is letting
        go; StoreLocked while another broker holds it. `catalogue_only`: the store is opened to
        write the catalogue alone, beside running workers (`batonmq.store.pgfamily`)."""
        deadline = asyncio.get_running_loop().time() + LOCK_WAIT
        await connection.execute(self._sql["enrol"], self._broker_id)
        while True:
            async with connection.transaction():
                if self._family is not None:
                    await connection.execute(self._sql["family_lock"], self._family_key)
                state, holder, expires, live = await fetch_row(
                    connection, self._sql["lease"], self._broker_id
                )
                serving = state in SERVING_STATES
                rival = None
                if self._family is not None:
                    rival = await rival_lease(
                        connection, self._sql, self._family, self._broker_id, _gone
                    )
                self.workers_run = rival is not None
                if rival is not None and not catalogue_only:
                    holder, expires = rival
                elif not (live and serving and holder != self._holder) or _gone(holder):
                    self.epoch = await connection.fetchval(
                        self._sql["claim"],
                        self._broker_id,
                        self._holder,
                        self._lease_seconds,
                        self._member_of,
                    )
                    self.unclean_stop = serving
                    break
            if asyncio.get_running_loop().time() >= deadline:
                raise StoreLocked(
                    f"the store of broker {(self._family or self._broker_id)!r} at "
                    f"{self._sessions.location} is in use by "
                    f"another running broker ({holder}); its lease expires at "
                    f"{expires:%Y-%m-%d %H:%M:%S %Z} unless that broker renews it"
                )
            await asyncio.sleep(_LOCK_RETRY)
        self.fenced = None
        if self._renewal is None:
            self._renewal = asyncio.get_running_loop().create_task(self._keep(), name="store lease")

    @staticmethod
    def holder_gone(holder: str | None) -> bool:
        """Whether the lease holder `holder` is a process of this host that no longer runs."""
        return _gone(holder)

    def same_run(self, holder: str | None) -> bool:
        """Whether the lease holder `holder` is a process of this run of the broker: a worker
        whose lease names the run's token, as this one's does, a worker too. Not the host and
        the `batonmq` process: in containers both repeat from one run to the next (a pod
        recreated under its name, its `batonmq` process pid 1)."""
        return self._run is not None and _run(holder) == self._run

    async def check_epoch(self, connection: Connection) -> None:
        """Inside a write transaction: go on only while this broker still owns the store."""
        epoch = await connection.fetchval(self._sql["epoch"], self._broker_id)
        if epoch != self.epoch:
            raise self.fence(f"its epoch {self.epoch} is now {epoch}")

    def fence(self, why: str) -> StoreFenced:
        """The StoreFenced to raise now that another broker has taken the store over, the
        first time told to `on_fenced`."""
        if self.fenced is None:
            self.fenced = StoreFenced(
                f"broker {self._broker_id!r} no longer owns its store at "
                f"{self._sessions.location}: another broker has taken it over ({why}); nothing "
                "more is written"
            )
            if self.on_fenced is not None:
                self.on_fenced(self.fenced)
        return StoreFenced(str(self.fenced))

    async def stop_renewing(self) -> None:
        renewal, self._renewal = self._renewal, None
        if renewal is not None:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal

    async def release(self, connection: Connection) -> None:
        """Mark the record stopped and the lease free: the next holder knows this stop was
        clean."""
        await connection.execute(
            self._sql["stop"], self._broker_id, self.epoch, timeout=CLOSE_TIMEOUT
        )

    async def give_back(self, connection: Connection) -> None:
        """Let go of the lease claimed by an open that then failed (its replay or placement):
        the next claim takes it at once, and a sibling does not take this process for one that
        runs. The record stays "running", so that claim counts this as an unclean stop (the
        safe side: entries come back redelivered). If the database is gone, the lease runs out
        instead."""
        await self.stop_renewing()
        if not connection.is_closed():
            with contextlib.suppress(*DATABASE_ERRORS, TimeoutError):
                await connection.execute(
                    self._sql["give_back"], self._broker_id, self.epoch, timeout=CLOSE_TIMEOUT
                )

    async def _keep(self) -> None:
        """Renew the lease on a session of its own, so that commits never delay it; find out
        there, too, that another broker took the store over."""
        connection: Connection | None = None
        wait = self._renew_every
        try:
            while self.fenced is None:
                await asyncio.sleep(wait)
                wait = self._renew_every
                try:
                    if connection is None or connection.is_closed():
                        connection = await self._sessions.connect()
                    renewed = await connection.execute(
                        self._sql["renew"], self._broker_id, self.epoch, self._lease_seconds
                    )
                except (StoreError, *DATABASE_ERRORS) as error:
                    # The next commit reports an outage; the lease is renewed as soon as it is
                    # over, not a whole period later: in an HA cluster a member that could not
                    # be heard meanwhile is judged by how long its renewals stop once the store
                    # is back (`batonmq.cluster.detector`).
                    log.debug("store lease not renewed: %s", error)
                    if connection is not None:
                        connection.terminate()
                        connection = None
                    wait = min(self._renew_every, RENEW_RETRY)
                    continue
                if row_count(renewed) == 0:
                    self.fence("its lease could not be renewed")
        finally:
            if connection is not None:
                await close(connection)


def _gone(holder: str | None) -> bool:
    """Whether the lease holder `holder` ("host pid N ..."; N the process that holds it, a
    worker's own) is a process of this host that no longer runs: its lease need not be waited
    out."""
    host, _, rest = (holder or "").partition(" pid ")
    pid = rest.split(" ", 1)[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _ended(int(pid))


def _ended(pid: int) -> bool:
    """Whether process `pid`, which still exists, has ended and waits to be reaped (a worker of
    a killed broker until its new parent reaps it; Linux: state Z in /proc): it writes nothing
    more. False where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def _run(holder: str | None) -> str | None:
    """The run token of a worker's lease holder ("host pid N (batonmq pid P, run R) #token");
    None for any other holder."""
    _, worker, rest = (holder or "").partition(", run ")
    run = rest.split(")", 1)[0]
    return run if worker and run else None
