"""Relaying a TLS client's connection to the worker that owns its virtual host.

A plain connection moves to its owner with its socket (`batonmq.server.handoff`). A TLS
connection cannot: its session state (keys, sequence numbers) lives in the accepting worker's
TLS library and cannot be exported. So at connection.open the accepting worker keeps the TLS
transport and hands the owner one end of a Unix socket pair instead, with the plaintext it read
so far; from then on it copies plaintext between the two, in both directions, for the
connection's life. The owner serves the connection as it serves any other (it learns the
client's address and certificate from the hand-off's `Origin`).

- Backpressure passes through: while one side's transport buffers more than its high-water
  mark, the other side is not read, so a relay holds at most two transports' buffers.
- Either side ending ends both: the client leaving closes the owner's end (the owner's session
  ends as for a client that left), and the owner closing the connection (connection.close-ok,
  a shutdown, a killed owner) closes the client's TLS connection after what was written to it.
- The cost is one more copy of each byte through the accepting worker, for TLS clients of
  virtual hosts it does not own. A killed accepting worker cuts the relayed connections it
  held (their clients reconnect, as after any lost connection).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

log = logging.getLogger(__name__)


class _Side(asyncio.Protocol):
    """One transport of a relay: what it reads goes to the other side."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self.transport: asyncio.Transport | None = None
        self.other: _Side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._relay.forward(self.other, data)

    def eof_received(self) -> bool:
        return False  # TLS cannot half-close: an end is the end of both

    def pause_writing(self) -> None:
        self._relay.set_reading(self.other, False)

    def resume_writing(self) -> None:
        self._relay.set_reading(self.other, True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._relay.close()


class Relay:
    """Copies between `client`, the TLS transport the client is connected on (its protocol is
    replaced by the relay's), and `near`, this worker's end of the socket pair whose other end
    went to the owner."""

    def __init__(self, client: asyncio.Transport, near: socket.socket) -> None:
        self.client, self.owner = _Side(self), _Side(self)
        self.client.other, self.owner.other = self.owner, self.client
        self.client.transport = client
        client.set_protocol(self.client)
        #: What the client sent before the owner's side was connected.
        self._early: list[bytes] = []
        #: Set once both sides are closed; `on_end` is called then.
        self.ended = asyncio.Event()
        self.on_end: Callable[[Relay], None] | None = None
        #: While the owner's side is being connected.
        self._pending = True
        self._connecting = asyncio.get_running_loop().create_task(self._connect(near))

    async def _connect(self, near: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(lambda: self.owner, near)
        except BaseException as error:
            self._pending = False
            if self.owner.transport is None:
                near.close()
            if isinstance(error, OSError):
                log.info("handed connection gone: %s", error)
            self.close()
            if not isinstance(error, (OSError, asyncio.CancelledError)):
                raise
            return
        self._pending = False
        owner = self.owner.transport
        if owner is not None:
            owner.writelines(self._early)
        self._early = []

    def forward(self, to: _Side, data: bytes) -> None:
        if to.transport is not None:
            to.transport.write(data)
        elif to is self.owner and self._pending:
            self._early.append(data)

    def set_reading(self, side: _Side, reading: bool) -> None:
        transport = side.transport
        if transport is None or transport.is_closing():
            return
        if reading:
            transport.resume_reading()
        else:
            transport.pause_reading()

    def close(self) -> None:
        """End both sides (what each was given to write is still sent first)."""
        if self._pending:
            self._connecting.cancel()
            return  # `_connect` closes again once it has let go of the socket
        for side in (self.client, self.owner):
            if side.transport is not None and not side.transport.is_closing():
                side.transport.close()
        both_closed = self.client.transport is None and self.owner.transport is None
        if both_closed and not self.ended.is_set():
            self.ended.set()
            if self.on_end is not None:
                self.on_end(self)

    def abort(self) -> None:
        """End both sides now (a shutdown that waited long enough)."""
        self._connecting.cancel()
        for side in (self.client, self.owner):
            if side.transport is not None:
                side.transport.abort()
