"""The server connection state machine (`ServerConnection`), driven by the in-memory client.

Each test names the rule at the top of `batonmq/amqp/connection.py` it checks ("Rule n") and
quotes the AMQP 0-9-1 text behind it.
"""

from __future__ import annotations

import pytest
from pamqp import commands, frame, header
from pamqp.body import ContentBody

from batonmq.amqp.connection import (
    LARGE_BODY,
    ChannelClosed,
    ChannelFailed,
    ChannelOpened,
    ConnectionEnded,
    ConnectionSettings,
    ContentReceived,
    LoginRequested,
    MethodReceived,
    OpenRequested,
    ServerConnection,
    State,
)
from batonmq.amqp.constants import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    PROTOCOL_HEADER,
    PROTOCOL_HEADER_0_9,
    ReplyCode,
)
from batonmq.amqp.errors import ChannelError, HardError
from batonmq.amqp.frames import (
    HEARTBEAT_BYTES,
    BodyFrame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
)
from batonmq.amqp.outgoing import basic_deliver
from tests.memclient import ConnectionEnd, MemClient
from tests.wire import plain_response, raw_frame

Connection = commands.Connection
Channel = commands.Channel
Basic = commands.Basic

SETTINGS = ConnectionSettings(
    server_properties={"product": "BatonMQ-test"}, frame_max=131072, channel_max=16
)


def new_client(settings: ConnectionSettings = SETTINGS) -> tuple[MemClient, ConnectionEnd]:
    end = ConnectionEnd(ServerConnection(settings))
    return MemClient(end), end


def opened(settings: ConnectionSettings = SETTINGS, **tune: int) -> tuple[MemClient, ConnectionEnd]:
    """A connection through open-ok, with channel 1 open; events so far dropped."""
    client, end = new_client(settings)
    client.handshake(**tune)
    client.open_channel(1)
    end.take_events()
    return client, end


def expect_close(client: MemClient, code: ReplyCode) -> Connection.Close:
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == code, (close.reply_code, close.reply_text)
    assert close.reply_text.startswith(code.name)
    client.expect_nothing()
    return close


def publish_bytes(channel: int, body: bytes, frame_max: int = 4096) -> list[bytes]:
    """basic.publish, content header and body frames, each encoded separately."""
    parts = [
        frame.marshal(Basic.Publish(exchange="", routing_key="q"), channel),
        frame.marshal(header.ContentHeader(0, len(body), Basic.Properties()), channel),
    ]
    chunk = frame_max - 8
    parts += [
        frame.marshal(ContentBody(body[start : start + chunk]), channel)
        for start in range(0, len(body), chunk)
    ]
    return parts


# Protocol header and connection.start ----------------------------------------------------------


@pytest.mark.parametrize("protocol_header", [PROTOCOL_HEADER, PROTOCOL_HEADER_0_9])
def test_protocol_header_gets_connection_start(protocol_header):
    """Spec 4.2.2: "The client MUST start a new connection by sending a protocol header"; the
    server answers with connection.start, offering its mechanisms. Old 0-9 clients send
    AMQP 1 1 0 9 and are spoken to in 0-9-1, which agrees with 0-9 on the wire."""
    client, end = new_client()
    client.send_header(protocol_header)
    start = client.expect(Connection.Start, channel=0)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN"]
    assert "en_US" in start.locales.split()
    assert start.server_properties == {"product": "BatonMQ-test"}
    client.expect_nothing()
    assert end.connection.state is State.AWAITING_START_OK
    assert end.events == []


def test_protocol_header_in_pieces_is_partial_input():
    """BatonMQ style §3 and spec 4.2.2 ("The client MUST start a new connection by sending a
    protocol header"): the header may arrive in several reads."""
    client, _end = new_client()
    client.send_bytes(PROTOCOL_HEADER[:3])
    client.send_bytes(PROTOCOL_HEADER[3:7])
    assert client.raw_output() == b""
    client.send_bytes(PROTOCOL_HEADER[7:])
    client.expect(Connection.Start, channel=0)


@pytest.mark.parametrize(
    "protocol_header",
    [b"AMQP\x00\x01\x00\x00", b"AMQP\x01\x01\x00\x0a", b"AMQP\x00\x00\x08\x00", b"GET / HT"],
)
def test_unsupported_protocol_header_gets_ours_and_the_transport_closes(protocol_header):
    """Spec 4.2.2: "If the server does not recognise the first 5 octets of data on the socket,
    or does not support the specific protocol version that the client requests, it MUST write a
    valid protocol header to the socket, then flush the socket ... and then close the socket
    connection." (Rule 8: ConnectionEnded once, should_close_transport.)"""
    client, end = new_client()
    client.send_header(protocol_header)
    assert client.raw_output() == b"AMQP\x00\x00\x09\x01"
    assert end.connection.should_close_transport
    assert [type(event) for event in end.take_events()] == [ConnectionEnded]
    client.send_bytes(PROTOCOL_HEADER + HEARTBEAT_BYTES)
    assert client.raw_output() == b""
    assert end.events == []


# Start-ok and login ----------------------------------------------------------------------------


