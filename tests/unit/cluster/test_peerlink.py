"""The link between two workers of one broker (`batonmq.cluster.peerlink`): its records, and
links made through real hand-off inboxes over real Unix socket pairs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

import pytest
import uvloop
from hypothesis import given
from hypothesis import strategies as st

from batonmq.cluster.peerlink import (
    HELLO,
    KINDS,
    RECORD_MAX,
    MalformedRecord,
    PeerLink,
    PeerLinks,
    RecordReader,
    header,
    record_kind,
)
from batonmq.server.handoff import Inbox, Origin
from batonmq.server.placement import inbox_pairs

#: A kind for these tests only.
ECHO = record_kind(200, "test echo")
#: A kind registered but handled by nobody.
UNHANDLED = record_kind(201, "test unhandled")
#: A kind whose handler finds every record malformed.
REFUSED = record_kind(202, "test refused")

records_strategy = st.lists(
    st.tuples(st.integers(0, 255), st.binary(max_size=300)), min_size=1, max_size=20
)


def _stream(records: list[tuple[int, bytes]]) -> bytes:
    return b"".join(header(kind, len(payload)) + payload for kind, payload in records)


@given(records_strategy)
def test_records_come_out_as_they_went_in(records: list[tuple[int, bytes]]) -> None:
    """A record is a header (kind, length) and its payload: read back whole, in order."""
    assert RecordReader().feed(_stream(records)) == records


@given(records_strategy)
def test_records_split_at_every_octet_are_read_whole(records: list[tuple[int, bytes]]) -> None:
    """A stream socket may cut a record anywhere: a partial record waits for the rest, and is
    no error (STYLE, "Partial input is not an error")."""
    stream = _stream(records)
    for cut in range(len(stream) + 1):
        reader = RecordReader()
        assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == records


@given(records_strategy, st.integers(min_value=1, max_value=64))
def test_records_read_in_many_small_pieces_are_read_whole(
    records: list[tuple[int, bytes]], piece: int
) -> None:
    """A record longer than a read comes in many reads (a long message): it is read whole once
    its last piece came, and the records around it too."""
    stream = _stream(records)
    reader = RecordReader()
    read = []
    for start in range(0, len(stream), piece):
        read += reader.feed(stream[start : start + piece])
    assert read == records


def test_every_record_of_a_read_is_taken_and_a_partial_one_kept() -> None:
    records = [(ECHO, n.to_bytes(4, "big") * (n % 5)) for n in range(1000)]
    stream = _stream(records)
    reader = RecordReader()
    assert reader.feed(stream + stream[:3]) == records
    assert reader.feed(stream[3:]) == records


def test_a_length_over_the_limit_is_refused() -> None:
    with pytest.raises(MalformedRecord):
        RecordReader().feed(struct.pack("!BI", ECHO, RECORD_MAX + 1))


def test_a_kind_is_registered_once() -> None:
    assert KINDS[HELLO] == "hello"
    with pytest.raises(ValueError, match="taken"):
        record_kind(ECHO, "again")


@dataclass
class Pair:
    """Two workers' links, their ends handed through real inboxes, and what each was told."""

    links: list[PeerLinks]
    up: list[list[PeerLink]]
    down: list[list[PeerLink]]
    inboxes: list[Inbox]
    ends: list[tuple[socket.socket, socket.socket]]

    def close(self) -> None:
        for each, inbox in zip(self.links, self.inboxes, strict=True):
            each.close()
            inbox.stop()
        for reading, sending in self.ends:
            reading.close()
            sending.close()

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not done():
                await asyncio.sleep(0.005)


def _adopter(links: PeerLinks) -> Callable[[socket.socket, Origin, bytes], None]:
    """What a worker does with a link's end from its inbox (`WorkerDuties._adopt`)."""

    def adopt(end: socket.socket, origin: Origin, _received: bytes) -> None:
        assert origin.link_from is not None
        links.adopt(end, origin.link_from)

    return adopt


