"""Every connection end is logged once, whoever ended it and however, read from a real broker's
log after raw frames. Hardening: "Every connection the broker closes, for any reason (frame errors
501/502/504/505/530/540, heartbeat timeout, access refused), is logged once with peer address,
user, vhost, code and reason.\""""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Callable

import pytest
from pamqp import commands, frame, header

from tests.brokerproc import RunningBroker, start_broker, wait_until
from tests.rawclient import RawClient, connect, open_connection
from tests.wire import plain_response

pytestmark = pytest.mark.integration

ACCESS_REFUSED, FRAME_ERROR, SYNTAX_ERROR, CHANNEL_ERROR, UNEXPECTED_FRAME = 403, 501, 502, 504, 505
NOT_ALLOWED, NOT_IMPLEMENTED = 530, 540


def close_lines(broker: RunningBroker, port: int) -> list[str]:
    """The broker's "connection closed" lines for the client on local `port`."""
    return [
        line
        for line in broker.log().splitlines()
        if 'msg="connection closed' in line and f"peer=127.0.0.1:{port} " in line
    ]


def end_and_read_the_line(broker: RunningBroker, client: RawClient) -> str:
    """The one "connection closed" line of `client`'s connection, read once the connection is
    over at both ends and a later connection has been logged too (so no second line is on its
    way)."""
    port = client.sock.getsockname()[1]
    client.read_until_closed()
    client.close()
    with open_connection(broker, channel=None) as later:
        later_port = later.sock.getsockname()[1]
        later.send_frame(commands.Connection.Close(200, "done", 0, 0))
        later.expect(commands.Connection.CloseOk)
    wait_until(lambda: close_lines(broker, later_port), "the later connection's line")
    lines = close_lines(broker, port)
    assert len(lines) == 1, lines
    return lines[0]