def test_start_ok_asks_for_a_login_with_the_raw_response():
    """connection.start-ok response: "A block of opaque data passed to the security mechanism"; the
    state machine passes it on as bytes with the client properties (capabilities included) and
    waits for the answer."""
    client, end = new_client()
    end.answer = None
    client.start("guest", "sec\u00e9ret", capabilities={"consumer_cancel_notify": True})
    [event] = end.take_events()
    assert event == LoginRequested(
        "PLAIN",
        plain_response("guest", "sec\u00e9ret").encode("utf-8"),
        {"product": "memclient", "capabilities": {"consumer_cancel_notify": True}},
    )
    assert end.connection.state is State.AUTHENTICATING
    assert end.connection.supports("consumer_cancel_notify")
    assert not end.connection.supports("connection.blocked")
    client.expect_nothing()


def test_start_ok_with_a_mechanism_not_offered_closes_without_sending_anything():
    """connection.start-ok, mechanism, rule "validity": "If the mechanism field does not contain
    one of the security mechanisms proposed by the server in the Start method, the server MUST
    close the connection without sending any further data"."""
    client, end = new_client()
    client.send_header()
    client.expect(Connection.Start)
    client.send(0, Connection.StartOk(mechanism="EXTERNAL", response=""))
    assert client.raw_output() == b""
    assert end.connection.should_close_transport
    events = end.take_events()
    assert [type(event) for event in events] == [ConnectionEnded]
    assert events[0].by_peer is False
    client.send(0, Connection.TuneOk())
    assert client.raw_output() == b""
    assert end.events == []


def test_accept_login_sends_tune_with_the_offered_limits():
    """Spec (connection.tune): the server "proposes a set of connection configuration values"."""
    client, end = new_client()
    client.start()
    tune = client.expect(Connection.Tune, channel=0)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (16, 131072, 60)
    assert end.connection.username == "guest"
    assert end.connection.state is State.AWAITING_TUNE_OK


def test_refuse_login_closes_with_403_naming_start_ok():
    """RabbitMQ's authentication_failure_close: to a client with that capability,
    connection.close 403 ACCESS_REFUSED, naming connection.start-ok (class 10, method 11)."""
    client, end = new_client()
    end.answer = lambda connection, event: connection.refuse_login("bad password")
    client.start(capabilities={"authentication_failure_close": True})
    close = expect_close(client, ReplyCode.ACCESS_REFUSED)
    assert (close.class_id, close.method_id) == (10, 11)
    assert "bad password" in close.reply_text
    assert end.connection.state is State.CLOSING


def test_refuse_login_without_the_capability_closes_the_socket_with_nothing_sent():
    """Spec 2.2.4: for errors before connection.open "the server ... MUST close the socket
    without sending any further data"; only authentication_failure_close asks for a close."""
    client, end = new_client()
    end.answer = lambda connection, event: connection.refuse_login("bad password")
    client.start()
    client.expect_nothing()
    assert end.connection.should_close_transport
    assert end.connection.state is State.CLOSED


def test_answers_in_the_wrong_state_are_programming_errors():
    """BatonMQ style §2: "Illegal transitions raise a typed error; they are not silently
    ignored"."""
    connection = ServerConnection(SETTINGS)
    with pytest.raises(RuntimeError):
        connection.accept_login("guest")
    with pytest.raises(RuntimeError):
        connection.accept_open("/")


# Rule 1: events are lazy; an answer acts before the next frame -----------------------------------


def handshake_bytes(vhost: str = "/") -> bytes:
    return b"".join(
        frame.marshal(method, 0)
        for method in (
            Connection.StartOk(
                client_properties={"capabilities": {"authentication_failure_close": True}},
                mechanism="PLAIN",
                response=plain_response("guest", "guest"),
            ),
            Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0),
            Connection.Open(virtual_host=vhost),
        )
    )


def test_events_are_yielded_lazily_and_answers_act_before_the_next_frame():
    """Rule 1: start-ok, tune-ok and open in one read. Tune-ok is only legal after the login is
    accepted, so it must not be looked at before the caller answers LoginRequested."""
    connection = ServerConnection(SETTINGS)
    assert list(connection.receive_data(PROTOCOL_HEADER)) == []
    connection.data_to_send()
    events = connection.receive_data(handshake_bytes("/prod"))
    assert isinstance(next(events), LoginRequested)
    assert connection.state is State.AUTHENTICATING
    connection.accept_login("guest")
    assert next(events) == OpenRequested("/prod")
    connection.accept_open("/prod")
    assert list(events) == []
    assert connection.is_open
    assert connection.virtual_host == "/prod"


def test_a_refused_login_discards_the_frames_read_with_it():
    """Rule 1 with rule 6: once refuse_login closes the connection, the tune-ok and open that
    came in the same read are discarded, not answered with a second close."""
    connection = ServerConnection(SETTINGS)
    list(connection.receive_data(PROTOCOL_HEADER))
    connection.data_to_send()
    events = connection.receive_data(handshake_bytes())
    assert isinstance(next(events), LoginRequested)
    connection.refuse_login("no")
    assert list(events) == []
    reader = FrameReader(1 << 20)
    reader.feed(b"".join(connection.data_to_send()))
    close = reader.next_frame()
    assert isinstance(close, MethodFrame)
    assert isinstance(close.method, Connection.Close)
    assert close.method.reply_code == ReplyCode.ACCESS_REFUSED
    assert reader.next_frame() is None


# Rule 2: output --------------------------------------------------------------------------------


def test_data_to_send_returns_what_was_queued_since_the_last_call():
    """Rule 2: "Bytes come out of data_to_send: everything queued by the calls since the last time."
    Rule 2: "Bytes come out of data_to_send: everything queued by the calls since the last time"."""
    connection = ServerConnection(SETTINGS)
    list(connection.receive_data(PROTOCOL_HEADER))
    first = connection.data_to_send()
    assert len(first) == 1
    assert first[0][0] == FRAME_METHOD
    assert connection.data_to_send() == []


