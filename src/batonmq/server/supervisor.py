"""The `batonmq` process of a broker with `broker.workers` above 1: it binds the AMQP
listener's sockets once, starts that many worker processes on them, and keeps them running.

Each worker is the broker of one process (`batonmq.server.app`) on the inherited listening
sockets, with a store identity of its own (the broker's and "w<index>") and its rows in the
store the workers share: in PostgreSQL with its own lease and fencing epoch (the lease naming
a token the supervisor draws for the run, by which siblings know each other), after the
supervisor opened and closed the store as the broker's own identity, which no worker of a
running broker lets it claim (`batonmq.store.pgfamily`); in SQLite's one
file with its own append log, under the store's lock, which the supervisor takes before it
binds anything and holds for them all (the workers inherit it), after it replayed every append
log and gave each virtual host's rows to its owner (`batonmq.store.placement`). Every worker
accepts connections; a
connection goes on in the worker that owns its virtual host (`batonmq.server.placement`),
handed there at connection.open when another accepted it (`batonmq.server.handoff`).

The supervisor holds the pid file, and:

- passes SIGTERM and SIGINT on to every worker and waits for their graceful shutdown (each
  worker's `server.shutdown_timeout`, and as long again for its store; a worker still running
  then is killed), then exits 0;
- passes SIGHUP (reload the ACL files) on to every worker;
- binds the management API's port too, which every worker serves, and makes each worker's
  control inbox for the link between workers (`batonmq.server.siblings`), on which it tells the
  others when a worker ends and when it serves again;
- starts again a worker that ended without being asked to (a crash, SIGKILL, a lost store): the
  new process recovers that worker's virtual hosts from the store. Its sibling workers and
  their clients are not touched. A worker that ends again soon after its start waits longer
  before the next (1 s, doubling up to 30 s);
- stops everything if a worker cannot start the first time (exit status 1: the worker logged
  why), or if another process took a worker's store identity over (exit status 3, as a broker
  of one process that is fenced).

Its workers end with it, however it ends: the kernel kills each when the supervisor is gone
(`_end_with`), so a SIGKILL of the `batonmq` process ends the broker as it ends a broker of one
process.

The supervisor runs no event loop and no thread once it forks, so that forking a worker from
it is safe (the PostgreSQL store's check runs its event loop to the end before).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import secrets
import select
import signal
import socket
import time
from dataclasses import dataclass
from typing import Final

from batonmq.config import Config, ConfigError
from batonmq.server.listeners import configured_listeners, listening_sockets
from batonmq.server.pidfile import remove_pid_file, write_pid_file
from batonmq.server.placement import WorkerSeat, inbox_pairs, store_placement
from batonmq.server.siblings import tell_siblings
from batonmq.store.base import Store, StoreError, StoreUnavailable
from batonmq.store.configured import configured_store, sqlite_path

log = logging.getLogger(__name__)

#: Seconds before a worker that ended is started again, the first time...
RESTART_DELAY: Final = 1.0
#: ...and at most, for a worker that keeps ending soon after it started.
RESTART_DELAY_MAX: Final = 30.0
#: A worker that ran this long before it ended is started again after RESTART_DELAY.
STABLE_AFTER: Final = 60.0
#: The exit status of a worker whose store identity another process took over (app.EXIT_FENCED;
#: not imported, so that the supervisor does not load the server).
_EXIT_FENCED: Final = 3
_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)
#: prctl(2): the signal the calling process gets when its parent ends.
_PR_SET_PDEATHSIG: Final = 1


@dataclass(slots=True)
class _Worker:
    index: int
    pid: int
    started_at: float
    #: The pipe it writes one byte to once it serves (-1 once read, or once it ended).
    ready_pipe: int
    ready: bool = False
    #: Starts in a row that ended soon after.
    failures: int = 0


def supervise(config: Config) -> int:
    """Run the broker's workers until SIGTERM or SIGINT; the exit status."""
    try:
        listeners = configured_listeners(config)  # checked first, as by a broker of one process
        store_lock = _prepare_store(config)
    except ConfigError as error:
        log.error("cannot start: %s", error)
        return 1
    except StoreError as error:
        log.error("cannot open the store: %s", error)
        return 1
    try:
        listening = {
            listener.name: listening_sockets(listener.bind, listener.port) for listener in listeners
        }
    except OSError as error:
        amqp = config.listeners.amqp
        log.error("cannot listen on %s:%s: %s", amqp.bind, amqp.port, error.strerror or error)
        return 1
    management = _management_sockets(config)
    if management is None:
        return 1
    listening.update(management)
    inboxes, controls = inbox_pairs(config.workers), inbox_pairs(config.workers)
    pid_file = write_pid_file(config.data_dir)
    try:
        return Supervisor(config, listening, inboxes, controls, store_lock).run()
    finally:
        remove_pid_file(pid_file)


