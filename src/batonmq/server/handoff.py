"""Moving a client's connection to the worker that owns its virtual host, at connection.open
(`batonmq.server.placement`).

Any worker accepts a connection on the listening socket they share, and runs the handshake as a
broker with one process does, authentication included. When connection.open names a virtual
host another worker owns, the accepting worker stops reading and sends the owner the socket
(SCM_RIGHTS) with every byte it has read from it. The owner replays those bytes into a new
session (`amqp/` does no IO, so the replay is exact): it authenticates the client again, and
does not send again what the client already has, connection.start and connection.tune
(`ServerConnection(handed_over=True)`). Its answer to connection.open, and everything after it,
comes from the owner, so a refused virtual host or permission is refused as by a broker with one
process. The client sees nothing of the move.

Each worker's inbox is a Unix SOCK_SEQPACKET socket pair that the supervisor made: the worker
reads one end, and every worker sends on the other, one packet per connection. The supervisor
holds both ends too, so a connection handed to a worker that is restarting waits in its inbox
until the new process reads it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

#: The start of every hand-off packet, after which come the bytes read from the socket.
MAGIC: Final = b"BMQ1"
#: The largest packet read: the handshake up to connection.open is three frames of at most
#: frame_max (131072) octets, and the protocol header.
PACKET_MAX: Final = 1 << 20


def hand_over(client: int, received: bytes, outbox: socket.socket) -> str | None:
    """Send the client's socket (its descriptor `client`, which the accepting worker closes
    afterwards) and the bytes `received` from it to the inbox behind `outbox`; None once sent,
    else why it could not be (the inbox is full, the packet too large)."""
    try:
        socket.send_fds(outbox, [MAGIC + received], [client])
    except OSError as error:
        return error.strerror or str(error)
    return None


class Inbox:
    """The connections handed to this worker: each becomes `adopt(client socket, bytes read
    from it so far)`, while the event loop runs."""

    def __init__(self, sock: socket.socket, adopt: Callable[[socket.socket, bytes], None]) -> None:
        self._sock = sock
        self._adopt = adopt
        self._reading = False

    def start(self) -> None:
        asyncio.get_running_loop().add_reader(self._sock.fileno(), self._read)
        self._reading = True

    def stop(self) -> None:
        if self._reading:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._reading = False

    def _read(self) -> None:
        while self._reading:
            try:
                data, fds, flags, _address = socket.recv_fds(self._sock, PACKET_MAX, 1)
            except (BlockingIOError, InterruptedError):
                return
            if not fds:
                if not data:  # every sending end is closed: the supervisor is gone
                    self.stop()
                continue
            client = socket.socket(fileno=fds[0])
            for extra in fds[1:]:
                os.close(extra)
            truncated = flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)
            if truncated or not data.startswith(MAGIC):
                log.warning("connection handed over unreadable; closed", extra={"bytes": len(data)})
                client.close()
                continue
            client.setblocking(False)
            self._adopt(client, data[len(MAGIC) :])
