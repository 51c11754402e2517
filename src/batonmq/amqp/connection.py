"""The server side of one AMQP 0-9-1 connection, as a state machine with no IO (BatonMQ style §1,
2).

Rules of this machine — everything that changes its state lives in this file:

1. Bytes go in through `receive_data`, which yields events lazily. The caller handles each event
   before asking for the next, so an answer it gives (`accept_login`, `accept_open`,
   `close_channel`, `close`) takes effect before the next frame is looked at. Each event is the
   last thing its frame does, so the caller may stop after any event: the input not yet parsed
   stays buffered, and `receive_data(b"")` goes on with it (backpressure on input). A publish
   whose method, header and body frames are all buffered is taken in one step
   (`FrameReader.peek_content`), on exactly the conditions under which the three frames one by
   one would complete it with no error; anything else goes frame by frame. Its header is
   checked as in rule 5, so a bad one is refused with the same error either way.
2. Bytes come out of `data_to_send`: everything queued by the calls since the last time, joined
   into one piece, except that a body of `LARGE_BODY` octets or more stays a piece of its own,
   so that it is not copied (the small pieces around it are joined).
3. The handshake runs in the order of `_HANDSHAKE`: protocol header, start/start-ok, tune/tune-ok,
   open/open-ok. A method out of that order is 503 COMMAND_INVALID. A connection handed over
   from another worker process replays the client's input from its start, and does not send
   again the connection.start and connection.tune that client already has (`handed_over`).
4. Channel 0 carries connection methods only; a channel carries anything but connection methods.
   A method on a channel that is not open is 504 CHANNEL_ERROR (spec 4.2.2 "channel ... must be
   open"); so is channel.open on an open channel. channel.open while channel_max channels are
   open (closing ones included) is 530, whatever the channel's number: RabbitMQ counts channels
   (rabbit_reader), it does not bound their numbers, and clients rely on that.
5. A content-carrying method (basic.publish) is followed by exactly one content header and as many
   body frames as the header's body-size needs; any other frame on that channel in between, and
   content frames with no method before them, are 505 UNEXPECTED_FRAME. A body-size above
   max_message_size closes the channel with 406 (`ChannelFailed`) before any body is buffered.
   Then the header's properties are checked (`check_basic_properties`: 505 for a badly-formatted
   header, 502 for a value a client could not decode), so that no `ContentReceived` carries a
   header that some consumer could not decode.
6. After the server closes a channel it discards that channel's frames until channel.close-ok
   (spec: "the peer ... MUST discard all frames ... until close-ok"); after it closes the
   connection it discards everything but connection.close and connection.close-ok.
7. Any `ProtocolError` found in the input closes the connection with that error's code and text;
   the error never escapes `receive_data`. After a 501 FRAME_ERROR the stream is unframed, so
   the transport closes without waiting for close-ok. Errors before open-ok close the socket
   with nothing sent (spec 2.2.4): a tune-ok out of bounds, a login refused to a client that
   lacks the authentication_failure_close capability, an unoffered mechanism or locale.
8. When the exchange is over (close-ok either way, or a refused protocol header), `ConnectionEnded`
   is yielded once and `should_close_transport` turns true.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from pamqp import base, commands
from pamqp.common import FieldTable

from batonmq.amqp.constants import (
    BASIC_CLASS_ID,
    CONNECTION_CLASS_ID,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_MIN_SIZE,
    FRAME_OVERHEAD,
    PROTOCOL_HEADER,
    PROTOCOL_HEADER_0_9,
    PROTOCOL_HEADER_SIZE,
    ReplyCode,
)
from batonmq.amqp.errors import ChannelError, HardError, ProtocolError
from batonmq.amqp.frames import (
    END_THEN_FRAME_START,
    FRAME_END_BYTES,
    FRAME_START,
    HEARTBEAT_BYTES,
    BodyFrame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    encode_content,
    encode_method,
)
from batonmq.amqp.properties import check_basic_properties

Connection = commands.Connection
Channel = commands.Channel


class State(enum.Enum):
    AWAITING_HEADER = "awaiting protocol header"
    AWAITING_START_OK = "awaiting connection.start-ok"
    AUTHENTICATING = "authenticating"
    AWAITING_TUNE_OK = "awaiting connection.tune-ok"
    AWAITING_OPEN = "awaiting connection.open"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


#: The method each handshake state waits for, and the state it leads to.
_HANDSHAKE: Final[dict[State, tuple[type[base.Frame], State]]] = {
    State.AWAITING_START_OK: (Connection.StartOk, State.AUTHENTICATING),
    State.AWAITING_TUNE_OK: (Connection.TuneOk, State.AWAITING_OPEN),
    State.AWAITING_OPEN: (Connection.Open, State.OPENING),
}

_OPEN: Final = State.OPEN
#: The states in which no more input is read.
_NOT_READING: Final = (State.AWAITING_HEADER, State.CLOSED)

#: Methods a client sends that carry content (the server-to-client ones are not accepted).
_CONTENT_METHODS: Final = (commands.Basic.Publish,)
#: A body of at least this many octets is given by `data_to_send` as a piece of its own, so that
#: it is written without being copied (a stream's bodies are views of the chunk they were read
#: from); smaller pieces are joined, since a piece of a socket write (writev) costs more than
#: copying a few hundred octets does, and less than copying a few thousand.
LARGE_BODY: Final = 4 * 1024


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """What the server offers in connection.start and connection.tune."""

    server_properties: FieldTable
    mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")
    locales: tuple[str, ...] = ("en_US",)
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    max_message_size: int = 70 * 1024 * 1024


# Events ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoginRequested:
    """Answer with `accept_login(username)` or `refuse_login(text)`."""

    mechanism: str
    response: bytes
    client_properties: FieldTable


@dataclass(frozen=True, slots=True)
class OpenRequested:
    """Answer with `accept_open()` or `close(error)`."""

    virtual_host: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The client closed the channel (close-ok already sent)."""

    channel: int
    reply_code: int
    reply_text: str


