"""What a session logs when a connection or a channel ends, in memory (the integration tests in
tests/integration/test_close_log.py read a real broker's log)."""

from __future__ import annotations

import logging

import pytest
from pamqp import commands

from batonmq.engine.broker import Broker
from tests.memclient import connect


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage().startswith(text)]


def test_a_refusal_repeated_per_publish_is_logged_once_then_counted(caplog):
    """Hardening: coalesce "any other per-message log line that can flood (... per-publish
    refusal lines ...)": a client publishing to a missing exchange, reopening its channel each
    time, from ports that differ, gives one line and then a count."""
    caplog.set_level(logging.INFO, "batonmq.engine.session")
    broker = Broker()
    for port in (5001, 5002):
        client, _session = connect(broker, ("127.0.0.1", port))
        for _ in range(3):
            client.publish(1, b"lost", exchange="missing", routing_key="k")
            client.expect(commands.Channel.Close, 1)
            client.send(1, commands.Channel.CloseOk())
            client.open_channel(1)
    broker.session_log.flush()
    refused = lines(caplog, "channel closed by broker")
    assert [record.getMessage().split(" (")[0] for record in refused] == [
        "channel closed by broker",
        "channel closed by broker",
    ]
    assert refused[0].code == 404 and "missing" in refused[0].reason
    assert refused[1].getMessage().startswith("channel closed by broker (x5 in the last ")


def test_a_connection_end_is_logged_once_however_many_times_it_is_seen(caplog):
    """Hardening: every close "is logged once": the broker's close, then the client's close-ok,
    then the socket closing are one end, logged at the first."""
    caplog.set_level(logging.DEBUG, "batonmq.engine.session")
    broker = Broker()
    client, session = connect(broker)
    client.send(1, commands.Basic.Qos(prefetch_size=1))  # 540, a connection error
    client.expect(commands.Connection.Close, 0)
    client.send(0, commands.Connection.CloseOk())
    session.log_closed("client", None, "the client closed the socket")  # the socket, after
    [closed] = lines(caplog, "connection closed")
    assert (closed.levelname, closed.code, closed.closed_by) == ("WARNING", 540, "broker")
    assert (closed.peer, closed.user, closed.vhost) == ("127.0.0.1:5000", "guest", "/")
