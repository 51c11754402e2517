"""The broker's listening sockets: which are configured, opening them, accepting on them, and
closing them.

Two listeners, each with its own SASL mechanisms: `amqp` (plain TCP, `[listeners.amqp]`, on unless
`enabled = false`, which is Qpid manual's sslOnly) and `amqps` (TLS, `[listeners.amqps]`, off unless
enabled). At least one must be on. The TLS settings are checked before anything is opened: an
error in them (`TlsConfigError`) stops the broker at start-up.

The amqps sockets are accepted here, not by `create_server(ssl=...)`: with asyncio and uvloop a
handshake that fails there is silent and leaves the protocol behind, while `accept_tls` logs it
with the client's address and hands over a protocol only once the handshake is done.

While the broker is quiesced (`quiesce bkr`) a new client's socket is closed as soon as it is
accepted, before any AMQP byte is read or written: the client had no connection, as if the
port had refused it, so a client with several hosts (pika's list of parameters, aio-pika's
`connect_robust`, kombu's failover) goes on to the next one, and no AMQP reply code could tell it
more (connection.close needs a connection, which it never opened). The listening sockets stay
open, so that unquiesce needs no port that another process might have taken meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from batonmq.config import Config, ConfigError
from batonmq.security.tls import server_context
from batonmq.server.protocol import AMQPProtocol, accept_tls

log = logging.getLogger(__name__)

#: Pending connections a listening socket holds (asyncio's create_server default).
BACKLOG: Final = 100
#: After an accept() that failed for want of resources (EMFILE, ENOBUFS), wait this long before
#: the next (asyncio's own servers wait one second, too).
ACCEPT_RETRY_DELAY: Final = 1.0


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket as configured: where, which SASL mechanisms, and TLS or not."""

    #: "amqp" or "amqps", as in the configuration (`[listeners.<name>]`) and the log.
    name: str
    bind: str
    port: int
    mechanisms: tuple[str, ...]
    tls: ssl.SSLContext | None = None
    #: Sockets already listening, which a worker inherited from the supervisor (empty: the
    #: listener opens its own).
    sockets: tuple[socket.socket, ...] = ()


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


class Listening:
    """The open sockets of `listeners`. Each accepted client gets a protocol from
    `new_protocol(listener)`, which is passed to `accepted` once it serves (after the TLS
    handshake on amqps)."""

    def __init__(
        self,
        listeners: list[Listener],
        new_protocol: Callable[[Listener], AMQPProtocol],
        accepted: Callable[[AMQPProtocol], None],
    ) -> None:
        self.listeners = listeners
        self._new_protocol = new_protocol
        self._accepted = accepted
        self._servers: list[asyncio.Server] = []
        #: The amqps listener's sockets, and the tasks that accept on them.
        self._tls_sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        #: TLS handshakes under way.
        self._handshakes: set[asyncio.Task[None]] = set()
        #: Whether new clients are refused (`quiesce bkr`); open connections are served.
        self.quiesced = False

    @property
    def handshakes(self) -> int:
        """TLS handshakes under way."""
        return len(self._handshakes)

    async def open(self) -> dict[str, list[tuple[str, int]]]:
        """Open every listener's sockets; their bound addresses by listener name. ListenError
        (with nothing left open) when one cannot be opened."""
        addresses: dict[str, list[tuple[str, int]]] = {}
        for listener in self.listeners:
            try:
                addresses[listener.name] = await self._listen(listener)
            except OSError as error:
                await self.close()
                raise ListenError(listener, error) from error
        return addresses

    async def close(self) -> None:
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

    async def wait_closed(self) -> None:
        for server in self._servers:
            await server.wait_closed()

    def _serving(self, listener: Listener) -> asyncio.Protocol:
        if self.quiesced:
            return _Refused()
        protocol = self._new_protocol(listener)
        self._accepted(protocol)
        return protocol

    async def _listen(self, listener: Listener) -> list[tuple[str, int]]:
        if listener.sockets and listener.tls is None:
            # A worker's: each worker accepts on the sockets they share.
            loop = asyncio.get_running_loop()
            for sock in listener.sockets:
                self._servers.append(
                    await loop.create_server(
                        functools.partial(self._serving, listener), sock=sock, backlog=BACKLOG
                    )
                )
            return [sock.getsockname()[:2] for sock in listener.sockets]
        if listener.tls is None:
            server = await asyncio.get_running_loop().create_server(
                functools.partial(self._serving, listener),
                listener.bind,
                listener.port,
                reuse_address=True,
                backlog=BACKLOG,
            )
            self._servers.append(server)
            return [sock.getsockname()[:2] for sock in server.sockets]
        sockets = list(listener.sockets) or listening_sockets(listener.bind, listener.port)
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
            if self.quiesced:
                client.close()
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
            self._accepted(protocol)

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


class _Refused(asyncio.Protocol):
    """A client accepted while the broker is quiesced: its socket is closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


def listening_sockets(bind: str, port: int) -> list[socket.socket]:
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
