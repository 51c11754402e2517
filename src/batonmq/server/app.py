"""Run a broker: open its store and recover, listen, and shut down cleanly on a signal.

Two listeners, each with its own SASL mechanisms: `amqp` (plain TCP, `[listeners.amqp]`, on unless
`enabled = false`, which is seeds/004's sslOnly) and `amqps` (TLS, `[listeners.amqps]`, off unless
enabled). At least one must be on. The TLS settings are checked before the store is opened: an
error in them (`TlsConfigError`) stops the broker at start-up with exit status 1.

SIGTERM and SIGINT stop accepting connections, close every client connection with 320
CONNECTION_FORCED (spec: "the server ... is being shut down"), wait for them to go (at most
`server.shutdown_timeout`), commit what the journal holds, close the store, and exit 0.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import signal
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.config import Config, ConfigError
from batonmq.engine.access import AccessControl
from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.engine.recovery import restore
from batonmq.security.acl import AclError
from batonmq.security.authn import Authenticator
from batonmq.security.tls import server_context
from batonmq.server.pidfile import remove_pid_file, write_pid_file
from batonmq.server.protocol import AMQPProtocol, accept_tls
from batonmq.store.base import StoreError
from batonmq.store.configured import configured_store

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Pending connections a listening socket holds (asyncio's create_server default).
BACKLOG = 100
#: After an accept() that failed for want of resources (EMFILE, ENOBUFS), wait this long before
#: the next (asyncio's own servers wait one second, too).
ACCEPT_RETRY_DELAY = 1.0


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket as configured: where, which SASL mechanisms, and TLS or not."""

    #: "amqp" or "amqps", as in the configuration (`[listeners.<name>]`) and the log.
    name: str
    bind: str
    port: int
    mechanisms: tuple[str, ...]
    tls: ssl.SSLContext | None = None


def configured_listeners(config: Config) -> list[Listener]:
    """The enabled listeners, plain first; ConfigError (TlsConfigError for the TLS settings) if
    they cannot be used."""
    plain, secure = config.listeners.amqp, config.listeners.amqps
    listeners: list[Listener] = []
    if plain.enabled:
        mechanisms = tuple(plain.mechanisms.split())
        if "EXTERNAL" in mechanisms:
            raise ConfigError(
                "offers EXTERNAL, which needs a TLS client certificate: offer it on "
                "listeners.amqps only",
                key="listeners.amqp.mechanisms",
            )
        listeners.append(Listener("amqp", plain.bind, plain.port, mechanisms))
    if secure.enabled:
        listeners.append(
            Listener(
                "amqps",
                secure.bind,
                secure.port,
                tuple(secure.mechanisms.split()),
                server_context(secure),
            )
        )
    if not listeners:
        raise ConfigError(
            "is false and so is listeners.amqps.enabled: at least one listener must be enabled",
            key="listeners.amqp.enabled",
        )
    return listeners


class ListenError(Exception):
    """A listener's socket could not be opened (address in use, no permission, ...)."""

    def __init__(self, listener: Listener, error: OSError) -> None:
        super().__init__(f"{listener.name} {listener.bind}:{listener.port}: {error}")
        self.listener = listener
        self.error = error


