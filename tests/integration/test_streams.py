"""Stream queues (`x-queue-type: stream`) with a real broker, as RabbitMQ's streams over AMQP
0-9-1 behave ("Streams" guide, "Using Streams with AMQP 0-9-1"; rabbit_stream_queue.erl): an
append-only log read by offset, each consumer from its own position, nothing removed by
consuming. The rules the stream-queues issue names (offset specs, filters, the refusals,
SIGKILL recovery) run with pika, aio-pika and kombu (tests/streamclients.py); the rest with
pika."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import aio_pika
import asyncpg
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from batonmq.queues.streams.files import MARKED_SUFFIX, FileMedium
from batonmq.queues.streams.log import StreamLog
from tests.brokerproc import BrokerLife, RunningBroker, start_broker
from tests.httpapi import call
from tests.streamclients import (
    CLIENTS,
    STREAM,
    PikaClient,
    Refused,
    StreamClient,
    plain,
    stream_client,
)

pytestmark = pytest.mark.integration


def connect(broker: RunningBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def declare_stream(channel: BlockingChannel, name: str, **arguments: object) -> None:
    channel.queue_declare(name, durable=True, arguments={**STREAM, **arguments})


def bodies(count: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{number}".encode() for number in range(count)]


@pytest.fixture(params=CLIENTS)
def client_name(request: pytest.FixtureRequest) -> str:
    """Each stream rule below holds for every client the stream-queues issue names."""
    name: str = request.param
    return name


@pytest.fixture
def client(batonmq: RunningBroker, client_name: str) -> StreamClient:
    return stream_client(client_name, batonmq)


def test_publish_with_confirms_then_consume_from_first_with_offsets(client: StreamClient):
    """RabbitMQ: "x-stream-offset ... first - start from the first available message"; every
    delivery carries its offset in the x-stream-offset header; an ack removes nothing (a second
    consumer from first reads the same messages)."""
    client.declare("events")
    client.publish("events", plain(bodies(5)))
    first = client.consume("events", 5, {"x-stream-offset": "first"})
    again = client.consume("events", 5, {"x-stream-offset": "first"})
    assert first == [(number, f"m{number}".encode()) for number in range(5)]
    assert again == first
    assert client.message_count("events") == 5


def test_a_delivery_carries_when_the_stream_appended_it(batonmq: RunningBroker):
    """RabbitMQ's streams give every chunk a timestamp of when it was written (what an
    x-stream-offset timestamp seeks by) but deliver only x-stream-offset over AMQP 0-9-1;
    BatonMQ also delivers that moment, in milliseconds, as x-batonmq-stream-timestamp (README,
    "Stream queues"), in place of any the publisher set, and leaves the publisher's timestamp
    property as it was published."""
    with connect(batonmq) as connection:
        channel = connection.channel()
        declare_stream(channel, "stamped")
        channel.confirm_delivery()
        before = time.time_ns() // 1_000_000
        channel.basic_publish(
            "",
            "stamped",
            b"old",
            pika.BasicProperties(
                timestamp=1_700_000_000, headers={"x-batonmq-stream-timestamp": 7, "n": 1}
            ),
        )
        after = time.time_ns() // 1_000_000
        channel.basic_qos(prefetch_count=1)
        method, properties, _body = next(
            channel.consume(
                "stamped", arguments={"x-stream-offset": "first"}, inactivity_timeout=10
            )
        )
        assert method is not None
        channel.cancel()
    assert before <= properties.headers["x-batonmq-stream-timestamp"] <= after
    assert properties.headers["n"] == 1
    assert properties.timestamp == 1_700_000_000


def test_consume_from_an_offset_next_last_and_a_timestamp(client: StreamClient):
    """RabbitMQ's x-stream-offset values: an offset; "next" (the default: only what is published
    after the consumer attached); "last" (the start of the last chunk); a timestamp (from the
    chunk written at or after it)."""
    client.declare("offsets")
    client.publish("offsets", plain(bodies(4, "a")))
    time.sleep(1.1)  # a timestamp is in seconds
    since = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    time.sleep(0.1)
    client.publish("offsets", plain([b"b0"]))
    assert client.consume("offsets", 3, {"x-stream-offset": 2}) == [
        (2, b"a2"),
        (3, b"a3"),
        (4, b"b0"),
    ]
    assert client.consume("offsets", 1, {"x-stream-offset": "last"}) == [(4, b"b0")]
    assert client.consume("offsets", 1, {"x-stream-offset": since}) == [(4, b"b0")]
    # "next", as no x-stream-offset: the first delivery is the one published once attached.
    tail = client.consume("offsets", 1, then=lambda: client.publish("offsets", plain([b"c0"])))
    assert tail == [(5, b"c0")]


def test_two_consumers_at_different_offsets_each_keep_their_own_position(
    batonmq: RunningBroker,
):
    """RabbitMQ: reading a stream is non-destructive; each consumer has its own offset."""
    with connect(batonmq) as connection:
        one, two = connection.channel(), connection.channel()
        declare_stream(one, "shared")
        PikaClient(batonmq).publish("shared", plain(bodies(6)))
        one.basic_qos(prefetch_count=2)
        two.basic_qos(prefetch_count=2)
        seen: dict[str, list[int]] = {"one": [], "two": []}

        def taker(name: str, channel: BlockingChannel):
            def take(ch, method, properties, body) -> None:
                seen[name].append(properties.headers["x-stream-offset"])
                channel.basic_ack(method.delivery_tag)

            return take

        one.basic_consume("shared", taker("one", one), arguments={"x-stream-offset": 0})
        two.basic_consume("shared", taker("two", two), arguments={"x-stream-offset": 4})
        deadline = time.monotonic() + 10
        while (len(seen["one"]) < 6 or len(seen["two"]) < 2) and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
    assert seen == {"one": [0, 1, 2, 3, 4, 5], "two": [4, 5]}


def test_prefetch_is_the_credit_and_acks_return_it(batonmq: RunningBroker):
    """RabbitMQ: a stream consumer gets at most its prefetch of unacknowledged messages; an
    ack only returns credit."""
    with connect(batonmq) as connection:
        channel = connection.channel()
        declare_stream(channel, "credit")
        PikaClient(batonmq).publish("credit", plain(bodies(10)))
        channel.basic_qos(prefetch_count=3)
        tags: list[int] = []
        channel.basic_consume(
            "credit",
            lambda ch, method, properties, body: tags.append(method.delivery_tag),
            arguments={"x-stream-offset": "first"},
        )
        connection.process_data_events(time_limit=1.0)
        assert len(tags) == 3
        channel.basic_ack(tags[-1], multiple=True)
        connection.process_data_events(time_limit=1.0)
        assert len(tags) == 6


@pytest.mark.parametrize(
    ("durable", "exclusive", "refused"),
    [(False, False, "non-durable"), (True, True, "exclusive-owner")],
)
def test_a_stream_is_durable_and_not_exclusive(
    client: StreamClient, durable: bool, exclusive: bool, refused: str
):
    """RabbitMQ (rabbit_queue_type_util): 406 "invalid property 'non-durable' for queue ..."
    (and 'exclusive-owner')."""
    with pytest.raises(Refused) as closed:
        client.declare("s", durable=durable, exclusive=exclusive)
    assert closed.value.code == 406
    assert f"invalid property '{refused}' for queue 's' in vhost '/'" in closed.value.text


def test_a_stream_is_not_auto_delete(batonmq: RunningBroker):
    """RabbitMQ (rabbit_queue_type_util): 406 "invalid property 'auto-delete' for queue ..."."""
    with connect(batonmq) as connection:
        channel = connection.channel()
        with pytest.raises(ChannelClosedByBroker) as closed:
            channel.queue_declare("s", durable=True, auto_delete=True, arguments=STREAM)
    assert closed.value.reply_code == 406
    assert "invalid property 'auto-delete' for queue 's' in vhost '/'" in closed.value.reply_text


@pytest.mark.parametrize(
    "argument",
    [
        {"x-max-length": 10},
        {"x-message-ttl": 1000},
        {"x-dead-letter-exchange": "dlx"},
        {"x-overflow": "reject-publish"},
        {"x-max-priority": 5},
        {"x-single-active-consumer": True},
        {"x-max-age": "7 days"},
        {"x-stream-max-segment-size-bytes": 3_000_000_001},
    ],
)
def test_arguments_a_stream_does_not_take_are_refused(batonmq: RunningBroker, argument):
    """RabbitMQ (rabbit_amqqueue:check_arguments_key): "invalid arg 'x-max-length' for queue
    ... of queue type stream", 406; a bad x-max-age or too large a segment size is refused too
    ("Exceeded max value for x-stream-max-segment-size-bytes")."""
    with connect(batonmq) as connection:
        channel = connection.channel()
        with pytest.raises(ChannelClosedByBroker) as closed:
            declare_stream(channel, "s", **argument)
    assert closed.value.reply_code == 406
    assert f"invalid arg '{next(iter(argument))}'" in closed.value.reply_text


def test_the_arguments_a_stream_takes_are_accepted(batonmq: RunningBroker):
    with connect(batonmq) as connection:
        channel = connection.channel()
        declare_stream(
            channel,
            "s",
            **{
                "x-max-age": "7D",
                "x-max-length-bytes": 10_000_000,
                "x-stream-max-segment-size-bytes": 1_000_000,
            },
        )


def test_a_consumer_needs_a_prefetch(client: StreamClient):
    """rabbit_stream_queue:consume: 406 "consumer prefetch count is not set for stream ..."."""
    client.declare("s")
    with pytest.raises(Refused) as closed:
        client.consume("s", 1, prefetch=None)
    assert closed.value.code == 406
    assert "consumer prefetch count is not set for stream queue 's' in vhost '/'" in (
        closed.value.text
    )


def _refused_with_540(client: StreamClient, refused_call: Callable[[], object]) -> str:
    client.declare("s")
    with pytest.raises(Refused) as closed:
        refused_call()
    assert closed.value.code == 540
    return closed.value.text


def test_automatic_acknowledgement_is_refused(client: StreamClient):
    """rabbit_stream_queue:consume: 540 "automatic acknowledgement not supported by stream
    ..."."""
    text = _refused_with_540(client, lambda: client.consume("s", 1, no_ack=True))
    assert "automatic acknowledgement not supported by stream queue 's' in vhost '/'" in text


