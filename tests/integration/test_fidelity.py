"""Message fidelity, with real clients over real sockets against a real broker.

The rule (issue text): "Every basic property and every field-table value a publisher sends
reaches the consumer unchanged (non-UTF-8 strings, doubles, timestamps, nested tables, arrays,
empty strings)."

The strongest check is on the octets. The broker forwards a content header as it received it
(BatonMQ architecture), so a content header written here by hand from the spec (4.2.5 field types,
4.2.6.1 property flags and list), holding values no client library writes, must reach a raw
consumer identical octet for octet: through basic.get and basic.consume, through a headers
exchange (where the broker decodes the headers to route), from the store after a restart (SQLite
and PostgreSQL), and from the store when a long queue pages out of memory. Then the clients' own
view: what pika and aio-pika send (all fourteen properties, each one unset, every field type
they can encode) is what pika and aio-pika receive, and what a raw publisher sends decodes in
aio-pika to the exact values (doubles that no float holds, NaN payloads, -0.0). Field tables the
store keeps (binding arguments) keep their types across a restart. Where the broker itself adds
header fields (x-delivery-count, x-death), every other octet stays.

"Every value" is every value some consumer can decode: hardening has the broker refuse at the edge
what pika or aio-pika could not decode (short strings that are not UTF-8, NaN and infinities,
timestamps past the year 9999: amqp/properties.py, tests/integration/test_poison_headers.py).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import os
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, HeadersType
from pamqp import base, commands, frame
from pamqp.common import FieldTable
from pika.adapters.blocking_connection import BlockingChannel

from batonmq.amqp.properties import LATEST_FIELD_TIMESTAMP, LATEST_PROPERTY_TIMESTAMP
from tests.brokerproc import BrokerLife, RunningBroker, start_broker
from tests.rawclient import READ_TIMEOUT, RawClient, open_connection
from tests.wire import FRAME_END, raw_frame

pytestmark = pytest.mark.integration

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
BASIC_CLASS_ID = 60
#: Small, so that bodies span many frames both ways.
RAW_FRAME_MAX = 8192
#: The fewest entries a queue may keep in memory (the persist.page_window setting is at least 16).
PAGE_WINDOW = 16
ONE_DAY_MS = b"86400000"


# Octets from the spec --------------------------------------------------------------------------
# Written here, not by batonmq or a client library, so that they share no one's mistakes.


def short_string(octets: bytes) -> bytes:
    """Spec 4.2.5.3: an octet of length, then up to 255 octets."""
    assert len(octets) <= 255
    return bytes((len(octets),)) + octets


def long_string(octets: bytes) -> bytes:
    """Spec 4.2.5.3: a long (32-bit) length, then the octets."""
    return struct.pack(">I", len(octets)) + octets


def table(*entries: tuple[bytes, bytes]) -> bytes:
    """Spec 4.2.5.5: a long length, then (field name as a short string, typed value) pairs."""
    return long_string(b"".join(short_string(name) + value for name, value in entries))


def array(*values: bytes) -> bytes:
    """Spec 4.2.5.5 (RabbitMQ errata): a long length, then typed values."""
    return long_string(b"".join(values))


def field(tag: bytes, layout: str, *values: object) -> bytes:
    return tag + struct.pack(layout, *values)


def double(value: float) -> bytes:
    return field(b"d", ">d", value)


#: The fourteen basic properties in flag order (amqp0-9-1.xml, class basic: content-type is bit
#: 15 of the property flags, cluster-id bit 2), with pika's attribute names.
PROPERTY_ORDER = (
    ("content-type", "content_type"),
    ("content-encoding", "content_encoding"),
    ("headers", "headers"),
    ("delivery-mode", "delivery_mode"),
    ("priority", "priority"),
    ("correlation-id", "correlation_id"),
    ("reply-to", "reply_to"),
    ("expiration", "expiration"),
    ("message-id", "message_id"),
    ("timestamp", "timestamp"),
    ("type", "type"),
    ("user-id", "user_id"),
    ("app-id", "app_id"),
    ("cluster-id", "cluster_id"),
)
SPEC_NAMES = [spec_name for spec_name, _ in PROPERTY_ORDER]


def content_header(body_size: int, properties: dict[str, bytes]) -> bytes:
    """Spec 4.2.6.1: class-id, weight 0, body-size, property flags, then the property list in
    flag order; `properties` maps spec names to their encoded values."""
    flags = 0
    property_list = b""
    for bit, spec_name in zip(range(15, 1, -1), SPEC_NAMES, strict=True):
        if spec_name in properties:
            flags |= 1 << bit
            property_list += properties[spec_name]
    return struct.pack(">HHQH", BASIC_CLASS_ID, 0, body_size, flags) + property_list


@dataclass(frozen=True)
class Field:
    """One header: its name and typed value as octets, and the value a pamqp-based client
    (aio-pika) decodes it to."""

    name: bytes
    octets: bytes
    value: object = None


#: Every field type of spec 4.2.5.5 as RabbitMQ's errata table has them (t b B s u I i l f d D S
#: x T F A V), each at the extremes every client decodes, and the values the issue names: long
#: strings that are not UTF-8, doubles, timestamps, nested tables, arrays, empty strings.
FIELDS = (
    Field(b"bool-true", b"t\x01", True),
    Field(b"bool-false", b"t\x00", False),
    Field(b"int8-min", field(b"b", ">b", -(2**7)), -(2**7)),
    Field(b"int8-max", field(b"b", ">b", 2**7 - 1), 2**7 - 1),
    Field(b"uint8-max", field(b"B", ">B", 2**8 - 1), 2**8 - 1),
    Field(b"int16-min", field(b"s", ">h", -(2**15)), -(2**15)),
    Field(b"uint16-max", field(b"u", ">H", 2**16 - 1), 2**16 - 1),
    Field(b"int32-min", field(b"I", ">i", -(2**31)), -(2**31)),
    Field(b"uint32-max", field(b"i", ">I", 2**32 - 1), 2**32 - 1),
    Field(b"int64-min", field(b"l", ">q", -(2**63)), -(2**63)),
    Field(b"int64-max", field(b"l", ">q", 2**63 - 1), 2**63 - 1),
    Field(b"float", field(b"f", ">f", 0.1), struct.unpack(">f", struct.pack(">f", 0.1))[0]),
    Field(b"float-negative-zero", field(b"f", ">f", -0.0), -0.0),
    # 0.1 and 1/3 have no float32 form: a double must not pass through a float.
    Field(b"double", double(0.1), 0.1),
    Field(b"double-third", double(1 / 3), 1 / 3),
    Field(b"double-negative-zero", double(-0.0), -0.0),
    Field(b"double-subnormal", double(5e-324), 5e-324),
    Field(b"double-max", double(sys.float_info.max), sys.float_info.max),
    Field(b"decimal", field(b"D", ">Bi", 2, -12345), decimal.Decimal("-123.45")),
    Field(
        b"decimal-extreme",
        field(b"D", ">Bi", 255, 2**31 - 1),
        decimal.Decimal(2**31 - 1) * decimal.Decimal(10) ** -255,
    ),
    Field(b"longstr-empty", b"S" + long_string(b""), ""),
    Field(b"longstr-utf8", b"S" + long_string("ünïcödé ✓ 𝄞".encode()), "ünïcödé ✓ 𝄞"),
    Field(
        b"longstr-not-utf8",
        b"S" + long_string(b"\xff\xfe\x00\x80 caf\xe9"),
        b"\xff\xfe\x00\x80 caf\xe9",
    ),
    Field(b"bytes-empty", b"x" + long_string(b""), bytearray()),
    Field(b"bytes-every-value", b"x" + long_string(bytes(range(256))), bytearray(range(256))),
    Field(
        b"timestamp-epoch",
        field(b"T", ">Q", 0),
        datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC),
    ),
    Field(
        b"timestamp",
        field(b"T", ">Q", 1_700_000_000),
        datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC),
    ),
    Field(b"table-empty", b"F" + table(), {}),
    Field(
        b"table-nested",
        b"F"
        + table(
            (
                b"level-2",
                b"F"
                + table(
                    (b"level-3", b"F" + table((b"level-4", b"F" + table((b"deep", double(0.1)))))),
                    (b"beside", b"S" + long_string(b"")),
                ),
            )
        ),
        {"level-2": {"level-3": {"level-4": {"deep": 0.1}}, "beside": ""}},
    ),
    Field(b"array-empty", b"A" + array(), []),
    Field(
        b"array-mixed",
        b"A"
        + array(
            b"t\x01",
            field(b"b", ">b", -1),
            double(0.1),
            b"S" + long_string(b""),
            b"x" + long_string(b"\x00\xff"),
            b"V",
            field(b"T", ">Q", 0),
            field(b"D", ">Bi", 1, 5),
        ),
        [
            True,
            -1,
            0.1,
            "",
            bytearray(b"\x00\xff"),
            None,
            datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC),
            decimal.Decimal("0.5"),
        ],
    ),
    Field(
        b"array-nested",
        b"A"
        + array(
            b"A" + array(b"A" + array(field(b"I", ">i", 7)), b"A" + array()),
            b"F" + table((b"in-array", b"A" + array(b"V"))),
        ),
        [[[7], []], {"in-array": [None]}],
    ),
    Field(b"void", b"V", None),
    Field(b"", b"S" + long_string(b"an empty field name"), "an empty field name"),
    Field(b"n" * 255, b"t\x01", True),
    Field(
        b"timestamp-max",
        field(b"T", ">Q", LATEST_FIELD_TIMESTAMP),
        # pamqp's rule: above 2**32 - 1 a timestamp is taken for milliseconds.
        datetime.datetime.fromtimestamp(LATEST_FIELD_TIMESTAMP / 1000, tz=datetime.UTC),
    ),
)
EVERY_FIELD_TYPE = table(*((entry.name, entry.octets) for entry in FIELDS))
DECODED_FIELDS = {entry.name.decode(): entry.value for entry in FIELDS}


def every_property(user_id: str, headers: bytes = EVERY_FIELD_TYPE) -> dict[str, bytes]:
    """All fourteen basic properties; short strings with a zero octet (spec 4.2.5.3: "Short
    strings can carry up to 255 octets of UTF-8 data, but may not contain binary zero octets";
    RabbitMQ and every client pass them), one empty, one of 255 octets; the last timestamp
    pamqp decodes."""
    return {
        "content-type": short_string(b"application/vnd.fidelity+octets"),
        "content-encoding": short_string("x-ünï\x00".encode()),
        "headers": headers,
        "delivery-mode": b"\x02",
        "priority": b"\x09",
        "correlation-id": short_string(b"\x00corr"),
        "reply-to": short_string("réponse".encode()),
        "expiration": short_string(ONE_DAY_MS),  # a day: nothing expires during the test
        "message-id": short_string("ünïcödé ✓ 𝄞".encode()),
        "timestamp": struct.pack(">Q", LATEST_PROPERTY_TIMESTAMP),
        "type": short_string(b""),
        "user-id": short_string(user_id.encode()),  # must be the login user (RabbitMQ)
        "app-id": short_string(b"a" * 255),
        "cluster-id": short_string("cluster-é".encode()),
    }


BODIES = {
    "empty": b"",
    "every-byte-value": bytes(range(256)) * 3,
    "many-frames": os.urandom(12 * RAW_FRAME_MAX + 17),
}


# A raw client that reads frames as octets --------------------------------------------------------


@dataclass(frozen=True)
class RawContent:
    method: base.Frame
    header_payload: bytes
    body: bytes
    body_frames: int


def read_raw_frame(client: RawClient, timeout: float = READ_TIMEOUT) -> tuple[int, int, bytes]:
    """The next frame as (type, channel, payload octets), not decoded."""
    deadline = time.monotonic() + timeout
    client._fill(7, deadline)
    frame_type, channel, size = struct.unpack_from(">BHI", client.buffer)
    client._fill(7 + size + 1, deadline)
    assert client.buffer[7 + size] == FRAME_END
    payload = client.buffer[7 : 7 + size]
    client.buffer = client.buffer[8 + size :]
    return frame_type, channel, payload


def read_method(client: RawClient, channel: int) -> base.Frame:
    while True:
        frame_type, got_channel, payload = read_raw_frame(client)
        if frame_type == FRAME_HEARTBEAT:
            continue
        assert (frame_type, got_channel) == (FRAME_METHOD, channel), (frame_type, payload)
        _consumed, _channel, method = frame.unmarshal(raw_frame(FRAME_METHOD, channel, payload))
        assert isinstance(method, base.Frame)
        return method


def read_content(client: RawClient, channel: int, method_class: type[base.Frame]) -> RawContent:
    """A content-carrying method, its header payload and its body, all as received."""
    method = read_method(client, channel)
    assert isinstance(method, method_class), method
    frame_type, got_channel, header_payload = read_raw_frame(client)
    assert (frame_type, got_channel) == (FRAME_HEADER, channel)
    (body_size,) = struct.unpack_from(">Q", header_payload, 4)
    parts: list[bytes] = []
    while sum(len(part) for part in parts) < body_size:
        frame_type, got_channel, payload = read_raw_frame(client)
        assert (frame_type, got_channel) == (FRAME_BODY, channel)
        assert len(payload) + 8 <= client.frame_max
        parts.append(payload)
    return RawContent(method, header_payload, b"".join(parts), len(parts))


def publish_raw(
    client: RawClient,
    channel: int,
    exchange: str,
    routing_key: str,
    header_payload: bytes,
    body: bytes,
) -> None:
    """basic.publish, the content header as given, the body in frames of frame_max octets."""
    chunk = client.frame_max - 8
    client.send(
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
        + raw_frame(FRAME_HEADER, channel, header_payload)
        + b"".join(
            raw_frame(FRAME_BODY, channel, body[start : start + chunk])
            for start in range(0, len(body), chunk)
        )
    )


def get_raw(client: RawClient, channel: int, queue: str) -> RawContent:
    client.send_frame(commands.Basic.Get(queue=queue, no_ack=True), channel)
    return read_content(client, channel, commands.Basic.GetOk)


def select_confirms(client: RawClient, channel: int) -> None:
    client.send_frame(commands.Confirm.Select(), channel)
    client.expect(commands.Confirm.SelectOk, channel)


def await_confirms(client: RawClient, channel: int, count: int) -> None:
    """Wait for basic.ack of publishes 1..count (single or multiple acks)."""
    acked = 0
    while acked < count:
        ack = client.expect(commands.Basic.Ack, channel)
        acked = ack.delivery_tag


def declare(client: RawClient, channel: int, queue: str, *, durable: bool) -> None:
    client.send_frame(commands.Queue.Declare(queue=queue, durable=durable), channel)
    client.expect(commands.Queue.DeclareOk, channel)


@contextlib.contextmanager
def raw_connection(broker: RunningBroker) -> Iterator[RawClient]:
    client = open_connection(broker, frame_max=RAW_FRAME_MAX)
    try:
        yield client
    finally:
        client.close()


def assert_same_octets(got: RawContent, header_payload: bytes, body: bytes) -> None:
    assert got.header_payload == header_payload
    assert got.body == body


# Octets: raw publisher, raw consumer -------------------------------------------------------------


@pytest.mark.parametrize("body_name", list(BODIES))
def test_every_property_and_field_type_arrives_octet_for_octet_through_get_and_consume(
    broker: RunningBroker, body_name: str
) -> None:
    """Issue: "Every basic property and every field-table value a publisher sends reaches the
    consumer unchanged (non-UTF-8 strings, doubles, timestamps, nested tables, arrays, empty
    strings)". The content header (all fourteen properties, a headers table of every field type
    of spec 4.2.5.5) comes back as the very octets sent, through basic.get and basic.consume;
    the body too, empty (no body frame), of every octet value, or over many body frames, none
    above the negotiated frame-max (spec 4.2.6, content framing)."""
    body = BODIES[body_name]
    header_payload = content_header(len(body), every_property(broker.username))
    with raw_connection(broker) as client:
        queue = client.declare_queue(1)
        for _ in range(2):
            publish_raw(client, 1, "", queue, header_payload, body)
        assert_same_octets(get_raw(client, 1, queue), header_payload, body)
        client.send_frame(commands.Basic.Consume(queue=queue, no_ack=True), 1)
        client.expect(commands.Basic.ConsumeOk, 1)
        delivered = read_content(client, 1, commands.Basic.Deliver)
        assert_same_octets(delivered, header_payload, body)
        assert delivered.body_frames == -(-len(body) // (RAW_FRAME_MAX - 8))


def test_no_property_and_each_property_alone_arrive_octet_for_octet(broker: RunningBroker):
    """Spec 4.2.6.1: "The property flags are an array of bits that indicate the presence or
    absence of each property value". A header with no property, each of the fourteen alone, and
    all but each one, arrive as sent: an unset property stays unset, a set one set."""
    everything = every_property(broker.username)
    headers = [content_header(3, {})]
    for spec_name in SPEC_NAMES:
        headers.append(content_header(3, {spec_name: everything[spec_name]}))
        headers.append(content_header(3, {k: v for k, v in everything.items() if k != spec_name}))
    with raw_connection(broker) as client:
        queue = client.declare_queue(1)
        for header_payload in headers:
            publish_raw(client, 1, "", queue, header_payload, b"abc")
        for header_payload in headers:
            assert_same_octets(get_raw(client, 1, queue), header_payload, b"abc")


def test_through_a_headers_exchange_the_decoded_headers_route_and_the_octets_stay(
    broker: RunningBroker,
):
    """AMQP 0-9-1 3.1.3.3 (headers exchange) routes on the header table, so the broker decodes
    it: every field type, the last timestamps of the year 9999, all must decode (RabbitMQ
    routes them), and the consumer still gets the octets sent. Matching compares values, not
    wire types: the message's uint8 255 ('B') matches the binding's 255 (which pamqp writes as
    'u')."""
    header_payload = content_header(5, every_property(broker.username))
    with raw_connection(broker) as client:
        queue = client.declare_queue(1)
        client.send_frame(
            commands.Queue.Bind(
                queue=queue,
                exchange="amq.headers",
                arguments={
                    "x-match": "all",
                    "uint8-max": 255,
                    "longstr-utf8": "ünïcödé ✓ 𝄞",
                    "bool-true": True,
                    "void": None,
                },
            ),
            1,
        )
        client.expect(commands.Queue.BindOk, 1)
        publish_raw(client, 1, "amq.headers", "", header_payload, b"route")
        assert_same_octets(get_raw(client, 1, queue), header_payload, b"route")


def test_a_persistent_message_survives_a_restart_octet_for_octet(broker_life: BrokerLife):
    """Spec basic.properties delivery-mode 2 ("persistent") in a durable queue survives a
    restart, and the store keeps it whole: the content header octets (every property, every
    field type) and the body, on SQLite and on PostgreSQL."""
    headers = [
        content_header(len(body), every_property(broker_life.current.username))
        for body in BODIES.values()
    ]
    with raw_connection(broker_life.current) as client:
        select_confirms(client, 1)
        declare(client, 1, "kept", durable=True)
        for header_payload, body in zip(headers, BODIES.values(), strict=True):
            publish_raw(client, 1, "", "kept", header_payload, body)
        await_confirms(client, 1, len(BODIES))
    broker = broker_life.restart(kill=True)
    with raw_connection(broker) as client:
        for header_payload, body in zip(headers, BODIES.values(), strict=True):
            assert_same_octets(get_raw(client, 1, "kept"), header_payload, body)


@pytest.mark.parametrize("durable", [False, True], ids=["transient", "persistent"])
def test_a_queue_paged_to_the_store_gives_back_the_octets(
    tmp_path: Path, store_environment: dict[str, str], durable: bool
) -> None:
    """BatonMQ architecture: "a queue keeps a bounded window of messages in memory"; the rest waits
    in the store. With the smallest window (persist.page_window = 16) most of 60 messages are
    written out and read back: each comes back in order with its content header and body as
    sent, transient ones in a non-durable queue and persistent ones in a durable queue."""
    environment = {**store_environment, "BATONMQ__PERSIST__PAGE_WINDOW": str(PAGE_WINDOW)}
    broker = start_broker(tmp_path, environment=environment)
    try:
        properties = every_property(broker.username)
        if not durable:
            del properties["delivery-mode"]
        sent = []
        for number in range(60):
            body = str(number).encode() + bytes(range(256))
            sent.append((content_header(len(body), properties), body))
        with raw_connection(broker) as client:
            declare(client, 1, "paged", durable=durable)
            for batch in range(0, len(sent), 10):
                for header_payload, body in sent[batch : batch + 10]:
                    publish_raw(client, 1, "", "paged", header_payload, body)
                # A durable declare is answered once everything before it is committed, so
                # the page-out started by this batch is done before the next batch starts one.
                declare(client, 1, "sync-point", durable=True)
            for header_payload, body in sent:
                assert_same_octets(get_raw(client, 1, "paged"), header_payload, body)
    finally:
        broker.stop()


def test_typed_binding_arguments_survive_a_restart(broker_life: BrokerLife):
    """Field-table values in a durable binding keep their type through the store
    (store/fields.py): after a restart the binding still routes on them, and queue.unbind with
    the same arguments finds it (a binding's identity includes its arguments' wire types, as in
    RabbitMQ, so a byte array ('x') must not come back as a long string)."""
    arguments: FieldTable = {
        "x-match": "all",
        "bytes": bytearray(b"\x00\xff"),
        "text": "ünï",
        "number": 255,
        "flag": False,
        "when": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "amount": decimal.Decimal("-1.50"),
        "nested": {"list": [1, "two", None]},
    }
    headers = table(
        (b"bytes", b"x" + long_string(b"\x00\xff")),
        (b"text", b"S" + long_string("ünï".encode())),
        (b"number", field(b"B", ">B", 255)),
        (b"flag", b"t\x00"),
        (b"when", field(b"T", ">Q", 1_704_164_645)),
        (b"amount", field(b"D", ">Bi", 2, -150)),
        (
            b"nested",
            b"F" + table((b"list", b"A" + array(b"b\x01", b"S" + long_string(b"two"), b"V"))),
        ),
    )
    header_payload = content_header(1, {"headers": headers, "delivery-mode": b"\x02"})
    with raw_connection(broker_life.current) as client:
        client.send_frame(
            commands.Exchange.Declare(exchange="typed", exchange_type="headers", durable=True), 1
        )
        client.expect(commands.Exchange.DeclareOk, 1)
        declare(client, 1, "typed-queue", durable=True)
        client.send_frame(
            commands.Queue.Bind(queue="typed-queue", exchange="typed", arguments=arguments), 1
        )
        client.expect(commands.Queue.BindOk, 1)
    broker = broker_life.restart(kill=False)
    with raw_connection(broker) as client:
        publish_raw(client, 1, "typed", "", header_payload, b"1")
        assert_same_octets(get_raw(client, 1, "typed-queue"), header_payload, b"1")
        client.send_frame(
            commands.Queue.Unbind(queue="typed-queue", exchange="typed", arguments=arguments), 1
        )
        client.expect(commands.Queue.UnbindOk, 1)
        client.send_frame(commands.Confirm.Select(), 1)
        client.expect(commands.Confirm.SelectOk, 1)
        publish_raw(client, 1, "typed", "", header_payload, b"2")
        await_confirms(client, 1, 1)
        client.send_frame(commands.Basic.Get(queue="typed-queue", no_ack=True), 1)
        client.expect(commands.Basic.GetEmpty, 1)


# Octets the broker itself changes ----------------------------------------------------------------
# Where the broker must add header fields (x-delivery-count on redelivery, x-death on
# dead-lettering) every other field and property must keep its octets.

#: Spec 4.2.5.5 (RabbitMQ errata): the octets after the type tag of each fixed-size field type.
FIXED_FIELD_SIZES = {b"t": 1, b"b": 1, b"B": 1, b"s": 2, b"u": 2, b"I": 4, b"i": 4, b"l": 8}
FIXED_FIELD_SIZES |= {b"f": 4, b"d": 8, b"D": 5, b"T": 8, b"V": 0}
#: Property octets by spec name: a short string, a table, an octet or a timestamp.
PROPERTY_KINDS = dict.fromkeys(SPEC_NAMES, "shortstr") | {
    "headers": "table",
    "delivery-mode": "octet",
    "priority": "octet",
    "timestamp": "timestamp",
}


def split_properties(header_payload: bytes) -> dict[str, bytes]:
    """A content header's property list as {spec name: the property's octets}."""
    (flags,) = struct.unpack_from(">H", header_payload, 12)
    offset, found = 14, {}
    for bit, spec_name in zip(range(15, 1, -1), SPEC_NAMES, strict=True):
        if flags & (1 << bit):
            kind = PROPERTY_KINDS[spec_name]
            if kind == "shortstr":
                size = 1 + header_payload[offset]
            elif kind == "table":
                size = 4 + struct.unpack_from(">I", header_payload, offset)[0]
            else:
                size = 1 if kind == "octet" else 8
            found[spec_name] = header_payload[offset : offset + size]
            offset += size
    assert offset == len(header_payload)
    return found


def split_table(octets: bytes) -> dict[bytes, bytes]:
    """A field table's entries as {name octets: typed value octets}, in their order."""
    entries, offset = {}, 4
    assert struct.unpack_from(">I", octets)[0] == len(octets) - 4
    while offset < len(octets):
        name = octets[offset + 1 : offset + 1 + octets[offset]]
        offset += 1 + octets[offset]
        tag = octets[offset : offset + 1]
        if tag in FIXED_FIELD_SIZES:
            size = 1 + FIXED_FIELD_SIZES[tag]
        else:
            assert tag in (b"S", b"x", b"A", b"F"), tag
            size = 5 + struct.unpack_from(">I", octets, offset + 1)[0]
        entries[name] = octets[offset : offset + size]
        offset += size
    return entries


