"""The engine's service API, which management, batonctl and the cluster layer use: snapshots of
what runs (queues, exchanges, connections, channels, consumers, an overview), and changes made
through the same virtual-host methods and the same ACL as AMQP clients' (the foundation
requirements: "a user refused queue deletion over AMQP is refused it" here too)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.recovery import restore
from batonmq.engine.session import Session
from batonmq.engine.snapshots import BindingInfo
from batonmq.security.permissions import UserPermission
from batonmq.store.sqlite import SQLiteStore
from tests.memclient import LOOPBACK_PEER, MemClient, connect
from tests.unit.engine.test_access import (
    ADMIN_RULE,
    acl,
    broker_with_acl,
    grant_everything,
    login,
)


def test_snapshots_of_what_runs():
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "work")
    client.call(
        1,
        commands.Exchange.Declare(exchange="orders", exchange_type="fanout", durable=True),
        commands.Exchange.DeclareOk,
    )
    client.publish(1, b"one", routing_key="work")
    client.publish(1, b"two", routing_key="work")
    client.qos(1, 10)
    client.consume(1, "work", "c1")
    client.deliveries(1)
    api = EngineApi(broker)

    [queue] = api.queues("/")
    assert (queue.name, queue.type, queue.messages_ready, queue.consumers) == (
        "work",
        "classic",
        0,
        1,
    )
    exchanges = {exchange.name: exchange for exchange in api.exchanges()}
    assert exchanges["orders"].type == "fanout" and exchanges["orders"].durable
    assert "amq.topic" in exchanges
    [connection] = api.connections()
    assert (connection.id, connection.name, connection.user, connection.vhost) == (
        session.id,
        session.name,
        "guest",
        "/",
    )
    assert connection.channels == 1 and connection.recv_oct > 0
    [channel] = api.channels()
    assert (channel.number, channel.messages_unacknowledged, channel.consumers) == (1, 2, 1)
    assert channel.counters.publish == 2 and channel.counters.deliver == 2
    [consumer] = api.consumers()
    assert (consumer.queue, consumer.tag, consumer.ack_required) == ("work", "c1", True)
    overview = api.overview()
    assert (overview.connections, overview.channels, overview.queues, overview.consumers) == (
        1,
        1,
        1,
        1,
    )
    assert overview.message_totals.publish == 2


def test_closing_a_connection_sends_320_with_the_reason():
    """RabbitMQ's management closes a connection with CONNECTION_FORCED and the given reason
    (its reply text: "CONNECTION_FORCED - <reason>")."""
    broker = Broker()
    client, session = connect(broker)
    api = EngineApi(broker)
    api.close_connection(session.id, "maintenance")
    close = client.expect(commands.Connection.Close, 0)
    assert (close.reply_code, close.reply_text) == (320, "CONNECTION_FORCED - maintenance")
    assert api.connections() == []
    with pytest.raises(ApiError) as missing:
        api.close_connection(session.id, "again")
    assert missing.value.reply_code == ReplyCode.NOT_FOUND


async def test_queues_are_declared_purged_and_deleted_as_over_amqp():
    broker = Broker()
    client, _session = connect(broker)
    api = EngineApi(broker)
    declared = await api.declare_queue("guest", "/", "jobs", durable=False)
    assert (declared.name, declared.durable) == ("jobs", False)
    for number in range(3):
        client.publish(1, f"job {number}".encode(), routing_key="jobs")
    assert await api.purge_queue("guest", "/", "jobs") == 3
    client.publish(1, b"left", routing_key="jobs")
    assert await api.delete_queue("guest", "/", "jobs") == 1
    assert api.queues("/") == []
    with pytest.raises(ApiError) as missing:
        await api.purge_queue("guest", "/", "jobs")
    assert missing.value.reply_code == ReplyCode.NOT_FOUND
    with pytest.raises(ApiError) as odd:
        await api.declare_queue("guest", "/", "odd", arguments={"x-queue-type": "nope"})
    assert odd.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert "unsupported queue type" in odd.value.text
    with pytest.raises(ApiError) as no_vhost:
        api.queues("elsewhere")
    assert no_vhost.value.reply_code == ReplyCode.NOT_FOUND


async def test_changes_are_checked_against_the_same_acl_as_amqp(tmp_path: Path):
    broker = broker_with_acl(
        tmp_path, acl(ADMIN_RULE, "ACL DENY bob DELETE QUEUE", "ACL ALLOW bob ALL")
    )
    api = EngineApi(broker)
    await api.declare_queue("bob", "/", "kept", durable=False)
    with pytest.raises(ApiError) as refused:
        await api.delete_queue("bob", "/", "kept")
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
    assert [queue.name for queue in api.queues("/")] == ["kept"]
    assert await api.delete_queue("guest", "/", "kept") == 0


def test_the_log_level_changes_while_the_broker_runs():
    logger = logging.getLogger("batonmq")
    before = logger.level
    try:
        EngineApi.set_log_level("debug")
        assert logger.level == logging.DEBUG
        with pytest.raises(ApiError):
            EngineApi.set_log_level("chatty")
    finally:
        logger.setLevel(before)


@contextlib.asynccontextmanager
async def _stored_broker(directory: Path) -> AsyncIterator[tuple[Broker, SQLiteStore]]:
    """A broker on a real SQLite store, what it holds restored, its journal running."""
    store = SQLiteStore(directory / "batonmq.sqlite3", broker_id="b1")
    await store.open()
    recovery = await store.recover()
    broker = Broker(store=store)
    restore(broker, recovery)
    broker.journal.start()
    try:
        yield broker, store
    finally:
        await broker.journal.stop()
        await store.close()


async def test_a_durable_declare_returns_once_the_store_has_it(tmp_path: Path):
    """State follows the store: the declaration is applied, and the call returns, only after
    its write is committed."""
    async with _stored_broker(tmp_path) as (broker, store):
        api = EngineApi(broker)
        declaring = asyncio.ensure_future(api.declare_queue("guest", "/", "kept"))
        await asyncio.sleep(0)  # checked, and its write recorded: the commit is under way
        assert not declaring.done()
        assert api.queues("/") == []  # nothing visible before the commit
        assert (await declaring).durable
        assert (await store.stats()).queues == 1


def _logs_in(
    broker: Broker, user: str, password: str, peer: tuple[str, int] = LOOPBACK_PEER
) -> MemClient:
    """A client that logs in from `peer` (a failed login slows down that user's next logins
    from the same address)."""
    client = MemClient(Session(broker, peer, lambda: None))
    # A refused login is told with connection.close (RabbitMQ's authentication_failure_close).
    client.start(user, password, capabilities={"authentication_failure_close": True})
    return client


async def test_users_are_added_changed_and_deleted_while_the_broker_runs(tmp_path: Path):
    """The foundation requirements: "users ... changed while the broker runs (today they need
    the broker stopped)". A new user logs in at once; a new password is the one checked at the
    next login; a deleted user's connections are closed, as RabbitMQ closes them, and it can no
    longer log in. Each change is in the store before it is in force."""
    async with _stored_broker(tmp_path) as (broker, store):
        api = EngineApi(broker)
        await api.put_user("carol", "first secret")
        assert "carol" in api.users()
        assert "carol" in {user.name for user in await store.users()}
        carol = _logs_in(broker, "carol", "first secret")
        carol.expect(commands.Connection.Tune, 0)

        await api.put_user("carol", "second secret")
        stale = _logs_in(broker, "carol", "first secret", ("127.0.0.9", 5001))
        stale.expect(commands.Connection.Close, 0)
        _logs_in(broker, "carol", "second secret").expect(commands.Connection.Tune, 0)

        await api.delete_user("carol")
        close = carol.expect(commands.Connection.Close, 0)
        assert close.reply_code == ReplyCode.CONNECTION_FORCED
        assert "carol" not in {user.name for user in await store.users()}
        gone = _logs_in(broker, "carol", "second secret", ("127.0.0.10", 5001))
        gone.expect(commands.Connection.Close, 0)
        with pytest.raises(ApiError) as missing:
            await api.delete_user("carol")
        assert missing.value.reply_code == ReplyCode.NOT_FOUND


async def test_a_virtual_host_added_at_runtime_takes_connections():
    """RabbitMQ's management gives the user who creates a virtual host full permissions in it."""
    broker = Broker()
    api = EngineApi(broker)
    await api.add_vhost("orders", creator="guest")
    assert api.vhosts() == ["/", "orders"]
    assert api.permission("guest", "orders") == UserPermission.full("guest", "orders")
    client = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
    client.handshake(vhost="orders")
    client.open_channel(1)
    client.declare_queue(1, "placed")
    assert [queue.name for queue in api.queues("orders")] == ["placed"]


