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

The packet also says where the client came from (`Origin`): the listener, its address and the
broker's, and its verified TLS certificate. The owner's session takes them from there, not from
the socket it gets, which for a TLS client is not the client's (`batonmq.server.relay`: a TLS
session cannot move to another process, so the accepting worker keeps it and relays the
plaintext over a Unix socket pair, whose other end is what the owner gets).

A worker sends its siblings the ends of the links between workers this way too
(`batonmq.cluster.peerlink`): their origin names the worker that made them (`link_from`).

Each worker's inbox is a Unix SOCK_SEQPACKET socket pair that the supervisor made: the worker
reads one end, and every worker sends on the other, one packet per connection. The supervisor
holds both ends too, so a connection handed to a worker that is restarting waits in its inbox
until the new process reads it.
"""

from __future__ import annotations

import asyncio
import logging
import marshal
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from batonmq.security.sasl import PeerCertificate

log = logging.getLogger(__name__)

#: The listener name in the origin of a link's end between workers.
PEER_LINK: Final = "peerlink"
#: The start of every hand-off packet, after which come the origin's length (4 octets, big
#: endian), the origin and the bytes read from the socket.
MAGIC: Final = b"BMQ2"
_LENGTH: Final = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a handed connection came from, as the accepting worker saw it."""

    #: The listener that accepted it ("amqp" or "amqps"): its SASL mechanisms apply.
    listener: str
    peer: tuple[str, int]
    #: The broker's end (None if unknown).
    local: tuple[str, int] | None = None
    #: The verified TLS client certificate (as `getpeercert()`), on the amqps listener.
    peer_certificate: PeerCertificate | None = None
    #: Set for the end of a link between workers (`batonmq.cluster.peerlink`), which is no
    #: client's: the index and process start id of the worker that made it.
    link_from: tuple[int, int] | None = None

    @classmethod
    def peer_link(cls, worker: int, start: int) -> Origin:
        """The origin of a link's end that process `start` of worker `worker` made."""
        return cls(PEER_LINK, ("", 0), link_from=(worker, start))

    def encode(self) -> bytes:
        # marshal keeps the certificate's tuples (its subject is read as tuples); the packet
        # comes from a sibling process over a socket pair the supervisor made.
        certificate = None if self.peer_certificate is None else dict(self.peer_certificate)
        return marshal.dumps((self.listener, self.peer, self.local, certificate, self.link_from))

    @classmethod
    def decode(cls, data: bytes) -> Origin:
        listener, peer, local, certificate, link_from = marshal.loads(data)
        return cls(
            listener,
            tuple(peer),
            None if local is None else tuple(local),
            certificate,
            None if link_from is None else tuple(link_from),
        )


def packet(origin: Origin, received: bytes) -> bytes:
    """What goes to the owner's inbox with the client's socket."""
    encoded = origin.encode()
    return MAGIC + _LENGTH.pack(len(encoded)) + encoded + received


def unpack(data: bytes) -> tuple[Origin, bytes] | None:
    """The origin and the bytes of a packet; None if it is not a hand-off packet."""
    start = len(MAGIC) + _LENGTH.size
    if not data.startswith(MAGIC) or len(data) < start:
        return None
    (length,) = _LENGTH.unpack_from(data, len(MAGIC))
    try:
        origin = Origin.decode(data[start : start + length])
    except (EOFError, ValueError, TypeError):
        return None
    return origin, data[start + length :]


#: The largest packet read: the handshake up to connection.open is three frames of at most
#: frame_max (131072) octets, and the protocol header.
PACKET_MAX: Final = 1 << 20


def hand_over(client: int, origin: Origin, received: bytes, outbox: socket.socket) -> str | None:
    """Send the client's socket (its descriptor `client`, which the accepting worker closes
    afterwards), where it came from and the bytes `received` from it to the inbox behind
    `outbox`; None once sent, else why it could not be (the inbox is full, the packet too
    large)."""
    try:
        socket.send_fds(outbox, [packet(origin, received)], [client])
    except OSError as error:
        return error.strerror or str(error)
    return None


class Inbox:
    """The connections handed to this worker: each becomes `adopt(client socket, where it came
    from, bytes read from it so far)`, while the event loop runs."""

    def __init__(
        self, sock: socket.socket, adopt: Callable[[socket.socket, Origin, bytes], None]
    ) -> None:
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
            handed = None if truncated else unpack(data)
            if handed is None:
                log.warning("connection handed over unreadable; closed", extra={"bytes": len(data)})
                client.close()
                continue
            client.setblocking(False)
            self._adopt(client, *handed)