#: What RabbitMQ would route and pass through but pamqp cannot encode again as it came: a double,
#: an unsigned octet, a long string that is not UTF-8, timestamps pamqp reads as milliseconds,
#: and a cluster-id (pamqp: "cluster_id must be empty").
NOT_REENCODABLE = {
    "headers": table(
        (b"double", double(0.1)),
        (b"uint8", field(b"B", ">B", 255)),
        (b"longstr-not-utf8", b"S" + long_string(b"\xff\xfe")),
        (b"timestamp-max", field(b"T", ">Q", LATEST_FIELD_TIMESTAMP)),
    ),
    "correlation-id": short_string(b"\x00corr"),
    "timestamp": struct.pack(">Q", LATEST_PROPERTY_TIMESTAMP),
    "cluster-id": short_string(b"cluster-1"),
}


def assert_only_fields_added(
    got: bytes, sent: bytes, added: set[bytes], removed_properties: frozenset[str] = frozenset()
) -> None:
    """`got` is `sent` with the header fields `added` (and nothing else) added, and the
    properties `removed_properties` removed: every other octet as sent."""
    got_properties, sent_properties = split_properties(got), split_properties(sent)
    got_fields = split_table(got_properties.pop("headers"))
    sent_fields = split_table(sent_properties.pop("headers"))
    assert got_properties == {
        name: octets for name, octets in sent_properties.items() if name not in removed_properties
    }
    assert set(got_fields) - set(sent_fields) == added
    assert {name: got_fields[name] for name in sent_fields} == sent_fields


