"""Messages through the engine's service API: taken as basic.get takes them (RabbitMQ
management's "Get messages" and its ackmodes), published as basic.publish publishes them, and
browsed, copied, moved, removed and held back (the Qpid broker manual's management console;
imqcmd pause dst), with the same ACL checks as over AMQP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.messages import AckMode
from batonmq.stats import Scope
from tests.memclient import connect
from tests.unit.engine.test_access import ADMIN_RULE, acl, broker_with_acl
from tests.unit.engine.test_api import _stored_broker


def broker_with(queue: str, *bodies: str, **arguments: object) -> tuple[Broker, EngineApi]:
    broker = Broker()
    client, _session = connect(broker)
    client.call(
        1, commands.Queue.Declare(queue=queue, arguments=arguments), commands.Queue.DeclareOk
    )
    for body in bodies:
        client.publish(1, body.encode(), routing_key=queue)
    return broker, EngineApi(broker)


def bodies(api: EngineApi, queue: str) -> list[tuple[str, bool]]:
    return [
        (seen.message.body.decode(), seen.message.redelivered)
        for seen in api.browse("guest", "/", queue)
    ]


@pytest.mark.parametrize("mode", [AckMode.ACK_REQUEUE_TRUE, AckMode.REJECT_REQUEUE_TRUE])
async def test_a_requeueing_get_puts_the_messages_back_in_place_redelivered(mode: AckMode):
    """RabbitMQ's management takes them all before it requeues any, "because we get always the
    same message if the messages are requeued"."""
    _broker, api = broker_with("q", "a", "b", "c")
    taken = await api.get_messages("guest", "/", "q", 2, mode)
    assert [(got.message.body, got.message_count) for got in taken] == [(b"a", 2), (b"b", 1)]
    assert bodies(api, "q") == [("a", True), ("b", True), ("c", False)]


async def test_ack_requeue_false_takes_them_and_reject_requeue_false_dead_letters():
    broker, api = broker_with(
        "q", "a", "b", "c", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    )
    await api.declare_queue("guest", "/", "dlq", durable=False)
    taken = await api.get_messages("guest", "/", "q", 1, AckMode.ACK_REQUEUE_FALSE)
    assert [got.message.body for got in taken] == [b"a"]
    await api.get_messages("guest", "/", "q", 1, AckMode.REJECT_REQUEUE_FALSE)
    assert bodies(api, "q") == [("c", False)]
    assert [body for body, _ in bodies(api, "dlq")] == ["b"]
    assert [
        got.message.body
        for got in await api.get_messages("guest", "/", "q", 5, AckMode.ACK_REQUEUE_FALSE)
    ] == [b"c"]
    assert broker.vhosts["/"].queues["q"].message_count == 0


async def test_publish_routes_through_the_exchange_and_says_whether_it_was_routed():
    _broker, api = broker_with("q")
    properties = commands.Basic.Properties(content_type="text/plain", delivery_mode=2)
    assert await api.publish("guest", "/", "", "q", properties, b"hello")
    assert not await api.publish("guest", "/", "amq.direct", "nowhere", properties, b"lost")
    [seen] = api.browse("guest", "/", "q")
    assert (seen.message.body, seen.message.properties.content_type) == (b"hello", "text/plain")
    with pytest.raises(ApiError) as missing:
        await api.publish("guest", "/", "no-such", "q", properties, b"x")
    assert missing.value.reply_code == ReplyCode.NOT_FOUND
    with pytest.raises(ApiError) as claimed:
        await api.publish("guest", "/", "", "q", commands.Basic.Properties(user_id="eve"), b"x")
    assert claimed.value.reply_code == ReplyCode.PRECONDITION_FAILED


