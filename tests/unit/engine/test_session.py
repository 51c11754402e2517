"""The engine's side of a connection (`Session`): login, virtual host, connection-level errors
and the end of the connection, driven by the in-memory client."""

from __future__ import annotations

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from tests.memclient import LOOPBACK_PEER, MemClient, connect

Connection = commands.Connection


def new_session(broker: Broker, peer: tuple[str, int] = LOOPBACK_PEER) -> tuple[MemClient, Session]:
    session = Session(broker, peer, lambda: None)
    return MemClient(session), session


def test_guest_logs_in_from_loopback_and_opens_the_default_vhost():
    """The class grammar's open-connection with PLAIN guest/guest from 127.0.0.1, vhost "/"."""
    broker = Broker()
    _client, session = connect(broker)
    assert session.username == "guest"
    assert session.vhost is broker.vhosts["/"]
    assert session.connection.is_open
    assert session in broker.sessions


def test_connection_start_offers_what_the_broker_supports():
    """connection.start server-properties: RabbitMQ's "capabilities" table tells clients which
    extensions they may use (consumer_cancel_notify, publisher_confirms, basic.nack ...)."""
    client, _session = new_session(Broker())
    start = client.start()
    capabilities = start.server_properties["capabilities"]
    assert isinstance(capabilities, dict)
    assert capabilities["consumer_cancel_notify"] is True
    assert capabilities["publisher_confirms"] is True
    assert start.server_properties["product"] == "BatonMQ"
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN"]


def test_amqplain_login_works():
    """connection.start mechanisms: AMQPLAIN (RabbitMQ's field-table response) is offered and works.
    connection.start mechanisms: AMQPLAIN (RabbitMQ's field-table response) is offered and works."""
    client, _session = new_session(Broker())
    client.handshake(mechanism="AMQPLAIN")
    client.open_channel(1)


@pytest.mark.parametrize(("username", "password"), [("guest", "wrong"), ("nobody", "guest")])
def test_a_wrong_password_or_user_is_refused_with_403(username, password):
    """RabbitMQ's authentication_failure_close: connection.close 403 ACCESS_REFUSED naming
    connection.start-ok; the transport closes when the client answers close-ok."""
    broker = Broker()
    client, session = new_session(broker)
    client.start(username, password, capabilities={"authentication_failure_close": True})
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED
    assert (close.class_id, close.method_id) == (10, 11)
    client.expect_nothing()
    assert session.connection.username is None
    assert broker.sessions == set()
    client.send(0, Connection.CloseOk())
    client.expect_nothing()
    assert session.connection.should_close_transport


def test_guest_is_refused_from_a_remote_address():
    """RabbitMQ's loopback_users: guest may log in only from a loopback address."""
    client, _session = new_session(Broker(), ("10.0.0.7", 40000))
    client.start(capabilities={"authentication_failure_close": True})
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED
    assert "localhost" in close.reply_text


@pytest.mark.parametrize("host", ["::1", "::ffff:127.0.0.1", "127.0.0.2"])
def test_guest_is_accepted_from_every_loopback_form(host):
    """IPv6 loopback, and IPv4 loopback as an IPv4-mapped IPv6 address (a dual-stack socket),
    are loopback too."""
    _client, session = connect(Broker(), (host, 40000))
    assert session.username == "guest"


def test_an_unknown_vhost_is_530():
    """RabbitMQ: connection.open of a vhost that does not exist is 530 NOT_ALLOWED, naming
    connection.open (class 10, method 40)."""
    broker = Broker()
    client, _session = new_session(broker)
    client.start()
    tune = client.expect(Connection.Tune)
    client.tune_and_open(tune, vhost="/nope")
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED
    assert (close.class_id, close.method_id) == (10, 40)
    assert "/nope" in close.reply_text
    client.expect_nothing()
    assert broker.sessions == set()


def test_update_secret_is_answered():
    """connection.update-secret (RabbitMQ extension): "This method updates the secret used to
    authenticate this connection"; the server answers update-secret-ok."""
    client, _session = connect(Broker())
    client.send(0, Connection.UpdateSecret(new_secret="token", reason="refresh"))
    client.expect(Connection.UpdateSecretOk, channel=0)


def test_client_close_ends_the_session():
    """Spec 2.3.7: "The receiving peer MUST respond to a Close with a Close-Ok"."""
    broker = Broker()
    client, session = connect(broker)
    client.send(0, Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    client.expect(Connection.CloseOk, channel=0)
    assert session.ended
    assert session.connection.should_close_transport
    assert session.channels == {}
    assert broker.sessions == set()


def test_a_hard_error_from_a_handler_closes_the_connection_naming_the_method():
    """exchange.declare, type, rule "support": "The client MUST NOT attempt to declare an
    exchange with a type that the server does not support" - a connection error, 503."""
    client, session = connect(Broker())
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="nonsense"))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.COMMAND_INVALID
    assert (close.class_id, close.method_id) == (40, 10)
    assert session.ended
    client.send(0, Connection.CloseOk())
    assert session.connection.should_close_transport


def test_a_server_method_sent_by_the_client_is_503():
    """A method only the server sends (here basic.deliver) is not a client method."""
    client, _session = connect(Broker())
    client.send(1, commands.Basic.Deliver("c", 1, False, "", "q"))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.COMMAND_INVALID
    assert (close.class_id, close.method_id) == (60, 60)


def test_session_close_sends_connection_close_and_tears_down():
    """connection.close from the server (320 CONNECTION_FORCED at shutdown): "This method indicates
    that the sender wants to close the connection"; the session releases its channels at once."""
    broker = Broker()
    client, session = connect(broker)
    session.close(HardError(ReplyCode.CONNECTION_FORCED, "broker shutdown"))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.CONNECTION_FORCED
    assert session.ended
    assert broker.sessions == set()


def test_output_is_announced_through_request_flush():
    """The server layer writes only when told there is something to write."""
    calls = []
    session = Session(Broker(), LOOPBACK_PEER, lambda: calls.append(1))
    client = MemClient(session)
    client.send_header()
    assert calls
    calls.clear()
    client.expect(Connection.Start)
    assert calls == []
    session.send_method(0, Connection.Blocked(reason="low memory"))
    assert calls == [1]