def test_basic_get_is_refused(client: StreamClient):
    """rabbit_stream_queue:dequeue: 540 "basic.get not supported by stream queues ..."."""
    text = _refused_with_540(client, lambda: client.get("s"))
    assert "basic.get not supported by stream queues queue 's' in vhost '/'" in text


def test_global_qos_is_refused(client: StreamClient):
    """rabbit_stream_queue:consume: 540 "... does not support global qos"."""
    text = _refused_with_540(client, lambda: client.consume("s", 1, global_qos=True))
    assert "queue 's' in vhost '/' does not support global qos" in text


def test_purge_is_refused(batonmq: RunningBroker):
    """rabbit_channel (queue.purge): 540 "queue.purge not supported by stream queues ..."."""
    with connect(batonmq) as connection:
        channel = connection.channel()
        declare_stream(channel, "s")
        with pytest.raises(ConnectionClosedByBroker) as closed:
            channel.queue_purge("s")
    assert closed.value.reply_code == 540
    assert "queue.purge not supported by stream queues queue 's' in vhost '/'" in (
        closed.value.reply_text
    )


def test_filters_deliver_only_matching_values(client: StreamClient):
    """RabbitMQ stream filtering: a message's x-stream-filter-value header is its filter value;
    a consumer with x-stream-filter gets the messages with one of its values, and with
    x-stream-match-unfiltered also those without a value."""
    client.declare("filtered")
    client.publish(
        "filtered",
        [
            (body, None if value is None else {"x-stream-filter-value": value})
            for body, value in [(b"r1", "red"), (b"b1", "blue"), (b"n1", None), (b"r2", "red")]
        ],
    )
    red = client.consume("filtered", 2, {"x-stream-offset": "first", "x-stream-filter": "red"})
    both = client.consume(
        "filtered",
        3,
        {"x-stream-offset": "first", "x-stream-filter": ["red"], "x-stream-match-unfiltered": True},
    )
    assert red == [(0, b"r1"), (3, b"r2")]
    assert both == [(0, b"r1"), (2, b"n1"), (3, b"r2")]