def test_a_permission_changed_while_a_client_is_connected_is_in_force_at_its_next_check(
    tmp_path: Path,
):
    """The foundation requirements: permission changes "work through the API while clients
    are connected, and take effect on the next access check"."""
    broker = broker_with_acl(tmp_path, acl(ADMIN_RULE, "ACL ALLOW bob ALL"))
    bob = login(broker)
    bob.declare_queue(1, "allowed")
    (tmp_path / "broker.acl").write_text(
        acl(ADMIN_RULE, "ACL DENY bob CREATE QUEUE", "ACL ALLOW bob ALL")
    )
    EngineApi(broker).reload_acl()
    bob.send(1, commands.Queue.Declare(queue="refused"))
    close = bob.expect(commands.Channel.Close, 1)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED
    (tmp_path / "broker.acl").write_text("this is not an ACL\n")
    with pytest.raises(ApiError) as broken:
        EngineApi(broker).reload_acl()
    assert broken.value.reply_code == ReplyCode.PRECONDITION_FAILED


async def test_exchanges_are_declared_and_deleted_as_over_amqp_and_bindings_listed():
    """exchange.declare and exchange.delete through the virtual host's own checks; the
    bindings list holds the default exchange's implicit binding to every queue (AMQP 0-9-1:
    "every queue is automatically bound to it with a routing key equal to the queue name")."""
    broker = Broker()
    client, _session = connect(broker)
    api = EngineApi(broker)
    declared = await api.declare_exchange("guest", "/", "orders", "topic", durable=False)
    assert (declared.name, declared.type, declared.durable) == ("orders", "topic", False)
    client.declare_queue(1, "eu")
    client.call(
        1,
        commands.Queue.Bind(queue="eu", exchange="orders", routing_key="eu.#"),
        commands.Queue.BindOk,
    )
    assert [
        (binding.source, binding.destination, binding.destination_type, binding.routing_key)
        for binding in api.bindings("/")
    ] == [("", "eu", "queue", "eu"), ("orders", "eu", "queue", "eu.#")]

    with pytest.raises(ApiError) as unknown_type:
        await api.declare_exchange("guest", "/", "odd", "nope")
    assert unknown_type.value.reply_code == ReplyCode.COMMAND_INVALID
    with pytest.raises(ApiError) as in_use:
        await api.delete_exchange("guest", "/", "orders", if_unused=True)
    assert in_use.value.reply_code == ReplyCode.PRECONDITION_FAILED
    await api.delete_exchange("guest", "/", "orders")
    assert "orders" not in {exchange.name for exchange in api.exchanges("/")}
    with pytest.raises(ApiError) as missing:
        await api.delete_exchange("guest", "/", "orders")
    assert missing.value.reply_code == ReplyCode.NOT_FOUND


