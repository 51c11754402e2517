"""The AMQP 0-9-1 connection handshake, tuning and heartbeats, driven with raw frames.

Rule quotes are from the AMQP 0-9-1 specification (amqp0-9-1.pdf and amqp0-9-1.xml).
"""

from __future__ import annotations

import itertools
import time

import pytest
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from tests.brokerproc import RunningBroker
from tests.rawclient import (
    PROTOCOL_HEADER,
    RawClient,
    connect,
    non_heartbeat_frames,
    open_connection,
    plain_response,
)

pytestmark = pytest.mark.integration

FRAME_MIN_SIZE = 4096


def test_protocol_header_gets_connection_start(broker: RunningBroker) -> None:
    """Spec 4.2.2 and connection.start: the server answers `AMQP 0 0 9 1` with connection.start,
    "The server MUST provide a protocol version that is lower than or equal to that requested by
    the client", mechanisms are "A list of the security mechanisms that the server supports,
    delimited by spaces", and "The server MUST support at least the en_US locale". The
    server-properties "SHOULD contain at least ... product ... version ... platform"."""
    with connect(broker) as client:
        start = client.start(PROTOCOL_HEADER)

    assert (start.version_major, start.version_minor) == (0, 9)
    assert {"PLAIN", "AMQPLAIN"} <= set(start.mechanisms.split())
    assert "en_US" in start.locales.split()
    assert {"product", "version", "platform"} <= set(start.server_properties)


def test_amqp_0_9_protocol_header_is_served_as_0_9_1(broker: RunningBroker) -> None:
    """The 0-9 header `AMQP 1 1 0 9` is treated as 0-9-1 (the issue wants it accepted, as
    RabbitMQ does: 0-9-1 is wire-compatible with 0-9 for what 0-9 clients use). Spec 4.2.2: "The
    server MAY host multiple protocols on the same port"; connection.start rule server-support:
    "The server MUST provide a protocol version that is lower than or equal to that requested"."""
    with connect(broker) as client:
        tune = client.handshake(
            broker.username, broker.password, broker.vhost, protocol_header=b"AMQP\x01\x01\x00\x09"
        )
        client.open_channel(1)

        assert tune.frame_max >= FRAME_MIN_SIZE
        assert client.round_trip(1) == b"still serving"


@pytest.mark.parametrize(
    "protocol_header",
    [
        pytest.param(b"AMQP\x00\x00\x08\x00", id="amqp-0-8-0"),
        pytest.param(b"AMQP\x00\x00\x09\x02", id="amqp-0-9-2"),
        pytest.param(b"AMQP\x00\x01\x00\x00", id="amqp-1-0"),
        pytest.param(b"HTTP/1.1", id="http"),
    ],
)
def test_unsupported_protocol_header_is_answered_with_ours_and_closed(
    broker: RunningBroker, protocol_header: bytes
) -> None:
    """Spec 4.2.2: "If the server does not recognise the first 5 octets of data on the socket,
    or does not support the specific protocol version that the client requests, it MUST write a
    valid protocol header to the socket, then flush the socket ... and then close the socket
    connection." (connection.start rule protocol-name says the same.)"""
    with connect(broker) as client:
        client.send(protocol_header)

        assert client.read_until_closed() == PROTOCOL_HEADER


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_login_succeeds_with_each_offered_mechanism(broker: RunningBroker, mechanism: str) -> None:
    """connection.start-ok: the mechanism is "A single security mechanisms selected by the
    client, which must be one of those specified by the server"; PLAIN is RFC 4616 and AMQPLAIN a
    LOGIN/PASSWORD field table. Grammar: "S:START C:START-OK ... S:TUNE C:TUNE-OK C:OPEN
    S:OPEN-OK"."""
    with connect(broker) as client:
        client.handshake(broker.username, broker.password, broker.vhost, mechanism=mechanism)
        client.open_channel(1)

        assert client.round_trip(1) == b"still serving"


def test_wrong_password_is_refused_with_access_refused(broker: RunningBroker) -> None:
    """With the client capability authentication_failure_close (a RabbitMQ extension that pika,
    aio-pika and the Java client send) a failed login gets connection.close 403 ACCESS_REFUSED,
    and the server then closes the socket without waiting for close-ok, as spec 2.2.4 asks of
    errors before connection.open: "There is no hand-shaking for errors on connections that are
    not fully open ... a peer that detects an error MUST close the socket without sending any
    further data"."""
    with connect(broker) as client:
        client.start()
        client.start_ok("PLAIN", plain_response(broker.username, "not-the-password"))

        client.expect_connection_close(403, send_close_ok=False)