def test_data_to_send_joins_small_output_into_one_piece():
    """Rule 2: without a large body, the output is one piece (one socket write)."""
    _client, end = opened()
    for tag in (1, 2):
        end.connection.send_content(
            1, basic_deliver(1, "c", tag, False, "", "q"), b"\x00\x3c" + bytes(12), b"z" * 128
        )
    [piece] = end.connection.data_to_send()
    reader = FrameReader(1 << 20)
    reader.feed(piece)
    assert [type(item) for item in iter(reader.next_frame, None)] == [
        MethodFrame,
        HeaderFrame,
        BodyFrame,
    ] * 2


def test_data_to_send_gives_a_large_body_as_a_piece_of_its_own():
    """Rule 2: a body of LARGE_BODY octets or more comes out as the object queued, not copied,
    and the small pieces around it are joined."""
    _client, end = opened()
    body = b"z" * LARGE_BODY
    end.connection.send_content(
        1, basic_deliver(1, "c", 1, False, "", "q"), b"\x00\x3c" + bytes(12), body
    )
    output = end.connection.data_to_send()
    # The frames before it joined, the body itself, its frame end.
    assert len(output) == 3
    assert output[1] is body
    end.connection.send_heartbeat()
    assert len(end.connection.data_to_send()) == 1, "the next output is joined again"


# Tune-ok ----------------------------------------------------------------------------------------


def expect_closed_without_a_word(client: MemClient, end: ConnectionEnd) -> None:
    client.expect_nothing()
    assert end.connection.should_close_transport
    assert end.connection.state is State.CLOSED


@pytest.mark.parametrize("frame_max", [0, 1, 4095, 131073, 1 << 31])
def test_tune_ok_frame_max_outside_4096_to_the_offer_closes_the_socket(frame_max):
    """connection.tune-ok frame-max, rules "minimum" ("the minimum negotiated value for
    frame-max is also frame-min-size", 4096) and "upper-limit" ("If the client specifies a frame
    max that is higher than the value provided by the server, the server MUST close the
    connection without attempting a negotiated close"). 0, "no limit", is above the offer
    (RabbitMQ refuses it too)."""
    client, end = new_client()
    client.start()
    client.expect(Connection.Tune)
    client.send(0, Connection.TuneOk(channel_max=16, frame_max=frame_max, heartbeat=0))
    expect_closed_without_a_word(client, end)


def test_tune_ok_lower_frame_max_is_enforced_on_input_and_output():
    """Spec 4.2.3: "A peer MUST NOT send frames larger than the agreed-upon size. A peer that
    receives an oversized frame MUST signal a connection exception with reply code 501"."""
    client, end = opened(frame_max=4096, heartbeat=30)
    assert (end.connection.frame_max, end.connection.heartbeat) == (4096, 30)
    end.connection.send_content(
        1, basic_deliver(1, "c", 1, False, "", "q"), b"\x00\x3c" + bytes(12), b"z" * 10000
    )
    reader = FrameReader(4096)  # refuses a frame over 4096 octets with 501
    reader.feed(b"".join(end.connection.data_to_send()))
    frames = list(iter(reader.next_frame, None))
    assert [type(item) for item in frames] == [MethodFrame, HeaderFrame, *[BodyFrame] * 3]
    assert b"".join(item.payload for item in frames[2:] if isinstance(item, BodyFrame)) == (
        b"z" * 10000
    )
    client.send_bytes(raw_frame(FRAME_BODY, 1, b"b" * (4096 - 7)))
    expect_close(client, ReplyCode.FRAME_ERROR)


def test_a_body_given_as_a_view_is_written_as_it_is_not_copied():
    """A stream delivers bodies as views of the chunk they were read from: a body that fits in
    one frame goes out as that view, with no copy; one that does not is split as bytes would be
    (spec 4.2.3: "A peer MUST NOT send frames larger than the agreed-upon size")."""
    _client, end = opened(heartbeat=30)
    method, header = basic_deliver(1, "c", 1, False, "", "q"), b"\x00\x3c" + bytes(12)
    chunk = bytes(range(256)) * 200
    view = memoryview(chunk)[100 : 100 + LARGE_BODY]

    end.connection.send_content(1, method, header, view)
    written = end.connection.data_to_send()
    end.connection.send_content(1, method, header, bytes(view))

    assert any(part is view for part in written)
    assert b"".join(written) == b"".join(end.connection.data_to_send())
    _client, end = opened(frame_max=4096, heartbeat=30)
    large = memoryview(chunk)[1:]
    end.connection.send_content(1, method, header, large)
    from_view = b"".join(end.connection.data_to_send())
    end.connection.send_content(1, method, header, bytes(large))
    assert from_view == b"".join(end.connection.data_to_send())


@pytest.mark.parametrize("channel_max", [0, 17])
def test_tune_ok_channel_max_above_the_offer_closes_the_socket(channel_max):
    """connection.tune-ok channel-max, rule "upper-limit": "If the client specifies a channel
    max that is higher than the value provided by the server, the server MUST close the
    connection without attempting a negotiated close"; the field is also "notnull", and 0 would
    mean no limit."""
    client, end = new_client()
    client.start()
    client.expect(Connection.Tune)
    client.send(0, Connection.TuneOk(channel_max=channel_max, frame_max=131072, heartbeat=0))
    expect_closed_without_a_word(client, end)


