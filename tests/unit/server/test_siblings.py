"""The link between the workers of one broker (`batonmq.server.siblings`): its packets, and
requests and answers over real Unix socket pairs made as the supervisor makes them."""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import time
from collections.abc import Iterator

import pytest

from batonmq.server.placement import inbox_pairs
from batonmq.server.siblings import (
    FRAGMENT,
    PACKET_MAX,
    Assembler,
    Header,
    Kind,
    MalformedPacket,
    SiblingFailed,
    SiblingLink,
    SiblingUnavailable,
    packets,
    parse,
    tell_siblings,
)

Inboxes = list[tuple[socket.socket, socket.socket]]


def _header(
    kind: Kind = Kind.REQUEST, *, sender: int = 1, pid: int = 42, number: int = 7
) -> Header:
    return Header(kind, False, sender, pid, 0, number, 1e9)


def test_a_small_message_is_one_packet_that_parses_back() -> None:
    header = _header()
    (packet,) = packets(header, b"payload")
    assert len(packet) <= PACKET_MAX
    assert parse(packet) == (header, b"payload")


def test_a_large_message_is_cut_and_put_together_again() -> None:
    payload = os.urandom(FRAGMENT * 3 + 17)
    cut = list(packets(_header(), payload))
    assert len(cut) == 4
    assert all(len(packet) <= PACKET_MAX for packet in cut)
    assert [parse(packet)[0].more for packet in cut] == [True, True, True, False]
    assembler = Assembler()
    assert [assembler.add(*parse(packet)) for packet in cut[:-1]] == [None, None, None]
    assert assembler.add(*parse(cut[-1])) == payload
    assert len(assembler) == 0


def test_an_empty_payload_is_one_packet() -> None:
    (packet,) = packets(_header(), b"")
    assert Assembler().add(*parse(packet)) == b""


def test_messages_of_different_senders_interleave() -> None:
    """SOCK_SEQPACKET keeps each sender's packets in order, not the senders apart."""
    first, second = os.urandom(FRAGMENT + 1), os.urandom(FRAGMENT + 2)
    a = list(packets(_header(sender=0, pid=10), first))
    b = list(packets(_header(sender=2, pid=20), second))
    assembler = Assembler()
    done = [assembler.add(*parse(packet)) for packet in (a[0], b[0], b[1], a[1])]
    assert done == [None, None, second, first]


def test_what_an_ended_process_left_half_sent_is_dropped() -> None:
    """A worker killed in the middle of a message is started again with another pid."""
    assembler = Assembler()
    assembler.add(*parse(next(packets(_header(pid=10), os.urandom(FRAGMENT + 1)))))
    assert len(assembler) == 1
    assembler.add(*parse(next(packets(_header(pid=11), os.urandom(FRAGMENT + 1)))))
    assert len(assembler) == 1


@pytest.mark.parametrize("packet", [b"", b"short", b"XXXX" + bytes(40)])
def test_a_packet_that_is_not_the_links_is_refused(packet: bytes) -> None:
    with pytest.raises(MalformedPacket):
        parse(packet)


@pytest.fixture
def inboxes() -> Iterator[Inboxes]:
    made = inbox_pairs(3)
    yield made
    for ends in made:
        for end in ends:
            end.close()


async def _double(question: object) -> object:
    if question == "fail":
        raise ValueError("cannot")
    if question == "slow":
        await asyncio.sleep(10)
    assert isinstance(question, bytes)
    return question * 2


async def test_a_request_gets_its_answer_however_large(inboxes: Inboxes) -> None:
    asking = SiblingLink(0, inboxes, _double)
    answering = SiblingLink(1, inboxes, _double)
    asking.start()
    answering.start()
    try:
        large = os.urandom(FRAGMENT * 2 + 5)
        answers = await asyncio.gather(
            asking.request(1, b"x", 5), asking.request(1, large, 5), answering.request(0, b"y", 5)
        )
        assert answers == [b"xx", large * 2, b"yy"]
    finally:
        await asking.stop()
        await answering.stop()


