"""Run a broker: open its store and recover, listen (`batonmq.server.listeners`), and shut down
cleanly on a signal.

Everything that can be checked before the store is opened is checked first: an error in the
listener, TLS or ACL settings stops the broker at start-up with exit status 1.

SIGTERM and SIGINT (and `shutdown bkr` over the API) stop accepting connections, close every client
connection with 320 CONNECTION_FORCED (spec: "the server ... is being shut down"), wait for them to
go (at most `server.shutdown_timeout`), commit what the journal holds, close the store, and exit 0.
SIGHUP reloads the ACL files.

A broker whose store another broker has taken over (StoreFenced: its fencing epoch superseded)
stops serving at once, as on SIGTERM but writing nothing more, logs why, and exits with status
3, so that a supervisor can tell it from a crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import inspect
import logging
import os
import signal
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from batonmq import __version__
from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.config import Config, ConfigError
from batonmq.engine.access import AccessControl
from batonmq.engine.api import EngineApi
from batonmq.engine.autocreate import AutocreatePolicy, IdleQueueSweep
from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.engine.diskguard import DiskGuard
from batonmq.engine.memory import MemoryGuard, Thresholds, broker_resident_bytes, resident_bytes
from batonmq.engine.monitors import queue_monitors
from batonmq.engine.rates import SAMPLE_INTERVAL
from batonmq.engine.recovery import restore
from batonmq.management.perworker import adopt_taken_over
from batonmq.management.render import Node
from batonmq.management.topics import BrokerTopics
from batonmq.management.workers import Workers
from batonmq.security.acl import AclError
from batonmq.security.authn import Authenticator
from batonmq.security.tls import server_context
from batonmq.server.control import Administration
from batonmq.server.handoff import Origin
from batonmq.server.listeners import Listener, ListenError, Listening, configured_listeners
from batonmq.server.pidfile import remove_pid_file, write_pid_file
from batonmq.server.placement import WorkerSeat, store_placement
from batonmq.server.protocol import AMQPProtocol
from batonmq.server.relay import Relay
from batonmq.server.worker import WorkerDuties
from batonmq.store.base import StoreError, StoreFenced
from batonmq.store.configured import (
    configured_store,
    configured_stream_tables,
    store_broker_id,
    waits_for_no_standby,
)
from batonmq.store.placement import streams_root

if TYPE_CHECKING:
    from batonmq.cluster.member import ClusterMember
    from batonmq.management.http import HttpListener

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class BrokerServer:
    """The broker, its AMQP listeners and its management HTTP API listener."""

    def __init__(self, config: Config, seat: WorkerSeat | None = None) -> None:
        """`seat`: this process's place among the broker's workers (None: the broker runs in
        this one process)."""
        self.config = config
        self.seat = seat
        #: Checked first, so that a broker with unusable listener settings opens nothing.
        self.listeners = configured_listeners(config)
        if seat is not None:
            # On the sockets the supervisor bound.
            self.listeners = [
                dataclasses.replace(listener, sockets=tuple(seat.listening[listener.name]))
                for listener in self.listeners
            ]
        store = (
            configured_store(config, placement=store_placement(config))
            if seat is None
            else configured_store(
                config,
                seat.index,
                held_lock=seat.store_lock,
                run=seat.run,
                # An HA member's first worker to start places its rows (`PostgresStore`).
                placement=store_placement(config) if config.cluster.ha else None,
            )
        )
        self.broker = Broker(
            BrokerSettings(
                name=config.broker_name,
                default_vhost=config.default_vhost,
                frame_max=config.amqp.frame_max,
                channel_max=config.amqp.channel_max,
                heartbeat=config.amqp.heartbeat,
                max_message_size=config.amqp.max_message_size,
                guest_loopback_only=config.auth.guest_loopback_only,
                page_window=config.persist.page_window,
                max_connections_per_user=config.limits.max_connections_per_user,
                max_connections_per_vhost=config.limits.max_connections_per_vhost,
                max_consumers_per_channel=config.limits.max_consumers_per_channel,
                max_messages=config.limits.max_messages,
                max_bytes=config.limits.max_bytes,
                autocreate=AutocreatePolicy.from_config(config.autocreate),
                streams_dir=streams_root(config.data_dir, None if seat is None else seat.index),
                stream_tables=configured_stream_tables(store),
            ),
            store,
        )
        auth = config.auth
        #: Password checks (scrypt, ~40 ms and 16 MiB each) run here, two at a time at most.
        self._login_checks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="login")
        self.broker.authenticator = Authenticator(
            guest_loopback_only=auth.guest_loopback_only,
            max_failures=auth.max_failures,
            failure_window=auth.failure_window,
            lockout=auth.lockout,
            offload=self._offload,
        )
        # Qpid manual §2.2; AclError (file:line:column) if a file cannot be used: no start.
        self.broker.access = AccessControl.load(config.acl)
        self.protocols: set[AMQPProtocol] = set()
        self.listening = Listening(self.listeners, self._new_protocol, self.protocols.add)
        #: The management API's HTTPS context (listeners.amqps's certificate), checked now.
        http = config.listeners.http
        self._http_tls: ssl.SSLContext | None = (
            server_context(config.listeners.amqps) if http.enabled and http.tls else None
        )
        self.http: HttpListener | None = None
        #: The metrics and event topics, from `start` on.
        self.topics: BrokerTopics | None = None
        self.started_at = time.time()
        #: This broker as a member of its HA cluster (cluster.ha), once started.
        self.member: ClusterMember | None = None
        #: Each listener's bound addresses, by listener name (after `start`).
        self.addresses: dict[str, list[tuple[str, int]]] = {}
        #: The broker's periodic work (`every`), cancelled at shutdown.
        self._periodic: list[asyncio.Task[None]] = []
        #: With several workers: what this one does beside (`batonmq.server.worker`).
        self.worker = (
            None
            if seat is None
            else WorkerDuties(
                config,
                seat,
                self.broker,
                self.protocols,
                self._handed_protocol,
                lambda: self.listening.quiesced,
            )
        )
        #: Quiesce and shutdown, for the engine's API (`quiesce bkr`, `shutdown bkr`); the
        #: first of several workers counts its siblings' clients too.
        self.control = Administration(
            self.listening,
            self.protocols,
            stops_broker=seat is not None,
            siblings_serve=(
                self.worker.siblings_serve
                if self.worker is not None and self.worker.seat.index == 0
                else None
            ),
        )
        self.broker.control = self.control
        #: TLS connections this worker accepted and relays to their owners.
        self.relays: set[Relay] = set()

    def _offload(self, work: Callable[[], _T], done: Callable[[_T], None]) -> None:
        future = asyncio.get_running_loop().run_in_executor(self._login_checks, work)
        future.add_done_callback(lambda finished: done(finished.result()))

    def _new_protocol(
        self, listener: Listener, handed: tuple[Origin, bytes] | None = None
    ) -> AMQPProtocol:
        server_config = self.config.server
        return AMQPProtocol(
            self.broker,
            server_config.write_buffer_high,
            server_config.write_buffer_low,
            self.protocols.discard,
            (listener.name, listener.mechanisms),
            self.seat,
            handed,
            self._relayed,
        )

    def _relayed(self, relay: Relay) -> None:
        self.relays.add(relay)
        relay.on_end = self.relays.discard

    def _handed_protocol(self, origin: Origin, received: bytes) -> AMQPProtocol | None:
        """The protocol of a connection another worker handed over, as a client of the
        listener it came in on (None if this worker has no such listener)."""
        for listener in self.listeners:
            if listener.name == origin.listener:
                return self._new_protocol(listener, (origin, received))
        return None

    async def recover(self) -> None:
        """Open the store and bring back what it holds (StoreError if it cannot be used)."""
        store = self.broker.store
        assert store is not None
        started = time.monotonic()
        await store.open()
        try:
            recovery = await store.recover()
            peers = await store.definitions_of(self._siblings_ids()) if self._spreads else None
            settings = await store.connection_settings()
        except BaseException:
            await store.close()
            raise
        recovered = restore(self.broker, recovery, peers)
        self.broker.journal.start()
        if waits_for_no_standby(self.config, settings):
            log.warning(
                "persist.postgres.durability %s asks for replica acknowledgements, but the "
                "PostgreSQL server's synchronous_standby_names is empty: commits wait for no "
                "standby until the server names its synchronous standbys",
                self.config.persist.postgres.durability,
                extra={"location": store.location},
            )
        log.info(
            "recovered %d messages in %.3f s",
            recovered.messages,
            time.monotonic() - started,
            extra={
                "queues": recovered.queues,
                "store": store.kind,
                "location": store.location,
                **settings,
                "exchanges": recovered.exchanges,
                "bindings": recovered.bindings,
                "discarded_transient": recovery.discarded_entries,
                "unclean_stop": recovery.unclean_stop,
            },
        )

    @property
    def _spreads(self) -> bool:
        """Whether this worker serves a virtual host spread over the workers."""
        return self.seat is not None and self.seat.count > 1 and bool(self.seat.spread)

    def _siblings_ids(self) -> list[str]:
        """The store identities of this worker's siblings."""
        assert self.seat is not None
        return [
            store_broker_id(self.config, worker)
            for worker in range(self.seat.count)
            if worker != self.seat.index
        ]

    async def start(self) -> list[tuple[str, int]]:
        """Recover, then listen; returns the bound addresses of every listener, the amqp one's
        first (the real port when the configured one is 0). `addresses` has them by listener
        name."""
        await self.recover()
        if self.config.cluster.ha and self.seat is not None:
            # A share of a takeover that this worker's sibling claimed while it was down.
            await EngineApi(self.broker).adopt_taken_over(self.seat.owns)
        if self.worker is not None and await self.worker.siblings_quiesced():
            self.control.quiesce()  # before the listeners open: no client comes in meanwhile
        self.addresses = await self.listening.open()
        try:
            if self.worker is not None:
                self.worker.start()
            if self.config.cluster.ha and (self.seat is None or self.seat.index == 0):
                await self._join_cluster()
            if self.config.listeners.http.enabled:
                self.addresses["http"] = await self._open_http()
        except BaseException:
            if self.member is not None:
                await self.member.close()
            await self.listening.close()
            raise
        self.every(self.config.message.expiration_interval, self._sweep_expired)
        memory = self.config.memory
        memory_guard = MemoryGuard(
            self.broker,
            memory.budget,
            Thresholds(
                memory.yellow_threshold,
                memory.orange_threshold,
                memory.red_threshold,
                memory.green_count,
                memory.yellow_count,
                memory.orange_count,
            ),
            # A worker holds the budget against the whole broker's memory.
            resident_bytes
            if self.seat is None
            else functools.partial(broker_resident_bytes, os.getppid()),
        )
        memory_guard.check()
        self.every(memory.check_interval, memory_guard.check)
        policy = self.broker.settings.autocreate
        if policy.pattern is not None and policy.delete_after:
            sweep = IdleQueueSweep(self.broker, policy)
            self.every(sweep.interval, sweep.check)
        disk_guard = DiskGuard(self.broker, self.config.disk, self.config.data_dir)
        disk_guard.check()  # a disk already short of space holds producers from the start
        self.every(self.config.disk.check_interval, disk_guard.check)
        # The Overload requirements: slow consumer disconnect and threshold alerts, when configured.
        for interval, work in queue_monitors(self.broker, self.config):
            self.every(interval, work)
        self.every(SAMPLE_INTERVAL, EngineApi(self.broker).sample_rates)
        topic = self.config.metrics.topic
        self.topics = BrokerTopics(self._workers(), self._node(), topic)
        if topic.enabled:
            self.every(topic.interval, self.topics.publish_metrics)
        for name, addresses in self.addresses.items():
            for host, port in addresses:
                log.info(
                    "listening",
                    extra={"listener": name, "addr": host, "port": port, "tls": self._tls(name)},
                )
        return [address for addresses in self.addresses.values() for address in addresses]

    async def _join_cluster(self) -> None:
        """Register in the cluster's shared store and watch the other members (the HA guide's
        failure detection and takeover: `batonmq.cluster.member`)."""
        from batonmq.cluster.member import ClusterMember
        from batonmq.store.postgres import PostgresStore

        store = self.broker.store
        assert isinstance(store, PostgresStore)  # cluster.ha requires it (config checks)
        amqp = self.addresses.get("amqp") or self.addresses["amqps"]
        worker = self.worker
        self.member = (
            ClusterMember(self.config, self.broker, store)
            if worker is None
            else ClusterMember(
                self.config,
                self.broker,
                store,
                owns=worker.seat.owns,
                siblings_adopt=functools.partial(worker.workers.on_siblings, adopt_taken_over),
                count_clients=self.control.count_siblings,
            )
        )
        heartbeat = self.config.cluster.heartbeat
        try:
            await self.member.start(amqp[0])
        except OSError as error:
            self.member = None
            raise ListenError(
                Listener("heartbeat", heartbeat.hostname or amqp[0][0], heartbeat.port, ()), error
            ) from error

    def _tls(self, listener: str) -> bool:
        return listener == "amqps" or (listener == "http" and self._http_tls is not None)

    async def _open_http(self) -> list[tuple[str, int]]:
        """Start the management API (aiohttp is loaded only here: not when it is disabled)."""
        from batonmq.management.http import HttpListener

        http = self.config.listeners.http
        self.http = HttpListener(
            self._workers(),
            self._node(),
            http.bind,
            http.port,
            self._http_tls,
            () if self.seat is None else self.seat.listening.get("http", ()),
        )
        try:
            return await self.http.start()
        except OSError as error:
            self.http = None
            raise ListenError(Listener("http", http.bind, http.port, ()), error) from error

    def _workers(self) -> Workers:
        """This worker and its siblings, for what the management plane asks of every worker
        (only this process without workers)."""
        return Workers(EngineApi(self.broker)) if self.worker is None else self.worker.workers

    def _node(self) -> Node:
        """What the management API and the metrics topic say about this broker."""
        return Node(
            f"{self.config.broker_name}@{socket.gethostname()}",
            __version__,
            self.started_at,
            [
                ("amqp/ssl" if name == "amqps" else "amqp", host, port)
                for name, addresses in self.addresses.items()
                for host, port in addresses
            ],
        )

    def every(self, interval: float, work: Callable[[], object]) -> None:
        """Run `work` every `interval` seconds until shutdown (awaited, when it is a coroutine
        function); an exception it raises is logged and the next run goes ahead."""

        async def repeat() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    done = work()
                    if inspect.isawaitable(done):
                        await done
                except Exception:
                    log.exception("periodic task %s failed", getattr(work, "__name__", work))

        self._periodic.append(asyncio.create_task(repeat()))

    def _sweep_expired(self) -> None:
        """Remove expired messages from anywhere in their queues (the ones at a queue's head go
        at once without this)."""
        expired = self.broker.expire_messages()
        if expired:
            log.info("expired %d messages", expired)

    async def shutdown(self) -> None:
        for task in self._periodic:
            task.cancel()
        if self.topics is not None:
            self.topics.close()
        if self.member is not None:
            await self.member.close()
        if self.http is not None:
            await self.http.stop()
        if self.worker is not None:
            await self.worker.close()
        await self.listening.close()
        forced = HardError(ReplyCode.CONNECTION_FORCED, "broker shutdown")
        for protocol in list(self.protocols):
            if protocol.session is not None:
                protocol.session.close(forced)
        # Relayed connections end when their owners close them (every worker is stopping).
        waiting = [asyncio.ensure_future(protocol.lost.wait()) for protocol in self.protocols]
        waiting += [asyncio.ensure_future(relay.ended.wait()) for relay in self.relays]
        if waiting:
            _done, pending = await asyncio.wait(
                waiting, timeout=self.config.server.shutdown_timeout
            )
            for future in pending:
                future.cancel()
            for protocol in list(self.protocols):
                if protocol.transport is not None:
                    protocol.transport.abort()
            for relay in list(self.relays):
                relay.abort()
        await self.listening.wait_closed()
        self.broker.session_log.flush()  # the counts of repeated lines not yet logged
        await self.close_store()
        self._login_checks.shutdown(wait=False, cancel_futures=True)

    async def close_store(self) -> None:
        """Commit what the journal holds and close the store."""
        await self.broker.journal.stop()
        await asyncio.to_thread(self.broker.streams.close)
        if self.broker.store is not None:
            await self.broker.store.close()


