"""Malformed and out-of-order frames after a successful handshake, and the errors they earn.

Every test opens its connection with frame_max 4096 and channel_max 16 and channel 1 open, sends
one piece of bad input and checks the reply code: connection errors end in connection.close and a
closed socket, channel errors in channel.close with the connection still usable. A bystander
connection opened before the bad input must still serve afterwards.

Rule quotes are from the AMQP 0-9-1 specification (amqp0-9-1.pdf and amqp0-9-1.xml).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator

import pytest
from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from tests.brokerproc import RunningBroker
from tests.rawclient import FRAME_HEADER_SIZE, RawClient, open_connection
from tests.wire import method_payload, raw_frame

pytestmark = pytest.mark.integration

FRAME_MAX = 4096
CHANNEL_MAX = 16
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_ERROR, COMMAND_INVALID, CHANNEL_ERROR = 501, 503, 504
UNEXPECTED_FRAME, NOT_ALLOWED, NOT_IMPLEMENTED = 505, 530, 540
PRECONDITION_FAILED, NOT_FOUND = 406, 404


@pytest.fixture
def bystander(broker: RunningBroker) -> Iterator[RawClient]:
    """Another connection, opened before the bad input, that must keep working after it."""
    with open_connection(broker) as client:
        yield client
        assert client.round_trip(1) == b"still serving"


@pytest.fixture
def client(broker: RunningBroker, bystander: RawClient) -> Iterator[RawClient]:
    with open_connection(broker, frame_max=FRAME_MAX, channel_max=CHANNEL_MAX) as connection:
        yield connection


def _publish_start(channel: int, body_size: int, immediate: bool = False) -> bytes:
    """basic.publish and its content header announcing `body_size` octets, without the body."""
    method = commands.Basic.Publish(routing_key=f"nowhere-{uuid.uuid4().hex}", immediate=immediate)
    return frame.marshal(method, channel) + frame.marshal(ContentHeader(0, body_size), channel)


# -- framing errors ------------------------------------------------------------------------------


def test_wrong_frame_end_is_a_fatal_frame_error(client: RawClient) -> None:
    """Spec 4.2.3: "When a peer reads a frame it MUST check that the frame-end is valid before
    attempting to decode the frame. If the frame-end is not valid it MUST treat this as a fatal
    protocol error and close the connection" - the broker reports 501 FRAME_ERROR in
    connection.close (the issue asks for it, as RabbitMQ does) and closes the socket itself,
    without waiting for close-ok."""
    declare = method_payload(commands.Queue.Declare(queue="never-declared"))

    client.send(raw_frame(FRAME_METHOD, 1, declare, frame_end=0x00))

    client.expect_connection_close(FRAME_ERROR, send_close_ok=False)


def test_unknown_frame_type_is_a_fatal_frame_error(client: RawClient) -> None:
    """Spec 4.2.3: "If a peer receives a frame with a type that is not one of these defined types
    [1 method, 2 header, 3 body, 8 heartbeat], it MUST treat this as a fatal protocol error and
    close the connection" - with 501 FRAME_ERROR in connection.close (as the issue asks), and the
    socket closed by the broker without waiting for close-ok."""
    client.send(raw_frame(9, 1, b"\x00"))

    client.expect_connection_close(FRAME_ERROR, send_close_ok=False)


def test_frame_one_octet_over_frame_max_is_a_frame_error(client: RawClient) -> None:
    """connection.tune frame-max is "The largest frame size ... including frame header and
    end-byte"; spec 4.2.3: "A peer that receives an oversized frame MUST signal a connection
    exception with reply code 501 (frame error)." A body frame of frame_max + 1 octets in all."""
    payload_size = FRAME_MAX - FRAME_HEADER_SIZE - 1 + 1

    client.send(_publish_start(1, payload_size) + raw_frame(FRAME_BODY, 1, b"x" * payload_size))

    client.expect_connection_close(FRAME_ERROR)


