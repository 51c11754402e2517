"""A TCP proxy on 127.0.0.1 that the tests put between a client and a broker to make the network
fail: forward, drop, blackhole, delay, or cut the client's stream in the middle of a frame.

The mode applies to the connections already open as well as to new ones, so a test can let a
client connect and work, then break its network under it::

    with FaultProxy(broker.host, broker.port) as proxy:
        connection = pika.BlockingConnection(pika.URLParameters(proxy.url(broker)))
        ...
        proxy.set_mode(Blackhole())

The proxy runs its own asyncio loop in a thread, so blocking clients (pika) and asyncio ones
(aio-pika, on the test's loop) use it alike.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TypeVar

from tests.brokerproc import RunningBroker

_T = TypeVar("_T")


@dataclass(frozen=True)
class Forward:
    """Pass every byte on, both ways."""


@dataclass(frozen=True)
class Drop:
    """Close both sides of every open connection now, and of every new one at once."""


@dataclass(frozen=True)
class Blackhole:
    """Keep the sockets open and forward nothing either way: what was sent is lost, and
    neither end hears of it (a dead network path, not a closed connection)."""


@dataclass(frozen=True)
class Delay:
    """Hold each chunk `seconds` before passing it on (both ways, in order)."""

    seconds: float


@dataclass(frozen=True)
class Cut:
    """Forward `after_bytes` more bytes of each connection's client-to-broker stream (counted
    from the switch, or from the start for a new connection), then close both sides: the
    broker sees the stream end in the middle of whatever it was receiving. With `to_client`,
    the broker-to-client stream is counted instead: the client sees its end mid-delivery."""

    after_bytes: int
    to_client: bool = False


Mode = Forward | Drop | Blackhole | Delay | Cut

#: An item of a direction's queue: when to write the chunk (loop time) and the chunk; None
#: closes the connection once the chunks before it are written.
_Item = tuple[float, bytes] | None


@dataclass
class ProxiedConnection:
    """One client connection through the proxy."""

    #: The client-to-broker bytes forwarded (kept when the proxy records them).
    upstream: bytearray = field(default_factory=bytearray)
    #: How many client-to-broker bytes were passed on to the broker in all.
    upstream_count: int = 0
    #: How many broker-to-client bytes were passed on to the client in all.
    downstream_count: int = 0
    #: The proxy's own address on its connection to the broker ("127.0.0.1:PORT"): the peer
    #: that the broker sees and logs for this client.
    broker_side_address: str = ""
    #: Where a Cut ended the stream it counted (that stream's byte count), if one did.
    cut_at: int | None = None
    #: The Cut in force, and how many bytes of its stream may still pass.
    _cut: Cut | None = None
    _cut_remaining: int = 0
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    closed: bool = False

    def start_cut(self, cut: Cut | None) -> None:
        """Count toward `cut` from now on (None: no cut)."""
        self._cut = cut
        self._cut_remaining = cut.after_bytes if cut is not None else 0

    def close(self) -> None:
        """Close both sides at once, dropping what is not yet written."""
        self.closed = True
        for writer in self._writers:
            writer.transport.abort()
        for task in self._tasks:
            task.cancel()


class FaultProxy:
    """A proxy on 127.0.0.1 and a free port to `target_host`:`target_port`; a context manager.
    `record_upstream` keeps every client-to-broker byte forwarded (`connections[i].upstream`)."""

    def __init__(self, target_host: str, target_port: int, *, record_upstream: bool = False):
        self.target = (target_host, target_port)
        self.record_upstream = record_upstream
        self.host = "127.0.0.1"
        self.port = 0
        #: Every connection accepted, in order.
        self.connections: list[ProxiedConnection] = []
        self._mode: Mode = Forward()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fault-proxy", daemon=True
        )
        self._server: asyncio.Server | None = None

    def url(self, broker: RunningBroker, query: str = "") -> str:
        """`broker`'s AMQP URL with the proxy's address in place of the broker's."""
        vhost = "%2F" if broker.vhost == "/" else broker.vhost
        url = f"amqp://{broker.username}:{broker.password}@{self.host}:{self.port}/{vhost}"
        return f"{url}?{query}" if query else url

    # Control, from the test's thread ---------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *_exc: object) -> None:
        self._call(self._shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def set_mode(self, mode: Mode) -> None:
        """Apply `mode` to the open connections and to new ones; returns once it is in force."""
        self._call(self._apply(mode))

    def _call(self, coroutine: Coroutine[object, object, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    # The proxy, in its loop -------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _shut(self) -> None:
        assert self._server is not None
        self._server.close()
        for connection in self.connections:
            connection.close()
        await asyncio.gather(
            *(task for connection in self.connections for task in connection._tasks),
            return_exceptions=True,
        )
        await self._server.wait_closed()

    async def _apply(self, mode: Mode) -> None:
        self._mode = mode
        for connection in self.connections:
            if connection.closed:
                continue
            if isinstance(mode, Drop):
                connection.close()
            else:
                connection.start_cut(mode if isinstance(mode, Cut) else None)

    async def _accept(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        connection = ProxiedConnection()
        self.connections.append(connection)
        connection._writers.append(client)
        if isinstance(self._mode, Drop):
            connection.close()
            return
        if isinstance(self._mode, Cut):
            connection.start_cut(self._mode)
        try:
            server_reader, server = await asyncio.open_connection(*self.target)
        except OSError:
            connection.close()
            return
        connection._writers.append(server)
        address = server.get_extra_info("sockname")
        connection.broker_side_address = f"{address[0]}:{address[1]}"
        if connection.closed:  # dropped while connecting
            connection.close()
            return
        for reader, writer, upstream in (
            (client_reader, server, True),
            (server_reader, client, False),
        ):
            # Bounded, so that a slow reader holds the sender back as a socket would.
            queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=16)
            connection._tasks.append(
                asyncio.create_task(self._read(connection, reader, queue, upstream))
            )
            connection._tasks.append(asyncio.create_task(self._write(connection, writer, queue)))

    async def _read(
        self,
        connection: ProxiedConnection,
        reader: asyncio.StreamReader,
        queue: asyncio.Queue[_Item],
        upstream: bool,
    ) -> None:
        """Read one direction and queue what the mode lets through, with its time to go."""
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionError:
                chunk = b""
            mode = self._mode
            if not chunk:
                if not isinstance(mode, Blackhole):
                    await queue.put(None)
                # In a blackhole the other end hears nothing of this one's end either.
                return
            if isinstance(mode, Blackhole):
                continue
            if connection.cut_at is not None:
                return  # the other direction was cut: nothing more passes this way
            due = self._loop.time() + (mode.seconds if isinstance(mode, Delay) else 0.0)
            cut = connection._cut
            if cut is not None and cut.to_client != upstream:
                if len(chunk) >= connection._cut_remaining:
                    chunk = chunk[: connection._cut_remaining]
                    passed = connection.upstream_count if upstream else connection.downstream_count
                    connection.cut_at = passed + len(chunk)
                connection._cut_remaining -= len(chunk)
            if upstream:
                connection.upstream_count += len(chunk)
                if self.record_upstream:
                    connection.upstream += chunk
            else:
                connection.downstream_count += len(chunk)
            if chunk:
                await queue.put((due, chunk))
            if connection.cut_at is not None:
                await queue.put(None)
                return

    async def _write(
        self,
        connection: ProxiedConnection,
        writer: asyncio.StreamWriter,
        queue: asyncio.Queue[_Item],
    ) -> None:
        """Write one direction's queued chunks when due; at the end, close both sides."""
        while (item := await queue.get()) is not None:
            due, chunk = item
            await asyncio.sleep(max(0.0, due - self._loop.time()))
            writer.write(chunk)
            try:
                await writer.drain()
            except ConnectionError:
                break
        # Written out first, so that a cut delivers its half frame before the end.
        for other in connection._writers:
            other.close()
        connection.closed = True