@dataclass(frozen=True, slots=True)
class ChannelFailed:
    """The protocol layer closed the channel with a soft error (channel.close already sent)."""

    channel: int
    error: ProtocolError


# MethodReceived and ContentReceived are made once per method or message, and a frozen
# dataclass's __init__ costs several times a plain one's: they are not frozen, but are not to be
# changed either.


@dataclass(slots=True)
class MethodReceived:
    channel: int
    method: base.Frame


@dataclass(slots=True)
class ContentReceived:
    """A whole content-carrying method: method, header and body."""

    channel: int
    method: base.Frame
    header: HeaderFrame
    body: bytes


@dataclass(frozen=True, slots=True)
class ConnectionEnded:
    """The connection is over at the protocol level; close the transport once output is sent."""

    reply_code: int
    reply_text: str
    by_peer: bool


Event = (
    LoginRequested
    | OpenRequested
    | ChannelOpened
    | ChannelClosed
    | ChannelFailed
    | MethodReceived
    | ContentReceived
    | ConnectionEnded
)


# Per-channel bookkeeping ------------------------------------------------------------------------


@dataclass(slots=True)
class _PendingContent:
    method: base.Frame
    header: HeaderFrame | None = None
    body_parts: list[bytes] = field(default_factory=list)
    received: int = 0


@dataclass(slots=True)
class _ChannelSlot:
    closing: bool = False
    pending: _PendingContent | None = None