def test_frame_with_payload_over_frame_max_is_a_frame_error(client: RawClient) -> None:
    """Spec 4.2.3: "A peer MUST NOT send frames larger than the agreed-upon size. A peer that
    receives an oversized frame MUST signal a connection exception with reply code 501 (frame
    error)." A body frame whose payload alone is larger than frame_max."""
    payload_size = FRAME_MAX + 1

    client.send(_publish_start(1, payload_size) + raw_frame(FRAME_BODY, 1, b"x" * payload_size))

    client.expect_connection_close(FRAME_ERROR)


def test_frame_of_exactly_frame_max_is_accepted(client: RawClient) -> None:
    """connection.tune-ok frame-max: "The largest frame size that the client and server will use
    for the connection" - a body frame of exactly frame_max octets in all is legal."""
    queue = client.declare_queue(1)
    body = b"y" * (FRAME_MAX - FRAME_HEADER_SIZE - 1)

    client.publish(1, body, routing_key=queue)

    assert client.get_body(1, queue) == body


def test_truncated_method_payload_is_a_frame_error(client: RawClient) -> None:
    """A queue.declare whose arguments stop halfway cannot be decoded: 501 FRAME_ERROR, "The
    sender sent a malformed frame that the recipient could not decode", rather than 502
    SYNTAX_ERROR, which is for "a frame that contained illegal values for one or more fields"
    (values that decode but are not allowed). RabbitMQ answers 501 too."""
    declare = method_payload(commands.Queue.Declare(queue="never-declared"))

    client.send(raw_frame(FRAME_METHOD, 1, declare[:8]))

    client.expect_connection_close(FRAME_ERROR)


def test_content_header_class_mismatch_is_unexpected(client: RawClient) -> None:
    """Spec 4.2.6: "A peer that receives an incomplete or badly-formatted content MUST raise a
    connection exception with reply code 505 (unexpected frame). This includes missing content
    headers, wrong class IDs in content headers, missing content body frames, etc."
    basic.publish (class 60) followed by a header of class 50. (Spec 4.2.6.1 contradicts this
    with 501 for an invalid class-id; 4.2.6 names the case explicitly, and RabbitMQ answers
    505.)"""
    method = commands.Basic.Publish(routing_key="nowhere")
    wrong_class_header = struct.pack(">HHQH", 50, 0, 5, 0)

    client.send(
        frame.marshal(method, 1)
        + raw_frame(FRAME_HEADER, 1, wrong_class_header)
        + frame.marshal(ContentBody(b"hello"), 1)
    )

    client.expect_connection_close(UNEXPECTED_FRAME)


# -- channel numbers -----------------------------------------------------------------------------


def test_method_on_a_channel_that_is_not_open_is_a_channel_error(client: RawClient) -> None:
    """504 CHANNEL_ERROR: "The client attempted to work with a channel that had not been
    correctly opened"; a hard error, so connection.close, naming queue.declare (50/10)."""
    client.send_frame(commands.Queue.Declare(queue="never-declared"), 2)

    close = client.expect_connection_close(CHANNEL_ERROR)

    assert (close.class_id, close.method_id) == (50, 10)


def test_channel_open_on_an_open_channel_is_a_channel_error(client: RawClient) -> None:
    """channel.open rule state (on-failure channel-error): "The client MUST NOT use this method on
    an already-opened channel." 504 is a hard error: connection.close, naming channel.open."""
    client.send_frame(commands.Channel.Open(), 1)

    close = client.expect_connection_close(CHANNEL_ERROR)

    assert (close.class_id, close.method_id) == (20, 10)


@pytest.mark.usefixtures("bystander")
def test_a_channel_number_above_channel_max_opens(broker: RunningBroker) -> None:
    """The issue: "RabbitMQ opens channel 65535 on a connection whose negotiated channel_max is
    2047 ... Find RabbitMQ's rule and follow it." RabbitMQ (rabbit_reader:create_channel)
    refuses a channel only when the "number of channels opened ... has reached the negotiated
    channel_max": channel_max bounds how many channels are open, not their numbers. With
    channel_max 2047, channel 65535 opens and serves."""
    with open_connection(broker, channel=None, channel_max=2047) as client:
        client.open_channel(65535)

        assert client.round_trip(65535) == b"still serving"


