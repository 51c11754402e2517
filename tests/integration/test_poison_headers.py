"""Poison content headers stopped at the edge, with raw frames and real clients.

Hardening, defect 3: "A publisher can send a property table or field that does not decode; the
broker stores and delivers it, and pika consumers crash on it." Rules: "the broker decodes and
validates every property at the edge when the message arrives and closes the *publisher's*
connection with the proper code (502 syntax-error / 505 unexpected-frame as the specification
says) if it cannot"; "no message the broker holds can make a consumer ... fail". Proven by "a
property test that throws random property tables and field values at the publish path and checks
that each is either refused with the publisher's connection closed, or delivered to a pika
consumer and an aio-pika consumer that both decode it".

Octets are written here from the spec (4.2.5 field types with RabbitMQ's errata table, 4.2.6.1
content header), not with batonmq's code or a client's encoder.
"""

from __future__ import annotations

import asyncio
import math
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import aio_pika
import pika
import pytest
from aio_pika.abc import AbstractQueue, AbstractRobustConnection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame, header

from tests.brokerproc import RunningBroker, start_broker
from tests.rawclient import RawClient, open_connection
from tests.wire import raw_frame

pytestmark = pytest.mark.integration

FRAME_HEADER, FRAME_BODY = 2, 3
BASIC_CLASS_ID = 60
FRAME_ERROR, SYNTAX_ERROR, UNEXPECTED_FRAME = 501, 502, 505
#: class-id, weight, body-size and the first property-flags word (spec 4.2.6.1).
HEADER_FIXED_SIZE = 14
BODY = b"poison?"


def long_prefixed(octets: bytes) -> bytes:
    return struct.pack(">I", len(octets)) + octets


def short_prefixed(octets: bytes) -> bytes:
    return bytes((len(octets),)) + octets


def table(*entries: tuple[bytes, bytes]) -> bytes:
    """Spec 4.2.5.5: a long length, then (field name as a short string, typed value) pairs."""
    return long_prefixed(b"".join(short_prefixed(name) + value for name, value in entries))


def content_header(flags: int, property_list: bytes, weight: int = 0) -> bytes:
    """Spec 4.2.6.1: class-id, weight, body-size, property flags, property list."""
    return struct.pack(">HHQH", BASIC_CLASS_ID, weight, len(BODY), flags) + property_list


def headers_only(entries: bytes) -> bytes:
    return content_header(1 << 13, entries)


def publish_frames(channel: int, routing_key: str, header_payload: bytes) -> tuple[bytes, bytes]:
    """(basic.publish and the content header as given, the body frame)."""
    method = frame.marshal(commands.Basic.Publish(routing_key=routing_key), channel)
    return (
        method + raw_frame(FRAME_HEADER, channel, header_payload),
        raw_frame(FRAME_BODY, channel, BODY),
    )


# One bad header at a time ------------------------------------------------------------------------

MALFORMED = [
    pytest.param(headers_only(table((b"k", b"Z\x00"))), SYNTAX_ERROR, id="unknown-field-type"),
    pytest.param(headers_only(table((b"k", b"U\x00\x01"))), SYNTAX_ERROR, id="U-pamqp-cannot"),
    pytest.param(headers_only(table((b"k", b"\x00"))), SYNTAX_ERROR, id="zero-type-pika-cannot"),
    pytest.param(
        headers_only(table((b"k", b"d" + struct.pack(">d", math.nan)))), SYNTAX_ERROR, id="nan"
    ),
    pytest.param(
        headers_only(table((b"k", b"T" + struct.pack(">Q", 2**64 - 1)))),
        SYNTAX_ERROR,
        id="timestamp-past-9999",
    ),
    pytest.param(
        content_header(1 << 7, short_prefixed(b"\xc3\x28")), SYNTAX_ERROR, id="message-id-not-utf8"
    ),
    pytest.param(content_header(1 << 12, b"\x07"), SYNTAX_ERROR, id="delivery-mode-7"),
    pytest.param(headers_only(long_prefixed(b"\x01kI\x00")), SYNTAX_ERROR, id="value-past-table"),
    pytest.param(
        headers_only(struct.pack(">I", 99) + b"\x01kV"), UNEXPECTED_FRAME, id="table-past-end"
    ),
    pytest.param(content_header(1 << 12, b"\x02\x02"), UNEXPECTED_FRAME, id="octet-after-the-last"),
    pytest.param(content_header(0, b"", weight=3), UNEXPECTED_FRAME, id="weight"),
]


@pytest.fixture
def consumer(broker: RunningBroker) -> Iterator[tuple[RawClient, str]]:
    """Another connection consuming from the queue the bad publish is sent to; at the end it
    must have received nothing and still serve."""
    with open_connection(broker) as client:
        queue = client.declare_queue(1)
        client.send_frame(commands.Basic.Consume(queue=queue, no_ack=True), 1)
        tag = client.expect(commands.Basic.ConsumeOk, 1).consumer_tag
        yield client, queue
        # The next frame is cancel-ok, not a delivery: nothing reached the queue.
        client.send_frame(commands.Basic.Cancel(consumer_tag=tag), 1)
        client.expect(commands.Basic.CancelOk, 1)
        client.open_channel(2)
        assert client.round_trip(2) == b"still serving"


