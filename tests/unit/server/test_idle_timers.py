"""A connection's timer wakes only when one of its deadlines is due.

The rule pinned (the issue on per-connection costs): "1,000 idle connections plus one busy pair
(the cost of idle connections: heartbeats, timers, memory per connection)". An open connection
with heartbeats off has no timer at all; with heartbeats on, it wakes when our heartbeat is due
(spec 4.2.7: sent when nothing else was sent for half the interval) and not once a second. The
handshake timeout (RabbitMQ: 10 s) and the wait for connection.close-ok still end the
connection at their time. Real sockets and the real `AMQPProtocol`; the client is the blocking
raw-frame client, run in a thread beside the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import pytest
from pamqp import commands

from batonmq.engine.broker import Broker
from batonmq.server.protocol import CLOSE_TIMEOUT, HANDSHAKE_TIMEOUT, AMQPProtocol
from tests.ports import free_port
from tests.rawclient import RawClient
from tests.wire import plain_response

BUFFER = 1 << 20
CHANNEL_ERROR = 504


@dataclass
class Server:
    port: int
    protocols: list[AMQPProtocol] = field(default_factory=list)

    def client(self) -> RawClient:
        return RawClient.connect("127.0.0.1", self.port)

    def only_protocol(self) -> AMQPProtocol:
        [protocol] = self.protocols
        return protocol


@pytest.fixture
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A broker whose log shows a traceback fails the test."""
    caplog.set_level(logging.INFO)
    yield
    assert [record for record in caplog.records if record.exc_info] == []


