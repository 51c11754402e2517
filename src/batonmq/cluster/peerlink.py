"""The link between two worker processes of one broker (`broker.workers` above 1): a stream of
records each way, on one Unix SOCK_STREAM socket pair per pair of workers.

It is not the control inbox (`batonmq.server.siblings`): that is one SOCK_SEQPACKET buffer
that every sender shares, with no back-pressure or end per pair, and a pickle per message.
Here each pair has its own stream, so a worker that ends is seen by its end of stream, and a
peer that does not read holds back only what is sent to it.

Set-up. A worker makes the socket pair and sends the far end to the peer's hand-off inbox
(`batonmq.server.handoff.hand_over`), with an `Origin` that says which worker and process made
it (`Origin.link_from`); the peer gives it to its `PeerLinks` instead of serving it as AMQP. At
its first start a worker makes the link to every peer of a higher index; a worker the
supervisor started again makes it to every peer, since the links of its predecessor ended with
it. So each pair has one link, made by the one that started later. The supervisor holds the
inboxes, so an end sent to a worker that is restarting waits there for the new process.

Liveness. Each side opens with a HELLO record (its worker index and process start id), and a
link is up only once the peer's HELLO came: an end whose maker closed its own (it ended, or
the link was replaced) reads the end of the stream first, and never counts. Should two links
of one pair be up at once (two workers started again together made one each), both sides keep
the one made by the later process (start id, then index) and close the other. An end the
peer's inbox cannot take now (it is full) is made and sent again after a wait that grows to 5 s.
A worker that closes a link for a record it did not understand makes it again 5 s later, so
that one bad record does not cut a pair of live workers for good.

Records. A record is a `struct` header (kind, payload length) and raw payload bytes, no pickle.
A sender appends to the link's buffer and the buffer is written once per turn of the event
loop (`writelines`); a reader takes every whole record of what it read (a partial one waits
for the rest) and calls the handler registered for its kind. `record_kind` registers a kind.
A record of a kind with no handler, or before HELLO, or that its handler finds malformed
(`MalformedRecord`), closes the link with a logged error.

Back-pressure. The transport's pause/resume_writing make `PeerLink.writable` False/True and
call `PeerLinks.on_writable`, so that what sends on a link can hold its own sources. The reader
never stops reading: what a peer answers (later steps) comes on the same stream.

Description. `PeerLinks.describe` says of each link that is up since when, how many records and
octets went each way (HELLO included) and whether it is writable: what the management API shows
of it (RabbitMQ's `cluster_links`). The counts move once per write and once per read, not per
record.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from batonmq.server.handoff import Origin, hand_over

log = logging.getLogger(__name__)

#: A record's header: its kind and its payload's length in octets.
_HEADER: Final = struct.Struct("!BI")
#: The longest payload read; a longer length means the stream is not a link's.
RECORD_MAX: Final = 1 << 30
#: How many octets of messages a record that gathers several (PUBLISH, DELIVER) holds before the
#: next message begins another.
RECORD_OCTETS: Final = 256 * 1024

#: Every record kind, by number: its name (for the log).
KINDS: dict[int, str] = {}


def record_kind(number: int, name: str) -> int:
    """Register a record kind (a number from 1 to 255 not taken); returns the number."""
    if not 0 < number < 256 or number in KINDS:
        raise ValueError(f"record kind {number} ({name}) is taken or out of range")
    KINDS[number] = name
    return number


#: The first record each way: the sender's worker index and process start id.
HELLO: Final = record_kind(1, "hello")
_HELLO: Final = struct.Struct("!HQ")
#: The first and the longest wait before a link's end is sent again to a full inbox (seconds).
_RETRY_FIRST: Final = 0.1
_RETRY_MOST: Final = 5.0


class MalformedRecord(ValueError):
    """The stream holds what no link sends."""


def header(kind: int, length: int) -> bytes:
    """The header of a record of `kind` with a payload of `length` octets."""
    return _HEADER.pack(kind, length)


class RecordReader:
    """Whole records out of a byte stream read in pieces."""

    def __init__(self) -> None:
        #: The start of a record not yet whole, and how long it is once whole (when known).
        self._buffer = bytearray()
        self._wanting = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """(kind, payload) of every record that `data` completes, in order; the start of a
        record not yet whole is kept for the next read. MalformedRecord for a length over
        RECORD_MAX."""
        buffer = self._buffer
        if buffer:
            buffer += data
            if self._wanting > len(buffer):
                return []  # a long record comes in many reads: copied once it is whole
            data = bytes(buffer)
        records = []
        at, size = 0, len(data)
        while size - at >= _HEADER.size:
            kind, length = _HEADER.unpack_from(data, at)
            if length > RECORD_MAX:
                raise MalformedRecord(f"a record of {length} octets")
            end = at + _HEADER.size + length
            if end > size:
                self._wanting = end - at
                break
            records.append((kind, data[at + _HEADER.size : end]))
            at = end
        self._buffer = bytearray(data[at:])
        if len(self._buffer) < _HEADER.size:
            self._wanting = 0
        return records


@dataclass(frozen=True, slots=True)
class PeerLinkState:
    """A link that is up, as this worker sees it."""

    peer: int
    #: When the peer's HELLO came (seconds since the epoch).
    up_since: float
    records_sent: int
    bytes_sent: int
    records_received: int
    bytes_received: int
    #: False while the transport is over its high-water mark (paused).
    writable: bool


#: What reads a record of one kind: the link it came on, and its payload.
Handler = Callable[["PeerLink", bytes], None]
#: What is told that a link came up, went down, or became writable or not.
Watcher = Callable[["PeerLink"], None]


class PeerLink(asyncio.Protocol):
    """This worker's end of its link with worker `peer`."""

    def __init__(self, links: PeerLinks, peer: int, made_by: tuple[int, int]) -> None:
        """`made_by`: the worker index and process start id of the side that made it."""
        self._links = links
        self.peer = peer
        self.made_by = made_by
        #: The peer's process start id, from its HELLO (None until then: not up).
        self.peer_start: int | None = None
        #: When the peer's HELLO came (seconds since the epoch; 0 until then).
        self.up_since = 0.0
        #: Whether the transport takes more without going over its high-water mark.
        self.writable = True
        self.transport: asyncio.Transport | None = None
        self._reader = RecordReader()
        self._unsent: list[bytes] = []
        self._flushing = False
        #: What was written (records handed to the transport) and read, HELLO included.
        self.records_sent = self.bytes_sent = 0
        self.records_received = self.bytes_received = 0

    @property
    def rank(self) -> tuple[int, int]:
        """Of two links of one pair, both sides keep the one of the higher rank: made later."""
        index, start = self.made_by
        return start, index

    def send(self, kind: int, payload: bytes) -> None:
        """Append a record; it is written with the others of this turn of the event loop (or
        dropped, once the link is closing)."""
        self._unsent += (header(kind, len(payload)), payload)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        unsent, self._unsent = self._unsent, []
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            transport.writelines(unsent)
        except RuntimeError:
            # uvloop closes the transport of a `connect_accepted_socket` cancelled after it
            # called `connection_made` (a worker stopping while its links come up), and neither
            # `is_closing()` nor `connection_lost` says so: the link is lost.
            self.connection_lost(None)
            return
        self.records_sent += len(unsent) // 2  # a header and a payload each
        self.bytes_sent += sum(map(len, unsent))

    def close(self) -> None:
        """Close after what was sent so far."""
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        links = self._links
        self.send(HELLO, _HELLO.pack(links.index, links.start_id))

    def data_received(self, data: bytes) -> None:
        try:
            records = self._reader.feed(data)
        except MalformedRecord as error:
            self._refuse(str(error))
            return
        self.bytes_received += len(data)
        self.records_received += len(records)
        for kind, payload in records:
            if self.transport is None or self.transport.is_closing():
                return
            if self.peer_start is None:
                self._hello(kind, payload)
                continue
            handler = self._links.handlers.get(kind)
            if handler is None:
                self._refuse(f"no handler for a record of kind {KINDS.get(kind, kind)}")
                continue
            try:
                handler(self, payload)
            except MalformedRecord as error:
                self._refuse(f"a record of kind {KINDS[kind]}: {error}")

    def _hello(self, kind: int, payload: bytes) -> None:
        if kind != HELLO or len(payload) != _HELLO.size:
            self._refuse(f"a record of kind {KINDS.get(kind, kind)} before HELLO")
            return
        index, start = _HELLO.unpack(payload)
        made_by_peer = self.made_by[0] == self.peer
        if index != self.peer or (made_by_peer and start != self.made_by[1]):
            self._refuse(f"HELLO from worker {index} (start {start})")
            return
        self.peer_start = start
        self.up_since = time.time()
        self._links.hello(self)

    def state(self) -> PeerLinkState:
        return PeerLinkState(
            self.peer,
            self.up_since,
            self.records_sent,
            self.bytes_sent,
            self.records_received,
            self.bytes_received,
            self.writable,
        )

    def _refuse(self, reason: str) -> None:
        log.error(
            "peer link record not understood; link closed",
            extra={"peer": self.peer, "reason": reason},
        )
        if self.transport is not None:
            self.transport.abort()
            self._links.refused(self)

    def eof_received(self) -> bool:
        return False  # the peer's end closed: close ours

    def pause_writing(self) -> None:
        self._set_writable(False)

    def resume_writing(self) -> None:
        self._set_writable(True)

    def _set_writable(self, writable: bool) -> None:
        self.writable = writable
        for watcher in self._links.on_writable:
            watcher(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._links.lost(self, exc)


class PeerLinks:
    """This worker's links with its peers, while the event loop runs (`start` to `close`)."""

    def __init__(
        self, index: int, count: int, outboxes: list[socket.socket], *, started_again: bool
    ) -> None:
        """`outboxes`: each worker's hand-off inbox by index, the end the others send on.
        `started_again`: this process replaces one of this worker that ended."""
        self.index = index
        self.count = count
        #: This process's start id (HELLO), later than any earlier process's of this worker.
        self.start_id = time.monotonic_ns()
        self._outboxes = outboxes
        self._started_again = started_again
        #: The handler of each record kind but HELLO (`handle`).
        self.handlers: dict[int, Handler] = {}
        #: Told of a link that is up, of one that went down, of one whose `writable` changed.
        self.on_up: list[Watcher] = []
        self.on_down: list[Watcher] = []
        self.on_writable: list[Watcher] = []
        #: Told once this worker has started making its links (it serves from then on).
        self.on_start: list[Callable[[], None]] = []
        self.started = False
        #: The link with each peer that is up, by peer index.
        self._up: dict[int, PeerLink] = {}
        #: Links whose peer's HELLO has not come yet, and their connections being made.
        self._opening: set[PeerLink] = set()
        self._connecting: set[asyncio.Task[object]] = set()
        #: The next try to make the link with a peer whose inbox could not take its end.
        self._retries: dict[int, asyncio.TimerHandle] = {}
        self._closed = False

    def handle(self, kind: int, handler: Handler) -> None:
        """Call `handler` for every record of `kind` (registered with `record_kind`)."""
        if kind not in KINDS or kind == HELLO or kind in self.handlers:
            raise ValueError(f"record kind {kind} is not registered, or handled already")
        self.handlers[kind] = handler

    def link(self, peer: int) -> PeerLink | None:
        """The link with `peer` that is up, if any."""
        return self._up.get(peer)

    def describe(self) -> list[PeerLinkState]:
        """Every link that is up, by peer index."""
        return [self._up[peer].state() for peer in sorted(self._up)]

    def start(self) -> None:
        """Make the links that this worker makes: to every peer of a higher index, or to every
        peer if it was started again."""
        self.started = True
        for peer in range(self.count):
            if peer != self.index and (self._started_again or peer > self.index):
                self._make(peer)
        for watcher in self.on_start:
            watcher()

    def _make(self, peer: int, waited: float = 0.0) -> None:
        self._retries.pop(peer, None)
        if self._closed or peer in self._up:
            return
        near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        origin = Origin.peer_link(self.index, self.start_id)
        try:
            why = hand_over(far.fileno(), origin, b"", self._outboxes[peer])
        finally:
            far.close()
        if why is not None:
            near.close()
            wait = min(max(2 * waited, _RETRY_FIRST), _RETRY_MOST)
            log.warning(
                "peer link not made: %s; trying again in %.1f s", why, wait, extra={"peer": peer}
            )
            self._make_later(peer, wait)
            return
        self._connect(PeerLink(self, peer, (self.index, self.start_id)), near)

    def _make_later(self, peer: int, wait: float) -> None:
        pending = self._retries.get(peer)
        if pending is not None:
            pending.cancel()
        loop = asyncio.get_running_loop()
        self._retries[peer] = loop.call_later(wait, self._make, peer, wait)

    def refused(self, link: PeerLink) -> None:
        """This worker closed `link` for a record it did not understand. If it was the pair's
        link, its peer lives on: make the link again, a while later (the peer may send the
        same again)."""
        if self._up.get(link.peer) is link and not self._closed:
            self._make_later(link.peer, _RETRY_MOST)

    def adopt(self, end: socket.socket, made_by: tuple[int, int]) -> None:
        """A link's end that worker `made_by[0]` (process start id `made_by[1]`) made and
        handed to this worker."""
        peer, start = made_by
        current = self._up.get(peer)
        stale = current is not None and (current.peer_start or 0) > start
        if self._closed or stale or not 0 <= peer < self.count or peer == self.index:
            end.close()  # made by a process of that worker that a later one replaced
            return
        self._connect(PeerLink(self, peer, made_by), end)

    def _connect(self, link: PeerLink, end: socket.socket) -> None:
        end.setblocking(False)
        self._opening.add(link)
        loop = asyncio.get_running_loop()
        connecting = loop.create_task(loop.connect_accepted_socket(lambda: link, end))
        self._connecting.add(connecting)
        connecting.add_done_callback(lambda done: self._connected(done, link, end))

    def _connected(self, done: asyncio.Task[object], link: PeerLink, end: socket.socket) -> None:
        self._connecting.discard(done)
        if done.cancelled() or done.exception() is not None:
            self._opening.discard(link)
            end.close()

    def hello(self, link: PeerLink) -> None:
        """`link`'s peer said HELLO: it is up, unless the pair has a link of a higher rank."""
        self._opening.discard(link)
        current = self._up.get(link.peer)
        if current is not None:
            if min(current, link, key=lambda each: each.rank) is link:
                link.close()
                return
            self._down(current, "replaced by a later link")
            current.close()
        self._up[link.peer] = link
        log.info("peer link up", extra={"peer": link.peer, "peer_start": link.peer_start})
        for watcher in self.on_up:
            watcher(link)

    def lost(self, link: PeerLink, exc: Exception | None) -> None:
        self._opening.discard(link)
        if self._up.get(link.peer) is link:
            self._down(link, "end of stream" if exc is None else str(exc))

    def _down(self, link: PeerLink, reason: str) -> None:
        """`link` is up no more: every watcher that was told it is up is told it is down, so
        what waits on a link learns of its end exactly once, a replaced link's too."""
        del self._up[link.peer]
        if not self._closed:
            log.info("peer link down", extra={"peer": link.peer, "reason": reason})
        for watcher in self.on_down:
            watcher(link)

    def close(self) -> None:
        """Close every link (after what was sent on it), and take no more."""
        self._closed = True
        for retry in self._retries.values():
            retry.cancel()
        for connecting in list(self._connecting):
            connecting.cancel()
        for link in [*self._up.values(), *self._opening]:
            link.close()