def _prepare_store(config: Config) -> int | None:
    """Refuse a store that another running broker holds before anything is bound or forked,
    as a broker of one process does (StoreLocked).

    With the SQLite store, which the workers share: lock it for them all (the workers inherit
    the lock), write every append log a crash left to the database, and give each virtual
    host's rows to the worker that owns it now (`batonmq.store.placement`); the lock's
    descriptor. With PostgreSQL, where each worker holds a lease of its own: open the store as
    the broker's own identity, whose lease no worker of a running broker lets anyone claim
    (`batonmq.store.pgfamily`), migrating its schema once for all the workers and giving each
    virtual host's rows to the worker that owns it now, and close it again; None. An HA
    member's store has no identity of the broker's own to open: each worker claims its own,
    and the cluster takes them over together (`batonmq.store.members`)."""
    if config.persist.store != "sqlite":
        if not config.cluster.ha:  # an HA member's identities are its workers' alone
            asyncio.run(
                _open_and_close(configured_store(config, placement=store_placement(config)))
            )
        return None
    from batonmq.store.sqlite import prepare_for_workers
    from batonmq.store.sqlitefile import take_lock

    database = sqlite_path(config.data_dir)
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(
            f"cannot create the data directory {database.parent}: {exc.strerror}"
        ) from exc
    lock = take_lock(database)
    try:
        prepare_for_workers(
            database,
            broker_id=config.broker_name,
            sync=config.persist.sync,
            held_lock=lock,
            placement=store_placement(config),
        )
    except BaseException:
        os.close(lock)
        raise
    return lock


async def _open_and_close(store: Store) -> None:
    await store.open(create=True, migrate=True, lock=True)
    await store.close()