def test_a_redelivered_message_keeps_its_octets_beside_its_delivery_count(broker: RunningBroker):
    """Issue: every property and field "reaches the consumer unchanged". A queue with a
    delivery limit adds x-delivery-count to a message it delivers again (RabbitMQ, quorum
    queues); every other header field and property keeps its octets."""
    sent = content_header(4, NOT_REENCODABLE)
    with raw_connection(broker) as client:
        client.send_frame(
            commands.Queue.Declare(queue="limited", arguments={"x-delivery-limit": 5}), 1
        )
        client.expect(commands.Queue.DeclareOk, 1)
        publish_raw(client, 1, "", "limited", sent, b"body")
        client.send_frame(commands.Basic.Get(queue="limited"), 1)
        first = read_content(client, 1, commands.Basic.GetOk)
        assert isinstance(first.method, commands.Basic.GetOk)
        assert first.header_payload == sent
        client.send_frame(commands.Basic.Nack(delivery_tag=first.method.delivery_tag), 1)
        again = get_raw(client, 1, "limited")
    assert again.body == b"body"
    assert_only_fields_added(again.header_payload, sent, {b"x-delivery-count"})


def test_a_dead_lettered_message_keeps_its_octets_beside_its_death(broker: RunningBroker):
    """Issue: every property and field "reaches the consumer unchanged". Dead-lettering adds
    x-death and x-first-death-* and removes the expiration (RabbitMQ, "Dead-Lettered Effects on
    Messages"); every other header field and property keeps its octets."""
    sent = content_header(4, {**NOT_REENCODABLE, "expiration": short_string(ONE_DAY_MS)})
    with raw_connection(broker) as client:
        declare(client, 1, "dead", durable=False)
        client.send_frame(
            commands.Queue.Declare(
                queue="doomed",
                arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
            ),
            1,
        )
        client.expect(commands.Queue.DeclareOk, 1)
        publish_raw(client, 1, "", "doomed", sent, b"body")
        client.send_frame(commands.Basic.Get(queue="doomed"), 1)
        first = read_content(client, 1, commands.Basic.GetOk)
        assert isinstance(first.method, commands.Basic.GetOk)
        client.send_frame(
            commands.Basic.Reject(delivery_tag=first.method.delivery_tag, requeue=False), 1
        )
        dead = get_raw(client, 1, "dead")
    assert dead.body == b"body"
    added = {b"x-death", b"x-first-death-reason", b"x-first-death-queue"}
    added |= {b"x-first-death-exchange"}
    assert_only_fields_added(dead.header_payload, sent, added, frozenset({"expiration"}))