async def test_exchange_changes_are_checked_against_the_same_acl_as_amqp(tmp_path: Path):
    broker = broker_with_acl(
        tmp_path,
        acl(ADMIN_RULE, "ACL DENY bob CREATE EXCHANGE type=fanout", "ACL ALLOW bob ALL"),
    )
    api = EngineApi(broker)
    await api.declare_exchange("bob", "/", "topics", "topic")
    with pytest.raises(ApiError) as refused:
        await api.declare_exchange("bob", "/", "fans", "fanout")
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
    assert "fans" not in {exchange.name for exchange in api.exchanges("/")}


async def test_queues_count_their_unacknowledged_deliveries():
    broker = Broker()
    client, _session = connect(broker)
    client.declare_queue(1, "work")
    for number in range(3):
        client.publish(1, f"job {number}".encode(), routing_key="work")
    client.qos(1, 2)
    client.consume(1, "work", "c1")
    client.deliveries(1)
    queue = EngineApi(broker).queue("/", "work")
    assert (queue.messages_ready, queue.messages_unacknowledged) == (1, 2)


async def test_users_have_tags_and_log_in_as_over_amqp(tmp_path: Path):
    """RabbitMQ's user tags are kept with the user; a login is checked as an AMQP PLAIN login
    (a wrong password is refused, and so is guest from another host)."""
    async with _stored_broker(tmp_path) as (broker, store):
        api = EngineApi(broker)
        assert api.user("guest").tags == ("administrator",)
        await api.put_user("dave", "secret", ["monitoring"])
        assert api.user("dave").tags == ("monitoring",)
        await api.put_user("dave", None, ["management"])  # new tags, the same password
        assert [user.tags for user in await store.users() if user.name == "dave"] == [
            ("management",)
        ]
        assert await api.login("dave", "secret", "127.0.0.1") == api.user("dave")
        with pytest.raises(ApiError) as wrong:
            await api.login("dave", "wrong", "127.0.0.1")
        assert wrong.value.reply_code == ReplyCode.ACCESS_REFUSED
        with pytest.raises(ApiError) as remote_guest:
            await api.login("guest", "guest", "192.0.2.1")
        assert remote_guest.value.reply_code == ReplyCode.ACCESS_REFUSED
        with pytest.raises(ApiError) as no_password:
            await api.put_user("erin", None)
        assert no_password.value.reply_code == ReplyCode.PRECONDITION_FAILED
        await api.delete_user("dave")
        with pytest.raises(ApiError) as gone:
            api.user("dave")
        assert gone.value.reply_code == ReplyCode.NOT_FOUND