class Supervisor:
    def __init__(
        self,
        config: Config,
        listening: dict[str, list[socket.socket]],
        inboxes: list[tuple[socket.socket, socket.socket]],
        controls: list[tuple[socket.socket, socket.socket]],
        store_lock: int | None = None,
    ) -> None:
        """`inboxes` and `controls`: each worker's hand-off inbox and control inbox."""
        self.config = config
        self.listening = listening
        self.inboxes = inboxes
        self.controls = controls
        #: The SQLite store's lock, held for the workers, which inherit it.
        self.store_lock = store_lock
        #: This run's token, which every worker's lease names, a worker started again's too.
        self.run_token = secrets.token_hex(8)
        self.workers: dict[int, _Worker] = {}
        #: When each worker that ended is to be started again, and its failures in a row, by
        #: index.
        self.restarts: dict[int, tuple[float, int]] = {}
        self._signals: list[int] = []
        self._wake_read, self._wake_write = os.pipe()
        self._stopping_since: float | None = None
        self._status = 0

    def run(self) -> int:
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        previous_wakeup = signal.set_wakeup_fd(self._wake_write)
        for signum in _SIGNALS:
            signal.signal(signum, self._signalled)
        try:
            for index in range(self.config.workers):
                self._start(index, failures=0)
            self._loop()
        finally:
            self._send(signal.SIGTERM)  # none left, unless the supervisor itself failed
            signal.set_wakeup_fd(previous_wakeup)
            for signum in _SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            os.close(self._wake_read)
            os.close(self._wake_write)
        log.info("shutdown complete")
        return self._status

    def _signalled(self, signum: int, _frame: object) -> None:
        self._signals.append(signum)

    def _loop(self) -> None:
        all_ready = False
        while self.workers or (self._stopping_since is None and self.restarts):
            now = time.monotonic()
            waits = [when - now for when, _failures in self.restarts.values()]
            if self._stopping_since is not None:
                waits.append(self._stopping_since + self._stop_timeout - now)
            pipes = [
                worker.ready_pipe for worker in self.workers.values() if worker.ready_pipe >= 0
            ]
            readable, _, _ = select.select(
                [self._wake_read, *pipes], [], [], max(min(waits), 0) if waits else None
            )
            for worker in list(self.workers.values()):
                if worker.ready_pipe in readable:
                    self._read_ready(worker)
            if not all_ready and all(worker.ready for worker in self.workers.values()):
                all_ready = len(self.workers) == self.config.workers
                if all_ready:
                    log.info(
                        "broker started",
                        extra={
                            "broker": self.config.broker_name,
                            "pid": os.getpid(),
                            "workers": self.config.workers,
                        },
                    )
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_read, 512):
                    pass
            self._handle_signals()
            self._reap(first_start=not all_ready)
            self._restart_due()
            self._kill_late()

    def _read_ready(self, worker: _Worker) -> None:
        with contextlib.suppress(BlockingIOError):
            if os.read(worker.ready_pipe, 1):
                worker.ready = True
                tell_siblings(self.controls, worker.index, up=True)
            os.close(worker.ready_pipe)  # read, or ended before it served
            worker.ready_pipe = -1

    def _handle_signals(self) -> None:
        signals, self._signals = self._signals, []
        for signum in signals:
            if signum in (signal.SIGTERM, signal.SIGINT):
                self.stop()
            elif signum == signal.SIGHUP:
                self._send(signal.SIGHUP)

    def stop(self) -> None:
        """Stop every worker (once), and start none again."""
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            log.info("shutting down", extra={"workers": len(self.workers)})
            self.restarts.clear()
            self._send(signal.SIGTERM)

    @property
    def _stop_timeout(self) -> float:
        return 2 * self.config.server.shutdown_timeout

    def _send(self, signum: int) -> None:
        for worker in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signum)

    def _kill_late(self) -> None:
        since = self._stopping_since
        if since is None or time.monotonic() < since + self._stop_timeout:
            return
        for worker in self.workers.values():
            log.warning(
                "worker did not stop in time; killed",
                extra={"worker": worker.index, "pid": worker.pid},
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGKILL)
        self._stopping_since = time.monotonic()  # once more, if even that is not reaped

    def _reap(self, *, first_start: bool) -> None:
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = next((w for w in self.workers.values() if w.pid == pid), None)
            if worker is None:
                continue
            del self.workers[worker.index]
            if worker.ready_pipe >= 0:
                os.close(worker.ready_pipe)
            tell_siblings(self.controls, worker.index, up=False)
            self._ended(worker, os.waitstatus_to_exitcode(wait_status), first_start)

    def _ended(self, worker: _Worker, status: int, first_start: bool) -> None:
        fields = {"worker": worker.index, "pid": worker.pid, "status": status}
        if self._stopping_since is not None:
            if status not in (0, -signal.SIGTERM):
                self._status = self._status or 1
            return
        if first_start and not worker.ready:
            # It logged why; the configuration or the store is at fault, not the worker.
            log.error("cannot start: worker %d exited with status %d", worker.index, status)
            self._status = 1
            self.stop()
        elif status == _EXIT_FENCED:
            log.critical("stopping: worker %d was fenced off its store", worker.index)
            self._status = _EXIT_FENCED
            self.stop()
        else:
            ran = time.monotonic() - worker.started_at
            failures, delay = restart_backoff(ran, worker.failures)
            log.warning("worker died; restarting", extra={**fields, "delay": delay})
            self.restarts[worker.index] = (time.monotonic() + delay, failures)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for index, (when, failures) in list(self.restarts.items()):
            if when <= now:
                del self.restarts[index]
                self._start(index, failures, again=True)

    def _start(self, index: int, failures: int, *, again: bool = False) -> None:
        ready_read, ready_write = os.pipe()
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the worker process, which exits in `_work`
            _end_with(supervisor)
            os.close(ready_read)
            self._work(
                WorkerSeat(
                    index,
                    self.config.workers,
                    self.listening,
                    self.inboxes,
                    ready_write,
                    self.controls,
                    self.run_token,
                    self.store_lock,
                    again,
                    frozenset(self.config.spread_vhosts),
                )
            )
        os.close(ready_write)
        os.set_blocking(ready_read, False)
        self.workers[index] = _Worker(index, pid, time.monotonic(), ready_read, failures=failures)

    def _work(self, seat: WorkerSeat) -> None:
        """In the worker process: forget the supervisor's signals and pipes, run the broker on
        `seat`, and exit with its status (never returns)."""
        status = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in _SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            # Until the broker's own handler is in place, a reload does not end the worker.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            os.close(self._wake_read)
            os.close(self._wake_write)
            for sibling in self.workers.values():
                if sibling.ready_pipe >= 0:
                    os.close(sibling.ready_pipe)
            _tag_log_records(seat.index)
            from batonmq.server.app import run

            status = run(self.config, seat)
        except BaseException:
            log.exception("worker %d failed", seat.index)
        finally:
            logging.shutdown()
            os._exit(status)


