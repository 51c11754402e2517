"""Handing a client's socket and the bytes read from it to another worker's inbox
(`batonmq.server.handoff`), over a real Unix socket pair."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from batonmq.server.handoff import MAGIC, Inbox, Origin, hand_over, packet, unpack

ORIGIN = Origin("amqp", ("192.0.2.7", 50123), ("127.0.0.1", 5672))


@pytest.fixture
def inbox_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """An inbox as the supervisor makes it: the reading end and the sending end."""
    reading, sending = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for end in (reading, sending):
        end.setblocking(False)
    yield reading, sending
    reading.close()
    sending.close()


async def test_the_owner_gets_the_same_connection_and_every_byte(
    inbox_pair: tuple[socket.socket, socket.socket],
) -> None:
    """The client's connection itself moves: what the client sends next reaches the owner on
    the socket it adopted, and what the owner writes reaches the client."""
    reading, sending = inbox_pair
    client, accepted = socket.socketpair()
    adopted: asyncio.Queue[tuple[socket.socket, Origin, bytes]] = asyncio.Queue()
    inbox = Inbox(reading, lambda *handed: adopted.put_nowait(handed))
    inbox.start()
    try:
        assert hand_over(accepted.fileno(), ORIGIN, b"AMQP\x00\x00\x09\x01...", sending) is None
        accepted.close()  # the accepting worker lets its descriptor go
        sock, origin, received = await asyncio.wait_for(adopted.get(), 5)
    finally:
        inbox.stop()
    with client, sock:
        assert (origin, received) == (ORIGIN, b"AMQP\x00\x00\x09\x01...")
        client.sendall(b"next frame")
        assert await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 64), 5) == (
            b"next frame"
        )
        sock.setblocking(True)
        sock.sendall(b"open-ok")
        assert client.recv(64) == b"open-ok"


async def test_a_packet_that_is_not_a_hand_off_closes_what_came_with_it(
    inbox_pair: tuple[socket.socket, socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    reading, sending = inbox_pair
    client, accepted = socket.socketpair()
    adopted: list[bytes] = []
    inbox = Inbox(reading, lambda _sock, _origin, received: adopted.append(received))
    socket.send_fds(sending, [b"not a hand-off"], [accepted.fileno()])
    sending.send(b"no socket either")
    accepted.close()
    inbox.start()
    try:
        await asyncio.sleep(0.1)
    finally:
        inbox.stop()
    assert adopted == []
    assert "connection handed over unreadable; closed" in caplog.text
    # The descriptor that came with it was closed: the client's end sees the connection end.
    client.settimeout(5)
    assert client.recv(1) == b""
    client.close()


def test_a_full_inbox_says_why(inbox_pair: tuple[socket.socket, socket.socket]) -> None:
    """A worker whose inbox is full (its owner stalled) is told, and closes the client's
    connection rather than wait on the event loop."""
    _reading, sending = inbox_pair
    client, accepted = socket.socketpair()
    with client, accepted:
        for _ in range(100_000):
            why = hand_over(accepted.fileno(), ORIGIN, MAGIC * 1000, sending)
            if why is not None:
                break
        assert why is not None


def test_the_origin_keeps_a_client_certificate_as_the_tls_library_gives_it() -> None:
    """EXTERNAL reads the certificate's subject as tuples of (name, value) pairs
    (`getpeercert()`): the owner of a relayed TLS client gets it in that shape."""
    certificate = {
        "subject": ((("commonName", "guest"),), (("organizationName", "BatonMQ"),)),
        "notAfter": "Nov 26 00:00:00 2027 GMT",
    }
    origin = Origin("amqps", ("192.0.2.7", 50123), None, certificate)

    assert unpack(packet(origin, b"frames")) == (origin, b"frames")


def test_the_origin_of_a_link_end_names_the_worker_and_process_that_made_it() -> None:
    """A link's end between workers comes through the inbox too (`batonmq.cluster.peerlink`):
    its origin says who made it, which a client's never does."""
    origin = Origin.peer_link(3, 1_795_000_000_123_456_789)

    assert unpack(packet(origin, b"")) == (origin, b"")
    assert origin.link_from == (3, 1_795_000_000_123_456_789)
    assert ORIGIN.link_from is None


@pytest.mark.parametrize("data", [b"BMQ1" + b"old", MAGIC, MAGIC + b"\x00\x00\x00\x09garbage!!"])
def test_a_packet_of_another_version_or_damaged_is_not_a_hand_off(data: bytes) -> None:
    assert unpack(data) is None