async def test_a_full_queue_refusing_a_publish_is_a_precondition_failure():
    """RabbitMQ's management answers a nacked publish "Unable to publish message. Check queue
    limits."."""
    _broker, api = broker_with("q", "a", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    with pytest.raises(ApiError) as refused:
        await api.publish("guest", "/", "", "q", commands.Basic.Properties(), b"b")
    assert refused.value.text.endswith("Unable to publish message. Check queue limits.")


async def test_copy_move_and_remove_report_the_ids_not_in_the_queue():
    _broker, api = broker_with("source", "a", "b", "c", "d")
    await api.declare_queue("guest", "/", "target", durable=False)
    ids = {
        seen.message.body.decode(): seen.message.message_id
        for seen in api.browse("guest", "/", "source")
    }
    copied = await api.copy_messages("guest", "/", "source", "target", [ids["c"], ids["a"], 0])
    assert (copied.done, copied.missing) == ((ids["a"], ids["c"]), (0,))
    moved = await api.move_messages("guest", "/", "source", "target", [ids["b"]])
    assert (moved.done, moved.missing) == ((ids["b"],), ())
    removed = await api.remove_messages("guest", "/", "source", [ids["d"], ids["b"]])
    assert (removed.done, removed.missing) == ((ids["d"],), (ids["b"],))
    assert [body for body, _ in bodies(api, "source")] == ["a", "c"]
    assert [body for body, _ in bodies(api, "target")] == ["a", "c", "b"]
    with pytest.raises(ApiError) as missing:
        await api.move_messages("guest", "/", "source", "nowhere", [ids["a"]])
    assert missing.value.reply_code == ReplyCode.NOT_FOUND


@pytest.mark.parametrize("how", ["move", "copy"])
async def test_moving_or_copying_messages_to_their_own_queue_is_refused(how: str):
    """Moving messages loses none (at worst they are in both queues, never in neither): one
    moved to the queue it is in would be copied as a second entry of the same message, then
    both removed. The Qpid broker manual's console moves and copies messages to another queue;
    to the same one is refused (406, a 400 over HTTP) and changes nothing."""
    _broker, api = broker_with("q", "a", "b")
    ids = [seen.message.message_id for seen in api.browse("guest", "/", "q")]
    carry = api.move_messages if how == "move" else api.copy_messages
    with pytest.raises(ApiError) as refused:
        await carry("guest", "/", "q", "q", [ids[0]])
    assert refused.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert refused.value.text.endswith("queue 'q' holds the messages already")
    assert bodies(api, "q") == [("a", False), ("b", False)]


@pytest.mark.parametrize("kind", ["exchange", "queue"])
async def test_names_an_amqp_short_string_cannot_hold_are_refused(kind: str):
    """AMQP 0-9-1 §4.2.5.3: exchange and queue names are short strings, at most 255 octets of
    UTF-8. One declared another way (the management API, definitions) must fit too: basic.deliver
    carries the exchange's name, so a message through a longer one could never be delivered."""
    _broker, api = broker_with("q")

    async def declare(name: str) -> None:
        if kind == "exchange":
            await api.declare_exchange("guest", "/", name, "fanout")
        else:
            await api.declare_queue("guest", "/", name)

    def declared() -> set[str]:
        infos = api.exchanges("/") if kind == "exchange" else api.queues("/")
        return {info.name for info in infos}

    for name in ("x" * 256, "é" * 128, "\ud800"):
        with pytest.raises(ApiError) as refused:
            await declare(name)
        assert refused.value.reply_code == ReplyCode.PRECONDITION_FAILED
        assert refused.value.text.endswith(
            "must be at most 255 octets of UTF-8 (an AMQP short string)"
        )
    assert not {name for name in declared() if len(name) > 200}  # none of them was made
    await declare("x" * 255)
    assert "x" * 255 in declared()


async def test_a_copy_to_a_stream_returns_once_the_stream_has_written_it():
    """Copied as a confirmed publish would be (RabbitMQ, "Publisher Confirms": a message is
    confirmed once it is persisted; a stream writes its log itself): the call returns once the
    stream's log holds the copies, not when they were merely handed to it."""
    broker, api = broker_with("source", "a", "b")
    await api.declare_queue("guest", "/", "log", arguments={"x-queue-type": "stream"})
    ids = [seen.message.message_id for seen in api.browse("guest", "/", "source")]
    try:
        copied = await api.copy_messages("guest", "/", "source", "log", ids)
        assert (copied.done, copied.missing) == (tuple(ids), ())
        assert broker.vhosts["/"].queues["log"].message_count == 2
    finally:
        await asyncio.to_thread(broker.streams.close)


def test_a_paused_queue_delivers_to_no_consumer_until_resumed():
    """imqcmd pause dst: delivery to consumers stops, the queue still takes messages;
    resume dst: what waited goes out."""
    broker = Broker()
    client, _session = connect(broker)
    client.declare_queue(1, "q")
    api = EngineApi(broker)
    api.pause_queue("guest", "/", "q", paused=True)
    client.consume(1, "q", "c1")
    client.publish(1, b"held", routing_key="q")
    assert client.deliveries(1) == []
    assert api.queue("/", "q").messages_ready == 1
    api.pause_queue("guest", "/", "q", paused=False)
    assert [delivery.body for delivery in client.deliveries(1)] == [b"held"]


async def test_message_operations_are_checked_against_the_same_acl_as_amqp(tmp_path: Path):
    """basic.get needs CONSUME QUEUE, basic.publish PUBLISH EXCHANGE, queue.purge PURGE QUEUE
    (Qpid manual Table 2.3); browsing, moving and pausing need what consuming needs."""
    broker = broker_with_acl(
        tmp_path,
        acl(
            ADMIN_RULE,
            "ACL DENY bob CONSUME QUEUE",
            "ACL DENY bob PUBLISH EXCHANGE",
            "ACL DENY bob PURGE QUEUE",
            "ACL ALLOW bob ALL",
        ),
    )
    api = EngineApi(broker)
    await api.declare_queue("guest", "/", "q", durable=False)
    refused = [
        api.get_messages("bob", "/", "q", 1, AckMode.ACK_REQUEUE_FALSE),
        api.publish("bob", "/", "", "q", commands.Basic.Properties(), b""),
        api.remove_messages("bob", "/", "q", [1]),
        api.move_messages("bob", "/", "q", "q", [1]),
    ]
    for attempt in refused:
        with pytest.raises(ApiError) as error:
            await attempt
        assert error.value.reply_code == ReplyCode.ACCESS_REFUSED
    with pytest.raises(ApiError):
        api.browse("bob", "/", "q")
    with pytest.raises(ApiError):
        api.pause_queue("bob", "/", "q", paused=True)


def test_statistics_read_every_scope_with_labels():
    """Every statistic of the registry, per subject: the broker's totals, each connection's,
    channel's and queue's, labelled by name."""
    broker, api = broker_with("q", "a")
    readings = {reading.scope: reading for reading in api.statistics()}
    assert readings[Scope.BROKER].labels == {}
    assert readings[Scope.BROKER].values["connections"] == 1
    assert readings[Scope.QUEUE].labels == {"vhost": "/", "queue": "q"}
    assert readings[Scope.QUEUE].values["messages_ready"] == 1
    assert readings[Scope.CHANNEL].values["publish"] == 1
    [session] = broker.sessions
    assert readings[Scope.CONNECTION].labels == {"connection": session.name}


async def test_taken_and_published_messages_are_committed_before_the_call_returns(tmp_path: Path):
    """State follows the store: a get with ack_requeue_false returns once the removal is
    committed (as the reply to a basic.ack on a transaction would), a persistent publish once
    the message is (as a publisher confirm)."""
    async with _stored_broker(tmp_path) as (_broker, store):
        api = EngineApi(_broker)
        await api.declare_queue("guest", "/", "kept")
        persistent = commands.Basic.Properties(delivery_mode=2)
        for body in (b"one", b"two"):
            assert await api.publish("guest", "/", "", "kept", persistent, body)
        assert (await store.stats()).messages == 2
        await api.get_messages("guest", "/", "kept", 1, AckMode.ACK_REQUEUE_FALSE)
        assert (await store.stats()).messages == 1
        moved_to = await api.declare_queue("guest", "/", "other")
        [left] = api.browse("guest", "/", "kept")
        await api.move_messages("guest", "/", "kept", moved_to.name, [left.message.message_id])
        assert (await store.stats()).messages == 1  # one message, now held by the other queue
        assert [body for body, _ in bodies(api, "other")] == ["two"]