def test_the_virtual_hosts_a_user_may_open_follow_the_acl(tmp_path: Path):
    broker = broker_with_acl(
        tmp_path,
        acl(ADMIN_RULE, "ACL DENY bob ACCESS VIRTUALHOST name=hidden", "ACL ALLOW bob ALL"),
    )
    broker.add_vhost("hidden")
    grant_everything(broker)
    api = EngineApi(broker)
    assert api.permitted_vhosts("bob") == ["/"]
    assert api.permitted_vhosts("guest") == ["/", "hidden"]


async def test_bindings_are_made_and_removed_as_over_amqp(tmp_path: Path):
    """queue.bind / exchange.bind and their unbinds, checked with BIND and UNBIND EXCHANGE
    (Qpid manual Table 2.3) as over AMQP."""
    broker = broker_with_acl(
        tmp_path,
        acl(ADMIN_RULE, "ACL DENY bob BIND EXCHANGE routingkey=secret", "ACL ALLOW bob ALL"),
    )
    api = EngineApi(broker)
    await api.declare_exchange("bob", "/", "orders", "topic", durable=False)
    await api.declare_exchange("bob", "/", "audit", "fanout", durable=False)
    await api.declare_queue("bob", "/", "eu", durable=False)
    to_queue = BindingInfo("/", "orders", "eu", "queue", "eu.#", {})
    to_exchange = BindingInfo("/", "orders", "audit", "exchange", "#", {})
    await api.bind("bob", to_queue)
    await api.bind("bob", to_exchange)
    assert [binding for binding in api.bindings("/") if binding.source] == [
        to_queue,
        to_exchange,
    ]
    with pytest.raises(ApiError) as refused:
        await api.bind("bob", BindingInfo("/", "orders", "eu", "queue", "secret", {}))
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
    with pytest.raises(ApiError) as no_queue:
        await api.bind("bob", BindingInfo("/", "orders", "nowhere", "queue", "k", {}))
    assert no_queue.value.reply_code == ReplyCode.NOT_FOUND
    await api.unbind("bob", to_queue)
    await api.unbind("bob", to_exchange)
    assert [binding for binding in api.bindings("/") if binding.source] == []


async def test_a_virtual_host_is_deleted_with_everything_in_it_while_the_broker_runs(
    tmp_path: Path,
):
    """RabbitMQ's virtual host deletion: its connections are closed (320), its queues,
    messages and exchanges go, and the store holds nothing of it afterwards; a new connection
    to it is refused."""
    async with _stored_broker(tmp_path) as (broker, store):
        api = EngineApi(broker)
        await api.add_vhost("orders", creator="guest")
        assert [p.user for p in await store.permissions() if p.vhost == "orders"] == ["guest"]
        await api.declare_queue("guest", "orders", "placed")
        await api.declare_exchange("guest", "orders", "events", "fanout")
        client = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
        client.handshake(vhost="orders")
        client.open_channel(1)
        client.publish(
            1,
            b"order 1",
            routing_key="placed",
            properties=commands.Basic.Properties(delivery_mode=2),
        )
        await asyncio.sleep(0.1)  # the publish is written
        assert (await store.stats()).messages == 1

        await api.delete_vhost("orders")

        close = client.expect(commands.Connection.Close, 0)
        assert (close.reply_code, close.reply_text) == (
            320,
            "CONNECTION_FORCED - vhost 'orders' is deleted",
        )
        assert api.vhosts() == ["/"]
        recovery = await store.recover()
        assert "orders" not in recovery.vhosts
        assert [queue.vhost for queue in recovery.queues] == []
        assert [exchange.vhost for exchange in recovery.exchanges] == []
        assert [p.vhost for p in recovery.permissions] == ["/"]
        assert api.permissions(vhost="orders") == []
        assert (await store.stats()).messages == 0
        late = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
        late.start("guest", "guest")
        late.tune_and_open(late.expect(commands.Connection.Tune, 0), vhost="orders")
        refused = late.expect(commands.Connection.Close, 0)
        assert refused.reply_code in (ReplyCode.NOT_ALLOWED, ReplyCode.ACCESS_REFUSED)
        with pytest.raises(ApiError) as missing:
            await api.delete_vhost("orders")
        assert missing.value.reply_code == ReplyCode.NOT_FOUND