def _pair(*, started_again: tuple[bool, bool] = (False, False)) -> Pair:
    ends = inbox_pairs(2)
    outboxes = [sending for _reading, sending in ends]
    links = [PeerLinks(n, 2, outboxes, started_again=started_again[n]) for n in range(2)]
    pair = Pair(links, [[], []], [[], []], [], ends)
    for n, each in enumerate(links):
        each.on_up.append(pair.up[n].append)
        each.on_down.append(pair.down[n].append)
        inbox = Inbox(ends[n][0], _adopter(each))
        inbox.start()
        pair.inboxes.append(inbox)
    return pair


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    made = _pair()
    for each in made.links:
        each.start()
    await made.until(lambda: all(each.link(1 - n) for n, each in enumerate(made.links)))
    yield made
    made.close()


async def test_the_first_worker_makes_the_link_and_both_see_it_up(pair: Pair) -> None:
    """One link per pair, made by the worker of the lower index at a first start; each side
    up once the other's HELLO came."""
    first, second = pair.links
    assert [link.peer for link in pair.up[0]] == [1]
    assert [link.peer for link in pair.up[1]] == [0]
    link_0, link_1 = first.link(1), second.link(0)
    assert link_0 is not None and link_1 is not None
    assert link_0.made_by == link_1.made_by == (0, first.start_id)
    assert link_0.peer_start == second.start_id and link_1.peer_start == first.start_id


async def test_records_reach_the_handler_of_their_kind_in_order(pair: Pair) -> None:
    got: list[bytes] = []
    pair.links[1].handle(ECHO, lambda _link, payload: got.append(payload))
    link = pair.links[0].link(1)
    assert link is not None
    for n in range(500):
        link.send(ECHO, str(n).encode())
    await pair.until(lambda: len(got) == 500)
    assert got == [str(n).encode() for n in range(500)]


async def test_what_is_sent_in_one_turn_is_written_once(pair: Pair) -> None:
    """Coalesce socket writes per loop turn (ARCHITECTURE, "The message path")."""
    got: list[bytes] = []
    pair.links[1].handle(ECHO, lambda _link, payload: got.append(payload))
    link = pair.links[0].link(1)
    assert link is not None and link.transport is not None
    transport = link.transport
    writes: list[int] = []
    writelines = transport.writelines

    def counted(data: Iterable[bytes | bytearray | memoryview]) -> None:
        pieces = list(data)
        writes.append(len(pieces))
        writelines(pieces)

    transport.writelines = counted  # type: ignore[method-assign,assignment]
    for n in range(100):
        link.send(ECHO, str(n).encode())
    assert writes == []  # nothing before the turn ends
    await pair.until(lambda: len(got) == 100)
    assert writes == [200]  # one write: a header and a payload per record
    link.send(ECHO, b"next turn")
    await pair.until(lambda: len(got) == 101)
    assert writes == [200, 2]


async def test_a_record_of_a_kind_nobody_handles_closes_the_link_with_a_logged_error(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    link = pair.links[0].link(1)
    assert link is not None
    with caplog.at_level(logging.INFO, logger="batonmq.cluster.peerlink"):
        link.send(UNHANDLED, b"?")
        await pair.until(lambda: len(pair.down[0]) == len(pair.down[1]) == 1)
    refused = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in refused] == ["peer link record not understood; link closed"]
    assert refused[0].reason == "no handler for a record of kind test unhandled"  # type: ignore[attr-defined]
    assert all(record.exc_info is None for record in caplog.records)
    assert "peer link down" in [r.getMessage() for r in caplog.records]
    assert pair.links[0].link(1) is None and pair.links[1].link(0) is None


async def test_a_link_closed_for_a_record_not_understood_is_made_again(pair: Pair) -> None:
    """Both workers live on after one of them closed their link for a bad record: the one
    that closed it makes it again a while later, so the pair is not cut for good."""
    link = pair.links[0].link(1)
    assert link is not None
    link.send(UNHANDLED, b"?")
    await pair.until(lambda: len(pair.down[0]) == len(pair.down[1]) == 1)
    async with asyncio.timeout(10):
        while not all(each.link(1 - n) for n, each in enumerate(pair.links)):
            await asyncio.sleep(0.05)
    again = pair.links[1].link(0)
    assert again is not None and again.made_by[0] == 1  # made by the worker that refused
    assert [len(up) for up in pair.up] == [2, 2]