def test_retention_by_size_removes_whole_old_segments(broker_life: BrokerLife):
    """RabbitMQ: x-max-length-bytes retention removes whole segments (segment size from
    x-stream-max-segment-size-bytes), oldest first; consumers from "first" start at what is
    left. On each store: segment files beside SQLite, the store's tables in PostgreSQL."""
    client = PikaClient(broker_life.current)
    client.declare("small", {"x-max-length-bytes": 3000, "x-stream-max-segment-size-bytes": 1000})
    client.publish("small", plain([bytes(200) for _ in range(40)]))
    kept = client.message_count("small")
    assert 0 < kept < 40
    first = client.consume("small", 1, {"x-stream-offset": "first"})
    assert first[0][0] == 40 - kept


def test_retention_by_age_removes_segments_older_than_max_age(broker_life: BrokerLife):
    """RabbitMQ: x-max-age ("1s") removes the segments whose messages are all older than it,
    checked as the stream is written to (whole segments; the one being written stays). On each
    store."""
    client = PikaClient(broker_life.current)
    client.declare("aged", {"x-max-age": "1s", "x-stream-max-segment-size-bytes": 1000})
    client.publish("aged", plain([bytes(300) for _ in range(10)]))
    time.sleep(1.5)
    client.publish("aged", plain([b"new"]))
    kept = client.message_count("aged")
    first = client.consume("aged", 1, {"x-stream-offset": "first"})
    assert kept < 11
    assert first == [(11 - kept, bytes(300) if kept > 1 else b"new")]