def test_open_asks_for_the_virtual_host():
    """connection.open: "This method opens a connection to a virtual host"; the server answers
    open-ok only once the engine accepts the vhost."""
    client, end = new_client()
    end.answer = lambda connection, event: (
        connection.accept_login("guest") if isinstance(event, LoginRequested) else None
    )
    client.start()
    tune = client.expect(Connection.Tune)
    client.tune_and_open(tune, vhost="/staging")
    assert end.take_events()[-1] == OpenRequested("/staging")
    assert end.connection.state is State.OPENING
    client.expect_nothing()
    end.connection.accept_open("/staging")
    client.expect(Connection.OpenOk, channel=0)
    assert end.connection.is_open


# Rule 3: the handshake order -------------------------------------------------------------------


def test_tune_ok_instead_of_start_ok_is_503():
    """Rule 3. Spec (connection class grammar): "open-connection = C:protocol-header S:START
    C:START-OK *challenge S:TUNE C:TUNE-OK C:OPEN S:OPEN-OK"; a method out of that order is
    503 COMMAND_INVALID, naming the method."""
    client, _end = new_client()
    client.send_header()
    client.expect(Connection.Start)
    client.send(0, Connection.TuneOk())
    close = expect_close(client, ReplyCode.COMMAND_INVALID)
    assert (close.class_id, close.method_id) == (10, 31)


def test_open_before_tune_ok_is_503():
    """Rule 3 and the class grammar: C:TUNE-OK comes before C:OPEN."""
    client, _end = new_client()
    client.start()
    client.expect(Connection.Tune)
    client.send(0, Connection.Open(virtual_host="/"))
    expect_close(client, ReplyCode.COMMAND_INVALID)


def test_a_non_connection_method_on_channel_0_before_open_ok_is_503():
    """Rule 3: before open-ok, channel 0 carries the handshake only."""
    client, _end = new_client()
    client.start()
    client.expect(Connection.Tune)
    client.send(0, commands.Queue.Declare(queue="q"))
    close = expect_close(client, ReplyCode.COMMAND_INVALID)
    assert (close.class_id, close.method_id) == (50, 10)


def test_a_second_connection_open_after_open_ok_is_503():
    """Rule 3: the handshake happens once; connection.open after open-ok is out of order."""
    client, _end = opened()
    client.send(0, Connection.Open(virtual_host="/"))
    expect_close(client, ReplyCode.COMMAND_INVALID)


def test_a_channel_frame_before_open_ok_is_504():
    """Rule 4: "A method on a channel that is not open is 504 CHANNEL_ERROR"; no channel is open
    before the connection is."""
    client, end = new_client()
    client.start()
    client.expect(Connection.Tune)
    client.send(1, Channel.Open())
    expect_close(client, ReplyCode.CHANNEL_ERROR)
    assert not any(isinstance(event, ChannelOpened) for event in end.events)


# Rule 4: channels --------------------------------------------------------------------------------


def test_channel_open_yields_channel_opened_and_open_ok():
    """channel.open-ok: "This method signals to the client that the channel is ready for use"."""
    client, end = opened()
    client.send(2, Channel.Open())
    client.expect(Channel.OpenOk, channel=2)
    assert end.take_events() == [ChannelOpened(2)]
    assert end.connection.open_channels() == [1, 2]


def test_a_method_on_a_channel_that_is_not_open_is_504():
    """Rule 4, spec 4.2.2 / channel class: a channel "must be open" before use; RabbitMQ: 504
    CHANNEL_ERROR "expected 'channel.open'"."""
    client, end = opened()
    client.send(3, Basic.Qos(prefetch_count=1))
    close = expect_close(client, ReplyCode.CHANNEL_ERROR)
    assert (close.class_id, close.method_id) == (60, 10)
    assert end.events == []


def test_content_on_a_channel_that_is_not_open_is_504():
    """Rule 4 for content frames: a channel must be open before anything is sent on it."""
    client, _end = opened()
    client.send_bytes(publish_bytes(3, b"x")[1])
    expect_close(client, ReplyCode.CHANNEL_ERROR)


def test_channel_open_on_an_open_channel_is_504():
    """channel.open, rule "state": "The client MUST NOT use this method on an already-opened
    channel."; RabbitMQ: 504 CHANNEL_ERROR."""
    client, _end = opened()
    client.send(1, Channel.Open())
    close = expect_close(client, ReplyCode.CHANNEL_ERROR)
    assert (close.class_id, close.method_id) == (20, 10)


def test_channel_max_counts_open_channels_not_channel_numbers():
    """Rule 4. The issue: "RabbitMQ opens channel 65535 on a connection whose negotiated
    channel_max is 2047 ... Find RabbitMQ's rule and follow it." RabbitMQ's rule
    (rabbit_reader:create_channel) refuses a new channel only when "number of channels opened
    (N) has reached the negotiated channel_max (M)": with channel_max 4, channels 65535, 9 and
    4000 open beside channel 1, and a fifth is 530 NOT_ALLOWED, naming channel.open."""
    client, end = opened(channel_max=4)
    assert end.connection.channel_max == 4
    for channel in (65535, 9, 4000):
        client.open_channel(channel)
    client.send(2, Channel.Open())
    close = expect_close(client, ReplyCode.NOT_ALLOWED)
    assert "number of channels opened (4) has reached the negotiated channel_max (4)" in (
        close.reply_text
    )
    assert (close.class_id, close.method_id) == (20, 10)


