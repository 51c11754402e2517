"""A minimal AMQP 0-9-1 client connection on an asyncio Protocol.

Everything a broker sends goes through `InboundScanner` (frames.py): deliveries and confirms are
counted there; other methods are decoded with pamqp and queued for `call`/`expect`. The handshake
(PLAIN as the `Endpoint`'s user, heartbeats off, one channel) and the control methods are pamqp
objects; the hot paths (publisher.py, consumer.py) write pre-encoded bytes to `transport`
directly.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from pamqp import commands, frame
from pamqp.base import Frame

from benchmarks.loadgen.frames import PROTOCOL_HEADER, InboundScanner

#: The largest frame the client asks for (RabbitMQ's and BatonMQ's default).
FRAME_MAX = 131072
CHANNEL = 1

_M = TypeVar("_M", bound=Frame)

#: The connection.close the client ends with (the sink recognises these bytes).
CLOSE_FRAME = frame.marshal(
    commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a broker listens, and who logs in to which virtual host."""

    host: str
    port: int
    username: str = "guest"
    password: str = "guest"
    vhost: str = "/"

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        """Read `amqp://user:pass@host:port/vhost` as RabbitMQ's "AMQP URI Specification" does:
        each part percent-decoded; user and password default to guest, the port to 5672; with
        no path the virtual host is "/", and "amqp://host/" names the empty one. ValueError
        says what is wrong."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "amqp":
            raise ValueError(f"{url!r}: expected an amqp:// URL")
        if not parts.hostname:
            raise ValueError(f"{url!r}: names no host")
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: query and fragment are not supported")
        path = parts.path.removeprefix("/")
        if "/" in path:
            raise ValueError(f"{url!r}: a '/' in the virtual host is written %2F")
        return cls(
            host=urllib.parse.unquote(parts.hostname),
            port=parts.port or 5672,  # urlsplit raises ValueError for a port that is no number
            username=urllib.parse.unquote(parts.username or "guest"),
            password=urllib.parse.unquote(parts.password or "guest"),
            vhost=urllib.parse.unquote(path) if parts.path else "/",
        )


class BrokerClosed(ConnectionError):
    """The broker closed the connection or the channel, or the socket went away."""


class AmqpClient(asyncio.Protocol):
    """One connection with one channel (CHANNEL). Create with `connect`."""

    def __init__(self, scanner: InboundScanner) -> None:
        self.scanner = scanner
        self.transport: asyncio.Transport | None = None
        self.frame_max = FRAME_MAX
        #: Called after each read, once the scanner has counted it (the consumer acks here).
        self.on_data: Callable[[], None] | None = None
        self.error: BrokerClosed | None = None
        self._replies: deque[Frame] = deque()
        self._reply_waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(PROTOCOL_HEADER)

    def data_received(self, data: bytes) -> None:
        scanner = self.scanner
        scanner.feed(data, time.monotonic_ns())
        if scanner.others:
            for channel, raw in scanner.others:
                self._control(channel, raw)
            scanner.others.clear()
        if self.on_data is not None:
            self.on_data()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            if not self._writable.done():
                self._writable.set_result(None)
            self._writable = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            self.error = BrokerClosed(f"connection lost: {exc or 'closed by the broker'}")
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)  # writable() raises self.error
        if not self._lost.done():
            self._lost.set_result(None)

    # control path

    def _control(self, channel: int, raw: bytes) -> None:
        _, _, method = frame.unmarshal(raw)
        assert isinstance(method, Frame)
        if isinstance(method, commands.Connection.Close):
            self.error = BrokerClosed(f"connection closed: {method.reply_code} {method.reply_text}")
            self.send(commands.Connection.CloseOk(), channel=0)
        elif isinstance(method, commands.Channel.Close):
            self.error = BrokerClosed(f"channel closed: {method.reply_code} {method.reply_text}")
            self.send(commands.Channel.CloseOk(), channel=channel)
        self._replies.append(method)
        self._wake()

    def _wake(self) -> None:
        if self._reply_waiter is not None and not self._reply_waiter.done():
            self._reply_waiter.set_result(None)

    def send(self, method: Frame, channel: int = CHANNEL) -> None:
        assert self.transport is not None
        self.transport.write(frame.marshal(method, channel))

    async def expect(self, reply: type[_M], timeout: float = 30.0) -> _M:
        """The next method the broker sends, which must be a `reply`."""
        async with asyncio.timeout(timeout):
            while not self._replies:
                if self.error is not None:
                    raise self.error
                self._reply_waiter = asyncio.get_running_loop().create_future()
                await self._reply_waiter
            method = self._replies.popleft()
        if not isinstance(method, reply):
            raise self.error or BrokerClosed(f"expected {reply.name}, got {method.name}")
        return method

    async def call(self, method: Frame, reply: type[_M], timeout: float = 30.0) -> _M:
        self.send(method)
        return await self.expect(reply, timeout)

    async def call_many(self, methods: Sequence[Frame], reply: type[_M]) -> None:
        """Send all of `methods` at once (pipelined), then read one `reply` to each."""
        assert self.transport is not None
        self.transport.write(b"".join(frame.marshal(method, CHANNEL) for method in methods))
        for _ in methods:
            await self.expect(reply)

    async def writable(self, until_ns: int) -> None:
        """Wait until the transport's buffer is below its low-water mark, or until `until_ns`
        (time.monotonic_ns()): a broker that stops reading must not hang the run."""
        if self._writable is not None:
            timeout = max(0.0, (until_ns - time.monotonic_ns()) / 1e9)
            await asyncio.wait((self._writable,), timeout=timeout)
        if self.error is not None:
            raise self.error

    async def close(self, timeout: float = 5.0) -> None:
        """connection.close, waiting for close-ok (or for the socket to go) at most `timeout`."""
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(CLOSE_FRAME)
        try:
            async with asyncio.timeout(timeout):
                await self._close_ok()
        except TimeoutError:
            pass
        finally:
            self.transport.abort()

    async def _close_ok(self) -> None:
        while not self._lost.done():
            while self._replies:
                if isinstance(self._replies.popleft(), commands.Connection.CloseOk):
                    return
            self._reply_waiter = asyncio.get_running_loop().create_future()
            await self._reply_waiter


async def connect(
    endpoint: Endpoint,
    scanner: InboundScanner | None = None,
    *,
    timeout: float = 30.0,
    heartbeat: int = 0,
) -> AmqpClient:
    """Open a connection and channel CHANNEL; heartbeats off (the client never idles long)
    unless `heartbeat` asks for them, in seconds (the caller then sends its own)."""
    loop = asyncio.get_running_loop()
    scanner = scanner or InboundScanner()
    _, client = await loop.create_connection(
        lambda: AmqpClient(scanner), endpoint.host, endpoint.port
    )
    try:
        await client.expect(commands.Connection.Start, timeout)
        client.send(
            commands.Connection.StartOk(
                client_properties={"product": "batonmq-bench"},
                mechanism="PLAIN",
                response=f"\0{endpoint.username}\0{endpoint.password}",
            ),
            channel=0,
        )
        tune = await client.expect(commands.Connection.Tune, timeout)
        client.frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        client.send(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=client.frame_max, heartbeat=heartbeat
            ),
            channel=0,
        )
        client.send(commands.Connection.Open(virtual_host=endpoint.vhost), channel=0)
        await client.expect(commands.Connection.OpenOk, timeout)
        await client.call(commands.Channel.Open(), commands.Channel.OpenOk, timeout)
    except BaseException:
        assert client.transport is not None
        client.transport.abort()
        raise
    return client
