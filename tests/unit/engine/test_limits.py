"""The Overload requirements, "Other limits": "connections per user and per virtual host, channels
per connection, consumers per channel; each refusal names the limit", driven by the in-memory
client.

Each limit refuses at the limit with RabbitMQ's reply code and text plus the configuration key,
allows again once a connection or consumer goes away, and 0 means unlimited. Channels per
connection are amqp.channel_max, negotiated in connection.tune (tests/unit/amqp).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.api import EngineApi
from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.engine.session import Session
from batonmq.security.passwords import Credential
from batonmq.security.permissions import UserPermission
from tests.memclient import LOOPBACK_PEER, MemClient

Basic = commands.Basic
Connection = commands.Connection
Queue = commands.Queue

PASSWORD = "secret"
USERS = ("alice", "bob")


@functools.cache
def user_credential() -> Credential:
    return Credential.from_password(PASSWORD)


def limited_broker(**limits: int) -> Broker:
    """A broker with `limits` (BrokerSettings fields), users guest, alice and bob, and a second
    virtual host "other"."""
    broker = Broker(BrokerSettings(**limits))
    for user in USERS:
        broker.authenticator.users[user] = user_credential()
    broker.add_vhost("other")
    for user in ("guest", *USERS):
        for vhost in broker.vhosts:
            broker.permissions.set(UserPermission.full(user, vhost))
    return broker


def open_session(
    broker: Broker, user: str = "guest", vhost: str = "/"
) -> tuple[MemClient, Session]:
    """Protocol header to connection.open of `vhost` as `user`; the answer is not read yet."""
    session = Session(broker, LOOPBACK_PEER, lambda: None)
    client = MemClient(session)
    client.start(user, "guest" if user == "guest" else PASSWORD)
    tune = client.expect(Connection.Tune, channel=0)
    client.tune_and_open(tune, vhost=vhost)
    return client, session


def login(broker: Broker, user: str = "guest", vhost: str = "/") -> tuple[MemClient, Session]:
    client, session = open_session(broker, user, vhost)
    client.expect(Connection.OpenOk, channel=0)
    return client, session


def refused_open(broker: Broker, user: str = "guest", vhost: str = "/") -> str:
    """connection.open refused: the text of the connection.close 530, which names
    connection.open (class 10, method 40); the session is over and counts for nothing."""
    client, session = open_session(broker, user, vhost)
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED, close.reply_text
    assert (close.class_id, close.method_id) == (10, 40)
    assert session.ended
    assert session not in broker.sessions
    prefix = "NOT_ALLOWED - "
    assert close.reply_text.startswith(prefix)
    return close.reply_text.removeprefix(prefix)


def close_cleanly(client: MemClient) -> None:
    client.send(0, Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    client.expect(Connection.CloseOk, channel=0)


def vhost_limit_text(vhost: str, user: str, limit: int) -> str:
    return (
        f"access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) is "
        "reached (limits.max_connections_per_vhost)"
    )


def user_limit_text(user: str, limit: int) -> str:
    return (
        f"Connection refused for user '{user}': user connection limit ({limit}) is reached "
        "(limits.max_connections_per_user)"
    )


# --- connections per virtual host ----------------------------------------------------------------


def test_connections_per_vhost_are_refused_at_the_limit_with_rabbitmqs_text():
    """RabbitMQ (rabbit_reader, vhost max-connections): connection.open over the limit is
    530 NOT_ALLOWED "access to vhost '~s' refused for user '~s': connection limit (~p) is
    reached"; whoever the users are, and other virtual hosts are not affected."""
    broker = limited_broker(max_connections_per_vhost=2)
    login(broker, "guest")
    login(broker, "alice")

    assert refused_open(broker, "bob") == vhost_limit_text("/", "bob", 2)
    assert broker.connections.by_vhost == {"/": 2}
    login(broker, "bob", vhost="other")