@pytest.fixture
async def server(no_tracebacks: None) -> AsyncIterator[Server]:
    broker = Broker()
    served = Server(free_port())

    def new_protocol() -> AMQPProtocol:
        protocol = AMQPProtocol(broker, BUFFER, BUFFER // 2, lambda _protocol: None)
        served.protocols.append(protocol)
        return protocol

    listener = await asyncio.get_running_loop().create_server(
        new_protocol, "127.0.0.1", served.port
    )
    try:
        yield served
    finally:
        listener.close()
        for protocol in served.protocols:
            if protocol.transport is not None:
                protocol.transport.abort()
        await listener.wait_closed()


async def _open(server: Server, heartbeat: int) -> tuple[RawClient, AMQPProtocol]:
    client = server.client()
    await asyncio.to_thread(client.handshake, heartbeat_interval=heartbeat)
    await asyncio.to_thread(client.open_channel, 1)
    protocol = server.only_protocol()
    assert protocol.session.connection.heartbeat == heartbeat
    return client, protocol


def _login_and_tune_ok(client: RawClient) -> commands.Connection.Tune:
    """The handshake up to tune-ok (heartbeat 0), without connection.open."""
    client.start()
    tune = client.login("PLAIN", plain_response("guest", "guest"))
    client.tune_ok(tune.channel_max, tune.frame_max, 0)
    return tune


async def _closed_at_the_handshake_timeout(
    client: RawClient, started: float, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker closes `client`'s connection, made at `started` (monotonic), with no
    connection.close, HANDSHAKE_TIMEOUT later, and logs why."""
    received = await asyncio.to_thread(client.read_until_closed, HANDSHAKE_TIMEOUT + 5)

    elapsed = time.monotonic() - started
    assert received == b""
    assert HANDSHAKE_TIMEOUT - 0.5 <= elapsed <= HANDSHAKE_TIMEOUT + 1.0, elapsed
    reasons = [getattr(record, "reason", None) for record in caplog.records]
    assert "handshake timed out" in reasons


def _seconds_to_wake(protocol: AMQPProtocol) -> float | None:
    timer = protocol._timer
    if timer is None or timer.cancelled():
        return None
    return timer.when() - asyncio.get_running_loop().time()


async def test_open_connection_without_heartbeats_never_wakes(server: Server) -> None:
    """Spec 4.2.7 with heartbeat 0 ("the peer does not want a heartbeat"): nothing is due on
    an open, idle connection, so its protocol runs no timer callback over 3 s and has none
    scheduled (not one a second)."""
    client, protocol = await _open(server, heartbeat=0)
    with client:
        ticks = 0
        real_tick = protocol._tick

        def counting_tick() -> None:
            nonlocal ticks
            ticks += 1
            real_tick()

        protocol._tick = counting_tick  # type: ignore[method-assign]
        scheduled = []
        for _ in range(30):
            scheduled.append(_seconds_to_wake(protocol))
            await asyncio.sleep(0.1)

        assert ticks == 0
        assert scheduled == [None] * 30
        assert await asyncio.to_thread(client.round_trip, 1) == b"still serving"


async def test_open_connection_with_heartbeat_60_wakes_when_ours_is_due(server: Server) -> None:
    """Spec 4.2.7: the server sends a heartbeat when it has sent nothing for half the
    negotiated interval. With heartbeat 60 and open-ok just sent, the next wake is that
    heartbeat, about 30 s away (not 1 s), and after more traffic it is not moved earlier."""
    client, protocol = await _open(server, heartbeat=60)
    with client:
        wake = _seconds_to_wake(protocol)
        assert wake is not None and 29.0 < wake <= 30.0, wake

        await asyncio.to_thread(client.round_trip, 1)

        wake = _seconds_to_wake(protocol)
        assert wake is not None and 28.0 < wake <= 30.0, wake


async def test_handshake_timeout_still_ends_a_silent_connection(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """RabbitMQ's handshake timeout (10 s): a client that connects and sends nothing is
    disconnected then. The timer is set for that moment at accept, and fires at it."""
    client = server.client()
    with client:
        await asyncio.sleep(0.2)
        protocol = server.only_protocol()
        wake = _seconds_to_wake(protocol)
        assert wake is not None and HANDSHAKE_TIMEOUT - 1 < wake <= HANDSHAKE_TIMEOUT, wake
        started = time.monotonic() - 0.2

        await _closed_at_the_handshake_timeout(client, started, caplog)


async def test_handshake_timeout_ends_a_tuned_connection_that_never_opens(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """RabbitMQ's `handshake_timeout` bounds the whole AMQP 0-9-1 handshake, which ends with
    connection.open-ok (spec 2.2.4: the client "opens a virtual host" to finish it), not at
    tune-ok. A client that logs in, sends tune-ok with heartbeat 0 and then nothing would
    otherwise hold its connection, with no timer left, for ever."""
    client = server.client()
    with client:
        started = time.monotonic()
        tune = await asyncio.to_thread(_login_and_tune_ok, client)
        assert tune.heartbeat > 0  # the broker proposed one; the client chose 0
        protocol = server.only_protocol()
        wake = _seconds_to_wake(protocol)
        assert wake is not None and wake <= HANDSHAKE_TIMEOUT, wake

        await _closed_at_the_handshake_timeout(client, started, caplog)


async def test_close_ok_timeout_still_ends_a_connection_without_heartbeats(
    server: Server,
) -> None:
    """Spec 2.2.4 (connection.close: "the recipient MUST send Close-Ok"); a client that does
    not is disconnected CLOSE_TIMEOUT after the broker's connection.close, also when its
    connection has no heartbeats and so no timer of its own: closing sets one."""
    client, protocol = await _open(server, heartbeat=0)
    with client:
        assert _seconds_to_wake(protocol) is None
        client.send_frame(commands.Queue.Declare(queue="never-declared"), 2)  # 504: hard error
        close = await asyncio.to_thread(client.expect, commands.Connection.Close)
        closed_at = time.monotonic()
        assert close.reply_code == CHANNEL_ERROR
        wake = _seconds_to_wake(protocol)
        assert wake is not None and CLOSE_TIMEOUT - 0.5 < wake <= CLOSE_TIMEOUT, wake

        received = await asyncio.to_thread(client.read_until_closed, CLOSE_TIMEOUT + 5)

        elapsed = time.monotonic() - closed_at
        assert received == b""
        assert CLOSE_TIMEOUT - 0.5 <= elapsed <= CLOSE_TIMEOUT + 1.0, elapsed