async def test_a_record_its_handler_finds_malformed_closes_the_link_with_a_logged_error(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """A record that decodes to nothing a worker sends is refused as one of no known kind is:
    the link closes with one error line, and no traceback (a handler's MalformedRecord)."""

    def refuse(_link: PeerLink, _payload: bytes) -> None:
        raise MalformedRecord("not a record")

    pair.links[1].handle(REFUSED, refuse)
    link = pair.links[0].link(1)
    assert link is not None
    with caplog.at_level(logging.INFO, logger="batonmq.cluster.peerlink"):
        link.send(REFUSED, b"?")
        await pair.until(lambda: len(pair.down[0]) == len(pair.down[1]) == 1)
    refused = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in refused] == ["peer link record not understood; link closed"]
    assert refused[0].reason == "a record of kind test refused: not a record"  # type: ignore[attr-defined]
    assert all(record.exc_info is None for record in caplog.records)


async def test_two_workers_started_again_together_keep_one_link() -> None:
    """Each worker started again makes a link to the other: both sides keep the one made by
    the later process and close the other, so the pair has one link."""
    made = _pair(started_again=(True, True))
    try:
        for each in made.links:
            each.start()
        later = max(made.links, key=lambda each: (each.start_id, each.index))
        await made.until(
            lambda: all(
                (link := each.link(1 - n)) is not None and link.made_by[0] == later.index
                for n, each in enumerate(made.links)
            )
        )
        await asyncio.sleep(0.05)  # the other link is closed, not up again
        for n, each in enumerate(made.links):
            link = each.link(1 - n)
            assert link is not None and link.made_by == (later.index, later.start_id)
            # a watcher told of the other link is told of its end before the kept one is up
            assert made.up[n][-1] is link and made.down[n] == made.up[n][:-1]
    finally:
        made.close()


def _hello(worker: int, start: int) -> bytes:
    payload = struct.pack("!HQ", worker, start)
    return header(HELLO, len(payload)) + payload


