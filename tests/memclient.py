"""An in-memory AMQP 0-9-1 client for unit tests: a client and a server connection in memory.

The client encodes what it sends with pamqp (`pamqp.frame.marshal`, as a real client library
would) and decodes what the server sends with the project's own `FrameReader`. No sockets: the
server end is either a whole engine `Session` or a bare `ServerConnection` (whose events the test
answers itself, or lets `ConnectionEnd` answer with defaults).

Nothing the server sends is hidden: `receive()` returns every method and every assembled content
in order (heartbeats aside), and `expect()` fails on anything other than the frame asked for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from pamqp import base, commands, frame, header
from pamqp.body import ContentBody
from pamqp.common import FieldTable

from batonmq.amqp.connection import (
    Event,
    LoginRequested,
    OpenRequested,
    ServerConnection,
)
from batonmq.amqp.constants import PROTOCOL_HEADER
from batonmq.amqp.frames import (
    BodyFrame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    decode_properties,
)
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from tests.wire import amqplain_response, plain_response

M = TypeVar("M", bound=base.Frame)

#: Methods the server sends that are followed by a content header and body.
_CONTENT_METHODS = (commands.Basic.Deliver, commands.Basic.GetOk, commands.Basic.Return)
#: The client reads any frame the server sends; the test checks sizes where it matters.
_CLIENT_FRAME_MAX = 1 << 32


@dataclass(frozen=True)
class Content:
    """A content-carrying method the server sent, assembled: method, properties and body."""

    channel: int
    method: base.Frame
    properties: commands.Basic.Properties
    body: bytes
    body_frames: int


Received = MethodFrame | Content


# Server ends ------------------------------------------------------------------------------------


class SessionEnd:
    """The server end is a whole engine `Session`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def connection(self) -> ServerConnection:
        return self.session.connection

    def send(self, data: bytes) -> None:
        self.session.receive_data(data)

    def output(self) -> bytes:
        return b"".join(self.session.flush())


Answer = Callable[[ServerConnection, Event], None]


def default_answer(connection: ServerConnection, event: Event) -> None:
    """Accept every login as "guest" and every virtual host, as a permissive engine would."""
    if isinstance(event, LoginRequested):
        connection.accept_login("guest")
    elif isinstance(event, OpenRequested):
        connection.accept_open(event.virtual_host)


class ConnectionEnd:
    """The server end is a bare `ServerConnection`; its events are recorded in `events` and
    answered by `answer` as each is yielded (rule 1: an answer acts before the next frame)."""

    def __init__(self, connection: ServerConnection, answer: Answer | None = default_answer):
        self.connection = connection
        self.answer = answer
        self.events: list[Event] = []

    def send(self, data: bytes) -> None:
        for event in self.connection.receive_data(data):
            self.events.append(event)
            if self.answer is not None:
                self.answer(self.connection, event)

    def output(self) -> bytes:
        return b"".join(self.connection.data_to_send())

    def take_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events


ServerEnd = SessionEnd | ConnectionEnd


# The client ---------------------------------------------------------------------------------------


@dataclass
class _Assembly:
    method: base.Frame
    header: HeaderFrame | None = None
    parts: list[bytes] = field(default_factory=list)