# pika -------------------------------------------------------------------------------------------


def pika_headers() -> dict[object, object]:
    """Every field type pika 1.4 encodes (it has no float: UnsupportedAMQPFieldException): long
    strings ('S', empty too), bytes as byte arrays ('x', not UTF-8 and every octet value),
    booleans, integers ('I' and 'l'), decimals, timestamps, nested tables, arrays (mixed, nested,
    empty) and void."""
    return {
        "text": "ünïcödé ✓ 𝄞",
        "empty-text": "",
        "": "empty field name",
        "bytes": b"\xff\xfe\x00\x80",
        "bytes-every-value": bytes(range(256)),
        "bytes-empty": b"",
        "true": True,
        "false": False,
        "int32-min": -(2**31),
        "int64-min": -(2**63),
        "int64-max": 2**63 - 1,
        "decimal": decimal.Decimal("-123.45"),
        "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC),
        "table-empty": {},
        "nested": {"level-2": {"level-3": {"level-4": {"deep": "here"}}}},
        "array-empty": [],
        "array-mixed": [1, "two", b"\x03", None, True, decimal.Decimal("0.5"), {"k": [[]]}],
        "void": None,
    }


def every_pika_property(username: str) -> pika.BasicProperties:
    """All fourteen basic properties; one empty, one with a zero octet, and the last timestamp
    pamqp decodes (pika gives it as an integer)."""
    return pika.BasicProperties(
        content_type="application/json",
        content_encoding="",
        headers=pika_headers(),
        delivery_mode=2,
        priority=9,
        correlation_id="\x00corr",
        reply_to="réponse",
        expiration=ONE_DAY_MS.decode(),
        message_id="ünïcödé ✓ 𝄞",
        timestamp=LATEST_PROPERTY_TIMESTAMP,
        type="order.created",
        user_id=username,
        app_id="a" * 255,
        cluster_id="cluster-1",
    )


