"""The request/response link between the worker processes of one broker (`broker.workers`
above 1): one worker asks a sibling something and waits for its answer, with a time limit.

Each worker has a control inbox, a Unix SOCK_SEQPACKET socket pair that the supervisor made
before it started the workers (as it made their hand-off inboxes, `batonmq.server.handoff`):
the worker reads one end, and every worker sends on the other. The supervisor holds both ends,
so the inbox outlives the worker: a worker started again reads the same inbox.

A message (a request, or the answer to one) is pickled and cut into packets of at most
`FRAGMENT` octets, each with a header (`Header`): what it is, who sent it (worker index and
process id), to which process an answer goes, the request's number, its deadline and when it
was sent, and whether more packets of the message follow. SOCK_SEQPACKET keeps each packet
whole and the packets of one sender in order; packets of different senders may interleave, so
messages are put together by sender and number.

A request has a time limit: a sibling that does not answer in time (too busy, or ended) is
`SiblingUnavailable`, and the caller answers without it. The supervisor also tells every worker
when a sibling ends and when it serves again (`tell_siblings`, a packet on their inboxes): what
waits for a worker that ended fails at once, and so does what is asked of it until it serves
again. A request is dropped unread when its deadline has passed by the time it is read, or when
it was sent before the reading process started again (to the process of the same worker that ended),
so that a change the requester gave up on, and may have answered as failed, is not made later.
An answer meant for an earlier process of the same worker index is dropped too (by pid).

Pickle is safe here: both ends are processes of the same broker, forked from the same
supervisor, on sockets no other process can reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

log = logging.getLogger(__name__)

#: The largest payload of one packet: well below the default socket buffer (208 KiB), which
#: bounds a SOCK_SEQPACKET packet.
FRAGMENT: Final = 60 * 1024
_HEADER: Final = struct.Struct("!4sBBHIIIdd")
#: The start of every packet.
MAGIC: Final = b"BMQL"
PACKET_MAX: Final = _HEADER.size + FRAGMENT
#: A flag of the header: more packets of this message follow.
_MORE: Final = 1


class Kind(IntEnum):
    REQUEST = 1
    ANSWER = 2
    #: The sibling failed to answer: the payload is the text of the failure.
    FAILURE = 3
    #: From the supervisor: worker `sender` ended, or serves again (`tell_siblings`).
    DOWN = 4
    UP = 5


@dataclass(frozen=True, slots=True)
class Header:
    kind: Kind
    more: bool
    #: The sending worker's index and process id.
    sender: int
    sender_pid: int
    #: The process an answer goes to (0 in a request).
    to_pid: int
    #: The request's number among its sender's requests (an answer repeats it).
    number: int
    #: When the requester stops waiting (time.time(), seconds).
    deadline: float
    #: When it was sent (time.time()).
    sent: float = 0.0


class SiblingUnavailable(Exception):
    """A sibling did not answer in time: it is down, restarting, or too busy."""

    def __init__(self, worker: int, why: str) -> None:
        super().__init__(f"worker {worker} did not answer: {why}")
        self.worker = worker


class SiblingFailed(Exception):
    """A sibling took the request and failed to answer it (the text says why)."""


class MalformedPacket(ValueError):
    pass


def packets(header: Header, payload: bytes) -> Iterator[bytes]:
    """The packets of one message: `payload` cut into FRAGMENT-sized pieces (one empty piece
    for an empty payload), each behind `header`, with the `more` flag on all but the last."""
    pieces = [payload[at : at + FRAGMENT] for at in range(0, len(payload), FRAGMENT)] or [b""]
    for index, piece in enumerate(pieces):
        more = index < len(pieces) - 1
        yield (
            _HEADER.pack(
                MAGIC,
                header.kind,
                _MORE if more else 0,
                header.sender,
                header.sender_pid,
                header.to_pid,
                header.number,
                header.deadline,
                header.sent,
            )
            + piece
        )


def parse(packet: bytes) -> tuple[Header, bytes]:
    """A packet's header and payload piece; MalformedPacket when it is not one."""
    if len(packet) < _HEADER.size:
        raise MalformedPacket(f"{len(packet)} octets, shorter than a header")
    magic, kind, flags, sender, sender_pid, to_pid, number, deadline, sent = _HEADER.unpack_from(
        packet
    )
    if magic != MAGIC or kind not in Kind.__members__.values():
        raise MalformedPacket("not a link packet")
    more = bool(flags & _MORE)
    header = Header(Kind(kind), more, sender, sender_pid, to_pid, number, deadline, sent)
    return header, packet[_HEADER.size :]


