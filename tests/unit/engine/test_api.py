"""The engine's service API, which management, batonctl and the cluster layer use: snapshots of
what runs (queues, exchanges, connections, channels, consumers, an overview), and changes made
through the same virtual-host methods and the same ACL as AMQP clients' (the foundation
requirements: "a user refused queue deletion over AMQP is refused it" here too)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker
from batonmq.store.sqlite import SQLiteStore
from tests.memclient import connect
from tests.unit.engine.test_access import ADMIN_RULE, acl, broker_with_acl


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
    assert api.purge_queue("guest", "/", "jobs") == 3
    client.publish(1, b"left", routing_key="jobs")
    assert await api.delete_queue("guest", "/", "jobs") == 1
    assert api.queues("/") == []
    with pytest.raises(ApiError) as missing:
        api.purge_queue("guest", "/", "jobs")
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


async def test_a_durable_declare_returns_once_the_store_has_it(tmp_path: Path):
    """State follows the store: the declaration is applied, and the call returns, only after
    its write is committed."""
    store = SQLiteStore(tmp_path / "batonmq.sqlite3", broker_id="b1")
    await store.open()
    await store.recover()
    broker = Broker(store=store)
    broker.journal.start()
    try:
        api = EngineApi(broker)
        declaring = asyncio.ensure_future(api.declare_queue("guest", "/", "kept"))
        await asyncio.sleep(0)  # checked, and its write recorded: the commit is under way
        assert not declaring.done()
        assert api.queues("/") == []  # nothing visible before the commit
        assert (await declaring).durable
        assert (await store.stats()).queues == 1
    finally:
        await broker.journal.stop()
        await store.close()