def test_deleting_a_stream_removes_its_log(batonmq: RunningBroker):
    """The stream's segment files live under the data directory (the owning worker's, with
    workers) and go with the queue."""
    directory = batonmq.stream_directory("gone/soon")
    with connect(batonmq) as connection:
        channel = connection.channel()
        declare_stream(channel, "gone/soon")
        PikaClient(batonmq).publish("gone/soon", plain([b"x"]))
        assert list(directory.glob("*.segment"))
        channel.queue_delete("gone/soon")
        channel.queue_declare("sync-point", durable=True)
    deadline = time.monotonic() + 5
    while directory.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not directory.exists()


def test_a_stream_deleted_just_before_a_crash_is_gone_after_it(tmp_path: Path):
    """RabbitMQ: queue.delete "deletes all messages" of the queue. A stream deleted, then the
    broker killed after the deletion was committed and before its segment files were removed
    (that state made by putting them back after the SIGKILL), and a removal cut short (a marked
    directory): after the restart neither is left, and the stream declared again under the name
    starts empty instead of with the deleted one's messages."""
    life = BrokerLife(tmp_path, {})
    try:
        streams = life.current.stream_directory("doomed").parent
        with connect(life.current) as connection:
            channel = connection.channel()
            declare_stream(channel, "doomed")
            PikaClient(life.current).publish("doomed", plain(bodies(20)))
            saved = tmp_path / "saved"
            shutil.copytree(streams / "doomed", saved)
            channel.queue_delete("doomed")
        life.current.kill()
        shutil.rmtree(streams / "doomed", ignore_errors=True)
        shutil.copytree(saved, streams / "doomed")
        shutil.copytree(saved, streams / f"older{MARKED_SUFFIX}")

        broker = life.restart(kill=True)

        with connect(broker) as connection:
            channel = connection.channel()
            declare_stream(channel, "doomed")
            assert channel.queue_declare("doomed", passive=True).method.message_count == 0
        assert [path.name for path in streams.iterdir()] == ["doomed"]
    finally:
        life.stop()


def _stream_rows(dsn: str, queue: str) -> tuple[int, int]:
    """(segments, chunks) the PostgreSQL store holds for stream `queue`, in whichever schema."""

    async def count() -> tuple[int, int]:
        connection = await asyncpg.connect(dsn)
        try:
            (schema,) = await connection.fetchrow(
                "SELECT table_schema FROM information_schema.tables"
                " WHERE table_name = 'stream_chunks'"
            )
            counts = [
                await connection.fetchval(
                    f'SELECT count(*) FROM "{schema}".stream_{table} WHERE queue = $1', queue
                )
                for table in ("segments", "chunks")
            ]
            return counts[0], counts[1]
        finally:
            await connection.close()

    return asyncio.run(count())