async def _read_until_end(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    read = b""
    async with asyncio.timeout(5):
        while chunk := await loop.sock_recv(sock, 65536):
            read += chunk
    return read


async def test_an_end_made_by_an_earlier_process_of_the_peer_is_closed(pair: Pair) -> None:
    """An end that waited in the inbox while its maker was replaced is not taken for a live
    link: the link that is up came from a later process of that worker."""
    second = pair.links[1]
    earlier, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    earlier.setblocking(False)
    try:
        second.adopt(far, (0, pair.links[0].start_id - 1))
        assert await _read_until_end(earlier) == b""  # closed unread, no HELLO sent
        assert second.link(0) is pair.up[1][0]
    finally:
        earlier.close()


async def test_a_link_replaced_by_a_later_process_of_the_peer_is_reported_down_first(
    pair: Pair,
) -> None:
    """A link that a later process of the peer replaces is down for the watchers (what waits
    on it, e.g. publishes not yet confirmed, learns of its end) before the new one is up."""
    second, first = pair.links[1], pair.links[0]
    old = second.link(0)
    later, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    later.setblocking(False)
    try:
        later.sendall(_hello(0, first.start_id + 1))
        second.adopt(far, (0, first.start_id + 1))
        await pair.until(lambda: second.link(0) is not old)
        new = second.link(0)
        assert new is not None and new.peer_start == first.start_id + 1
        assert pair.down[1] == [old] and pair.up[1] == [old, new]
    finally:
        later.close()


async def test_a_link_whose_end_a_full_inbox_refused_is_made_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The peer's inbox was full when the link's end was sent: the link is made again once it
    has room, not left unmade until a worker restarts."""
    made = _pair()
    try:
        made.inboxes[1].stop()
        filler, stuffed = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sending, reading = made.ends[1][1], made.ends[1][0]
        with contextlib.suppress(BlockingIOError):
            while True:
                socket.send_fds(sending, [b"x"], [filler.fileno()])
        with caplog.at_level(logging.WARNING, logger="batonmq.cluster.peerlink"):
            for each in made.links:
                each.start()
            await made.until(lambda: "peer link not made" in caplog.text)
        with contextlib.suppress(BlockingIOError):
            while True:
                for fd in socket.recv_fds(reading, 16, 1)[1]:
                    os.close(fd)
        made.inboxes[1].start()
        await made.until(lambda: all(each.link(1 - n) for n, each in enumerate(made.links)))
        filler.close()
        stuffed.close()
    finally:
        made.close()


async def test_a_record_before_hello_closes_the_link() -> None:
    links = PeerLinks(1, 2, [], started_again=False)
    peer, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.setblocking(False)
    try:
        links.adopt(far, (0, 1))
        peer.send(header(ECHO, 0))
        read = await _read_until_end(peer)
        assert read == _hello(1, links.start_id)  # its HELLO, then the end
        assert links.link(0) is None
    finally:
        peer.close()
        links.close()


async def test_a_peer_that_does_not_read_makes_the_link_unwritable_until_it_reads() -> None:
    """Back-pressure: over the transport's high-water mark the link is not writable, and its
    watchers are told; once the peer read, it is writable again (Qpid broker manual, producer
    flow control: the sender is held, not the reader)."""
    links = PeerLinks(1, 2, [], started_again=False)
    changes: list[bool] = []
    links.on_writable.append(lambda link: changes.append(link.writable))
    peer, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for end in (peer, far):
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peer.setblocking(False)
    try:
        peer.send(_hello(0, 1))
        links.adopt(far, (0, 1))
        async with asyncio.timeout(5):
            while (link := links.link(0)) is None:
                await asyncio.sleep(0.005)
        assert link.transport is not None
        link.transport.set_write_buffer_limits(high=16384)
        chunk = b"x" * 4096
        sent = 0
        async with asyncio.timeout(5):
            while link.writable:
                link.send(ECHO, chunk)
                sent += 1
                await asyncio.sleep(0)
        assert changes == [False]
        read = 0
        loop = asyncio.get_running_loop()
        expected = len(_hello(1, links.start_id)) + sent * (len(header(ECHO, 0)) + len(chunk))
        async with asyncio.timeout(5):
            while read < expected:
                read += len(await loop.sock_recv(peer, 65536))
        assert changes == [False, True] and link.writable
    finally:
        peer.close()
        links.close()


async def test_a_link_counts_what_it_wrote_and_read(pair: Pair) -> None:
    """What the management API shows of a link (RabbitMQ's `cluster_links`: octets sent and
    received per link): records and octets each way, HELLO included, the same seen from the
    other side, and whether it is writable."""
    got: list[bytes] = []
    pair.links[1].handle(ECHO, lambda _link, payload: got.append(payload))
    first, second = pair.links
    hello = len(_hello(0, 0))
    [sending] = first.describe()
    [receiving] = second.describe()
    assert (sending.peer, receiving.peer) == (1, 0)
    assert (sending.records_sent, sending.bytes_sent) == (1, hello)
    assert (receiving.records_received, receiving.bytes_received) == (1, hello)
    link = first.link(1)
    assert link is not None
    payloads = [bytes(n) for n in range(50)]
    for payload in payloads:
        link.send(ECHO, payload)
    await pair.until(lambda: len(got) == 50)
    octets = hello + sum(len(header(ECHO, len(payload)) + payload) for payload in payloads)
    [sending] = first.describe()
    [receiving] = second.describe()
    assert (sending.records_sent, sending.bytes_sent) == (51, octets)
    assert (receiving.records_received, receiving.bytes_received) == (51, octets)
    assert (sending.records_received, sending.bytes_received) == (1, hello)
    assert (receiving.records_sent, receiving.bytes_sent) == (1, hello)
    assert sending.writable and receiving.writable
    assert 0 < sending.up_since <= time.time()


def test_a_link_whose_connection_is_cancelled_as_it_is_made_is_lost_without_a_traceback() -> None:
    """A worker that stops while its links come up (refused at start: the event loop's
    shutdown cancels every task) cancels `connect_accepted_socket` after it called
    `connection_made`. uvloop, which the broker runs on, then closes the transport without
    `is_closing()` or `connection_lost` saying so; the HELLO queued in `connection_made` must
    not be written to it (a traceback in the broker's log before), and the link counts as
    lost."""
    errors: list[dict[str, object]] = []

    async def main() -> PeerLinks:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        links = PeerLinks(0, 2, [], started_again=False)
        near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with far:
            links._connect(PeerLink(links, 1, (0, links.start_id)), near)
            await asyncio.sleep(0)  # connection_made: the HELLO is queued
            for connecting in list(links._connecting):
                connecting.cancel()
            await asyncio.sleep(0.1)
        return links

    links = uvloop.run(main())

    assert errors == []
    assert links._opening == set() and links.link(1) is None