def test_a_vhost_connection_slot_comes_back_when_a_connection_closes_or_is_lost():
    """The Overload requirements: the limit is on open connections: one closed by the client, or
    whose socket went away (the server layer's teardown), makes room for another."""
    broker = limited_broker(max_connections_per_vhost=2)
    first, _ = login(broker)
    _second, second_session = login(broker)
    refused_open(broker)

    close_cleanly(first)
    third, _ = login(broker)
    refused_open(broker)

    second_session.teardown()  # the socket is gone
    login(broker)
    refused_open(broker)
    close_cleanly(third)
    assert broker.connections.by_vhost == {"/": 1}


# --- connections per user ------------------------------------------------------------------------


def test_connections_per_user_are_refused_at_the_limit_with_rabbitmqs_text():
    """RabbitMQ (rabbit_reader, user max-connections): 530 NOT_ALLOWED "Connection refused for
    user '~s': user connection limit (~p) is reached"; across virtual hosts, and other users
    are not affected."""
    broker = limited_broker(max_connections_per_user=2)
    login(broker, "alice")
    login(broker, "alice", vhost="other")

    assert refused_open(broker, "alice") == user_limit_text("alice", 2)
    assert refused_open(broker, "alice", vhost="other") == user_limit_text("alice", 2)
    login(broker, "bob")
    assert broker.connections.by_user == {"alice": 2, "bob": 1}


def test_a_user_connection_slot_comes_back_when_a_connection_ends():
    broker = limited_broker(max_connections_per_user=1)
    client, _ = login(broker, "alice")
    refused_open(broker, "alice")

    close_cleanly(client)

    _client, session = login(broker, "alice")
    session.teardown()
    login(broker, "alice")


def test_the_vhost_limit_is_named_first_when_both_are_reached():
    """RabbitMQ checks the virtual host's limit before the user's."""
    broker = limited_broker(max_connections_per_user=1, max_connections_per_vhost=1)
    login(broker, "alice")

    assert refused_open(broker, "alice") == vhost_limit_text("/", "alice", 1)


def test_a_refused_connection_counts_for_nothing():
    """A connection refused for a limit, an unknown virtual host or a failed login never
    counted, so its end frees nothing (the counters are kept at open and at teardown)."""
    broker = limited_broker(max_connections_per_user=1)
    login(broker, "alice")
    for _ in range(3):
        refused_open(broker, "alice")
    client, session = open_session(broker, "bob", vhost="nope")
    client.expect(Connection.Close, channel=0)
    session.teardown()

    assert broker.connections.by_user == {"alice": 1}
    assert broker.connections.by_vhost == {"/": 1}


class _AnsweredLater:
    """The admission of a worker other than the first: the first worker's answer comes when
    the test gives it (`answer`), counted in `broker.connections` as the first would."""

    def __init__(self, broker: Broker) -> None:
        self._count = broker.connections
        self._waiting: list[Callable[[], None]] = []

    def admit(self, user: str, vhost: str, then: Callable[[str | None], None]) -> None:
        self._waiting.append(lambda: then(self._count.admit(0, user, vhost)))

    def ended(self, user: str, vhost: str) -> None:
        self._count.ended(0, user, vhost)

    def answer(self) -> None:
        self._waiting.pop(0)()


async def test_a_connection_let_in_as_its_vhost_is_being_deleted_is_refused():
    """RabbitMQ deletes a virtual host's connections with it, and one being deleted takes no
    new connection: an admission the first worker answers while the deletion is under way
    (its store write not done yet) refuses the connection and frees its slot."""
    broker = limited_broker(max_connections_per_vhost=5)
    admission = _AnsweredLater(broker)
    broker.admission = admission
    client, session = open_session(broker, "alice", "other")
    journal = broker.journal
    written = journal.durable

    async def slow_durable() -> bool:
        await asyncio.sleep(0.05)
        return await written()

    journal.durable = slow_durable  # type: ignore[method-assign]
    deleting = asyncio.get_running_loop().create_task(EngineApi(broker).delete_vhost("other"))
    await asyncio.sleep(0)
    assert "other" in broker.vhosts_deleting
    admission.answer()
    await deleting
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED
    assert close.reply_text == (
        "NOT_ALLOWED - access to vhost 'other' refused for user 'alice': it is being deleted"
    )
    assert session.vhost_or_none is None
    assert broker.connections.by_vhost == {}