async def serve(
    config: Config,
    started: Callable[[BrokerServer], None] | None = None,
    seat: WorkerSeat | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, a shutdown asked for over the API (`shutdown bkr`), or until
    another broker takes the store over. `seat`: as a worker of a broker with several
    (`batonmq.server.supervisor`, which holds the pid file)."""
    server = BrokerServer(config, seat)
    stop = server.control.stop
    fenced: list[StoreFenced] = []

    def fence(error: StoreFenced) -> None:
        log.critical("stopping: %s", error)
        fenced.append(error)
        stop.set()

    if server.broker.store is not None:
        server.broker.store.on_fenced(fence)
    # Before the listeners open: a signal sent as soon as the port accepts (a supervisor, a
    # test) must find its handler, not the default action that ends the process.
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload_acl, server)
    try:
        await server.start()
    except BaseException:
        await server.close_store()
        raise
    pid_file = write_pid_file(config.data_dir) if seat is None else None
    if seat is None:
        log.info("broker started", extra={"broker": config.broker_name, "pid": os.getpid()})
    else:
        log.info("worker started", extra={"worker": seat.index, "pid": os.getpid()})
        os.write(seat.ready, b"R")
    if started is not None:
        started(server)
    try:
        await stop.wait()
        log.info("shutting down", extra={"connections": len(server.protocols)})
        await server.shutdown()
    finally:
        if pid_file is not None:
            remove_pid_file(pid_file)
    if fenced:
        raise fenced[0]
    log.info("shutdown complete")


def _reload_acl(server: BrokerServer) -> None:
    """SIGHUP: read the ACL files again; a file that cannot be used leaves the old rules."""
    try:
        server.broker.access.reload()
    except AclError as error:
        log.error("ACL reload failed, keeping the old rules: %s", error)
    else:
        log.info("ACL reloaded")


def tune_garbage_collector() -> None:
    """Every message allocates a few short-lived objects, which would set off the cyclic
    collector every 700 allocations (CPython's default) and have it walk everything the broker
    holds (queued messages included) at each older generation's turn. Objects alive at start
    are left out of collections (`gc.freeze`), and the youngest generation waits for more."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


#: The exit status of a broker that another broker fenced off its store.
EXIT_FENCED = 3


def run(config: Config, seat: WorkerSeat | None = None) -> int:
    """The `batonmq` command's body: 0 after a clean shutdown, 1 if it cannot start,
    EXIT_FENCED if another broker took its store over. With `broker.workers` above 1, the
    supervisor's (`batonmq.server.supervisor`), which runs this in each worker (`seat`)."""
    if config.workers > 1 and seat is None:
        from batonmq.server.supervisor import supervise

        return supervise(config)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        runner = asyncio.run
    else:
        runner = uvloop.run
    tune_garbage_collector()
    try:
        runner(serve(config, seat=seat))
    except ConfigError as error:  # TlsConfigError among them
        log.error("cannot start: %s", error)
        return 1
    except AclError as error:
        log.error("cannot start: %s", error)
        return 1
    except StoreFenced:
        return EXIT_FENCED  # logged when it was found
    except StoreError as error:
        log.error("cannot open the store: %s", error)
        return 1
    except ListenError as error:
        listener = error.listener
        log.error(
            "cannot listen on %s:%s: %s",
            listener.bind,
            listener.port,
            error.error.strerror or error.error,
            extra={"listener": listener.name},
        )
        return 1
    except OSError as error:  # anything else the operating system refused at start-up
        log.error("cannot start: %s", error)
        return 1
    return 0