def pika_properties_of(properties: pika.BasicProperties) -> dict[str, object]:
    return {attribute: getattr(properties, attribute) for _, attribute in PROPERTY_ORDER}


@contextlib.contextmanager
def pika_channel(broker: RunningBroker) -> Iterator[BlockingChannel]:
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        yield connection.channel()


def pika_consume(channel: BlockingChannel, queue: str, count: int):
    """`count` deliveries through basic.consume: (properties, body) each."""
    received = []
    for method, properties, body in channel.consume(queue, auto_ack=True, inactivity_timeout=5):
        assert method is not None, "nothing delivered within 5 s"
        received.append((properties, body))
        if len(received) == count:
            break
    channel.cancel()
    return received


@pytest.mark.parametrize("exchange", ["", "amq.headers"], ids=["default", "headers"])
def test_pika_every_property_and_header_arrives_through_get_and_consume(
    broker: RunningBroker, exchange: str
) -> None:
    """Issue: every property and field-table value "reaches the consumer unchanged". pika
    publishes all fourteen properties (user-id the login user, RabbitMQ "Validated User-ID") and
    every field type it can encode, with empty, every-byte-value and many-frame bodies; pika
    gets the same back through basic.get and basic.consume, through the default exchange and
    through a headers exchange (which decodes the headers to route)."""
    sent = every_pika_property(broker.username)
    bodies = [b"", bytes(range(256)), os.urandom(3 * 131072 + 17)]
    with pika_channel(broker) as channel:
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, "amq.headers", arguments={"x-match": "any", "true": True})
        for body in bodies * 2:
            channel.basic_publish(exchange, queue, body, sent)
        for body in bodies:
            _method, properties, got = channel.basic_get(queue, auto_ack=True)
            assert got == body
            assert pika_properties_of(properties) == pika_properties_of(sent)
        for body, (properties, got) in zip(
            bodies, pika_consume(channel, queue, len(bodies)), strict=True
        ):
            assert got == body
            assert pika_properties_of(properties) == pika_properties_of(sent)


