"""A small blocking AMQP 0-9-1 client for tests that speak raw frames to a broker.

It does only what a test needs: send the protocol header, log in with a chosen SASL mechanism and
response, send pamqp frames or arbitrary bytes, and read frames back, every read with a deadline.
It never hides what the broker sent: `expect` fails on any frame other than the one asked for
(heartbeats aside), so a test sees exactly the broker's reply.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid
from typing import Protocol, TypeVar

from pamqp import commands, frame, header, heartbeat
from pamqp.body import ContentBody
from pamqp.frame import FrameTypes

from tests.wire import amqplain_response, plain_response

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_HEADER_SIZE = 7
READ_TIMEOUT = 5.0
# RabbitMQ waits 3 s (its SILENT_CLOSE_DELAY) before it closes the socket after a fatal error.
CLOSE_TIMEOUT = 10.0

FrameT = TypeVar("FrameT")


class BrokerAddress(Protocol):
    """What the client needs to reach a broker (tests.brokerproc.RunningBroker has it)."""

    host: str
    port: int
    username: str
    password: str
    vhost: str


class SocketClosed(Exception):
    """The broker closed the socket (end of stream or reset) before a whole frame arrived."""


def non_heartbeat_frames(data: bytes) -> list[FrameTypes]:
    """The frames in `data` other than heartbeats (a broker may send those until it closes)."""
    frames: list[FrameTypes] = []
    while data:
        consumed, _channel, value = frame.unmarshal(data)
        data = data[consumed:]
        if not isinstance(value, heartbeat.Heartbeat):
            frames.append(value)
    return frames


class RawClient:
    """One TCP connection to the broker, driven frame by frame."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.frame_max = 4096
        self.channel_max = 0
        self.last_frame_size = 0

    @classmethod
    def connect(cls, host: str, port: int, timeout: float = READ_TIMEOUT) -> RawClient:
        return cls(socket.create_connection((host, port), timeout=timeout))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sending --------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, value: FrameTypes, channel: int = 0) -> None:
        self.send(frame.marshal(value, channel))

    def send_heartbeat(self) -> None:
        self.send(heartbeat.Heartbeat.marshal())

    def publish(self, channel: int, body: bytes, routing_key: str, exchange: str = "") -> None:
        """basic.publish, its content header and the body in frames of at most frame_max octets,
        all in one write."""
        method = commands.Basic.Publish(exchange=exchange, routing_key=routing_key)
        chunk = self.frame_max - FRAME_HEADER_SIZE - 1
        self.send(
            frame.marshal(method, channel)
            + frame.marshal(header.ContentHeader(0, len(body)), channel)
            + b"".join(
                frame.marshal(ContentBody(body[start : start + chunk]), channel)
                for start in range(0, len(body), chunk)
            )
        )

    # -- receiving ------------------------------------------------------------------------------

    def _fill(self, size: int, deadline: float) -> None:
        while len(self.buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete frame from the broker in time: {self.buffer!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError as exc:
                raise SocketClosed(f"connection reset; unparsed input {self.buffer!r}") from exc
            if not chunk:
                raise SocketClosed(f"end of stream; unparsed input {self.buffer!r}")
            self.buffer += chunk

    def read_frame(self, timeout: float = READ_TIMEOUT) -> tuple[int, FrameTypes]:
        """The next frame as (channel, pamqp value); raises TimeoutError or SocketClosed."""
        deadline = time.monotonic() + timeout
        self._fill(FRAME_HEADER_SIZE, deadline)
        (size,) = struct.unpack_from(">I", self.buffer, 3)
        self._fill(FRAME_HEADER_SIZE + size + 1, deadline)
        consumed, channel, value = frame.unmarshal(self.buffer)
        self.buffer = self.buffer[consumed:]
        self.last_frame_size = consumed
        return channel, value

    def expect(
        self, expected: type[FrameT], channel: int = 0, timeout: float = READ_TIMEOUT
    ) -> FrameT:
        """The next frame other than a heartbeat, which must be `expected` on `channel`."""
        deadline = time.monotonic() + timeout
        while True:
            got_channel, value = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if isinstance(value, heartbeat.Heartbeat):
                continue
            assert isinstance(value, expected), (
                f"expected {expected.__qualname__} on channel {channel}, "
                f"got {_describe(value)} on channel {got_channel}"
            )
            assert got_channel == channel, (
                f"expected {expected.__qualname__} on channel {channel}, got it on {got_channel}"
            )
            return value

    def read_until_closed(self, timeout: float = CLOSE_TIMEOUT) -> bytes:
        """Everything the broker sends until it closes the socket; TimeoutError if it does not."""
        deadline = time.monotonic() + timeout
        received, self.buffer = self.buffer, b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"the broker kept the socket open; it sent {received!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk

    def expect_silent_close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """The broker closes the socket without sending anything (not even connection.close)."""
        received = self.read_until_closed(timeout)
        assert received == b"", f"expected a bare close, got {describe_frames(received)}"

    def expect_connection_close(
        self, reply_code: int, send_close_ok: bool = True, timeout: float = CLOSE_TIMEOUT
    ) -> commands.Connection.Close:
        """connection.close with `reply_code`, then the socket closed: after our close-ok, or,
        with send_close_ok=False, by the broker on its own."""
        close = self.expect(commands.Connection.Close, 0, timeout)
        assert close.reply_code == reply_code, f"expected {reply_code}, got {_describe(close)}"
        if send_close_ok:
            # The broker may have closed the socket already, which is allowed.
            with contextlib.suppress(OSError):
                self.send_frame(commands.Connection.CloseOk())
        trailing = self.read_until_closed(timeout)
        assert not non_heartbeat_frames(trailing), f"data after connection.close: {trailing!r}"
        return close

    def expect_channel_close(
        self, channel: int, reply_code: int, timeout: float = READ_TIMEOUT
    ) -> commands.Channel.Close:
        """channel.close with `reply_code` on `channel`; answers it with channel.close-ok."""
        close = self.expect(commands.Channel.Close, channel, timeout)
        assert close.reply_code == reply_code, f"expected {reply_code}, got {_describe(close)}"
        self.send_frame(commands.Channel.CloseOk(), channel)
        return close

    # -- the handshake --------------------------------------------------------------------------

    def start(self, protocol_header: bytes = PROTOCOL_HEADER) -> commands.Connection.Start:
        self.send(protocol_header)
        return self.expect(commands.Connection.Start)

    def start_ok(
        self, mechanism: str, response: str, authentication_failure_close: bool = True
    ) -> None:
        """connection.start-ok. The capability asks for connection.close 403 on a failed login
        (a RabbitMQ extension, sent by pika and the Java client) rather than a bare close."""
        self.send_frame(
            commands.Connection.StartOk(
                client_properties={
                    "product": "batonmq tests rawclient",
                    # As pika and the RabbitMQ clients announce them.
                    "capabilities": {
                        "authentication_failure_close": authentication_failure_close,
                        "consumer_cancel_notify": True,
                    },
                },
                mechanism=mechanism,
                response=response,
                locale="en_US",
            )
        )

    def login(self, mechanism: str, response: str) -> commands.Connection.Tune:
        """connection.start-ok; returns the broker's connection.tune."""
        self.start_ok(mechanism, response)
        return self.expect(commands.Connection.Tune)

    def tune_ok(self, channel_max: int, frame_max: int, heartbeat_interval: int) -> None:
        self.send_frame(commands.Connection.TuneOk(channel_max, frame_max, heartbeat_interval))
        self.channel_max, self.frame_max = channel_max, frame_max

    def handshake(
        self,
        username: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        *,
        mechanism: str = "PLAIN",
        channel_max: int | None = None,
        frame_max: int | None = None,
        heartbeat_interval: int = 0,
        protocol_header: bytes = PROTOCOL_HEADER,
    ) -> commands.Connection.Tune:
        """Protocol header through connection.open-ok; returns the broker's connection.tune.
        channel_max and frame_max default to what the broker proposed."""
        self.start(protocol_header)
        make_response = amqplain_response if mechanism == "AMQPLAIN" else plain_response
        tune = self.login(mechanism, make_response(username, password))
        self.tune_ok(
            tune.channel_max if channel_max is None else channel_max,
            tune.frame_max if frame_max is None else frame_max,
            heartbeat_interval,
        )
        self.send_frame(commands.Connection.Open(virtual_host=vhost))
        self.expect(commands.Connection.OpenOk)
        return tune

    # -- channels and messages ------------------------------------------------------------------

    def open_channel(self, channel: int) -> None:
        self.send_frame(commands.Channel.Open(), channel)
        self.expect(commands.Channel.OpenOk, channel)

    def declare_queue(self, channel: int) -> str:
        """A fresh exclusive queue with a unique name."""
        name = f"rawclient-{uuid.uuid4().hex}"
        self.send_frame(commands.Queue.Declare(queue=name, exclusive=True), channel)
        declared = self.expect(commands.Queue.DeclareOk, channel)
        assert declared.queue == name
        return name

    def get_body(self, channel: int, queue: str) -> bytes:
        """basic.get with no-ack: the message body (one header, any number of body frames)."""
        self.send_frame(commands.Basic.Get(queue=queue, no_ack=True), channel)
        self.expect(commands.Basic.GetOk, channel)
        content = self.expect(header.ContentHeader, channel)
        body = b""
        while len(body) < content.body_size:
            body += self.expect(ContentBody, channel).value
        return body

    def round_trip(self, channel: int, body: bytes = b"still serving") -> bytes:
        """Declare a queue, publish `body` to it and get it back: proof the broker serves."""
        queue = self.declare_queue(channel)
        self.publish(channel, body, routing_key=queue)
        return self.get_body(channel, queue)


def connect(broker: BrokerAddress) -> RawClient:
    """A TCP connection to the broker, nothing sent yet."""
    return RawClient.connect(broker.host, broker.port)


def open_connection(
    broker: BrokerAddress,
    channel: int | None = 1,
    *,
    channel_max: int | None = None,
    frame_max: int | None = None,
    heartbeat_interval: int = 0,
) -> RawClient:
    """A connection through connection.open-ok as the broker's user and vhost, with `channel`
    open; the tuning arguments are as for `RawClient.handshake`."""
    client = connect(broker)
    try:
        client.handshake(
            broker.username,
            broker.password,
            broker.vhost,
            channel_max=channel_max,
            frame_max=frame_max,
            heartbeat_interval=heartbeat_interval,
        )
        if channel is not None:
            client.open_channel(channel)
    except BaseException:
        client.close()
        raise
    return client


def describe_frames(data: bytes) -> str:
    """Frames in `data`, decoded where possible, for assertion messages."""
    try:
        return ", ".join(_describe(value) for value in non_heartbeat_frames(data)) or "heartbeats"
    except Exception:  # not whole frames: show the octets
        return repr(data)


def _describe(value: object) -> str:
    """A frame with its fields, for assertion messages (pamqp's repr shows only the class)."""
    fields = getattr(value, "__slots__", None) or vars(value)
    shown = ", ".join(f"{name}={getattr(value, name, None)!r}" for name in fields)
    return f"{getattr(value, 'name', type(value).__name__)}({shown})"