def test_with_postgres_a_stream_is_kept_in_the_store_and_goes_with_its_queue(
    tmp_path: Path, postgres_dsn: str
):
    """The stream-queues issue: streams are "stored in segments on disk (...); PostgreSQL stores
    them in tables when the store is PostgreSQL": nothing under the data directory, a row per
    chunk, and none left once the stream is deleted."""
    broker = start_broker(
        tmp_path,
        environment={
            "BATONMQ__PERSIST__STORE": "postgres",
            "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
        },
    )
    with connect(broker) as connection:
        channel = connection.channel()
        declare_stream(channel, "tabled", **{"x-stream-max-segment-size-bytes": 1000})
        PikaClient(broker).publish("tabled", plain([bytes(300) for _ in range(10)]))
        segments, chunks = _stream_rows(postgres_dsn, "tabled")
        assert segments > 1
        assert chunks >= segments
        assert not list(Path(broker.data_dir).rglob("*.segment"))
        channel.queue_delete("tabled")
        channel.queue_declare("sync-point", durable=True)
    deadline = time.monotonic() + 5
    while _stream_rows(postgres_dsn, "tabled") != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _stream_rows(postgres_dsn, "tabled") == (0, 0)


def test_confirmed_messages_survive_sigkill_at_their_offsets(
    broker_life: BrokerLife, client_name: str
):
    """Confirms mean durable: every confirmed message of a stream is at its offset after a
    SIGKILL, and the stream goes on from there."""
    before = stream_client(client_name, broker_life.current)
    before.declare("durable")
    before.publish("durable", plain(bodies(50)))
    after = stream_client(client_name, broker_life.restart(kill=True))
    # Answered once the log is open again: its count is the span of offsets it holds.
    assert after.message_count("durable") == 50
    after.publish("durable", plain([b"after"]))
    received = after.consume("durable", 51, {"x-stream-offset": "first"}, prefetch=100)
    assert received == [(n, f"m{n}".encode()) for n in range(50)] + [(50, b"after")]


def test_a_producer_s_repeated_publishing_ids_are_confirmed_and_stored_once(
    broker_life: BrokerLife,
):
    """RabbitMQ's stream deduplication (its stream clients' documentation, Deduplication): a
    named producer's message whose publishing id is not above the last one stored is not
    stored, and it is confirmed all the same. Over AMQP 0-9-1: the x-batonmq-producer and
    x-batonmq-sequence headers; a message without them is kept as ever. The last ids are kept
    with the segments, so a replay after a SIGKILL and restart stores nothing twice."""

    def publish_ids(client: PikaClient, producer: str, ids: range) -> None:
        # pika raises NackError for a nacked message: each of these is acked.
        client.publish(
            "deduplicated",
            [
                (
                    f"{producer}{number}".encode(),
                    {"x-batonmq-producer": producer, "x-batonmq-sequence": number},
                )
                for number in ids
            ],
        )

    client = PikaClient(broker_life.current)
    client.declare("deduplicated", {"x-stream-max-segment-size-bytes": 2000})
    publish_ids(client, "a", range(0, 30))
    publish_ids(client, "a", range(20, 40))  # 20 to 29 again
    publish_ids(client, "b", range(0, 5))
    client.publish("deduplicated", plain([b"plain", b"plain"]))
    publish_ids(client, "a", range(10, 15))  # behind the last id
    client = PikaClient(broker_life.restart(kill=True))
    publish_ids(client, "a", range(35, 45))  # 35 to 39 again
    publish_ids(client, "b", range(0, 6))
    received = client.consume(
        "deduplicated", 100, {"x-stream-offset": "first"}, prefetch=100, timeout=3
    )
    expected = (
        [f"a{n}".encode() for n in range(40)]
        + [f"b{n}".encode() for n in range(5)]
        + [b"plain", b"plain"]
        + [f"a{n}".encode() for n in range(40, 45)]
        + [b"b5"]
    )
    assert [body for _offset, body in received] == expected
    assert [offset for offset, _body in received] == list(range(len(expected)))


def test_a_transaction_commits_its_messages_into_the_stream(batonmq: RunningBroker):
    """Spec (tx.commit): the publishes of a transaction take effect at the commit; tx.commit-ok
    comes once the stream has written them (they are then read at their offsets)."""
    with connect(batonmq) as connection:
        channel = connection.channel()
        declare_stream(channel, "tx")
        channel.tx_select()
        for body in bodies(3):
            channel.basic_publish("", "tx", body)
        assert channel.queue_declare("tx", passive=True).method.message_count == 0
        channel.tx_commit()
        assert channel.queue_declare("tx", passive=True).method.message_count == 3
        received = PikaClient(batonmq).consume("tx", 3, {"x-stream-offset": "first"})
    assert received == [(n, f"m{n}".encode()) for n in range(3)]