def test_pika_each_property_unset_stays_unset(broker: RunningBroker):
    """Spec 4.2.6.1: a property whose flag is clear is absent. With pika: no property at all,
    then all fourteen but one, for each one; every unset one arrives unset (None), every set one
    with its value."""
    everything = pika_properties_of(every_pika_property(broker.username))
    variants = [dict.fromkeys(everything)]
    for attribute in everything:
        variants.append({**everything, attribute: None})
    with pika_channel(broker) as channel:
        queue = channel.queue_declare("", exclusive=True).method.queue
        for values in variants:
            channel.basic_publish("", queue, b"x", pika.BasicProperties(**values))
        for values in variants:
            _method, properties, _body = channel.basic_get(queue, auto_ack=True)
            assert pika_properties_of(properties) == values


def test_pika_empty_short_strings_arrive_empty_not_absent(broker: RunningBroker):
    """Issue: "empty strings". An empty short string is a present property of length 0 (spec
    4.2.5.3: "zero or more octets"), not an absent one: every short-string property set to ""
    arrives as "" (pika sends the flag for any value that is not None). Not the expiration:
    "" is no number of milliseconds, which RabbitMQ refuses too (406 "invalid expiration"); nor
    the user-id, which must be the login user."""
    not_strings = ("headers", "delivery_mode", "priority", "timestamp")
    empty = {
        attribute: ""
        for _, attribute in PROPERTY_ORDER
        if attribute not in (*not_strings, "expiration", "user_id")
    }
    with pika_channel(broker) as channel:
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"", pika.BasicProperties(**empty, headers={"": ""}))
        _method, properties, body = channel.basic_get(queue, auto_ack=True)
    assert body == b""
    assert {attribute: getattr(properties, attribute) for attribute in empty} == empty
    assert properties.headers == {"": ""}