def test_connections_are_unlimited_by_default():
    """0 (the default) is "no limit"; the counters forget users and vhosts with none open."""
    broker = limited_broker()
    clients = [login(broker, "alice")[0] for _ in range(50)]
    assert broker.connections.by_user == {"alice": 50}

    for client in clients:
        close_cleanly(client)

    assert broker.connections.by_user == {}
    assert broker.connections.by_vhost == {}


# --- consumers per channel -----------------------------------------------------------------------


def consumer_refusal(client: MemClient, queue: str = "q", channel: int = 1) -> str:
    """basic.consume refused: the text of the connection.close 530, which names basic.consume
    (class 60, method 20)."""
    client.send(channel, Basic.Consume(queue=queue))
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED, close.reply_text
    assert (close.class_id, close.method_id) == (60, 20)
    return close.reply_text


def consuming_client(broker: Broker, channels: tuple[int, ...] = (1,)) -> MemClient:
    client, _ = login(broker)
    for channel in channels:
        client.open_channel(channel)
    client.declare_queue(channels[0], "q")
    return client


CONSUMER_LIMIT_TEXT = (
    "NOT_ALLOWED - reached maximum (2) of consumers per channel (limits.max_consumers_per_channel)"
)


def test_consumers_per_channel_are_refused_at_the_limit_with_rabbitmqs_text():
    """RabbitMQ's consumer_max_per_channel (rabbit_channel): basic.consume over the limit is
    protocol_error(not_allowed, "reached maximum (~B) of consumers per channel"): 530, which
    closes the connection."""
    broker = limited_broker(max_consumers_per_channel=2)
    client = consuming_client(broker)
    client.consume(1, "q")
    client.consume(1, "q", "second")

    assert consumer_refusal(client) == CONSUMER_LIMIT_TEXT


def test_the_consumer_limit_is_per_channel():
    broker = limited_broker(max_consumers_per_channel=2)
    client = consuming_client(broker, channels=(1, 2))
    for channel in (1, 2):
        client.consume(channel, "q")
        client.consume(channel, "q")

    assert consumer_refusal(client, channel=2) == CONSUMER_LIMIT_TEXT


@pytest.mark.parametrize("how", ["basic.cancel", "queue.delete"])
def test_a_consumer_slot_comes_back_when_a_consumer_goes(how):
    """A cancelled consumer, or one cancelled because its queue was deleted, no longer counts."""
    broker = limited_broker(max_consumers_per_channel=2)
    client = consuming_client(broker)
    client.declare_queue(1, "other")
    tag = client.consume(1, "q")
    client.consume(1, "other")

    if how == "basic.cancel":
        client.call(1, Basic.Cancel(consumer_tag=tag), Basic.CancelOk)
    else:
        client.call(1, Queue.Delete(queue="q"), Queue.DeleteOk)
        client.declare_queue(1, "q")
    client.consume(1, "q")

    assert consumer_refusal(client) == CONSUMER_LIMIT_TEXT


def test_a_reused_tag_at_the_limit_is_still_a_reused_tag():
    """As RabbitMQ: the limit is checked for a new consumer tag; a reused one is refused for
    what it is."""
    broker = limited_broker(max_consumers_per_channel=1)
    client = consuming_client(broker)
    client.consume(1, "q", "tag")

    client.send(1, Basic.Consume(queue="q", consumer_tag="tag"))
    close = client.expect(Connection.Close, channel=0)
    assert "attempt to reuse consumer tag 'tag'" in close.reply_text


def test_consumers_are_unlimited_by_default():
    broker = limited_broker()
    client = consuming_client(broker)
    for _ in range(200):
        client.consume(1, "q")
    client.expect_nothing()