def restart_backoff(ran: float, failures: int) -> tuple[int, float]:
    """For a worker that ended after `ran` seconds, started after `failures` starts in a row
    that ended soon after: those starts in a row now, and the seconds to wait before the next.
    RESTART_DELAY, doubled for each start in a row after the first, at most RESTART_DELAY_MAX;
    a worker that ran STABLE_AFTER or longer counts none and waits RESTART_DELAY."""
    failures = 0 if ran >= STABLE_AFTER else failures + 1
    return failures, min(RESTART_DELAY * 2 ** max(failures - 1, 0), RESTART_DELAY_MAX)


def _management_sockets(config: Config) -> dict[str, list[socket.socket]] | None:
    """The management API's listening sockets, bound once here as the AMQP listener's are, so
    that every worker serves the API and a worker started again finds them as they were
    (nothing when the API is off); None when they cannot be bound (logged)."""
    http = config.listeners.http
    if not http.enabled:
        return {}
    try:
        return {"http": listening_sockets(http.bind, http.port)}
    except OSError as error:
        log.error(
            "cannot listen on %s:%s: %s",
            http.bind,
            http.port,
            error.strerror or error,
            extra={"listener": "http"},
        )
        return None


def _end_with(supervisor: int) -> None:
    """In a worker just forked: have the kernel SIGKILL it when the supervisor ends, however
    that ends (SIGKILL, the OOM killer). A worker without its supervisor would go on holding
    the port, the SQLite store's lock or its PostgreSQL lease, with no one to restart its
    siblings; so the whole broker ends, as a broker of one process does, and a new one
    recovers from the store. Linux's PR_SET_PDEATHSIG; elsewhere the worker outlives it."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = getattr(libc, "prctl", None)
    if prctl is None:
        return
    if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        log.warning("worker not tied to the supervisor: %s", os.strerror(ctypes.get_errno()))
    elif os.getppid() != supervisor:
        os._exit(1)  # it ended before the tie was made


def _tag_log_records(worker: int) -> None:
    """Every line a worker logs names it (`worker=<index>`)."""

    def tag(record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker"):
            record.worker = worker
        return True

    for logger in (logging.getLogger(), logging.getLogger("batonmq")):
        for handler in logger.handlers:
            handler.addFilter(tag)