def test_wrong_password_without_the_capability_closes_the_socket(broker: RunningBroker) -> None:
    """Spec 2.2.4: "There is no hand-shaking for errors on connections that are not fully open.
    Following successful protocol header negotiation, ... and prior to sending or receiving Open
    or Open-Ok, a peer that detects an error MUST close the socket without sending any further
    data." A client that did not ask for authentication_failure_close gets only the close."""
    with connect(broker) as client:
        client.start()
        client.start_ok(
            "PLAIN",
            plain_response(broker.username, "not-the-password"),
            authentication_failure_close=False,
        )

        client.expect_silent_close()


def test_unknown_mechanism_closes_the_socket_without_data(broker: RunningBroker) -> None:
    """connection.start-ok rule validity: "If the mechanism field does not contain one of the
    security mechanisms proposed by the server in the Start method, the server MUST close the
    connection without sending any further data" ("a socket close, with no connection close
    negotiation")."""
    with connect(broker) as client:
        client.start()
        client.start_ok("X-NO-SUCH-MECHANISM", plain_response(broker.username, broker.password))

        client.expect_silent_close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("frame_max", "proposed + 1", id="frame-max-above-proposed"),
        pytest.param("frame_max", FRAME_MIN_SIZE - 1, id="frame-max-below-minimum"),
        pytest.param("channel_max", "proposed + 1", id="channel-max-above-proposed"),
        pytest.param("channel_max", 0, id="channel-max-unlimited"),
    ],
)
def test_tune_ok_outside_the_limits_closes_the_socket(
    broker: RunningBroker, field: str, value: int | str
) -> None:
    """connection.tune-ok rules upper-limit: "If the client specifies a frame max [channel max]
    that is higher than the value provided by the server, the server MUST close the connection
    without attempting a negotiated close"; tune-ok channel-max has `assert check="notnull"` and
    `assert check="le"` tune's channel-max, so 0 is refused too; frame-max rule minimum: "the
    minimum negotiated value for frame-max is also frame-min-size" (4096). Spec 2.2.4: before
    Open/Open-Ok "a peer that detects an error MUST close the socket without sending any further
    data" (and 4.10.2: "pause that connection ... and then ... close the network connection"), so
    no connection.close is sent."""
    with connect(broker) as client:
        client.start()
        tune = client.login("PLAIN", plain_response(broker.username, broker.password))
        assert 0 < tune.channel_max < 0xFFFF, "the test needs a bounded channel_max proposal"
        assert tune.frame_max > FRAME_MIN_SIZE, "the test needs a bounded frame_max proposal"
        tuning = {"channel_max": tune.channel_max, "frame_max": tune.frame_max}
        tuning[field] = tuning[field] + 1 if value == "proposed + 1" else int(value)

        client.tune_ok(tuning["channel_max"], tuning["frame_max"], 0)

        client.expect_silent_close()


def test_tune_proposes_the_configured_limits(broker: RunningBroker) -> None:
    """connection.tune: the server proposes channel-max ("Usable channel numbers are in the range
    1..channel-max"), frame-max and heartbeat. BatonMQ's defaults are frame_max 131072 and
    heartbeat 60 s (checked only against BatonMQ; an external broker has its own)."""
    with connect(broker) as client:
        client.start()
        tune = client.login("PLAIN", plain_response(broker.username, broker.password))

    assert tune.channel_max > 0
    assert tune.frame_max >= FRAME_MIN_SIZE
    if broker.process is not None:
        assert (tune.frame_max, tune.heartbeat) == (131072, 60)


def test_negotiated_lower_frame_max_bounds_the_servers_frames(broker: RunningBroker) -> None:
    """connection.tune frame-max: "The client can negotiate a lower value"; spec 4.2.3: "A peer
    MUST NOT send frames larger than the agreed-upon size". A 10,000-octet message comes back
    split into content body frames of at most the negotiated 4096 octets (spec 4.2.6.2)."""
    body = bytes(range(256)) * 40
    with open_connection(broker, frame_max=FRAME_MIN_SIZE) as client:
        queue = client.declare_queue(1)
        client.publish(1, body, routing_key=queue)
        client.send_frame(commands.Basic.Get(queue=queue, no_ack=True), 1)
        client.expect(commands.Basic.GetOk, 1)
        content = client.expect(ContentHeader, 1)
        received, frame_sizes = b"", []
        while len(received) < content.body_size:
            received += client.expect(ContentBody, 1).value
            frame_sizes.append(client.last_frame_size)

    assert received == body
    assert max(frame_sizes) <= FRAME_MIN_SIZE