@pytest.mark.parametrize("whole", [True, False], ids=["whole-publish", "header-alone"])
@pytest.mark.parametrize(("header_payload", "code"), MALFORMED)
def test_a_malformed_header_closes_the_publishers_connection_and_nothing_else(
    broker: RunningBroker,
    consumer: tuple[RawClient, str],
    header_payload: bytes,
    code: int,
    whole: bool,
) -> None:
    """Hardening: the broker "closes the *publisher's* connection with the proper code (502
    syntax-error / 505 unexpected-frame as the specification says)": 505 for a badly-formatted
    header (spec 4.2.6: "A peer that receives an incomplete or badly-formatted content MUST raise
    a connection exception with reply code 505"), 502 for a value no client can decode ("a frame
    that contained illegal values for one or more fields"). The consumer of the queue, on
    another connection, receives nothing and stays connected; the broker logs no traceback.
    Whole publishes in one write and headers sent alone take different paths in the broker."""
    _consumer, queue = consumer
    start, body = publish_frames(1, queue, header_payload)
    with open_connection(broker) as publisher:
        publisher.send(start + body if whole else start)
        close = publisher.expect_connection_close(code)
    assert close.reply_text.startswith(("SYNTAX_ERROR", "UNEXPECTED_FRAME"))
    assert "Traceback" not in broker.log()


# Random headers: refused, or decoded by both clients ----------------------------------------------

#: Well-formed field values with any value in them, and the type octets one client knows and the
#: other not ('U': pika only; 0: pamqp only) or neither.
_scalars = st.one_of(
    st.tuples(st.sampled_from(b"tbB"), st.binary(min_size=1, max_size=1)),
    st.tuples(st.sampled_from(b"suU"), st.binary(min_size=2, max_size=2)),
    st.tuples(st.sampled_from(b"Iif"), st.binary(min_size=4, max_size=4)),
    st.tuples(st.sampled_from(b"lLdT"), st.binary(min_size=8, max_size=8)),
    st.tuples(st.just(ord("T")), st.integers(0, 253_402_300_800).map(struct.Struct(">Q").pack)),
    st.tuples(st.just(ord("d")), st.floats().map(struct.Struct(">d").pack)),
    st.tuples(st.just(ord("D")), st.binary(min_size=5, max_size=5)),
    st.tuples(st.sampled_from(b"Sx"), st.binary(max_size=10).map(long_prefixed)),
    st.tuples(st.sampled_from(b"V\x00"), st.just(b"")),
    st.tuples(st.integers(0, 255), st.binary(max_size=3)),
).map(lambda pair: bytes((pair[0],)) + pair[1])
_names = st.one_of(st.text(max_size=5).map(str.encode), st.binary(max_size=4))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: b"A" + long_prefixed(b"".join(items))),
        st.lists(st.tuples(_names, inner), max_size=3).map(lambda pairs: b"F" + table(*pairs)),
    ),
    max_leaves=8,
)
_short_strings = st.one_of(st.text(max_size=6).map(str.encode), st.binary(max_size=6))
_PROPERTIES = [
    _short_strings.map(short_prefixed),  # content-type
    _short_strings.map(short_prefixed),  # content-encoding
    st.lists(st.tuples(_names, _values), max_size=4).map(lambda pairs: table(*pairs)),
    st.binary(min_size=1, max_size=1),  # delivery-mode
    st.binary(min_size=1, max_size=1),  # priority
    _short_strings.map(short_prefixed),  # correlation-id
    _short_strings.map(short_prefixed),  # reply-to
    # expiration: a day or more, so that nothing expires before it is read
    st.integers(86_400_000, 10**12).map(lambda n: short_prefixed(str(n).encode())),
    _short_strings.map(short_prefixed),  # message-id
    st.integers(0, 2**64 - 1).map(struct.Struct(">Q").pack),  # timestamp
    _short_strings.map(short_prefixed),  # type
    st.just(short_prefixed(b"guest")),  # user-id: the login user (RabbitMQ Validated User-ID)
    _short_strings.map(short_prefixed),  # app-id
    _short_strings.map(short_prefixed),  # cluster-id
]