def test_pika_a_user_id_not_utf8_closes_the_publishers_connection(broker: RunningBroker):
    """Hardening: "the broker decodes and validates every property at the edge ... and closes the
    *publisher's* connection with the proper code (502 syntax-error ...)". A user-id that is not
    UTF-8 (spec 4.2.5.3: short strings carry UTF-8; pamqp, and so aio-pika, cannot decode it)
    is refused there, before RabbitMQ's "Validated User-ID" check could answer 406."""
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"x", pika.BasicProperties(user_id=b"gu\xffest"))
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            channel.basic_get(queue)
    assert closed.value.reply_code == 502
    assert "short string is not UTF-8" in closed.value.reply_text


# aio-pika ---------------------------------------------------------------------------------------


def same(left: object, right: object) -> bool:
    """Equal values of equal types; floats by their bits (NaN payloads, -0.0)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float) and isinstance(right, float):
        return struct.pack(">d", left) == struct.pack(">d", right)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same, left, right))
    return left == right


def float32(value: float) -> float:
    """What pamqp sends for a Python float: a 32-bit 'f' field."""
    result: float = struct.unpack(">f", struct.pack(">f", value))[0]
    return result


def aio_pika_headers() -> HeadersType:
    """Every field type pamqp encodes: floats (as 32-bit 'f'; -0.0 too, but no infinity or NaN,
    which pika cannot decode: amqp/properties.py), every integer width it picks, decimals, long
    strings (empty too), byte arrays, timestamps, nested tables, arrays and void."""
    return {
        "float": 0.5,
        "float-negative-zero": -0.0,
        "float-rounded": 0.1,
        "int8": -128,
        "int16": -32768,
        "uint16": 65535,
        "int32": -(2**31),
        "uint32": 2**32 - 1,
        "int64": -(2**63),
        "decimal": decimal.Decimal("-123.45"),
        "text": "ünïcödé ✓ 𝄞",
        "empty-text": "",
        "bytes": bytearray(range(256)),
        "bytes-empty": bytearray(),
        "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC),
        "nested": {"level-2": {"level-3": {"level-4": {"deep": True}}}},
        "table-empty": {},
        "array": [1, "two", [3.5, [None]], {"k": bytearray(b"\x00")}, False],
        "array-empty": [],
        "void": None,
    }


def expected_aio_pika_headers() -> HeadersType:
    """`aio_pika_headers` as received: what pamqp sent, so each float is its float32."""

    def sent(value: object) -> object:
        if isinstance(value, float):
            return float32(value)
        if isinstance(value, dict):
            return {name: sent(item) for name, item in value.items()}
        if isinstance(value, list):
            return [sent(item) for item in value]
        return value

    result = sent(aio_pika_headers())
    assert isinstance(result, dict)
    return result


def every_aio_pika_property(username: str, body: bytes) -> aio_pika.Message:
    """The thirteen properties aio-pika can set (pamqp refuses a cluster-id: "cluster_id must be
    empty")."""
    return aio_pika.Message(
        body,
        headers=aio_pika_headers(),
        content_type="application/json",
        content_encoding="gzip",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        priority=9,
        correlation_id="corr-ünï",
        reply_to="réponse",
        expiration=86400,
        message_id="message-1",
        timestamp=datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        type="order.created",
        user_id=username,
        app_id="a" * 255,
    )


def assert_aio_pika_properties(received: AbstractIncomingMessage, sent: aio_pika.Message):
    assert same(received.headers, expected_aio_pika_headers())
    for attribute in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
    ):
        assert getattr(received, attribute) == getattr(sent, attribute), attribute