def test_unknown_vhost_is_refused_with_not_allowed(broker: RunningBroker) -> None:
    """connection.open rule security: "The server SHOULD verify that the client has permission to
    access the specified virtual host"; a vhost that does not exist gets connection.close 530
    NOT_ALLOWED ("The client tried to work with some entity in a manner that is prohibited by the
    server"), naming the failing method (connection.open, 10/40)."""
    with connect(broker) as client:
        client.start()
        tune = client.login("PLAIN", plain_response(broker.username, broker.password))
        client.tune_ok(tune.channel_max, tune.frame_max, 0)
        client.send_frame(commands.Connection.Open(virtual_host="no-such-vhost"))

        close = client.expect_connection_close(530)

    assert (close.class_id, close.method_id) == (10, 40)


def test_client_initiated_close_gets_close_ok(broker: RunningBroker) -> None:
    """Grammar: "close-connection = C:CLOSE S:CLOSE-OK"; spec 2.3.7: "The receiving peer MUST
    respond to a Close with a Close-Ok"."""
    with open_connection(broker) as client:
        client.send_frame(commands.Connection.Close(200, "client closing", 0, 0))

        client.expect(commands.Connection.CloseOk)


def test_update_secret_gets_update_secret_ok(broker: RunningBroker) -> None:
    """connection.update-secret (class 10, method 70; a RabbitMQ extension to 0-9-1, in 3.10):
    "This method updates the secret used to authenticate this connection"; the server answers
    update-secret-ok and the connection keeps working."""
    with open_connection(broker) as client:
        client.send_frame(commands.Connection.UpdateSecret(broker.password, "rotation"))

        client.expect(commands.Connection.UpdateSecretOk)
        assert client.round_trip(1) == b"still serving"


def _collect_heartbeats(client: RawClient, seconds: float, send_every: float) -> list[float]:
    """Arrival times of the server's heartbeats over `seconds`, sending ours every `send_every`
    seconds; fails on any other frame."""
    start = time.monotonic()
    arrivals = [start]
    next_send = start
    while (now := time.monotonic()) < start + seconds:
        if now >= next_send:
            client.send_heartbeat()
            next_send += send_every
        try:
            channel, value = client.read_frame(max(min(next_send, start + seconds) - now, 0.01))
        except TimeoutError:
            continue
        assert (channel, type(value)) == (0, Heartbeat), f"unexpected {value!r} on {channel}"
        arrivals.append(time.monotonic())
    return arrivals


def test_heartbeating_client_gets_heartbeats_and_stays_connected(broker: RunningBroker) -> None:
    """Spec 4.2.7: "The server should start sending and monitoring heartbeats after receiving
    Connection.Tune-Ok"; "Heartbeat frames MUST have a channel number of zero"; "The peer should
    make a best effort to send heartbeats at specified intervals". With heartbeat tuned to 1 s and
    a client that sends its own every 0.5 s, the server's heartbeats arrive about every second
    and the connection is still serving after 4 s."""
    with open_connection(broker, heartbeat_interval=1) as client:
        arrivals = _collect_heartbeats(client, seconds=4.0, send_every=0.5)

        gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
        assert len(gaps) >= 3, f"only {len(gaps)} heartbeats in 4 s"
        assert max(gaps) <= 1.5, f"heartbeat gaps {gaps}"
        assert client.round_trip(1) == b"still serving"


def test_silent_client_is_disconnected_after_two_intervals(broker: RunningBroker) -> None:
    """Spec 4.2.7: "If a peer detects no incoming traffic (i.e. received octets) for two
    heartbeat intervals or longer, it should close the connection without following the
    Connection.Close/Close-Ok handshaking". Heartbeat 1 s and a client that sends nothing after
    connection.open: the socket is closed 2 to 4 s later, with only heartbeats before it (1.9 s
    is allowed for the lower bound: the clock starts when open-ok arrives, a little after the
    server last heard from us)."""
    with open_connection(broker, channel=None, heartbeat_interval=1) as client:
        silent_since = time.monotonic()

        trailing = client.read_until_closed(timeout=6.0)

        silence = time.monotonic() - silent_since
        assert silence >= 1.9
        assert silence <= 4.0
        assert non_heartbeat_frames(trailing) == []