class ServerConnection:
    """One client connection, server side. See the rules at the top of this module."""

    def __init__(self, settings: ConnectionSettings, *, handed_over: bool = False) -> None:
        """`handed_over`: the client's input is replayed from its start into this machine by a
        worker process it was handed to at connection.open (`batonmq.server.handoff`): the
        worker that accepted it sent connection.start and connection.tune already, so they are
        not sent again."""
        self.settings = settings
        self._handed_over = handed_over
        self.state = State.AWAITING_HEADER
        self.frame_max = settings.frame_max
        self.channel_max = settings.channel_max
        self.heartbeat = settings.heartbeat
        self.username: str | None = None
        self.virtual_host: str | None = None
        self.client_properties: FieldTable = {}
        self.should_close_transport = False
        #: Whether connection.blocked was sent and connection.unblocked not yet.
        self.blocked = False
        self._reader = FrameReader(settings.frame_max)
        #: Frames and frame pieces; a body may be a view of a stream chunk (not copied).
        self._output: list[bytes | memoryview] = []
        #: A body of `LARGE_BODY` octets or more is in `_output`.
        self._large_output = False
        self._channels: dict[int, _ChannelSlot] = {}
        self._ended = False

    # Input --------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> Iterator[Event]:
        """Feed bytes; yields the events they complete (consume the iterator fully)."""
        reader, channels = self._reader, self._channels
        max_message_size = self.settings.max_message_size
        reader.feed(data)
        try:
            if self.state is State.AWAITING_HEADER:
                yield from self._receive_protocol_header()
            while self.state not in _NOT_READING:
                if self.state is _OPEN:
                    # The hot path: a whole publish at once, on a channel ready for one (the
                    # checks of rule 5 and `_receive_channel_method`); anything else goes frame
                    # by frame below.
                    content = reader.peek_content()
                    if content is not None:
                        channel, method, header, body, end = content
                        slot = channels.get(channel)
                        if (
                            slot is not None
                            and not slot.closing
                            and slot.pending is None
                            and header.body_size <= max_message_size
                        ):
                            check_basic_properties(header.payload)
                            reader.skip_to(end)
                            yield ContentReceived(channel, method, header, body)
                            continue
                frame = reader.next_frame()
                if frame is None:
                    return
                yield from self._receive_frame(frame)
        except ProtocolError as error:
            self.close(error)
            if error.reply_code is ReplyCode.FRAME_ERROR:
                # The stream has lost its framing, so no close-ok could be read from it: close
                # the socket once connection.close is out (spec 4.2.3).
                yield from self._end(error.reply_code, error.reply_text, False)

    def _receive_protocol_header(self) -> Iterator[Event]:
        header = self._reader.take(PROTOCOL_HEADER_SIZE)
        if header is None:
            return
        if header not in (PROTOCOL_HEADER, PROTOCOL_HEADER_0_9):
            # Spec 4.2.2: answer an unsupported header with the one we speak, then close.
            self._output.append(PROTOCOL_HEADER)
            yield from self._end(ReplyCode.NOT_ALLOWED, "unsupported protocol header", False)
            return
        if not self._handed_over:
            self._send_start()
        self.state = State.AWAITING_START_OK

    def _send_start(self) -> None:
        self.send_method(
            0,
            Connection.Start(
                version_major=0,
                version_minor=9,
                server_properties=self.settings.server_properties,
                mechanisms=" ".join(self.settings.mechanisms),
                locales=" ".join(self.settings.locales),
            ),
        )

    def _receive_frame(
        self, frame: MethodFrame | HeaderFrame | BodyFrame | HeartbeatFrame
    ) -> Iterator[Event]:
        if isinstance(frame, HeartbeatFrame):
            return
        if self.state is State.CLOSING:
            yield from self._receive_while_closing(frame)
        elif frame.channel == 0:
            if not isinstance(frame, MethodFrame):
                # Spec 4.2.6.1: "The channel number MUST NOT be zero ... 504 (channel error)".
                raise HardError(ReplyCode.CHANNEL_ERROR, "content frame on channel 0")
            yield from self._receive_connection_method(frame.method)
        elif self.state is not State.OPEN:
            raise HardError(ReplyCode.CHANNEL_ERROR, f"channel {frame.channel} used before open")
        elif isinstance(frame, MethodFrame):
            yield from self._receive_channel_method(frame.channel, frame.method)
        else:
            yield from self._receive_content(frame)

    def _receive_while_closing(
        self, frame: MethodFrame | HeaderFrame | BodyFrame
    ) -> Iterator[Event]:
        if not (isinstance(frame, MethodFrame) and frame.channel == 0):
            return
        if isinstance(frame.method, Connection.Close):
            self.send_method(0, Connection.CloseOk())
        if isinstance(frame.method, Connection.Close | Connection.CloseOk):
            yield from self._end(self.close_code, self.close_text, False)

    def _receive_connection_method(self, method: base.Frame) -> Iterator[Event]:
        if isinstance(method, Connection.Close):
            self.send_method(0, Connection.CloseOk())
            yield from self._end(method.reply_code or 0, method.reply_text or "", True)
            return
        expected = _HANDSHAKE.get(self.state)
        if expected is not None:
            method_class, next_state = expected
            if not isinstance(method, method_class):
                raise HardError(
                    ReplyCode.COMMAND_INVALID,
                    f"expected {method_class.name}, got {method.name}",
                    type(method),
                )
            self.state = next_state
            yield from self._receive_handshake_method(method)
        elif self.state is State.OPEN and isinstance(method, Connection.UpdateSecret):
            yield MethodReceived(0, method)
        else:
            raise HardError(
                ReplyCode.COMMAND_INVALID,
                f"{method.name} is not allowed on channel 0 while {self.state.value}",
                type(method),
            )

    def _receive_handshake_method(self, method: base.Frame) -> Iterator[Event]:
        if isinstance(method, Connection.StartOk):
            if method.mechanism not in self.settings.mechanisms or (
                method.locale not in self.settings.locales
            ):
                # Spec (connection.start-ok): an unoffered mechanism or locale closes the
                # socket "without sending any further data".
                yield from self._end(ReplyCode.ACCESS_REFUSED, "unsupported mechanism", False)
                return
            self.client_properties = method.client_properties or {}
            response = method.response
            raw = response.encode("utf-8") if isinstance(response, str) else bytes(response)
            yield LoginRequested(method.mechanism, raw, self.client_properties)
        elif isinstance(method, Connection.TuneOk):
            try:
                self._apply_tune_ok(method)
            except HardError as error:
                # Spec (tune-ok channel-max, frame-max): "the server MUST close the connection
                # without attempting a negotiated close".
                yield from self._end(error.reply_code, error.reply_text, False)
        elif isinstance(method, Connection.Open):
            yield OpenRequested(method.virtual_host)

    def _apply_tune_ok(self, tune_ok: commands.Connection.TuneOk) -> None:
        offered = self.settings
        # 0 would mean "no limit", which is above the server's limit (RabbitMQ refuses it too;
        # the spec marks tune-ok channel-max notnull).
        frame_max = tune_ok.frame_max
        if not FRAME_MIN_SIZE <= frame_max <= offered.frame_max:
            raise HardError(
                ReplyCode.NOT_ALLOWED,
                f"frame_max {frame_max} outside {FRAME_MIN_SIZE}..{offered.frame_max}",
                Connection.TuneOk,
            )
        channel_max = tune_ok.channel_max
        if not 1 <= channel_max <= offered.channel_max:
            raise HardError(
                ReplyCode.NOT_ALLOWED,
                f"channel_max {channel_max} outside 1..{offered.channel_max}",
                Connection.TuneOk,
            )
        self.frame_max, self.channel_max = frame_max, channel_max
        self.heartbeat = tune_ok.heartbeat
        self._reader.frame_max = frame_max

    def _receive_channel_method(self, channel: int, method: base.Frame) -> Iterator[Event]:
        slot = self._channels.get(channel)
        if slot is not None and slot.closing:
            if isinstance(method, Channel.Close | Channel.CloseOk):
                if isinstance(method, Channel.Close):
                    self.send_method(channel, Channel.CloseOk())
                del self._channels[channel]
            return
        if isinstance(method, Channel.Open):
            if slot is not None:
                raise HardError(
                    ReplyCode.CHANNEL_ERROR, f"channel {channel} already open", Channel.Open
                )
            if len(self._channels) >= self.channel_max:
                # As RabbitMQ (rabbit_reader:create_channel): channel_max bounds how many
                # channels are open at once, whatever their numbers.
                raise HardError(
                    ReplyCode.NOT_ALLOWED,
                    f"number of channels opened ({len(self._channels)}) has reached the "
                    f"negotiated channel_max ({self.channel_max})",
                    Channel.Open,
                )
            self._channels[channel] = _ChannelSlot()
            self.send_method(channel, Channel.OpenOk())
            yield ChannelOpened(channel)
            return
        if slot is None:
            raise HardError(ReplyCode.CHANNEL_ERROR, f"channel {channel} is not open", type(method))
        if slot.pending is not None:
            raise HardError(
                ReplyCode.UNEXPECTED_FRAME,
                f"{method.name} on channel {channel} while content was expected",
                type(method),
            )
        if method.index >> 16 == CONNECTION_CLASS_ID:
            raise HardError(
                ReplyCode.COMMAND_INVALID, f"{method.name} on channel {channel}", type(method)
            )
        if isinstance(method, Channel.Close):
            del self._channels[channel]
            self.send_method(channel, Channel.CloseOk())
            yield ChannelClosed(channel, method.reply_code or 0, method.reply_text or "")
        elif isinstance(method, Channel.CloseOk):
            raise HardError(ReplyCode.COMMAND_INVALID, f"unexpected close-ok on channel {channel}")
        elif isinstance(method, _CONTENT_METHODS):
            slot.pending = _PendingContent(method)
        else:
            yield MethodReceived(channel, method)

    def _receive_content(self, frame: HeaderFrame | BodyFrame) -> Iterator[Event]:
        slot = self._channels.get(frame.channel)
        if slot is None:
            raise HardError(ReplyCode.CHANNEL_ERROR, f"channel {frame.channel} is not open")
        if slot.closing:
            return
        pending = slot.pending
        kind = "header" if isinstance(frame, HeaderFrame) else "body"
        if pending is None or (pending.header is None) != isinstance(frame, HeaderFrame):
            raise HardError(
                ReplyCode.UNEXPECTED_FRAME, f"content {kind} frame on channel {frame.channel}"
            )
        if isinstance(frame, HeaderFrame):
            if frame.class_id != BASIC_CLASS_ID:
                # Spec 4.2.6 (and RabbitMQ): badly-formatted content is 505; 4.2.6.1 says 501.
                raise HardError(
                    ReplyCode.UNEXPECTED_FRAME, f"content header of class {frame.class_id}"
                )
            if frame.body_size > self.settings.max_message_size:
                # As RabbitMQ: refused before the body is read, as a channel error.
                error = ChannelError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"message size {frame.body_size} is larger than configured max size "
                    f"{self.settings.max_message_size}",
                    type(pending.method),
                )
                self.close_channel(frame.channel, error)
                yield ChannelFailed(frame.channel, error)
                return
            check_basic_properties(frame.payload)
            pending.header = frame
        else:
            pending.body_parts.append(frame.payload)
            pending.received += len(frame.payload)
        header = pending.header
        assert header is not None
        if pending.received > header.body_size:
            raise HardError(
                ReplyCode.UNEXPECTED_FRAME,
                f"content body of {pending.received} octets exceeds body-size {header.body_size}",
            )
        if pending.received == header.body_size:
            slot.pending = None
            parts = pending.body_parts
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            yield ContentReceived(frame.channel, pending.method, header, body)

    # Answers and output -------------------------------------------------------------------

    def accept_login(self, username: str) -> None:
        self._expect_state(State.AUTHENTICATING)
        self.username = username
        settings = self.settings
        if not self._handed_over:
            self.send_method(
                0,
                Connection.Tune(
                    channel_max=settings.channel_max,
                    frame_max=settings.frame_max,
                    heartbeat=settings.heartbeat,
                ),
            )
        self.state = State.AWAITING_TUNE_OK

    def refuse_login(self, reply_text: str) -> None:
        """connection.close 403 to a client with the authentication_failure_close capability;
        to others, a closed socket (spec 2.2.4: no data is sent for errors before open)."""
        self._expect_state(State.AUTHENTICATING)
        if self.supports("authentication_failure_close"):
            self.close(HardError(ReplyCode.ACCESS_REFUSED, reply_text, Connection.StartOk))
        else:
            self.state, self.should_close_transport = State.CLOSED, True

    def accept_open(self, virtual_host: str) -> None:
        self._expect_state(State.OPENING)
        self.virtual_host = virtual_host
        self.send_method(0, Connection.OpenOk())
        self.state = State.OPEN

    def send_method(self, channel: int, method: base.Frame) -> None:
        self._output.append(encode_method(channel, method))

    def send_frame(self, frame: bytes) -> None:
        """An already-encoded frame (amqp/outgoing.py)."""
        self._output.append(frame)

    def send_content(
        self, channel: int, method_frame: bytes, header_payload: bytes, body: bytes | memoryview
    ) -> None:
        """A content-carrying method (already encoded: amqp/outgoing.py), its header as received
        from the publisher, and the body split to the negotiated frame_max."""
        body_size = len(body)
        if body_size >= LARGE_BODY:
            self._large_output = True
        if 0 < body_size <= self.frame_max - FRAME_OVERHEAD:
            # The common case, a body in one frame, as pieces: the frames are joined when
            # written (`data_to_send`), so the payloads are not copied into frames first.
            self._output += (
                method_frame,
                FRAME_START.pack(FRAME_HEADER, channel, len(header_payload)),
                header_payload,
                END_THEN_FRAME_START.pack(FRAME_END, FRAME_BODY, channel, body_size),
                body,
                FRAME_END_BYTES,
            )
        else:
            self._output += encode_content(
                channel, method_frame, header_payload, body, self.frame_max
            )

    def block(self, reason: str) -> bool:
        """connection.blocked (RabbitMQ's extension: the server will not read this client's
        publishes until unblocked), sent only to clients that announced the connection.blocked
        capability and only once per blocking; returns whether it was sent."""
        if self.blocked or not self.is_open or not self.supports("connection.blocked"):
            return False
        self.blocked = True
        self.send_method(0, Connection.Blocked(reason=short_string(reason)))
        return True

    def unblock(self) -> bool:
        """connection.unblocked, if connection.blocked was sent; returns whether it was sent."""
        if not self.blocked:
            return False
        self.blocked = False
        if self.is_open:
            self.send_method(0, Connection.Unblocked())
        return True

    def send_heartbeat(self) -> None:
        self._output.append(HEARTBEAT_BYTES)

    def close_channel(self, channel: int, error: ProtocolError) -> None:
        """Close one channel with a soft error; its frames are discarded until close-ok."""
        slot = self._channels.get(channel)
        if slot is None or slot.closing:
            return
        slot.closing, slot.pending = True, None
        self.send_method(
            channel,
            Channel.Close(
                reply_code=error.reply_code,
                reply_text=short_string(error.reply_text),
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )

    def close(self, error: ProtocolError) -> None:
        """Close the connection (a hard error, or 320 CONNECTION_FORCED at shutdown)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        if self.state is State.AWAITING_HEADER:
            self.state, self.should_close_transport = State.CLOSED, True
            return
        self.close_code, self.close_text = int(error.reply_code), short_string(error.reply_text)
        self.send_method(
            0,
            Connection.Close(
                reply_code=error.reply_code,
                reply_text=self.close_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )
        self.state = State.CLOSING
        self._channels.clear()

    def data_to_send(self) -> list[bytes | memoryview]:
        """What to write (rule 2): one piece, or the pieces as queued when a large body is
        among them; empty when nothing was queued."""
        output, self._output = self._output, []
        if len(output) <= 1:
            return output
        if not self._large_output:
            return [b"".join(output)]
        self._large_output = False
        return _joined_around_large(output)

    @property
    def is_open(self) -> bool:
        return self.state is State.OPEN

    @property
    def is_closing(self) -> bool:
        """Closed, or closing: no further method will be processed."""
        return self.state in (State.CLOSING, State.CLOSED)

    def open_channels(self) -> list[int]:
        return [number for number, slot in self._channels.items() if not slot.closing]

    def supports(self, capability: str) -> bool:
        """Whether the client said it supports a capability (e.g. "connection.blocked")."""
        capabilities = self.client_properties.get("capabilities")
        return isinstance(capabilities, dict) and capabilities.get(capability) is True

    # Internals ----------------------------------------------------------------------------

    #: The code and text of the connection.close the server sent; 0 and "" until it sends one.
    close_code: int = 0
    close_text: str = ""

    def _end(self, reply_code: int, reply_text: str, by_peer: bool) -> Iterator[Event]:
        self.state = State.CLOSED
        self.should_close_transport = True
        self._channels.clear()
        if not self._ended:
            self._ended = True
            yield ConnectionEnded(reply_code, reply_text, by_peer)

    def _expect_state(self, state: State) -> None:
        if self.state is not state:
            raise RuntimeError(f"connection is {self.state.value}, not {state.value}")


def short_string(text: str) -> str:
    """`text` cut to fit an AMQP short string: 255 octets of UTF-8, not 255 characters. A lone
    surrogate (a long string that was not UTF-8, such as an alternate-exchange name, decodes
    with surrogate escapes and may be quoted in an error's text) is written as its escape."""
    encoded = text.encode("utf-8", "backslashreplace")
    if len(encoded) <= 255:
        return encoded.decode("utf-8")
    return encoded[:255].decode("utf-8", "ignore")


def _joined_around_large(pieces: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """`pieces` with each run of pieces under `LARGE_BODY` octets joined into one."""
    joined: list[bytes | memoryview] = []
    run: list[bytes | memoryview] = []
    for piece in pieces:
        if len(piece) < LARGE_BODY:
            run.append(piece)
            continue
        if run:
            joined.append(b"".join(run))
            run = []
        joined.append(piece)
    if run:
        joined.append(b"".join(run))
    return joined