def test_a_redeclaration_must_repeat_the_retention_arguments(batonmq: RunningBroker):
    """RabbitMQ (rabbit_amqqueue:assert_args_equivalence over declare_args, x-max-age among
    them): 406 "inequivalent arg 'x-max-age' for queue ..."."""
    with connect(batonmq) as connection:
        channel = connection.channel()
        declare_stream(channel, "kept", **{"x-max-age": "7D"})
        declare_stream(channel, "kept", **{"x-max-age": "7D"})
        with pytest.raises(ChannelClosedByBroker) as closed:
            declare_stream(channel, "kept", **{"x-max-age": "1D"})
    assert closed.value.reply_code == 406
    assert "inequivalent arg 'x-max-age'" in closed.value.reply_text


def test_messages_published_together_are_written_as_one_chunk(batonmq: RunningBroker):
    """BatonMQ architecture: "Never fsync per message": the messages that arrive in one loop
    turn, or while an append is on the disk, are appended as one chunk (one fsync)."""

    async def burst() -> None:
        connection = await aio_pika.connect(batonmq.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue("burst", durable=True, arguments=STREAM)
            exchange = channel.default_exchange
            await asyncio.gather(
                *(exchange.publish(aio_pika.Message(body), "burst") for body in bodies(200))
            )

    asyncio.run(asyncio.wait_for(burst(), 20))
    batonmq.stop()
    stream_log = StreamLog(FileMedium(batonmq.stream_directory("burst")))
    try:
        assert stream_log.next_offset == 200
        assert stream_log.chunk_count <= 100
    finally:
        stream_log.close()


def test_the_management_api_declares_a_stream_and_refuses_to_purge_it(tmp_path: Path):
    """RabbitMQ's management API declares a stream with its arguments and lists its type;
    purging one is refused as queue.purge is ("queue.purge not supported by stream queues")."""
    with start_broker(tmp_path, http=True) as broker:
        status, _body = call(
            broker,
            "PUT",
            "/api/queues/%2F/events",
            {"durable": True, "arguments": {"x-queue-type": "stream"}},
        )
        assert status == 201
        status, listed = call(broker, "GET", "/api/queues/%2F/events")
        assert (status, listed["type"]) == (200, "stream")
        status, refused = call(broker, "DELETE", "/api/queues/%2F/events/contents")
    assert status == 400
    assert "queue.purge not supported by stream queues" in refused["reason"]


def test_a_kill_mid_publish_loses_no_confirmed_message(broker_life: BrokerLife):
    """Confirms mean durable, under SIGKILL while a publisher is publishing: after the restart
    every confirmed message is in the stream at the offset it was given (one publisher, so its
    n-th message is at offset n), and the log holds nothing out of order (a torn last chunk was
    never confirmed and is dropped)."""
    confirmed: set[int] = set()
    url = broker_life.current.url

    async def publish_until_killed() -> None:
        connection = await aio_pika.connect(url)
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue("crash", durable=True, arguments=STREAM)
        killer: asyncio.Task[None] | None = None
        number = 0
        try:
            while True:
                batch = range(number, number + 50)
                number += 50
                outcomes = await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            channel.default_exchange.publish(aio_pika.Message(b"%d" % n), "crash")
                            for n in batch
                        ),
                        return_exceptions=True,
                    ),
                    10,
                )
                confirmed.update(
                    n
                    for n, outcome in zip(batch, outcomes, strict=True)
                    if outcome is not None and not isinstance(outcome, BaseException)
                )
                if all(isinstance(outcome, BaseException) for outcome in outcomes):
                    break
                if killer is None and len(confirmed) >= 500:
                    killer = asyncio.create_task(asyncio.to_thread(broker_life.current.kill))
        finally:
            if killer is not None:
                await killer
            with contextlib.suppress(Exception):
                await connection.close()

    asyncio.run(asyncio.wait_for(publish_until_killed(), 60))
    assert len(confirmed) >= 500
    client = PikaClient(broker_life.restart(kill=True))
    held = client.message_count("crash")
    received = client.consume("crash", held, {"x-stream-offset": "first"}, prefetch=500, timeout=30)
    assert len(received) == held
    assert all(int(body) == offset for offset, body in received)
    assert confirmed <= {offset for offset, _body in received}