def test_a_closed_channel_frees_its_place_under_channel_max():
    """Rule 4, RabbitMQ's count of open channels: after channel.close / close-ok the channel no
    longer counts, so another (of any number) can be opened in its place."""
    client, _end = opened(channel_max=2)
    client.open_channel(65535)
    client.send(65535, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=65535)
    client.open_channel(30000)
    client.expect_nothing()


def test_a_channel_the_server_closed_counts_until_its_close_ok():
    """Rule 4 with rule 6: a channel the server closed is still there until the client's
    close-ok ("the peer ... MUST discard all frames ... until close-ok"), and RabbitMQ counts it
    until then too (its channel_count drops at channel cleanup, on close-ok)."""
    error = ChannelError(ReplyCode.PRECONDITION_FAILED, "for the test")
    client, end = opened(channel_max=2)
    client.open_channel(7)
    end.connection.close_channel(7, error)
    client.expect(Channel.Close, channel=7)
    client.send(9, Channel.Open())
    expect_close(client, ReplyCode.NOT_ALLOWED)

    client, end = opened(channel_max=2)
    client.open_channel(7)
    end.connection.close_channel(7, error)
    client.expect(Channel.Close, channel=7)
    client.send(7, Channel.CloseOk())
    client.open_channel(9)
    client.expect_nothing()


@pytest.mark.parametrize(
    "method",
    [
        Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0),
        Connection.CloseOk(),
        Connection.Open(virtual_host="/"),
        Connection.StartOk(mechanism="PLAIN", response="\x00guest\x00guest"),
        Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0),
        Connection.SecureOk(response="x"),
        Connection.UpdateSecret(new_secret="s", reason="r"),
    ],
    ids=lambda method: method.name,
)
def test_a_connection_method_on_a_channel_other_than_0_is_503(method):
    """Rule 4: "a channel carries anything but connection methods". Spec 4.2.3: "The channel
    number MUST be zero for all ... method ... frames that refer to the Connection class. A peer
    that receives a non-zero channel number for one of these frames MUST signal a connection
    exception with reply code 503 (command invalid)."""
    client, end = opened()
    client.send(1, method)
    expect_close(client, ReplyCode.COMMAND_INVALID)
    assert end.events == []


# Rule 5: content ---------------------------------------------------------------------------------


def test_content_with_an_empty_body_completes_at_its_header():
    """Spec 4.2.6.2: the body is as many frames as body-size needs; body-size 0 needs none."""
    client, end = opened()
    parts = publish_bytes(1, b"")
    assert len(parts) == 2
    client.send_bytes(parts[0])
    assert end.events == []
    client.send_bytes(parts[1])
    [event] = end.take_events()
    assert isinstance(event, ContentReceived)
    assert (event.channel, event.body, event.header.body_size) == (1, b"", 0)
    assert isinstance(event.method, Basic.Publish)
    assert event.method.routing_key == "q"


def test_content_over_many_body_frames_is_one_event():
    """Spec 4.2.6.2: "A peer MUST handle a content body that is split into multiple frames by
    storing these frames as a single set"."""
    client, end = opened()
    body = bytes(range(256)) * 64  # 16384 octets: 5 body frames of at most 4088
    parts = publish_bytes(1, body)
    assert len(parts) == 7
    for part in parts[:-1]:
        client.send_bytes(part)
    assert end.events == []
    client.send_bytes(parts[-1])
    [event] = end.take_events()
    assert isinstance(event, ContentReceived)
    assert event.body == body
    client.expect_nothing()


def test_contents_on_different_channels_may_interleave():
    """Spec 4.2.6: content frames on a channel "may be mixed with frames for other channels, but
    two content frames from the same channel may not be mixed or overlapped"."""
    client, end = opened()
    client.open_channel(2)
    end.take_events()
    one, two = publish_bytes(1, b"a" * 5000), publish_bytes(2, b"b" * 10)
    for part in (one[0], two[0], one[1], two[1], one[2], two[2], one[3]):
        client.send_bytes(part)
    events = end.take_events()
    assert [(e.channel, e.body) for e in events if isinstance(e, ContentReceived)] == [
        (2, b"b" * 10),
        (1, b"a" * 5000),
    ]


def test_content_header_with_no_method_is_505():
    """Rule 5; spec 4.2.6: "A peer that receives an incomplete or badly-formatted content MUST
    raise a connection exception with reply code 505 (unexpected frame)"."""
    client, _end = opened()
    client.send_bytes(publish_bytes(1, b"abc")[1])
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)


def test_body_frame_with_no_method_is_505():
    """Rule 5; spec 4.2.6: an incomplete or badly-formatted content is 505 UNEXPECTED_FRAME."""
    client, _end = opened()
    client.send_bytes(raw_frame(FRAME_BODY, 1, b"abc"))
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)


def test_method_between_publish_and_its_header_is_505():
    """Rule 5; spec 4.2.6: content frames on a channel "are strictly sequential"; a method before
    the content header is 505."""
    client, end = opened()
    client.send_bytes(publish_bytes(1, b"abc")[0])
    client.send(1, Basic.Qos(prefetch_count=1))
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)
    assert end.events == []


def test_method_in_the_middle_of_the_body_is_505():
    """Rule 5: a method before the body is complete is 505."""
    client, end = opened()
    parts = publish_bytes(1, b"x" * 5000)
    client.send_bytes(parts[0] + parts[1] + parts[2])
    client.send(1, Basic.Qos(prefetch_count=1))
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)
    assert end.events == []