async def test_a_worker_that_is_down_is_unavailable_after_the_time_limit(
    inboxes: Inboxes,
) -> None:
    """Worker 2 reads nothing (it is down): the request waits in its inbox, then gives up."""
    asking = SiblingLink(0, inboxes, _double)
    asking.start()
    try:
        started = time.monotonic()
        with pytest.raises(SiblingUnavailable) as unavailable:
            await asking.request(2, b"x", 0.3)
        assert 0.3 <= time.monotonic() - started < 2
        assert unavailable.value.worker == 2
    finally:
        await asking.stop()


async def test_a_request_found_after_its_deadline_is_not_carried_out(inboxes: Inboxes) -> None:
    """A worker that was restarting finds the requests that waited in its inbox: those given up
    on are dropped, so a change the requester answered as failed is not made later."""
    asked: list[object] = []

    async def record(question: object) -> object:
        asked.append(question)
        return question

    asking = SiblingLink(0, inboxes, record)
    asking.start()
    try:
        with pytest.raises(SiblingUnavailable):
            await asking.request(1, b"late", 0.1)
        restarted = SiblingLink(1, inboxes, record, started_again=True)
        restarted.start()
        try:
            assert await asking.request(1, b"on time", 5) == b"on time"
        finally:
            await restarted.stop()
    finally:
        await asking.stop()
    assert asked == [b"on time"]


async def test_a_worker_starting_for_the_first_time_answers_what_was_asked_before(
    inboxes: Inboxes,
) -> None:
    """At a broker's start the workers come up in any order: worker 1 may take a client and ask
    worker 0 (a login's failure count) before worker 0's process exists. Nothing was meant
    for an earlier process of worker 0, so the request waits in its inbox and is answered.
    (Dropped as "sent before this process started", the login waited 5 s for nothing.)"""
    asking = SiblingLink(0, inboxes, _double)
    asking.start()
    try:
        request = asyncio.ensure_future(asking.request(1, b"early", 5))
        await asyncio.sleep(0.05)  # sent, and worker 1 has not started yet
        first = SiblingLink(1, inboxes, _double)
        first.start()
        try:
            assert await request == b"earlyearly"
        finally:
            await first.stop()
    finally:
        await asking.stop()


async def test_a_failure_to_answer_is_said(
    inboxes: Inboxes, caplog: pytest.LogCaptureFixture
) -> None:
    asking = SiblingLink(0, inboxes, _double)
    answering = SiblingLink(1, inboxes, _double)
    asking.start()
    answering.start()
    try:
        with pytest.raises(SiblingFailed, match="ValueError: cannot"):
            await asking.request(1, "fail", 5)
    finally:
        await asking.stop()
        await answering.stop()
    assert "sibling request failed" in caplog.text


async def test_an_answer_for_an_earlier_process_is_dropped(inboxes: Inboxes) -> None:
    """Answers go by pid: one meant for an earlier process of this worker index (same request
    number) does not answer this one's request."""
    asking = SiblingLink(0, inboxes, _double)
    asking.start()
    try:
        stale = Header(Kind.ANSWER, False, 1, 99, os.getpid() + 1, 1, 0.0)
        for packet in packets(stale, pickle.dumps(b"stale")):
            inboxes[0][1].send(packet)
        answering = SiblingLink(1, inboxes, _double)
        answering.start()
        try:
            assert await asking.request(1, b"z", 5) == b"zz"
        finally:
            await answering.stop()
    finally:
        await asking.stop()


async def test_what_was_asked_of_a_worker_that_ended_fails_at_once(inboxes: Inboxes) -> None:
    """The supervisor tells the others when a worker ends and when it serves again: until then a
    request to it fails at once instead of after its time limit."""
    asking = SiblingLink(0, inboxes, _double)
    asking.start()
    try:
        started = time.monotonic()
        waiting = asyncio.ensure_future(asking.request(2, b"x", 30))
        await asyncio.sleep(0.05)
        tell_siblings(inboxes, 2, up=False)
        with pytest.raises(SiblingUnavailable, match="it ended"):
            await waiting
        with pytest.raises(SiblingUnavailable, match="it is down"):
            await asking.request(2, b"x", 30)
        assert time.monotonic() - started < 5
        tell_siblings(inboxes, 2, up=True)
        await asyncio.sleep(0.05)
        assert asking.down == set()
        with pytest.raises(SiblingUnavailable, match="no answer"):
            await asking.request(2, b"x", 0.1)
    finally:
        await asking.stop()