@pytest.mark.usefixtures("bystander")
def test_more_channels_than_channel_max_is_not_allowed(broker: RunningBroker) -> None:
    """connection.tune-ok channel-max: "The maximum total number of channels that the client will
    use per connection"; RabbitMQ: 530 when the "number of channels opened (2) has reached the
    negotiated channel_max (2)". With channel_max 2 and channels 1 and 65535 open, channel.open
    on 3 gets 530 NOT_ALLOWED."""
    with open_connection(broker, channel_max=2) as client:
        client.open_channel(65535)

        client.send_frame(commands.Channel.Open(), 3)

        close = client.expect_connection_close(NOT_ALLOWED)
        assert "has reached the negotiated channel_max (2)" in close.reply_text


def test_heartbeat_on_a_nonzero_channel_is_a_frame_error(client: RawClient) -> None:
    """Spec 4.2.7: "Heartbeat frames MUST have a channel number of zero. A peer that receives an
    invalid heartbeat frame MUST raise a connection exception with reply code 501 (frame
    error)." (Spec 4.2.3 says 503 for the same case; 4.2.7 is the rule about heartbeat frames
    themselves.)"""
    client.send(raw_frame(FRAME_HEARTBEAT, 1, b""))

    client.expect_connection_close(FRAME_ERROR)


def test_connection_method_on_a_nonzero_channel_is_command_invalid(client: RawClient) -> None:
    """Spec 4.2.3: "The channel number MUST be zero for ... method ... frames that refer to the
    Connection class. A peer that receives a non-zero channel number for one of these frames MUST
    signal a connection exception with reply code 503 (command invalid).\""""
    client.send_frame(commands.Connection.UpdateSecret("guest", "wrong channel"), 1)

    client.expect_connection_close(COMMAND_INVALID)


def test_content_on_channel_zero_is_a_channel_error(client: RawClient) -> None:
    """Spec 4.2.6.1: "The channel number in content frames MUST NOT be zero. A peer that
    receives a zero channel number in a content frame MUST signal a connection exception with
    reply code 504 (channel error).\""""
    client.send(frame.marshal(ContentHeader(0, 5), 0))

    client.expect_connection_close(CHANNEL_ERROR)


# -- content sequence ----------------------------------------------------------------------------


def test_content_header_without_a_method_is_unexpected(client: RawClient) -> None:
    """505 UNEXPECTED_FRAME: "The peer sent a frame that was not expected, usually in the context
    of a content header and body"; spec 4.2.6: "A peer that receives an incomplete or
    badly-formatted content MUST raise a connection exception with reply code 505"."""
    client.send(frame.marshal(ContentHeader(0, 5), 1))

    client.expect_connection_close(UNEXPECTED_FRAME)


def test_content_body_without_a_method_is_unexpected(client: RawClient) -> None:
    """505 UNEXPECTED_FRAME: "The peer sent a frame that was not expected, usually in the context
    of a content header and body" - a body frame with no basic.publish and header before it."""
    client.send(frame.marshal(ContentBody(b"hello"), 1))

    client.expect_connection_close(UNEXPECTED_FRAME)


def test_method_where_a_body_was_expected_is_unexpected(client: RawClient) -> None:
    """Spec 4.2.6: "A peer that receives an incomplete or badly-formatted content MUST raise a
    connection exception with reply code 505 (unexpected frame)." The header announces 10
    octets, then a method frame interrupts the content."""
    interrupting = frame.marshal(commands.Queue.Declare(queue="never-declared"), 1)

    client.send(_publish_start(1, 10) + interrupting)

    client.expect_connection_close(UNEXPECTED_FRAME)