@pytest.fixture
async def aio_channel(broker: RunningBroker):
    connection = await aio_pika.connect(broker.url)
    try:
        yield await connection.channel()
    finally:
        await connection.close()


@pytest.mark.parametrize("exchange_name", ["", "amq.headers"], ids=["default", "headers"])
async def test_aio_pika_every_property_and_header_arrives_through_get_and_consume(
    broker: RunningBroker, aio_channel: AbstractChannel, exchange_name: str
) -> None:
    """Issue: every property and field-table value "reaches the consumer unchanged". aio-pika
    publishes every property it can set and every field type pamqp encodes, with empty,
    every-byte-value and many-frame bodies, on a confirm channel; aio-pika receives them the
    same through basic.get and basic.consume, through the default and a headers exchange."""
    bodies = [b"", bytes(range(256)), os.urandom(3 * 131072 + 17)]
    queue = await aio_channel.declare_queue(exclusive=True)
    await queue.bind("amq.headers", arguments={"x-match": "any", "void": None})
    exchange = (
        aio_channel.default_exchange
        if exchange_name == ""
        else await aio_channel.get_exchange(exchange_name, ensure=False)
    )
    for body in bodies * 2:
        message = every_aio_pika_property(broker.username, body)
        await exchange.publish(message, routing_key=queue.name)
    for body in bodies:
        received = await queue.get(no_ack=True)
        assert received.body == body
        assert_aio_pika_properties(received, every_aio_pika_property(broker.username, body))
    async with queue.iterator(no_ack=True) as deliveries:
        for body in bodies:
            received = await anext(deliveries)
            assert received.body == body
            assert_aio_pika_properties(received, every_aio_pika_property(broker.username, body))


async def test_aio_pika_receives_exactly_what_a_raw_publisher_sent(
    broker: RunningBroker, aio_channel: AbstractChannel
) -> None:
    """Issue: "doubles" reach the consumer unchanged. pamqp writes floats as 32-bit 'f', so the
    doubles ('d': 0.1 and 1/3, which no float32 holds, -0.0, the subnormal minimum, the
    maximum), and the 'B' octet type, come from a raw publisher; aio-pika decodes each header
    to exactly the value sent, at every depth, and every property too."""
    queue = await aio_channel.declare_queue(exclusive=True)
    properties = every_property(broker.username)
    properties["timestamp"] = struct.pack(">Q", 1_704_164_645)
    with raw_connection(broker) as client:
        publish_raw(client, 1, "", queue.name, content_header(3, properties), b"raw")
        client.send_frame(commands.Basic.Qos(prefetch_count=1), 1)  # a sync point
        client.expect(commands.Basic.QosOk, 1)
    received = await queue.get(no_ack=True)
    assert received.body == b"raw"
    assert same(received.headers, DECODED_FIELDS)
    assert received.timestamp == datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert (received.content_type, received.reply_to, received.app_id) == (
        "application/vnd.fidelity+octets",
        "réponse",
        "a" * 255,
    )
    assert (received.priority, received.delivery_mode, received.user_id) == (
        9,
        aio_pika.DeliveryMode.PERSISTENT,
        broker.username,
    )
    assert received.expiration == 86400