class MemClient:
    def __init__(self, server: ServerEnd | Session | ServerConnection) -> None:
        if isinstance(server, Session):
            server = SessionEnd(server)
        elif isinstance(server, ServerConnection):
            server = ConnectionEnd(server)
        self.server: ServerEnd = server
        self.frame_max = 4096
        self._reader = FrameReader(_CLIENT_FRAME_MAX)
        self._assembling: dict[int, _Assembly] = {}
        self._received: deque[Received] = deque()

    # Sending ------------------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        self.server.send(data)

    def send_header(self, protocol_header: bytes = PROTOCOL_HEADER) -> None:
        self.send_bytes(protocol_header)

    def send(self, channel: int, method: base.Frame) -> None:
        self.send_bytes(frame.marshal(method, channel))

    def publish(
        self,
        channel: int,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        mandatory: bool = False,
        immediate: bool = False,
        properties: commands.Basic.Properties | None = None,
    ) -> None:
        """basic.publish with its content header and body, split to the client's frame_max,
        all in one write."""
        method = commands.Basic.Publish(
            exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
        )
        self.send_bytes(self.content_bytes(channel, method, body, properties))

    def content_bytes(
        self,
        channel: int,
        method: base.Frame,
        body: bytes,
        properties: commands.Basic.Properties | None = None,
    ) -> bytes:
        parts = [
            frame.marshal(method, channel),
            frame.marshal(header.ContentHeader(0, len(body), properties), channel),
        ]
        chunk = self.frame_max - 8
        for start in range(0, len(body), chunk):
            parts.append(frame.marshal(ContentBody(body[start : start + chunk]), channel))
        return b"".join(parts)

    # Receiving ----------------------------------------------------------------------------

    def raw_output(self) -> bytes:
        """The server's output as bytes, undecoded (for a refused protocol header)."""
        return self.server.output()

    def receive(self) -> list[Received]:
        """Everything the server has sent since the last look, methods and assembled contents."""
        self._pump()
        received = list(self._received)
        self._received.clear()
        return received

    def expect(self, method_class: type[M], channel: int | None = None) -> M:
        """The next thing the server sent, which must be a `method_class` method (on `channel`)."""
        item = self._next(method_class.name)
        assert not isinstance(item, Content), f"expected {method_class.name}, got content {item}"
        assert isinstance(item.method, method_class), (
            f"expected {method_class.name}, got {item.method.name} on channel {item.channel}"
        )
        if channel is not None:
            assert item.channel == channel, f"{method_class.name} on channel {item.channel}"
        return item.method

    def expect_content(self, method_class: type[base.Frame], channel: int | None = None) -> Content:
        """The next thing the server sent, which must be a `method_class` content."""
        item = self._next(method_class.name)
        assert isinstance(item, Content), f"expected content {method_class.name}, got {item}"
        assert isinstance(item.method, method_class), (
            f"expected {method_class.name}, got {item.method.name}"
        )
        if channel is not None:
            assert item.channel == channel, f"{method_class.name} on channel {item.channel}"
        return item

    def expect_nothing(self) -> None:
        received = self.receive()
        assert received == [], f"expected nothing, got {describe(received)}"

    def _next(self, wanted: str) -> Received:
        self._pump()
        assert self._received, f"expected {wanted}, the server sent nothing"
        return self._received.popleft()

    def _pump(self) -> None:
        self._reader.feed(self.server.output())
        while (decoded := self._reader.next_frame()) is not None:
            self._take(decoded)

    def _take(self, decoded: MethodFrame | HeaderFrame | BodyFrame | HeartbeatFrame) -> None:
        if isinstance(decoded, HeartbeatFrame):
            return
        channel = decoded.channel
        assembly = self._assembling.get(channel)
        if isinstance(decoded, MethodFrame):
            assert assembly is None, f"{decoded.method.name} in the middle of content"
            if isinstance(decoded.method, _CONTENT_METHODS):
                self._assembling[channel] = _Assembly(decoded.method)
            else:
                self._received.append(decoded)
            return
        assert assembly is not None, f"content frame with no method on channel {channel}"
        if isinstance(decoded, HeaderFrame):
            assert assembly.header is None, "second content header"
            assembly.header = decoded
        else:
            assert assembly.header is not None, "content body before its header"
            assembly.parts.append(decoded.payload)
        content_header = assembly.header
        received = sum(len(part) for part in assembly.parts)
        assert received <= content_header.body_size, "content body longer than its body-size"
        if received == content_header.body_size:
            del self._assembling[channel]
            self._received.append(
                Content(
                    channel,
                    assembly.method,
                    decode_properties(content_header.payload),
                    b"".join(assembly.parts),
                    len(assembly.parts),
                )
            )

    # Conversations ------------------------------------------------------------------------

    def handshake(
        self,
        username: str = "guest",
        password: str = "guest",
        *,
        vhost: str = "/",
        mechanism: str = "PLAIN",
        capabilities: dict[str, bool] | None = None,
        frame_max: int | None = None,
        channel_max: int | None = None,
        heartbeat: int = 0,
    ) -> commands.Connection.Tune:
        """Protocol header to open-ok; returns the server's connection.tune."""
        self.start(username, password, mechanism=mechanism, capabilities=capabilities)
        tune = self.expect(commands.Connection.Tune, channel=0)
        self.tune_and_open(
            tune, vhost=vhost, frame_max=frame_max, channel_max=channel_max, heartbeat=heartbeat
        )
        self.expect(commands.Connection.OpenOk, channel=0)
        return tune

    def start(
        self,
        username: str = "guest",
        password: str = "guest",
        *,
        mechanism: str = "PLAIN",
        capabilities: dict[str, bool] | None = None,
    ) -> commands.Connection.Start:
        """Protocol header, connection.start, connection.start-ok."""
        self.send_header()
        start = self.expect(commands.Connection.Start, channel=0)
        response = (
            amqplain_response(username, password)
            if mechanism == "AMQPLAIN"
            else plain_response(username, password)
        )
        client_properties: FieldTable = {"product": "memclient"}
        if capabilities is not None:
            client_properties["capabilities"] = dict(capabilities)
        self.send(
            0,
            commands.Connection.StartOk(
                client_properties=client_properties, mechanism=mechanism, response=response
            ),
        )
        return start

    def tune_and_open(
        self,
        tune: commands.Connection.Tune,
        *,
        vhost: str = "/",
        frame_max: int | None = None,
        channel_max: int | None = None,
        heartbeat: int = 0,
    ) -> None:
        """tune-ok with the server's frame_max and channel_max unless given (0 is refused)."""
        frame_max = tune.frame_max if frame_max is None else frame_max
        channel_max = tune.channel_max if channel_max is None else channel_max
        self.send(
            0,
            commands.Connection.TuneOk(
                channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
            ),
        )
        self.frame_max = frame_max
        self.send(0, commands.Connection.Open(virtual_host=vhost))

    def open_channel(self, channel: int = 1) -> None:
        self.send(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk, channel=channel)

    def call(self, channel: int, method: base.Frame, reply_class: type[M]) -> M:
        """Send a synchronous method and expect exactly its reply, on the same channel."""
        self.send(channel, method)
        return self.expect(reply_class, channel=channel)

    def declare_queue(
        self,
        channel: int,
        name: str,
        *,
        exclusive: bool = False,
        auto_delete: bool = False,
    ) -> str:
        declare_ok = self.call(
            channel,
            commands.Queue.Declare(queue=name, exclusive=exclusive, auto_delete=auto_delete),
            commands.Queue.DeclareOk,
        )
        return declare_ok.queue

    def consume(self, channel: int, queue: str, tag: str = "", *, no_ack: bool = False) -> str:
        consume_ok = self.call(
            channel,
            commands.Basic.Consume(queue=queue, consumer_tag=tag, no_ack=no_ack),
            commands.Basic.ConsumeOk,
        )
        return consume_ok.consumer_tag

    def qos(self, channel: int, prefetch_count: int, global_: bool = False) -> None:
        self.call(
            channel,
            commands.Basic.Qos(prefetch_count=prefetch_count, global_=global_),
            commands.Basic.QosOk,
        )

    def get(self, channel: int, queue: str, no_ack: bool = False) -> Content | None:
        """basic.get: the content, or None on get-empty."""
        self.send(channel, commands.Basic.Get(queue=queue, no_ack=no_ack))
        self._pump()
        assert self._received, "no answer to basic.get"
        item = self._received[0]
        if isinstance(item, MethodFrame) and isinstance(item.method, commands.Basic.GetEmpty):
            self._received.popleft()
            return None
        return self.expect_content(commands.Basic.GetOk, channel=channel)

    def deliveries(self, channel: int | None = None) -> list[Content]:
        """Everything received, which must all be basic.deliver contents (on `channel`)."""
        received = self.receive()
        assert all(
            isinstance(item, Content) and isinstance(item.method, commands.Basic.Deliver)
            for item in received
        ), f"expected only deliveries, got {describe(received)}"
        contents = [item for item in received if isinstance(item, Content)]
        if channel is not None:
            assert {item.channel for item in contents} <= {channel}
        return contents


LOOPBACK_PEER = ("127.0.0.1", 5000)


def connect(
    broker: Broker,
    peer: tuple[str, int] = LOOPBACK_PEER,
    *,
    channels: tuple[int, ...] = (1,),
    output_budget: int | None = None,
    capabilities: dict[str, bool] | None = None,
) -> tuple[MemClient, Session]:
    """A Session on `broker` with a no-op request_flush, and a client logged in as guest/guest
    on vhost "/" with `channels` open."""
    if output_budget is None:
        session = Session(broker, peer, lambda: None)
    else:
        session = Session(broker, peer, lambda: None, output_budget=output_budget)
    client = MemClient(session)
    client.handshake(capabilities=capabilities)
    for channel in channels:
        client.open_channel(channel)
    return client, session


def describe(received: list[Received]) -> list[str]:
    """Short names of what arrived, for assertion messages."""
    return [f"{item.channel}:{item.method.name}" for item in received]


def bodies(contents: list[Content]) -> list[bytes]:
    return [content.body for content in contents]