class Assembler:
    """Puts messages together from packets, by sender process and request number."""

    def __init__(self) -> None:
        self._partial: dict[tuple[Kind, int, int, int], list[bytes]] = {}

    def add(self, header: Header, piece: bytes) -> bytes | None:
        """The whole payload once `piece` is its last, else None."""
        key = (header.kind, header.sender, header.sender_pid, header.number)
        if header.more:
            if key not in self._partial:
                self._forget_ended(header.sender, header.sender_pid)
            self._partial.setdefault(key, []).append(piece)
            return None
        pieces = self._partial.pop(key, None)
        return piece if pieces is None else b"".join([*pieces, piece])

    def _forget_ended(self, sender: int, pid: int) -> None:
        """Drop what an earlier process of worker `sender` left half sent when it ended."""
        for key in [key for key in self._partial if key[1] == sender and key[2] != pid]:
            del self._partial[key]

    def __len__(self) -> int:
        return len(self._partial)


#: What a worker answers a sibling's request with (run in its event loop).
Serve = Callable[[object], Awaitable[object]]


class SiblingLink:
    """This worker's end of the link: it asks its siblings (`request`) and answers them
    (`serve`), while the event loop runs (`start` to `stop`)."""

    def __init__(
        self,
        index: int,
        inboxes: list[tuple[socket.socket, socket.socket]],
        serve: Serve,
        *,
        started_again: bool = False,
    ) -> None:
        """`inboxes`: each worker's control inbox by index, the end its worker reads and the
        end the others send on. `started_again`: this process replaces one of this worker that
        ended (`WorkerSeat.started_again`); the first process of a worker reads what was sent
        before it started, since nothing was meant for an earlier one (a sibling that started
        sooner may ask it before it reads)."""
        self.index = index
        self._inboxes = inboxes
        self._serve = serve
        self._pid = os.getpid()
        self._numbers = itertools.count(1)
        self._waiting: dict[int, tuple[int, asyncio.Future[tuple[Kind, bytes]]]] = {}
        self._assembler = Assembler()
        self._sending = [asyncio.Lock() for _ in inboxes]
        self._serving: set[asyncio.Task[None]] = set()
        self._reading = False
        #: The siblings that ended and do not serve again yet, as the supervisor told.
        self.down: set[int] = set()
        #: Called with a sibling's index and whether it serves again (else it ended) when the
        #: supervisor tells.
        self.when_told: Callable[[int, bool], None] | None = None
        #: Requests sent before this process started were meant for an earlier one, if any.
        self._started = time.time() if started_again else 0.0

    @property
    def workers(self) -> int:
        return len(self._inboxes)

    def start(self) -> None:
        asyncio.get_running_loop().add_reader(self._inbox.fileno(), self._read)
        self._reading = True

    async def stop(self) -> None:
        if self._reading:
            asyncio.get_running_loop().remove_reader(self._inbox.fileno())
            self._reading = False
        for task in list(self._serving):
            task.cancel()
        for _worker, waiting in self._waiting.values():
            waiting.cancel()
        self._waiting.clear()

    @property
    def _inbox(self) -> socket.socket:
        return self._inboxes[self.index][0]

    async def request(self, worker: int, question: object, timeout: float) -> object:
        """Ask `worker` (a sibling, not this worker) `question`, and its answer; SiblingUnavailable
        when none came within `timeout` seconds, SiblingFailed when it failed to answer."""
        if worker in self.down:
            raise SiblingUnavailable(worker, "it is down")
        number = next(self._numbers)
        now = time.time()
        header = Header(Kind.REQUEST, False, self.index, self._pid, 0, number, now + timeout, now)
        answered = asyncio.get_running_loop().create_future()
        self._waiting[number] = (worker, answered)
        try:
            async with asyncio.timeout(timeout):
                await self._send(worker, header, pickle.dumps(question))
                kind, payload = await answered
        except TimeoutError:
            raise SiblingUnavailable(worker, f"no answer within {timeout:g} s") from None
        except OSError as error:
            raise SiblingUnavailable(worker, error.strerror or str(error)) from None
        finally:
            self._waiting.pop(number, None)
        if kind is Kind.DOWN:
            raise SiblingUnavailable(worker, "it ended")
        if kind is Kind.FAILURE:
            raise SiblingFailed(payload.decode("utf-8", "replace"))
        return pickle.loads(payload)

    async def _send(self, worker: int, header: Header, payload: bytes) -> None:
        outbox = self._inboxes[worker][1]
        async with self._sending[worker]:  # one message at a time: its packets in a row
            for packet in packets(header, payload):
                await self._send_packet(outbox, packet)

    @staticmethod
    async def _send_packet(outbox: socket.socket, packet: bytes) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                outbox.send(packet)
                return
            except (BlockingIOError, InterruptedError):
                pass
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(outbox.fileno(), _set_once, writable)
            try:
                await writable
            finally:
                loop.remove_writer(outbox.fileno())

    def _read(self) -> None:
        while self._reading:
            try:
                packet = self._inbox.recv(PACKET_MAX)
            except (BlockingIOError, InterruptedError):
                return
            if not packet:
                return
            try:
                header, piece = parse(packet)
            except MalformedPacket as error:
                log.warning("sibling packet unreadable; dropped", extra={"reason": str(error)})
                continue
            payload = self._assembler.add(header, piece)
            if payload is not None:
                self._received(header, payload)

    def _received(self, header: Header, payload: bytes) -> None:
        if header.kind in (Kind.UP, Kind.DOWN):
            self._told(header.sender, up=header.kind is Kind.UP)
            return
        if header.kind is Kind.REQUEST:
            if header.deadline < time.time() or header.sent < self._started:
                # Its requester gave up, or asked an earlier process of this worker, and may
                # have answered its client already: a change made now would come too late.
                return
            if not 0 <= header.sender < self.workers:
                return
            task = asyncio.get_running_loop().create_task(self._answer(header, payload))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
            return
        waiting = self._waiting.get(header.number)
        if header.to_pid != self._pid or waiting is None or waiting[0] != header.sender:
            return  # for an earlier process of this worker, or given up on
        if not waiting[1].done():
            waiting[1].set_result((header.kind, payload))

    def _told(self, worker: int, *, up: bool) -> None:
        """The supervisor says `worker` ended (what was asked of it gets no answer), or serves
        again."""
        if self.when_told is not None:
            # Soon, not now: the requests read before the word (those a worker sent before it
            # ended) are answered first, each a task made as it was read.
            asyncio.get_running_loop().call_soon(self.when_told, worker, up)
        if up:
            self.down.discard(worker)
            return
        self.down.add(worker)
        for asked, answered in self._waiting.values():
            if asked == worker and not answered.done():
                answered.set_result((Kind.DOWN, b""))

    async def _answer(self, request: Header, payload: bytes) -> None:
        try:
            answer = pickle.dumps(await self._serve(pickle.loads(payload)))
            kind = Kind.ANSWER
        except Exception as error:
            log.exception("sibling request failed", extra={"worker": request.sender})
            answer, kind = f"{type(error).__name__}: {error}".encode(), Kind.FAILURE
        header = Header(kind, False, self.index, self._pid, request.sender_pid, request.number, 0.0)
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(max(request.deadline - time.time(), 0.0)):
                await self._send(request.sender, header, answer)


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def tell_siblings(
    controls: list[tuple[socket.socket, socket.socket]], worker: int, *, up: bool
) -> None:
    """For the supervisor: tell every other worker that `worker` ended, or serves again (a
    worker whose inbox is full is not told: it finds out by its time limit)."""
    header = Header(Kind.UP if up else Kind.DOWN, False, worker, os.getpid(), 0, 0, 0.0)
    (packet,) = packets(header, b"")
    for index, (_reading, sending) in enumerate(controls):
        if index != worker:
            with contextlib.suppress(OSError):
                sending.send(packet)
