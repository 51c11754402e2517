"""The tests' TCP fault proxy (tests.faultproxy) in front of a trivial echo server, on real
loopback sockets: each mode does what it says, on connections already open.

Hardening, "The test harness": "A small TCP fault proxy in the tests (forward, drop, blackhole,
delay, cut mid-frame)".
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.faultproxy import Blackhole, Cut, Delay, FaultProxy, Forward
from tests.faultproxy import Drop as DropMode

#: Long enough for bytes to cross loopback many times over; how long a test waits to see that
#: nothing arrives.
QUIET = 0.5


@dataclass
class EchoLog:
    """What the echo server received, per connection, and which connections it saw end.

    A connection is logged when its handler thread starts, which may be after the proxy has
    already forwarded, cut and closed it: `wait_ended` waits for the entry to appear too."""

    received: list[bytearray] = field(default_factory=list)
    ended: list[threading.Event] = field(default_factory=list)
    opened: threading.Condition = field(default_factory=threading.Condition)

    def add(self) -> tuple[bytearray, threading.Event]:
        entry = bytearray(), threading.Event()
        with self.opened:
            self.received.append(entry[0])
            self.ended.append(entry[1])
            self.opened.notify_all()
        return entry

    def wait_ended(self, index: int, timeout: float = 10) -> bool:
        """Whether connection `index` was seen and ended within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.opened:
            if not self.opened.wait_for(lambda: len(self.ended) > index, timeout):
                return False
        return self.ended[index].wait(max(0.0, deadline - time.monotonic()))


class EchoHandler(socketserver.BaseRequestHandler):
    server: EchoServer

    def handle(self) -> None:
        received, ended = self.server.log.add()
        try:
            while chunk := self.request.recv(65536):
                received += chunk
                self.request.sendall(chunk)
        except ConnectionError:
            pass
        finally:
            ended.set()


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), EchoHandler)
        self.log = EchoLog()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    host, port = echo.server_address[:2]
    with FaultProxy(str(host), int(port)) as running:
        yield running


@pytest.fixture
def client(proxy: FaultProxy) -> Iterator[socket.socket]:
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as sock:
        yield sock


def receive(sock: socket.socket, size: int) -> bytes:
    """Exactly `size` bytes, or fewer if the connection ends first."""
    data = b""
    while len(data) < size and (chunk := sock.recv(size - len(data))):
        data += chunk
    return data


def nothing_arrives(sock: socket.socket) -> bool:
    """True if `sock` stays open and silent for QUIET seconds."""
    sock.settimeout(QUIET)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(10)
    return False


def is_closed(sock: socket.socket) -> bool:
    """True if the peer closed `sock` (an end of stream or a reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_forward_passes_bytes_both_ways(echo: EchoServer, client: socket.socket):
    """Forward: every byte reaches the server, and its answer the client."""
    payload = bytes(range(256)) * 1000
    client.sendall(payload)
    assert receive(client, len(payload)) == payload
    assert echo.log.received[0] == payload


def test_drop_closes_both_sides_of_an_open_connection(
    echo: EchoServer, proxy: FaultProxy, client: socket.socket
):
    """Drop: both sides of a connection already open are closed at once."""
    client.sendall(b"hello")
    assert receive(client, 5) == b"hello"
    proxy.set_mode(DropMode())
    assert is_closed(client)
    assert echo.log.wait_ended(0)


def test_drop_closes_a_new_connection_at_once(proxy: FaultProxy):
    """Drop: a connection made while dropping is closed at once."""
    proxy.set_mode(DropMode())
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as sock:
        assert is_closed(sock)


def test_blackhole_forwards_nothing_and_keeps_the_sockets_open(
    echo: EchoServer, proxy: FaultProxy, client: socket.socket
):
    """Blackhole: nothing passes either way, neither end sees its connection end, and what
    was sent meanwhile is lost; forwarding again passes new bytes."""
    client.sendall(b"before")
    assert receive(client, 6) == b"before"
    proxy.set_mode(Blackhole())
    client.sendall(b"lost")
    assert nothing_arrives(client)
    assert echo.log.received[0] == b"before"
    assert not echo.log.ended[0].is_set()
    proxy.set_mode(Forward())
    client.sendall(b"after")
    assert receive(client, 5) == b"after"
    assert echo.log.received[0] == b"beforeafter"


def test_delay_holds_each_chunk_and_keeps_the_order(client: socket.socket, proxy: FaultProxy):
    """Delay: each chunk is held the given time in each direction (so an echo takes at least
    twice that), and the chunks arrive in the order they were sent."""
    proxy.set_mode(Delay(0.3))
    started = time.monotonic()
    for part in (b"one,", b"two,", b"three"):
        client.sendall(part)
    assert receive(client, 13) == b"one,two,three"
    assert time.monotonic() - started >= 0.6


def test_cut_forwards_k_bytes_then_closes_both_sides(
    echo: EchoServer, proxy: FaultProxy, client: socket.socket
):
    """Cut: after the switch, exactly K more client-to-server bytes pass, then both sides are
    closed: the server sees the stream end in the middle of what the client sent."""
    client.sendall(b"0123")
    assert receive(client, 4) == b"0123"
    proxy.set_mode(Cut(after_bytes=5))
    client.sendall(b"abcdefghij")
    assert echo.log.wait_ended(0)
    assert echo.log.received[0] == b"0123abcde"
    # The client's side is closed as soon as the cut is written: the server's echo of it has
    # no way back, save a part that was quicker than the close.
    assert b"abcde".startswith(receive(client, 6))
    assert proxy.connections[0].cut_at == 9


def test_cut_counts_a_new_connection_from_its_start(echo: EchoServer, proxy: FaultProxy):
    """Cut set before a client connects: the first K bytes of its stream pass."""
    proxy.set_mode(Cut(after_bytes=3))
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as sock:
        sock.sendall(b"abcdef")
        assert b"abc".startswith(receive(sock, 6))
    assert echo.log.wait_ended(0)
    assert echo.log.received[0] == b"abc"


def test_a_cut_to_the_client_counts_the_server_to_client_stream(
    echo: EchoServer, proxy: FaultProxy, client: socket.socket
):
    """Cut to the client: K more server-to-client bytes pass, then both sides are closed: the
    client sees the stream end in the middle of what the server sent."""
    proxy.set_mode(Cut(after_bytes=4, to_client=True))
    client.sendall(b"abcdefgh")
    assert receive(client, 8) == b"abcd"
    assert echo.log.wait_ended(0)
    assert proxy.connections[0].cut_at == 4