def raw_frame(frame_type: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return (
        bytes([frame_type])
        + channel.to_bytes(2, "big")
        + len(payload).to_bytes(4, "big")
        + (payload + bytes([end]))
    )


def bad_frame_end(client: RawClient) -> None:
    client.send(raw_frame(8, 0, b"", end=0x00))  # a heartbeat frame with a wrong frame-end


def content_header_without_publish(client: RawClient) -> None:
    client.send_frame(header.ContentHeader(0, 5), 1)


def malformed_content_header(client: RawClient) -> None:
    """basic.publish, then a content header whose delivery-mode is 7 (spec 4.2.6.1 header:
    class-id 60, weight, body-size, property flags; bit 12 is delivery-mode)."""
    client.send(frame.marshal(commands.Basic.Publish(routing_key="q"), 1))
    client.send(raw_frame(2, 1, struct.pack(">HHQH", 60, 0, 5, 1 << 12) + b"\x07"))


def method_on_a_channel_not_open(client: RawClient) -> None:
    client.send_frame(commands.Basic.Qos(prefetch_count=1), 2)


def prefetch_size(client: RawClient) -> None:
    client.send_frame(commands.Basic.Qos(prefetch_size=1), 1)


#: case -> (bad input, reply code, the reason's start)
CASES: dict[str, tuple[Callable[[RawClient], None], int, str]] = {
    "501 frame error": (bad_frame_end, FRAME_ERROR, "FRAME_ERROR - frame-end"),
    "502 syntax error": (
        malformed_content_header,
        SYNTAX_ERROR,
        "SYNTAX_ERROR - content header property: delivery-mode 7",
    ),
    "504 channel error": (method_on_a_channel_not_open, CHANNEL_ERROR, "CHANNEL_ERROR - channel 2"),
    "505 unexpected frame": (
        content_header_without_publish,
        UNEXPECTED_FRAME,
        "UNEXPECTED_FRAME - content header",
    ),
    "540 not implemented": (prefetch_size, NOT_IMPLEMENTED, "NOT_IMPLEMENTED - prefetch_size"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_connection_closed_for_bad_frames_is_logged_once_with_all_fields(
    batonmq: RunningBroker, case: str
):
    """Hardening: frame errors 501/502/504/505/540 are "logged once with peer address, user, vhost,
    code and reason"; a broker's error close is a warning."""
    send_bad_input, code, reason = CASES[case]
    client = open_connection(batonmq, channel=1)
    send_bad_input(client)
    client.expect_connection_close(code)
    with contextlib.suppress(OSError):  # after a 501 the broker does not wait for close-ok
        client.send_frame(commands.Connection.CloseOk())
    line = end_and_read_the_line(batonmq, client)
    assert line.split()[1] == "warning"
    assert "user=guest" in line and "vhost=/" in line
    assert f"code={code}" in line and "closed_by=broker" in line
    assert f'reason="{reason}' in line, line


def test_a_530_for_more_channels_than_channel_max_is_logged_once_with_all_fields(
    batonmq: RunningBroker,
):
    """Hardening: 530 is "logged once with peer address, user, vhost, code and reason"; RabbitMQ
    closes with 530 when the "number of channels opened (2) has reached the negotiated
    channel_max (2)"."""
    client = open_connection(batonmq, channel=1, channel_max=2)
    client.open_channel(65535)
    client.send_frame(commands.Channel.Open(), 3)
    client.expect_connection_close(NOT_ALLOWED)
    client.send_frame(commands.Connection.CloseOk())
    line = end_and_read_the_line(batonmq, client)
    assert line.split()[1] == "warning"
    assert "user=guest vhost=/ code=530" in line and "closed_by=broker" in line
    assert 'reason="NOT_ALLOWED - number of channels opened (2) has reached the negotiated' in line


def test_a_refused_login_is_logged_once_with_the_user_the_mechanism_and_why(
    batonmq: RunningBroker,
):
    """Hardening: "A refused login names the user, the mechanism, the peer and why; it never
    says "see the broker logfile" inside the broker's own log"; 403 access refused is logged
    once with the five fields."""
    client = connect(batonmq)
    client.start()
    client.start_ok("PLAIN", plain_response("guest", "wrong"))
    client.expect_connection_close(ACCESS_REFUSED)
    client.send_frame(commands.Connection.CloseOk())
    line = end_and_read_the_line(batonmq, client)
    assert line.split()[1] == "warning"
    assert "user=guest" in line and "vhost=null" in line and "mechanism=PLAIN" in line
    assert 'code=403 reason="login refused: wrong password"' in line
    assert "logfile" not in batonmq.log()


def test_a_vhost_refused_at_open_is_logged_with_the_vhost_asked_for(batonmq: RunningBroker):
    """Hardening: closes "logged once with peer address, user, vhost, code and reason" (530 for
    a virtual host that does not exist, as RabbitMQ)."""
    client = connect(batonmq)
    client.start()
    tune = client.login("PLAIN", plain_response("guest", "guest"))
    client.tune_ok(tune.channel_max, tune.frame_max, 0)
    client.send_frame(commands.Connection.Open(virtual_host="nowhere"))
    client.expect_connection_close(NOT_ALLOWED)
    client.send_frame(commands.Connection.CloseOk())
    line = end_and_read_the_line(batonmq, client)
    assert "user=guest vhost=nowhere code=530" in line
    assert "reason=\"NOT_ALLOWED - vhost 'nowhere' not found\"" in line


def test_a_missed_heartbeat_close_is_logged_once(batonmq: RunningBroker):
    """Hardening: "heartbeat timeout" is logged once; spec 4.2.7: a peer that detects no incoming
    traffic closes "without following the Connection.Close/Close-Ok handshaking", so no code
    went either way (code=null)."""
    client = open_connection(batonmq, channel=None, heartbeat_interval=1)
    line = end_and_read_the_line(batonmq, client)
    assert line.split()[1] == "warning"
    assert "user=guest vhost=/ code=null" in line
    assert 'reason="missed heartbeats from client, timeout: 1s" closed_by=broker' in line


def test_a_client_close_is_information_and_names_the_client(batonmq: RunningBroker):
    """Hardening: every end is logged once; "INFO for client-initiated/normal closes"."""
    client = open_connection(batonmq, channel=None)
    client.send_frame(commands.Connection.Close(200, "bye", 0, 0))
    client.expect(commands.Connection.CloseOk)
    line = end_and_read_the_line(batonmq, client)
    assert line.split()[1] == "info"
    assert "user=guest vhost=/ code=200 reason=bye closed_by=client" in line


def test_a_login_guessed_in_a_loop_is_logged_once_then_counted(tmp_path):
    """Hardening: per-connection lines under attack are coalesced: the first refusal at once,
    then "(xN in the last 10 s)" for the repeats (here, at shutdown's flush)."""
    broker = start_broker(tmp_path, "--log-format", "json")
    try:
        for _ in range(4):
            with connect(broker) as client:
                client.start()
                client.start_ok("PLAIN", plain_response("nobody", "guess"))
                client.expect_connection_close(ACCESS_REFUSED)
    finally:
        broker.stop()
    records = [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]
    refused = [r for r in records if r["msg"].startswith("connection closed") and r["code"] == 403]
    assert len(refused) == 2, refused
    assert refused[0]["msg"] == "connection closed"
    assert refused[1]["msg"].startswith("connection closed (x3 in the last ")
    assert refused[1]["repeats"] == 3 and refused[1]["user"] == "nobody"


def test_a_socket_dropped_by_the_client_is_logged_once(batonmq: RunningBroker):
    """Hardening: every end is logged once, a client that drops the socket without
    connection.close too (no code went either way)."""
    client = open_connection(batonmq, channel=1)
    port = client.sock.getsockname()[1]
    client.close()
    wait_until(lambda: close_lines(batonmq, port), "the dropped connection's line")
    [line] = close_lines(batonmq, port)
    assert line.split()[1] == "info"
    assert 'user=guest vhost=/ code=null reason="the client closed the socket"' in line
    assert "closed_by=client" in line