@st.composite
def header_payloads(draw: st.DrawFn) -> bytes:
    """Content headers: any set of the fourteen properties with any value in them, and now and
    then octets changed, cut or added."""
    present = draw(st.lists(st.booleans(), min_size=14, max_size=14))
    flags = sum(1 << (15 - index) for index, on in enumerate(present) if on)
    property_list = b"".join(
        draw(strategy) for strategy, on in zip(_PROPERTIES, present, strict=True) if on
    )
    payload = bytearray(content_header(flags, property_list))
    damage = draw(st.sampled_from(["none", "none", "octet", "cut", "extra"]))
    if damage == "octet":
        payload[draw(st.integers(12, len(payload) - 1))] = draw(st.integers(0, 255))
    elif damage == "cut":
        del payload[draw(st.integers(12, len(payload))) :]
    elif damage == "extra":
        payload += draw(st.binary(min_size=1, max_size=3))
    return bytes(payload)


@dataclass
class Consumers:
    """A pika consumer and an aio-pika consumer of one queue each, both bound to one fanout
    exchange, kept open across examples: a header either client cannot decode would break its
    connection and fail every example after."""

    broker: RunningBroker
    exchange: str
    pika_channel: pika.adapters.blocking_connection.BlockingChannel
    pika_queue: str
    loop: asyncio.AbstractEventLoop
    aio_connection: AbstractRobustConnection
    aio_queue: AbstractQueue


@pytest.fixture(scope="module")
def consumers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Consumers]:
    broker = start_broker(tmp_path_factory.mktemp("poison"))
    exchange = f"poison-{uuid.uuid4().hex}"
    loop = asyncio.new_event_loop()
    try:
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
            channel = connection.channel()
            channel.exchange_declare(exchange, "fanout")
            pika_queue = channel.queue_declare("", exclusive=True).method.queue
            channel.queue_bind(pika_queue, exchange)

            async def aio_consumer() -> tuple[AbstractRobustConnection, AbstractQueue]:
                aio_connection = await aio_pika.connect_robust(broker.url)
                aio_channel = await aio_connection.channel()
                aio_queue = await aio_channel.declare_queue(exclusive=True)
                await aio_queue.bind(exchange)
                return aio_connection, aio_queue

            aio_connection, aio_queue = loop.run_until_complete(aio_consumer())
            try:
                yield Consumers(
                    broker, exchange, channel, pika_queue, loop, aio_connection, aio_queue
                )
            finally:
                loop.run_until_complete(aio_connection.close())
        assert "Traceback" not in broker.log()
    finally:
        loop.close()
        broker.stop()


def publish_with_confirm(broker: RunningBroker, exchange: str, header_payload: bytes) -> int:
    """Publish with a raw client under confirms: 200 when acked, else the connection.close
    code (the connection is then closed)."""
    with open_connection(broker) as publisher:
        publisher.send_frame(commands.Confirm.Select(), 1)
        publisher.expect(commands.Confirm.SelectOk, 1)
        method = commands.Basic.Publish(exchange=exchange)
        publisher.send(
            frame.marshal(method, 1)
            + raw_frame(FRAME_HEADER, 1, header_payload)
            + raw_frame(FRAME_BODY, 1, BODY)
        )
        _channel, reply = publisher.read_frame()
        if isinstance(reply, commands.Connection.Close):
            publisher.send_frame(commands.Connection.CloseOk())
            return int(reply.reply_code)
        assert isinstance(reply, commands.Basic.Ack), reply
        return 200


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(header_payload=header_payloads())
def test_every_header_is_refused_or_decoded_by_pika_and_aio_pika(
    consumers: Consumers, header_payload: bytes
) -> None:
    """Hardening: "throws random property tables and field values at the publish path and checks
    that each is either refused with the publisher's connection closed, or delivered to a pika
    consumer and an aio-pika consumer that both decode it". Refused: connection.close 502 or
    505, and neither consumer gets anything. Delivered: both get it, with the properties each
    client decodes from the octets sent (forwarded unchanged)."""
    outcome = publish_with_confirm(consumers.broker, consumers.exchange, header_payload)
    _method, pika_properties, pika_body = consumers.pika_channel.basic_get(
        consumers.pika_queue, auto_ack=True
    )
    aio_message = consumers.loop.run_until_complete(
        consumers.aio_queue.get(no_ack=True, fail=False, timeout=5)
    )
    if outcome != 200:
        # A header frame too short for its fixed fields (class-id to the first flags word) is
        # 501 FRAME_ERROR at the frame layer: "a malformed frame that the recipient could not
        # decode".
        short = len(header_payload) < HEADER_FIXED_SIZE
        assert outcome == FRAME_ERROR if short else outcome in (SYNTAX_ERROR, UNEXPECTED_FRAME)
        assert pika_body is None
        assert aio_message is None
        return
    assert pika_body == BODY
    assert vars(pika_properties) == vars(pika.spec.BasicProperties().decode(header_payload[12:]))
    assert aio_message is not None
    assert aio_message.body == BODY
    sent = header.ContentHeader()
    sent.unmarshal(header_payload)
    assert aio_message.headers == (sent.properties.headers or {})
    assert aio_message.message_id == (sent.properties.message_id or None)  # aio-pika: "" is None