class BrokerServer:
    """The broker and its AMQP listeners."""

    def __init__(self, config: Config) -> None:
        self.config = config
        #: Checked first, so that a broker with unusable listener settings opens nothing.
        self.listeners = configured_listeners(config)
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
            ),
            configured_store(config),
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
        # seeds/004 §2.2; AclError (file:line:column) if a file cannot be used: no start.
        self.broker.access = AccessControl.load(config.acl)
        self.protocols: set[AMQPProtocol] = set()
        #: Each listener's bound addresses, by listener name (after `start`).
        self.addresses: dict[str, list[tuple[str, int]]] = {}
        self._servers: list[asyncio.Server] = []
        #: The amqps listener's sockets, and the tasks that accept on them.
        self._tls_sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        #: TLS handshakes under way (their clients join `protocols` once it is done).
        self._handshakes: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def _offload(self, work: Callable[[], _T], done: Callable[[_T], None]) -> None:
        future = asyncio.get_running_loop().run_in_executor(self._login_checks, work)
        future.add_done_callback(lambda finished: done(finished.result()))

    def _new_protocol(self, listener: Listener) -> AMQPProtocol:
        server_config = self.config.server
        return AMQPProtocol(
            self.broker,
            server_config.write_buffer_high,
            server_config.write_buffer_low,
            self.protocols.discard,
            listener.mechanisms,
        )

    def _protocol_factory(self, listener: Listener) -> AMQPProtocol:
        protocol = self._new_protocol(listener)
        self.protocols.add(protocol)
        return protocol

    async def _listen(self, listener: Listener) -> list[tuple[str, int]]:
        """Open `listener`'s sockets; their bound addresses."""
        if listener.tls is None:
            server = await asyncio.get_running_loop().create_server(
                functools.partial(self._protocol_factory, listener),
                listener.bind,
                listener.port,
                reuse_address=True,
                backlog=BACKLOG,
            )
            self._servers.append(server)
            return [sock.getsockname()[:2] for sock in server.sockets]
        # TLS: the sockets are accepted here rather than by create_server, for accept_tls.
        sockets = _listening_sockets(listener.bind, listener.port)
        self._tls_sockets.extend(sockets)
        for sock in sockets:
            self._acceptors.append(asyncio.create_task(self._accept_tls(sock, listener)))
        return [sock.getsockname()[:2] for sock in sockets]

    async def _accept_tls(self, sock: socket.socket, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _address = await loop.sock_accept(sock)
            except (ConnectionAbortedError, InterruptedError):
                continue  # the client left before it was accepted
            except OSError as error:
                log.error(
                    "cannot accept a connection: %s",
                    error.strerror or error,
                    extra={"listener": listener.name},
                )
                await asyncio.sleep(ACCEPT_RETRY_DELAY)
                continue
            handshake = asyncio.create_task(self._tls_handshake(client, listener))
            self._handshakes.add(handshake)
            handshake.add_done_callback(functools.partial(self._tls_handshake_done, client))

    async def _tls_handshake(self, client: socket.socket, listener: Listener) -> None:
        assert listener.tls is not None
        protocol = await accept_tls(
            client, listener.tls, functools.partial(self._new_protocol, listener)
        )
        if protocol is not None and not protocol.lost.is_set():
            self.protocols.add(protocol)

    def _tls_handshake_done(self, client: socket.socket, handshake: asyncio.Task[None]) -> None:
        self._handshakes.discard(handshake)
        if handshake.cancelled():
            # At shutdown; perhaps before the socket went to a transport, which would close it.
            # (Closing it again is harmless: a closed socket ignores it, and a socket a uvloop
            # transport still uses stays open until the transport lets go of it.)
            client.close()
        elif (error := handshake.exception()) is not None:
            log.error("TLS handshake failed", exc_info=error)
            client.close()

    async def recover(self) -> None:
        """Open the store and bring back what it holds (StoreError if it cannot be used)."""
        store = self.broker.store
        assert store is not None
        started = time.monotonic()
        await store.open()
        try:
            recovery = await store.recover()
        except BaseException:
            await store.close()
            raise
        recovered = restore(self.broker, recovery)
        self.broker.journal.start()
        log.info(
            "recovered %d messages in %.3f s",
            recovered.messages,
            time.monotonic() - started,
            extra={
                "queues": recovered.queues,
                "store": store.kind,
                "location": store.location,
                "sync": self.config.persist.sync,
                "exchanges": recovered.exchanges,
                "bindings": recovered.bindings,
                "discarded_transient": recovery.discarded_entries,
            },
        )

    async def start(self) -> list[tuple[str, int]]:
        """Recover, then listen; returns the bound addresses of every listener, the amqp one's
        first (the real port when the configured one is 0). `addresses` has them by listener
        name."""
        await self.recover()
        try:
            for listener in self.listeners:
                self.addresses[listener.name] = await self._listen(listener)
        except OSError as error:
            await self._stop_listening()
            raise ListenError(listener, error) from error
        self._sweeper = asyncio.create_task(self._sweep_expired())
        for name, addresses in self.addresses.items():
            for host, port in addresses:
                log.info(
                    "listening",
                    extra={"listener": name, "addr": host, "port": port, "tls": name == "amqps"},
                )
        return [address for addresses in self.addresses.values() for address in addresses]

    async def _sweep_expired(self) -> None:
        """Every `message.expiration_interval`, remove expired messages from anywhere in their
        queues (the ones at a queue's head go at once without this)."""
        while True:
            await asyncio.sleep(self.config.message.expiration_interval)
            expired = self.broker.expire_messages()
            if expired:
                log.info("expired %d messages", expired)

    async def shutdown(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self._stop_listening()
        forced = HardError(ReplyCode.CONNECTION_FORCED, "broker shutdown")
        for protocol in list(self.protocols):
            if protocol.session is not None:
                protocol.session.close(forced)
        waiting = [asyncio.ensure_future(protocol.lost.wait()) for protocol in self.protocols]
        if waiting:
            _done, pending = await asyncio.wait(
                waiting, timeout=self.config.server.shutdown_timeout
            )
            for future in pending:
                future.cancel()
            for protocol in list(self.protocols):
                if protocol.transport is not None:
                    protocol.transport.abort()
        for server in self._servers:
            await server.wait_closed()
        await self.close_store()
        self._login_checks.shutdown(wait=False, cancel_futures=True)

    async def _stop_listening(self) -> None:
        """Accept no more connections, and drop the TLS handshakes under way."""
        for server in self._servers:
            server.close()
        tasks = [*self._acceptors, *self._handshakes]
        for task in tasks:
            task.cancel()
        # The event loop lets go of a socket when the accept on it has ended, not before.
        await asyncio.gather(*tasks, return_exceptions=True)
        for sock in self._tls_sockets:
            sock.close()

    async def close_store(self) -> None:
        """Commit what the journal holds and close the store."""
        await self.broker.journal.stop()
        if self.broker.store is not None:
            await self.broker.store.close()


async def serve(config: Config, started: Callable[[BrokerServer], None] | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    server = BrokerServer(config)
    try:
        await server.start()
    except BaseException:
        await server.close_store()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload_acl, server)
    pid_file = write_pid_file(config.data_dir)
    log.info("broker started", extra={"broker": config.broker_name, "pid": os.getpid()})
    if started is not None:
        started(server)
    try:
        await stop.wait()
        log.info("shutting down", extra={"connections": len(server.protocols)})
        await server.shutdown()
    finally:
        remove_pid_file(pid_file)
    log.info("shutdown complete")


def _reload_acl(server: BrokerServer) -> None:
    """SIGHUP: read the ACL files again; a file that cannot be used leaves the old rules."""
    try:
        server.broker.access.reload()
    except AclError as error:
        log.error("ACL reload failed, keeping the old rules: %s", error)
    else:
        log.info("ACL reloaded")


def _listening_sockets(bind: str, port: int) -> list[socket.socket]:
    """Non-blocking sockets listening on every address `bind` names (as create_server does):
    SO_REUSEADDR, and IPv6 sockets for IPv6 alone."""
    addresses = socket.getaddrinfo(
        bind or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(addresses):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _tune_garbage_collector() -> None:
    """Every message allocates a few short-lived objects, which would set off the cyclic
    collector every 700 allocations (CPython's default) and have it walk everything the broker
    holds (queued messages included) at each older generation's turn. Objects alive at start
    are left out of collections (`gc.freeze`), and the youngest generation waits for more."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def run(config: Config) -> int:
    """The `batonmq` command's body: 0 after a clean shutdown, 1 if it cannot start."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        runner = asyncio.run
    else:
        runner = uvloop.run
    _tune_garbage_collector()
    try:
        runner(serve(config))
    except ConfigError as error:  # TlsConfigError among them
        log.error("cannot start: %s", error)
        return 1
    except AclError as error:
        log.error("cannot start: %s", error)
        return 1
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