def test_body_longer_than_the_header_says_is_unexpected(client: RawClient) -> None:
    """Spec 4.2.6: "A peer that receives an incomplete or badly-formatted content MUST raise a
    connection exception with reply code 505 (unexpected frame)." The header announces 5 octets
    and the body frame carries 11."""
    client.send(_publish_start(1, 5) + frame.marshal(ContentBody(b"hello world"), 1))

    client.expect_connection_close(UNEXPECTED_FRAME)


# -- methods the broker does not implement -------------------------------------------------------


@pytest.mark.parametrize(
    ("class_id", "method_id"),
    [
        pytest.param(99, 10, id="undefined-class"),
        pytest.param(0xF0F0, 10, id="extension-class"),
        pytest.param(60, 99, id="undefined-basic-method"),
    ],
)
def test_unknown_class_or_method_is_not_implemented(
    client: RawClient, class_id: int, method_id: int
) -> None:
    """The spec has no rule for an unknown class or method id; spec 4.2.4: "Class id values from
    %xF0.00-%xFF.FF ... may be used by implementations for non-standard extension classes".
    540 NOT_IMPLEMENTED ("The client tried to use functionality that is not implemented in the
    server") fits such ids; 503 COMMAND_INVALID is for "an invalid sequence of frames". The close
    names the method that provoked it, as connection.close class-id asks ("When the close is
    provoked by a method exception, this is the class of the method")."""
    client.send(raw_frame(FRAME_METHOD, 1, struct.pack(">HH", class_id, method_id)))

    close = client.expect_connection_close(NOT_IMPLEMENTED)

    assert (close.class_id, close.method_id) == (class_id, method_id)


def test_publish_with_immediate_is_not_implemented(client: RawClient) -> None:
    """basic.publish immediate: "This flag tells the server how to react if the message cannot be
    routed to a queue consumer immediately"; like RabbitMQ (since 3.0) the broker does not
    implement it and answers 540 NOT_IMPLEMENTED ("The client tried to use functionality that is
    not implemented in the server"), a hard error, naming basic.publish (60/40)."""
    client.send(_publish_start(1, 5, immediate=True) + frame.marshal(ContentBody(b"hello"), 1))

    close = client.expect_connection_close(NOT_IMPLEMENTED)

    assert (close.class_id, close.method_id) == (60, 40)


# -- channel errors ------------------------------------------------------------------------------


def test_ack_of_unknown_delivery_tag_closes_only_the_channel(client: RawClient) -> None:
    """basic.ack delivery-tag: "The server MUST validate that a non-zero delivery-tag refers to a
    delivered message, and raise a channel exception if this is not the case" (406
    PRECONDITION_FAILED, a soft error); the connection and its other channels carry on."""
    client.open_channel(2)

    client.send_frame(commands.Basic.Ack(delivery_tag=42), 1)

    close = client.expect_channel_close(1, PRECONDITION_FAILED)
    assert (close.class_id, close.method_id) == (60, 80)
    assert client.round_trip(2) == b"still serving"


def test_frames_after_channel_close_are_discarded_until_close_ok(client: RawClient) -> None:
    """channel.close rule stability: "After sending this method, any received methods except
    Close and Close-OK MUST be discarded." A queue.declare sent after the server's channel.close
    gets no reply and declares nothing; after our close-ok the channel number can be reopened."""
    queue = f"discarded-{uuid.uuid4().hex}"
    client.send_frame(commands.Basic.Ack(delivery_tag=42), 1)
    client.expect(commands.Channel.Close, 1)

    client.send_frame(commands.Queue.Declare(queue=queue), 1)
    client.send_frame(commands.Channel.CloseOk(), 1)
    client.send_frame(commands.Channel.Open(), 1)

    client.expect(commands.Channel.OpenOk, 1)
    client.send_frame(commands.Queue.Declare(queue=queue, passive=True), 1)
    client.expect_channel_close(1, NOT_FOUND)
