"""Heartbeats between the brokers of an HA cluster (MQ 4.1 HA guide: "Brokers within an HA
cluster periodically inform each other that they are still in operation by exchanging heartbeat
packets"; imq.cluster.heartbeat.hostname, .port and .interval).

Each broker listens on its heartbeat address and keeps one connection open to every other
member's, on which it sends a heartbeat every interval. What it hears is reported, by broker id,
to `on_heartbeat` (the failure detector's input); silence is the detector's business, not this
module's.

The wire: lines of JSON, each at most `LINE_MAX` bytes. The connecting side opens with a hello,
``{"hello": {"cluster": ID, "broker": ID}}``, then sends ``{"beat": N}`` with N counting up. A hello
from another cluster, a line that is not one of these, or a line too long ends the connection,
with a warning naming the peer: a stray client can neither pose as a member nor exhaust memory.

With `tls` (`[cluster.heartbeat] tls`, MQ 4.1 HA guide: the cluster connection service may be
secured with SSL) both ends speak mutual TLS before the first line, each requiring a certificate
from the cluster's CA bundle. A connection whose handshake fails or does not finish within
TLS_HANDSHAKE_TIMEOUT is dropped by asyncio's TLS server without a word on the receiving side (it
logs handshake failures in debug mode only), so it is the sending side that tells: a member
whose TLS handshakes with a peer fail says so once, until its heartbeats get through again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

log = logging.getLogger(__name__)

LINE_MAX: Final = 1024
#: Seconds a TLS handshake may take (asyncio's default is 60): on a loaded machine one takes
#: longer than a heartbeat interval, and a member that cannot finish one in this long is as good
#: as silent.
TLS_HANDSHAKE_TIMEOUT: Final = 10.0


class HeartbeatError(ValueError):
    """A line that is not a hello or a heartbeat."""


@dataclass(frozen=True, slots=True)
class Hello:
    cluster: str
    broker: str


@dataclass(frozen=True, slots=True)
class Beat:
    number: int


def hello_line(cluster: str, broker: str) -> bytes:
    return json.dumps({"hello": {"cluster": cluster, "broker": broker}}).encode() + b"\n"


def beat_line(number: int) -> bytes:
    return json.dumps({"beat": number}).encode() + b"\n"


def parse_line(line: bytes) -> Hello | Beat:
    try:
        frame = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HeartbeatError("not JSON") from None
    if isinstance(frame, dict) and len(frame) == 1:
        hello = frame.get("hello")
        if isinstance(hello, dict) and hello.keys() == {"cluster", "broker"}:
            cluster, broker = hello["cluster"], hello["broker"]
            if isinstance(cluster, str) and isinstance(broker, str) and broker:
                return Hello(cluster, broker)
        beat = frame.get("beat")
        if isinstance(beat, int) and not isinstance(beat, bool) and beat >= 0:
            return Beat(beat)
    raise HeartbeatError(f"not a hello or a heartbeat: {line[:80]!r}")


class HeartbeatService:
    def __init__(
        self,
        *,
        cluster: str,
        broker: str,
        interval: float,
        on_heartbeat: Callable[[str], None],
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
    ) -> None:
        """`tls`: the server and client contexts of mutual TLS (`batonmq.security.tls`)."""
        self.cluster = cluster
        self.broker = broker
        self.interval = interval
        self.on_heartbeat = on_heartbeat
        self.tls = tls
        self._server: asyncio.Server | None = None
        self._senders: dict[str, tuple[tuple[str, int], asyncio.Task[None]]] = {}
        #: The connections heartbeats arrive on, and the tasks that read them.
        self._receivers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Start the heartbeat service; returns the address it listens on."""
        self._server = await asyncio.start_server(
            self._receive,
            host,
            port,
            limit=LINE_MAX,
            ssl=self.tls[0] if self.tls else None,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT if self.tls else None,
        )
        address: tuple[str, int] = self._server.sockets[0].getsockname()[:2]
        return address

    def watch(self, peers: Mapping[str, tuple[str, int]]) -> None:
        """Send heartbeats to exactly these members (broker id: heartbeat address)."""
        for broker, (address, task) in list(self._senders.items()):
            if peers.get(broker) != address:
                task.cancel()
                del self._senders[broker]
        for broker, address in peers.items():
            if broker != self.broker and broker not in self._senders:
                task = asyncio.create_task(self._send(address), name=f"heartbeats to {broker}")
                self._senders[broker] = (address, task)

    async def close(self) -> None:
        senders = [task for _, task in self._senders.values()]
        self._senders.clear()
        if self._server is not None:
            self._server.close()
        for task in senders:
            task.cancel()
        # A receiver ends when its connection does: cancelled, it would be logged by asyncio's
        # own callback on the server's handler task (Python 3.11 calls task.exception() there).
        receivers = list(self._receivers)
        for writer in self._receivers.values():
            _drop(writer)
        await asyncio.gather(*senders, *receivers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _send(self, address: tuple[str, int]) -> None:
        beats = iter(range(1 << 62))
        refused = False
        while True:
            try:
                writer = await self._connect(address)
            except ssl.SSLError as error:
                if not refused:
                    log.warning(
                        "heartbeats refused: the TLS handshake with the member failed",
                        extra={"peer": f"{address[0]}:{address[1]}", "reason": str(error)},
                    )
                refused = True
                await asyncio.sleep(self.interval)
                continue
            except (OSError, TimeoutError):
                await asyncio.sleep(self.interval)  # the member may be down: try again
                continue
            refused = False
            try:
                writer.write(hello_line(self.cluster, self.broker))
                for number in beats:
                    writer.write(beat_line(number))
                    async with asyncio.timeout(self.interval):
                        await writer.drain()
                    await asyncio.sleep(self.interval)
            except (OSError, TimeoutError):
                await asyncio.sleep(self.interval)
            finally:
                _drop(writer)

    async def _connect(self, address: tuple[str, int]) -> asyncio.StreamWriter:
        """A connection to a member's heartbeat service, within an interval; with `tls`, then
        its handshake, bounded by TLS_HANDSHAKE_TIMEOUT. The handshake runs on the open
        connection rather than inside open_connection: cancelled there by a timeout, asyncio
        leaves the socket unclosed."""
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result of an
        # awaitable that completes as its task is cancelled and drops the cancellation, so a
        # sender cancelled by `close` just as it connected went on sending forever.
        async with asyncio.timeout(self.interval):
            _, writer = await asyncio.open_connection(*address)
        if self.tls is not None:
            try:
                await writer.start_tls(
                    self.tls[1],
                    server_hostname=address[0],
                    ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT,
                )
            except BaseException:
                _drop(writer)
                raise
        return writer

    async def _receive(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._receivers[task] = writer
        peer = writer.get_extra_info("peername")
        try:
            first = parse_line(await reader.readline())
            if not isinstance(first, Hello):
                raise HeartbeatError("a heartbeat before the hello")
            if first.cluster != self.cluster:
                raise HeartbeatError(
                    f"broker {first.broker!r} is of cluster {first.cluster!r}, not {self.cluster!r}"
                )
            while line := await reader.readline():
                if isinstance(parse_line(line), Beat):
                    self.on_heartbeat(first.broker)
        except (HeartbeatError, ValueError) as error:
            # ValueError: StreamReader's "separator not found, chunk exceed the limit".
            log.warning(
                "heartbeat connection refused", extra={"peer": str(peer), "reason": str(error)}
            )
        except OSError:
            pass  # the member went away; the failure detector notices the silence
        finally:
            self._receivers.pop(task, None)
            _drop(writer)
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _drop(writer: asyncio.StreamWriter) -> None:
    """End a heartbeat connection at once. A TLS connection is aborted, not closed: a graceful
    close waits for the peer's close_notify (up to 30 s), which a heartbeat, whose every line
    was sent or is worthless, need not wait for."""
    if writer.get_extra_info("sslcontext") is not None:
        writer.transport.abort()
    else:
        writer.close()