def test_second_content_header_is_505():
    """Rule 5: "exactly one content header"."""
    client, _end = opened()
    parts = publish_bytes(1, b"x" * 10)
    client.send_bytes(parts[0] + parts[1] + parts[1])
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)


def test_body_larger_than_body_size_is_505():
    """Rule 5: as many body frames as body-size needs and no more octets."""
    client, end = opened()
    parts = publish_bytes(1, b"x" * 10)
    client.send_bytes(parts[0] + parts[1] + raw_frame(FRAME_BODY, 1, b"y" * 11))
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)
    assert end.events == []


def test_body_frame_after_an_empty_content_is_505():
    """Rule 5: a content of body-size 0 is complete at its header; a body frame after it has no
    method."""
    client, end = opened()
    parts = publish_bytes(1, b"")
    client.send_bytes(parts[0] + parts[1] + raw_frame(FRAME_BODY, 1, b"y"))
    assert [type(event) for event in end.events] == [ContentReceived]
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)


def test_a_body_size_above_max_message_size_closes_the_channel_with_406():
    """Rule 5: "A body-size above max_message_size closes the channel with 406 (`ChannelFailed`)
    before any body is buffered" (RabbitMQ's max_message_size); the body frames that follow are
    discarded (rule 6) and the connection stays open."""
    settings = ConnectionSettings(server_properties={}, max_message_size=1000)
    client, end = opened(settings)
    parts = publish_bytes(1, b"x" * 5000)
    client.send_bytes(parts[0] + parts[1])
    close = client.expect(Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert (close.class_id, close.method_id) == (60, 40)
    [event] = end.take_events()
    assert isinstance(event, ChannelFailed)
    assert event.channel == 1
    assert event.error.reply_code is ReplyCode.PRECONDITION_FAILED
    client.send_bytes(b"".join(parts[2:]))
    client.expect_nothing()
    assert end.events == []
    assert end.connection.is_open


def test_a_body_size_of_exactly_max_message_size_is_accepted():
    """Rule 5: only a body-size above max_message_size is refused."""
    settings = ConnectionSettings(server_properties={}, max_message_size=1000)
    client, end = opened(settings)
    client.send_bytes(b"".join(publish_bytes(1, b"x" * 1000)))
    [event] = end.take_events()
    assert isinstance(event, ContentReceived)
    assert len(event.body) == 1000


# Channel close ---------------------------------------------------------------------------------


def test_client_channel_close_gets_close_ok():
    """channel.close-ok: "This method confirms a Channel.Close method and tells the recipient that
    it is safe to release resources for the channel"; the channel number may then be opened
    again."""
    client, end = opened()
    client.send(1, Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=1)
    assert end.take_events() == [ChannelClosed(1, 200, "bye")]
    client.open_channel(1)
    assert end.take_events() == [ChannelOpened(1)]


def test_unexpected_channel_close_ok_is_503():
    """channel.close-ok answers a channel.close the server sent; unasked, it is 503 COMMAND_INVALID.
    channel.close-ok answers a channel.close the server sent; unasked, it is 503 COMMAND_INVALID."""
    client, _end = opened()
    client.send(1, Channel.CloseOk())
    expect_close(client, ReplyCode.COMMAND_INVALID)


def test_after_close_channel_its_frames_are_discarded_until_close_ok():
    """Rule 6; channel.close, rule "stability": "After sending this method, any received methods
    except Close and Close-OK MUST be discarded." Content frames go with their method."""
    client, end = opened()
    client.open_channel(2)
    end.take_events()
    end.connection.close_channel(1, ChannelError(ReplyCode.NOT_FOUND, "no queue 'q'", Basic.Get))
    close = client.expect(Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert (close.class_id, close.method_id) == (60, 70)
    assert end.connection.open_channels() == [2]
    client.send(1, Basic.Qos(prefetch_count=1))
    client.send_bytes(b"".join(publish_bytes(1, b"x" * 5000)))
    client.send_bytes(raw_frame(FRAME_HEADER, 1, b"\x00" * 14))
    client.expect_nothing()
    assert end.events == []
    client.send(2, Basic.Qos(prefetch_count=1))
    assert [type(event) for event in end.take_events()] == [MethodReceived]
    client.send(1, Channel.CloseOk())
    client.expect_nothing()
    assert end.events == []
    client.open_channel(1)
    assert end.take_events() == [ChannelOpened(1)]


def test_channel_open_on_a_closing_channel_is_discarded():
    """Rule 6 ("discards that channel's frames until channel.close-ok"); channel.close, rule
    "stability": "any received methods except Close and Close-OK MUST be discarded" - channel.open
    included: the client may have sent it before it saw the server's close."""
    client, end = opened()
    end.connection.close_channel(1, ChannelError(ReplyCode.NOT_FOUND, "x"))
    client.expect(Channel.Close, channel=1)
    client.send(1, Channel.Open())
    client.expect_nothing()
    assert end.events == []
    assert end.connection.is_open


def test_close_channel_in_the_middle_of_content_discards_the_rest():
    """Rule 6: after the server closes a channel, its frames (the rest of a content included) are
    discarded, not 505."""
    client, end = opened()
    parts = publish_bytes(1, b"x" * 5000)
    client.send_bytes(parts[0] + parts[1])
    end.connection.close_channel(1, ChannelError(ReplyCode.PRECONDITION_FAILED, "no"))
    client.expect(Channel.Close, channel=1)
    client.send_bytes(parts[2] + parts[3])
    client.expect_nothing()
    assert end.events == []
    assert end.connection.is_open


def test_channel_close_crossing_the_servers_close_gets_close_ok():
    """channel.close, rule "stability": "The response to receiving a Close after sending Close
    must be to send Close-Ok."""
    client, end = opened()
    end.connection.close_channel(1, ChannelError(ReplyCode.NOT_FOUND, "x"))
    client.expect(Channel.Close, channel=1)
    client.send(1, Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Channel.CloseOk, channel=1)
    assert end.events == []
    client.open_channel(1)


def test_close_channel_on_a_closing_or_unknown_channel_sends_nothing_more():
    """Rule 6: one channel.close per closing; a channel that is not open has none to send."""
    client, end = opened()
    end.connection.close_channel(1, ChannelError(ReplyCode.NOT_FOUND, "x"))
    end.connection.close_channel(1, ChannelError(ReplyCode.NOT_FOUND, "x"))
    end.connection.close_channel(9, ChannelError(ReplyCode.NOT_FOUND, "x"))
    client.expect(Channel.Close, channel=1)
    client.expect_nothing()


def test_close_channel_truncates_the_reply_text_to_255_octets():
    """Domain reply-text is a short string: at most 255 octets. An error text of 200 two-octet
    characters (a queue name, say) is cut to fit, not refused by the encoder."""
    client, end = opened()
    end.connection.close_channel(1, ChannelError(ReplyCode.NOT_FOUND, "\u00e9" * 200))
    close = client.expect(Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert 200 <= len(close.reply_text.encode("utf-8")) <= 255


def test_close_channel_escapes_a_short_string_that_was_not_utf8():
    """A name that is not UTF-8 decodes with surrogate escapes (an alternate-exchange long
    string, engine/exchange.py) and an error may quote it; the reply-text short string is still
    sent, with the escape written out, not a UnicodeEncodeError that aborts the connection."""
    client, end = opened()
    text = "no exchange 'ae-\udcff'"
    end.connection.close_channel(1, ChannelError(ReplyCode.NOT_FOUND, text))
    close = client.expect(Channel.Close, channel=1)
    assert close.reply_text.endswith("no exchange 'ae-\\udcff'")


# Connection close ------------------------------------------------------------------------------


def test_client_connection_close_gets_close_ok_and_ends_once():
    """Spec 2.3.7: "The receiving peer MUST respond to a Close with a Close-Ok"; rule 8:
    ConnectionEnded exactly once, by the peer."""
    client, end = opened()
    client.send(0, Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    client.expect(Connection.CloseOk, channel=0)
    assert end.take_events() == [ConnectionEnded(200, "bye", True)]
    assert end.connection.should_close_transport
    assert end.connection.state is State.CLOSED
    client.send(0, Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.send(1, Basic.Qos())
    client.expect_nothing()
    assert end.events == []


def test_after_close_only_close_and_close_ok_are_looked_at():
    """Rule 6; connection.close, rule "stability": "After sending this method, any received
    methods except Close and Close-OK MUST be discarded"."""
    client, end = opened()
    end.connection.close(HardError(ReplyCode.CONNECTION_FORCED, "shutdown"))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.CONNECTION_FORCED
    assert end.connection.open_channels() == []
    client.send(1, Basic.Qos())
    client.send(2, Channel.Open())
    client.send_bytes(b"".join(publish_bytes(1, b"x")))
    client.send(0, Connection.Open(virtual_host="/"))
    client.send(0, Connection.TuneOk())
    client.send_bytes(HEARTBEAT_BYTES)
    client.expect_nothing()
    assert end.events == []
    assert not end.connection.should_close_transport
    client.send(0, Connection.CloseOk())
    client.expect_nothing()
    assert end.take_events() == [ConnectionEnded(320, "CONNECTION_FORCED - shutdown", False)]
    assert end.connection.should_close_transport


def test_close_crossing_the_servers_close_gets_close_ok_and_ends_once():
    """connection.close, rule "stability": "The response to receiving a Close after sending
    Close must be to send Close-Ok."""
    client, end = opened()
    end.connection.close(HardError(ReplyCode.INTERNAL_ERROR, "oops"))
    client.expect(Connection.Close)
    client.send(0, Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(Connection.CloseOk, channel=0)
    client.send(0, Connection.CloseOk())
    events = end.take_events()
    assert [type(event) for event in events] == [ConnectionEnded]
    assert events[0].reply_code == ReplyCode.INTERNAL_ERROR
    assert events[0].by_peer is False


def test_close_twice_sends_one_close():
    """connection.close, rule "stability": after the server sent close it waits for close-ok; a
    second error sends nothing more."""
    client, end = opened()
    end.connection.close(HardError(ReplyCode.INTERNAL_ERROR, "one"))
    end.connection.close(HardError(ReplyCode.INTERNAL_ERROR, "two"))
    close = client.expect(Connection.Close)
    assert close.reply_text.endswith("one")
    client.expect_nothing()


def test_close_truncates_the_reply_text_to_255_octets():
    """Domain reply-text is a short string: at most 255 octets, however many characters."""
    client, end = opened()
    end.connection.close(HardError(ReplyCode.NOT_ALLOWED, "vhost '" + "\u00e9" * 200 + "'"))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED
    assert 200 <= len(close.reply_text.encode("utf-8")) <= 255


def test_close_before_the_protocol_header_just_closes_the_transport():
    """Spec 4.2.2 / 2.2.4: before the protocol header there is no AMQP connection to close with a
    method."""
    connection = ServerConnection(SETTINGS)
    connection.close(HardError(ReplyCode.CONNECTION_FORCED, "shutdown"))
    assert connection.should_close_transport
    assert connection.data_to_send() == []


# Rule 7: errors in the input never escape --------------------------------------------------------


def test_a_frame_error_after_open_closes_the_connection_without_raising():
    """Rule 7; spec 4.2.3: a bad frame-end is "a fatal protocol error": connection.close 501,
    then the transport closes at once, since no close-ok can be framed out of the stream."""
    client, end = opened()
    client.send_bytes(raw_frame(FRAME_METHOD, 1, b"\x00\x3c\x00\x0a" + bytes(7), frame_end=0))
    close = expect_close(client, ReplyCode.FRAME_ERROR)
    assert (close.class_id, close.method_id) == (0, 0)
    assert end.connection.state is State.CLOSED
    assert end.connection.should_close_transport


def test_heartbeats_are_ignored():
    """Spec 4.2.7: heartbeat frames carry no events; they only show the peer is alive."""
    client, end = opened()
    client.send_bytes(HEARTBEAT_BYTES * 3)
    client.expect_nothing()
    assert end.events == []
    end.connection.send_heartbeat()
    assert client.raw_output() == HEARTBEAT_BYTES


def test_methods_on_an_open_channel_are_method_received():
    """Rule 4: a method on an open channel goes to the engine as MethodReceived."""
    client, end = opened()
    client.send(1, Basic.Qos(prefetch_count=3))
    [event] = end.take_events()
    assert isinstance(event, MethodReceived)
    assert event.channel == 1
    assert isinstance(event.method, Basic.Qos)
    assert event.method.prefetch_count == 3


def test_send_method_and_send_frame_queue_output_in_call_order():
    """Rule 2: output comes out in the order it was queued (spec 4.7: order on a channel is
    preserved)."""
    _client, end = opened()
    end.connection.send_method(1, Basic.QosOk())
    end.connection.send_frame(raw_frame(FRAME_BODY, 7, b""))
    end.connection.send_heartbeat()
    reader = FrameReader(1 << 20)
    reader.feed(b"".join(end.connection.data_to_send()))
    first = reader.next_frame()
    assert isinstance(first, MethodFrame)
    assert isinstance(first.method, Basic.QosOk)
    assert reader.next_frame() == BodyFrame(7, b"")
    assert reader.next_frame() == HeartbeatFrame(0)
    assert reader.next_frame() is None


def test_content_header_on_channel_0_is_504():
    """Spec 4.2.6.1 (content header): "The channel number MUST NOT be zero, and the peer MUST
    respond to a zero channel number with a connection exception with reply code 504 (channel
    error)"."""
    client, _end = opened()
    client.send_bytes(publish_bytes(0, b"abc")[1])
    expect_close(client, ReplyCode.CHANNEL_ERROR)


def test_content_header_of_another_class_is_505():
    """A content header whose class-id is not the method's. The spec says both 505 (4.2.6: "an
    incomplete or badly-formatted content ... 505 (unexpected frame)") and 501 (4.2.6.1);
    RabbitMQ answers 505, so BatonMQ does too."""
    client, _end = opened()
    method, content_header, *_body = publish_bytes(1, b"abc")
    payload = bytearray(content_header[7:-1])
    payload[0:2] = (50).to_bytes(2, "big")  # the queue class instead of basic
    client.send_bytes(method + raw_frame(FRAME_HEADER, 1, bytes(payload)))
    expect_close(client, ReplyCode.UNEXPECTED_FRAME)


# connection.blocked / connection.unblocked ------------------------------------------------------


def test_block_and_unblock_reach_a_client_with_the_capability():
    """RabbitMQ's connection.blocked extension: "the broker will send a connection.blocked
    method to a client that announced the connection.blocked capability", and
    connection.unblocked when the resource alarm clears; each is sent once per change."""
    client, end = new_client()
    client.handshake(capabilities={"connection.blocked": True})
    assert end.connection.block("memory alarm")
    assert not end.connection.block("memory alarm again")
    blocked = client.expect(Connection.Blocked, channel=0)
    assert blocked.reason == "memory alarm"
    assert end.connection.unblock()
    assert not end.connection.unblock()
    client.expect(Connection.Unblocked, channel=0)
    client.expect_nothing()


def test_block_is_not_sent_to_a_client_without_the_capability():
    """A client that did not announce connection.blocked does not know the method: nothing is
    sent to it (its socket is simply not read, which is the server layer's part)."""
    client, end = new_client()
    client.handshake()
    assert not end.connection.block("memory alarm")
    assert not end.connection.blocked
    client.expect_nothing()


def test_the_caller_may_stop_after_any_event_and_resume_with_no_new_bytes():
    """Rule 1: each event is the last thing its frame does, so a caller whose output is backed
    up may stop consuming events; the unparsed input stays buffered and receive_data(b"")
    continues exactly where it stopped."""
    _client, end = opened()
    end.take_events()
    connection = end.connection
    burst = b"".join(frame.marshal(Basic.Qos(prefetch_count=count), 1) for count in (1, 2, 3))
    events = connection.receive_data(burst)
    first = next(events)
    assert isinstance(first, MethodReceived)
    assert first.method.prefetch_count == 1
    del events  # abandoned mid-way, as Session.receive_data does when output backs up
    rest = list(connection.receive_data(b""))
    assert [event.method.prefetch_count for event in rest] == [2, 3]
