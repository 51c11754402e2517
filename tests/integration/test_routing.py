"""Routing with real clients: alternate exchanges, the headers exchange on every AMQP field type,
and Qpid's selector bindings (x-filter-jms-selector).

The alternate-exchange and headers tests were written against RabbitMQ 3.10.8 first
(`--amqp-url`), so they encode what RabbitMQ does; selector bindings are not a RabbitMQ feature
and run on BatonMQ only (the `batonmq` fixture). Names are unique per test and every exchange a
test declares is deleted afterwards, because the --amqp-url broker is shared.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import functools
import struct
import uuid
from collections.abc import Iterator

import aio_pika
import pika
import pytest
from pamqp import commands, header
from pamqp.body import ContentBody
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from tests.brokerproc import BrokerLife, RunningBroker
from tests.rawclient import RawClient, open_connection
from tests.wire import raw_frame

pytestmark = pytest.mark.integration

AE = "alternate-exchange"
SELECTOR = "x-filter-jms-selector"


def unique(kind: str) -> str:
    return f"test.routing.{kind}.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def connection(broker: RunningBroker) -> Iterator[BlockingConnection]:
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as opened:
        yield opened


@pytest.fixture
def exchanges(broker: RunningBroker) -> Iterator[list[str]]:
    """Names of exchanges the test declares; each is deleted at teardown."""
    names: list[str] = []
    yield names
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as cleanup:
        channel = cleanup.channel()
        for name in names:
            channel.exchange_delete(name)


def declare(
    channel: BlockingChannel, exchanges: list[str], kind: str, exchange_type: str, **options
) -> str:
    name = unique(kind)
    channel.exchange_declare(name, exchange_type, **options)
    exchanges.append(name)
    return name


def exclusive_queue(channel: BlockingChannel) -> str:
    return channel.queue_declare("", exclusive=True).method.queue


def bodies(channel: BlockingChannel, queue: str) -> list[bytes]:
    """Every ready message of `queue`, taken with basic.get no-ack until get-empty."""
    found: list[bytes] = []
    while True:
        method, _properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return found
        found.append(body)


def returned(channel: BlockingChannel, exchange: str, routing_key: str) -> bool:
    """Publish a mandatory message on a confirm channel: True if the broker returned it."""
    try:
        channel.basic_publish(exchange, routing_key, b"mandatory", mandatory=True)
    except UnroutableError:
        return True
    return False


# Alternate exchanges ---------------------------------------------------------------------------


def test_unroutable_messages_go_to_the_alternate_exchange_and_are_not_returned(
    connection: BlockingConnection, exchanges: list[str]
) -> None:
    """RabbitMQ, "Alternate Exchanges": "Whenever an exchange with a configured AE cannot route a
    message to any queue, it publishes the message to the specified AE instead." A message the
    AE routes is routed: basic.publish mandatory ("if the message cannot be routed to a queue")
    does not return it."""
    channel = connection.channel()
    channel.confirm_delivery()
    alternate = declare(channel, exchanges, "ae", "fanout")
    orders = declare(channel, exchanges, "orders", "direct", arguments={AE: alternate})
    matched, unrouted = exclusive_queue(channel), exclusive_queue(channel)
    channel.queue_bind(matched, orders, "eu")
    channel.queue_bind(unrouted, alternate)
    channel.basic_publish(orders, "eu", b"eu order", mandatory=True)
    assert not returned(channel, orders, "us")
    assert bodies(channel, matched) == [b"eu order"]
    assert bodies(channel, unrouted) == [b"mandatory"]


def test_alternate_exchanges_chain_and_cycles_end_unrouted(
    connection: BlockingConnection, exchanges: list[str]
) -> None:
    """An AE that cannot route the message either passes it to its own AE; exchanges whose AEs
    form a cycle route nothing, and the message is returned to a mandatory publisher."""
    channel = connection.channel()
    channel.confirm_delivery()
    last = declare(channel, exchanges, "last", "fanout")
    middle = declare(channel, exchanges, "middle", "topic", arguments={AE: last})
    first = declare(channel, exchanges, "first", "direct", arguments={AE: middle})
    queue = exclusive_queue(channel)
    channel.queue_bind(queue, last)
    assert not returned(channel, first, "k")
    assert bodies(channel, queue) == [b"mandatory"]
    name_a, name_b = unique("cycle-a"), unique("cycle-b")
    channel.exchange_declare(name_a, "direct", arguments={AE: name_b})
    exchanges.append(name_a)
    channel.exchange_declare(name_b, "direct", arguments={AE: name_a})
    exchanges.append(name_b)
    assert returned(channel, name_a, "k")
    looped = unique("self")
    channel.exchange_declare(looped, "direct", arguments={AE: looped})
    exchanges.append(looped)
    assert returned(channel, looped, "k")


def test_a_missing_alternate_exchange_drops_the_message(
    connection: BlockingConnection, exchanges: list[str]
) -> None:
    """RabbitMQ accepts an AE that does not exist; an unroutable message then goes nowhere and a
    mandatory one is returned. Declared later, the AE takes effect."""
    channel = connection.channel()
    channel.confirm_delivery()
    missing = unique("missing-ae")
    orders = declare(channel, exchanges, "orders", "direct", arguments={AE: missing})
    assert returned(channel, orders, "k")
    channel.exchange_declare(missing, "fanout")
    exchanges.append(missing)
    queue = exclusive_queue(channel)
    channel.queue_bind(queue, missing)
    assert not returned(channel, orders, "k")
    assert bodies(channel, queue) == [b"mandatory"]


def test_the_alternate_exchange_is_not_used_when_a_binding_to_an_exchange_matched(
    connection: BlockingConnection, exchanges: list[str]
) -> None:
    """RabbitMQ (rabbit_exchange:route/2, process_alternate) uses the AE only when the exchange's
    own bindings match no destination; a binding to an exchange that routes the message nowhere
    is a match. That exchange's own AE is used, as for any exchange the message goes through."""
    channel = connection.channel()
    channel.confirm_delivery()
    alternate = declare(channel, exchanges, "ae", "fanout")
    inner_alternate = declare(channel, exchanges, "inner-ae", "fanout")
    outer = declare(channel, exchanges, "outer", "direct", arguments={AE: alternate})
    inner = declare(channel, exchanges, "inner", "direct")
    ae_queue, inner_ae_queue = exclusive_queue(channel), exclusive_queue(channel)
    channel.queue_bind(ae_queue, alternate)
    channel.queue_bind(inner_ae_queue, inner_alternate)
    channel.exchange_bind(inner, outer, "k")
    assert returned(channel, outer, "k")
    channel.exchange_delete(inner)
    channel.exchange_declare(inner, "direct", arguments={AE: inner_alternate})
    channel.exchange_bind(inner, outer, "k")
    assert not returned(channel, outer, "k")
    assert bodies(channel, inner_ae_queue) == [b"mandatory"]
    assert bodies(channel, ae_queue) == []


def test_redeclaring_with_another_alternate_exchange_is_precondition_failed(
    connection: BlockingConnection, exchanges: list[str]
) -> None:
    """AMQP 0-9-1 exchange.declare: "If [the exchange] exists, the server MUST check that the
    existing exchange has the same values for type, durable, and arguments fields"; RabbitMQ
    compares alternate-exchange among the arguments and answers 406 "inequivalent arg"."""
    channel = connection.channel()
    orders = declare(channel, exchanges, "orders", "direct", arguments={AE: "ae-one"})
    channel.exchange_declare(orders, "direct", arguments={AE: "ae-one", "x-other": 1})
    with pytest.raises(ChannelClosedByBroker) as closed:
        channel.exchange_declare(orders, "direct", arguments={AE: "ae-two"})
    assert closed.value.reply_code == 406
    assert closed.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange '{orders}' in "
        "vhost '/': received 'ae-two' but current is 'ae-one'"
    )
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as closed:
        channel.exchange_declare(orders, "direct")
    assert closed.value.reply_text.endswith(
        "received none but current is the value 'ae-one' of type 'longstr'"
    )


def test_an_alternate_exchange_that_is_not_a_string_is_precondition_failed(
    connection: BlockingConnection,
) -> None:
    """RabbitMQ (exchange.declare): "invalid type '~ts' for arg '~ts' in ~ts"; pika sends a small
    int as a signedint."""
    channel = connection.channel()
    name = unique("bad-ae")
    with pytest.raises(ChannelClosedByBroker) as closed:
        channel.exchange_declare(name, "direct", arguments={AE: 5})
    assert closed.value.reply_code == 406
    assert closed.value.reply_text == (
        f"PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange "
        f"'{name}' in vhost '/'"
    )


# The headers exchange on every field type -------------------------------------------------------
#
# Clients pick a value's wire type for us (pika sends every small int as a signedint, pamqp the
# narrowest integer, pika cannot send floats), so these field tables are written octet by octet.


def _shortstr(text: str) -> bytes:
    encoded = text.encode()
    return bytes([len(encoded)]) + encoded


def _longstr(octets: bytes) -> bytes:
    return struct.pack(">I", len(octets)) + octets


class Field:
    """Field-table values with the wire type chosen by the test (AMQP 0-9-1 4.2.5.5, with
    RabbitMQ's type letters)."""

    void = b"V"

    @staticmethod
    def byte(value: int) -> bytes:
        return b"b" + struct.pack(">b", value)

    @staticmethod
    def ubyte(value: int) -> bytes:
        return b"B" + struct.pack(">B", value)

    @staticmethod
    def short(value: int) -> bytes:
        return b"s" + struct.pack(">h", value)

    @staticmethod
    def ushort(value: int) -> bytes:
        return b"u" + struct.pack(">H", value)

    @staticmethod
    def int(value: int) -> bytes:
        return b"I" + struct.pack(">i", value)

    @staticmethod
    def uint(value: int) -> bytes:
        return b"i" + struct.pack(">I", value)

    @staticmethod
    def long(value: int) -> bytes:
        return b"l" + struct.pack(">q", value)

    @staticmethod
    def float(value: float) -> bytes:
        return b"f" + struct.pack(">f", value)

    @staticmethod
    def double(value: float) -> bytes:
        return b"d" + struct.pack(">d", value)

    @staticmethod
    def timestamp(seconds: int) -> bytes:
        return b"T" + struct.pack(">Q", seconds)

    @staticmethod
    def bool(value: bool) -> bytes:
        return b"t" + bytes([value])

    @staticmethod
    def decimal(scale: int, unscaled: int) -> bytes:
        return b"D" + struct.pack(">Bi", scale, unscaled)

    @staticmethod
    def longstr(value: str | bytes) -> bytes:
        return b"S" + _longstr(value.encode() if isinstance(value, str) else value)

    @staticmethod
    def bytes(value: bytes) -> bytes:
        return b"x" + _longstr(value)

    @staticmethod
    def table(*fields: tuple[str, bytes]) -> bytes:
        return b"F" + _longstr(_table_body(fields))

    @staticmethod
    def array(*values: bytes) -> bytes:
        return b"A" + _longstr(b"".join(values))


def _table_body(fields: tuple[tuple[str, bytes], ...]) -> bytes:
    return b"".join(_shortstr(name) + value for name, value in fields)


def _method(channel: int, class_id: int, method_id: int, arguments: bytes) -> bytes:
    return raw_frame(1, channel, struct.pack(">HH", class_id, method_id) + arguments)


def bind_raw(client: RawClient, queue: str, exchange: str, *fields: tuple[str, bytes]) -> None:
    """queue.bind (class 50, method 20) with a hand-typed arguments table."""
    arguments = b"\x00\x00" + _shortstr(queue) + _shortstr(exchange) + _shortstr("") + b"\x00"
    client.send(_method(1, 50, 20, arguments + _longstr(_table_body(fields))))
    client.expect(commands.Queue.BindOk, 1)


def publish_raw(client: RawClient, exchange: str, body: bytes, *fields: tuple[str, bytes]) -> None:
    """basic.publish (60, 40) and a content header whose only property is hand-typed headers."""
    publish = b"\x00\x00" + _shortstr(exchange) + _shortstr("") + b"\x00"
    content_header = struct.pack(">HHQH", 60, 0, len(body), 0x2000) + _longstr(_table_body(fields))
    client.send(
        _method(1, 60, 40, publish) + raw_frame(2, 1, content_header) + raw_frame(3, 1, body)
    )


def get_all(client: RawClient, queue: str) -> list[bytes]:
    found: list[bytes] = []
    while True:
        client.send_frame(commands.Basic.Get(queue=queue, no_ack=True), 1)
        _channel, reply = client.read_frame()
        if isinstance(reply, commands.Basic.GetEmpty):
            return found
        assert isinstance(reply, commands.Basic.GetOk), reply
        client.expect(header.ContentHeader, 1)
        found.append(client.expect(ContentBody, 1).value)


def headers_matches(
    broker: RunningBroker, cases: dict[str, tuple[bytes, bytes]]
) -> dict[str, bool]:
    """For each case (binding value, header value): bind a queue with x-match=all and the binding
    value under the case's name, publish a message with the header value under that name, and
    say whether the queue got it."""
    with contextlib.closing(open_connection(broker)) as client:
        exchange = unique("headers")
        client.send_frame(commands.Exchange.Declare(exchange=exchange, exchange_type="headers"), 1)
        client.expect(commands.Exchange.DeclareOk, 1)
        queues = {}
        for name, (binding_value, _header_value) in cases.items():
            queues[name] = client.declare_queue(1)
            bind_raw(
                client,
                queues[name],
                exchange,
                ("x-match", Field.longstr("all")),
                (name, binding_value),
            )
        for name, (_binding_value, header_value) in cases.items():
            publish_raw(client, exchange, name.encode(), (name, header_value))
        matched = {name: get_all(client, queue) for name, queue in queues.items()}
        client.send_frame(commands.Exchange.Delete(exchange=exchange), 1)
        client.expect(commands.Exchange.DeleteOk, 1)
    assert all(found in ([], [name.encode()]) for name, found in matched.items()), matched
    return {name: bool(found) for name, found in matched.items()}


def test_headers_exchange_compares_every_field_type_as_rabbitmq_does(broker: RunningBroker):
    """RabbitMQ (rabbit_exchange_type_headers) compares a binding value with a header with
    Erlang's == on the decoded values: every integer width is an integer and 1 == 1.0; a
    timestamp is its integer seconds; a long string and a byte array are the same octets; a
    boolean is not a number; a decimal is (scale, value), so 1.5 is not 1.50; in a nested table
    or array each element keeps its type. A void binding value means "simple presence of the
    corresponding data field", and a void header equals no value."""
    F = Field
    nested = F.table(("a", F.int(1)), ("b", F.longstr("x")))
    cases = {
        # binding value, header value, whether RabbitMQ 3.10.8 routes
        "byte~long": (F.byte(1), F.long(1), True),
        "ubyte~int": (F.ubyte(7), F.int(7), True),
        "short~short-negative": (F.short(-7), F.short(-7), True),
        "ushort~short": (F.ushort(7), F.short(7), True),
        "uint~byte": (F.uint(7), F.byte(7), True),
        "long~long": (F.long(-(2**40)), F.long(-(2**40)), True),
        "int~int-other": (F.int(7), F.int(8), False),
        "double~int": (F.double(1.0), F.int(1), True),
        "float~double": (F.float(1.5), F.double(1.5), True),
        "decimal~decimal": (F.decimal(1, 15), F.decimal(1, 15), True),
        "decimal~decimal-scale": (F.decimal(1, 15), F.decimal(2, 150), False),
        "decimal~int": (F.decimal(0, 1), F.int(1), False),
        "bool~bool": (F.bool(True), F.bool(True), True),
        "bool~byte": (F.bool(True), F.byte(1), False),
        "bool~longstr": (F.bool(True), F.longstr("true"), False),
        "longstr~bytes": (F.longstr("abc"), F.bytes(b"abc"), True),
        "longstr~bytes-non-utf8": (F.longstr(b"\xff\x00"), F.bytes(b"\xff\x00"), True),
        "longstr~longstr-case": (F.longstr("abc"), F.longstr("ABC"), False),
        "timestamp~long": (F.timestamp(1_700_000_000), F.long(1_700_000_000), True),
        "timestamp~timestamp": (F.timestamp(1_700_000_000), F.timestamp(1_700_000_000), True),
        "timestamp~double": (F.timestamp(1_700_000_000), F.double(1_700_000_000.0), True),
        "table~table": (nested, nested, True),
        "table~table-bytes": (F.table(("a", F.longstr("x"))), F.table(("a", F.bytes(b"x"))), False),
        "table~table-double": (F.table(("a", F.int(1))), F.table(("a", F.double(1.0))), False),
        "array~array": (
            F.array(F.int(1), F.longstr("x"), F.void),
            F.array(F.int(1), F.longstr("x"), F.void),
            True,
        ),
        "array~array-order": (F.array(F.int(1), F.int(2)), F.array(F.int(2), F.int(1)), False),
        "void~longstr": (F.void, F.longstr("anything"), True),
        "void~void": (F.void, F.void, True),
        "void~table": (F.void, F.table(), True),
        "longstr-empty~void": (F.longstr(""), F.void, False),
        "byte-zero~void": (F.byte(0), F.void, False),
    }
    matched = headers_matches(
        broker, {name: (binding, value) for name, (binding, value, _) in cases.items()}
    )
    assert matched == {name: routes for name, (_, _, routes) in cases.items()}


def test_what_batonmq_cannot_tell_apart_in_nested_values_it_takes_as_equal(
    batonmq: RunningBroker,
):
    """Where BatonMQ differs from RabbitMQ 3.10.8, which routes none of these: RabbitMQ compares
    a nested table or array by its encoding, so integer widths and key order count there. BatonMQ
    decodes field tables (pamqp) to Python values, which keep neither, and a binding's identity
    already ignores key order; it routes them all."""
    matched = headers_matches(
        batonmq,
        {
            "table~table-width": (
                Field.table(("a", Field.int(1))),
                Field.table(("a", Field.byte(1))),
            ),
            "array~array-width": (Field.array(Field.long(1)), Field.array(Field.short(1))),
            "table~table-order": (
                Field.table(("a", Field.int(1)), ("b", Field.int(2))),
                Field.table(("b", Field.int(2)), ("a", Field.int(1))),
            ),
        },
    )
    assert all(matched.values()), matched


async def test_headers_bound_by_aio_pika_match_what_pika_publishes(
    broker: RunningBroker, connection: BlockingConnection, exchanges: list[str]
) -> None:
    """Two real clients that encode the same values differently: aio-pika (pamqp) sends an int
    as the narrowest integer type and a float as a float, pika an int as a signedint and bytes
    as a byte array; RabbitMQ matches by value, and so does BatonMQ. x-match any-with-x also
    compares x- headers, all ignores them. The nested table is sent in pamqp's order (it sorts
    keys): RabbitMQ compares a nested table with its key order."""
    publisher = connection.channel()
    publisher.confirm_delivery()
    exchange = declare(publisher, exchanges, "headers", "headers")
    moment = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    bindings = {
        "int": {"x-match": "all", "count": 7, "x-ignored": "never sent"},
        "float": {"x-match": "all", "ratio": 2.0},
        "text": {"x-match": "all", "raw": "caf\u00e9"},
        "when": {"x-match": "all", "when": moment},
        "decimal": {"x-match": "all", "price": decimal.Decimal("1.25")},
        "nested": {"x-match": "all", "meta": {"tags": ["a", "b"], "region": "eu"}},
        "presence": {"x-match": "any", "trace": None, "absent": 1},
        "with-x": {"x-match": "any-with-x", "x-tenant": "acme"},
    }
    connected = await aio_pika.connect(broker.url)
    async with connected:
        channel = await connected.channel()
        headers_exchange = await channel.get_exchange(exchange)
        queues = {}
        for name, arguments in bindings.items():
            queues[name] = await channel.declare_queue(exclusive=True)
            await queues[name].bind(headers_exchange, arguments=arguments)
        headers = {
            "count": 7,
            "ratio": 2,
            "raw": "caf\u00e9".encode(),
            "when": moment,
            "price": decimal.Decimal("1.25"),
            "meta": {"region": "eu", "tags": ["a", "b"]},
            "trace": "anything",
            "x-tenant": "acme",
        }
        publisher.basic_publish(exchange, "", b"all types", pika.BasicProperties(headers=headers))
        publisher.basic_publish(
            exchange,
            "",
            b"other values",
            pika.BasicProperties(
                headers={
                    "count": 8,
                    "ratio": 3,
                    "raw": "cafe",
                    "price": decimal.Decimal("1.2"),
                    "meta": {"tags": ["a"], "region": "eu"},
                    "x-tenant": "other",
                }
            ),
        )
        routed = {}
        for name, queue in queues.items():
            routed[name] = []
            while (message := await queue.get(no_ack=True, fail=False)) is not None:
                routed[name].append(message.body)
    assert routed == {name: [b"all types"] for name in bindings}


# Selector bindings (Qpid's x-filter-jms-selector; BatonMQ only) --------------------------------


def test_a_selector_binding_routes_only_the_messages_it_selects(batonmq: RunningBroker) -> None:
    """Qpid: a binding with the argument x-filter-jms-selector matches only messages whose
    headers and properties satisfy the JMS selector (JMS 1.1 "Message Selectors"); two bindings
    of one queue that differ only in their selector are two bindings."""
    with pika.BlockingConnection(pika.URLParameters(batonmq.url)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("orders", "topic")
        urgent, eu_large = exclusive_queue(channel), exclusive_queue(channel)
        channel.queue_bind(urgent, "orders", "orders.#", arguments={SELECTOR: "JMSPriority > 6"})
        channel.queue_bind(eu_large, "orders", "orders.eu.*", arguments={SELECTOR: "total >= 100"})
        channel.queue_bind(
            eu_large, "orders", "orders.eu.*", arguments={SELECTOR: "vip = TRUE AND total > 0"}
        )
        sent = [
            ("orders.eu.fr", {"total": 250}, 1, b"large"),
            ("orders.eu.fr", {"total": 5, "vip": True}, 1, b"vip"),
            ("orders.eu.fr", {"total": 5}, 9, b"urgent small"),
            ("orders.us.ny", {"total": 500}, 1, b"us large"),
            ("orders.eu.de", {}, 0, b"nothing known"),
        ]
        for routing_key, headers, priority, body in sent:
            properties = pika.BasicProperties(headers=headers, priority=priority)
            channel.basic_publish("orders", routing_key, body, properties)
        assert bodies(channel, urgent) == [b"urgent small"]
        assert bodies(channel, eu_large) == [b"large", b"vip"]
        channel.queue_unbind(
            eu_large, "orders", "orders.eu.*", arguments={SELECTOR: "total >= 100"}
        )
        channel.basic_publish(
            "orders", "orders.eu.fr", b"large again", pika.BasicProperties(headers={"total": 250})
        )
        assert bodies(channel, eu_large) == []


@pytest.mark.parametrize("method", ["queue.bind", "exchange.bind"])
def test_a_selector_that_does_not_parse_is_precondition_failed_naming_its_position(
    batonmq: RunningBroker, method: str
) -> None:
    """JMS 1.1: an invalid selector is refused (InvalidSelectorException); BatonMQ closes the
    channel with 406 PRECONDITION_FAILED, and the reply text says where the error is."""
    with pika.BlockingConnection(pika.URLParameters(batonmq.url)) as connection:
        channel = connection.channel()
        channel.exchange_declare("source", "direct")
        channel.exchange_declare("target", "fanout")
        queue = exclusive_queue(channel)
        arguments = {SELECTOR: "colour = 'red' AND AND size > 2"}
        bind = (
            functools.partial(channel.queue_bind, queue)
            if method == "queue.bind"
            else functools.partial(channel.exchange_bind, "target")
        )
        with pytest.raises(ChannelClosedByBroker) as closed:
            bind("source", "k", arguments=arguments)
        assert closed.value.reply_code == 406
        assert "x-filter-jms-selector" in closed.value.reply_text
        assert "position 19" in closed.value.reply_text


def test_an_exchange_to_exchange_binding_filters_by_its_selector(batonmq: RunningBroker) -> None:
    with pika.BlockingConnection(pika.URLParameters(batonmq.url)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("source", "fanout")
        channel.exchange_declare("target", "fanout")
        channel.exchange_bind("target", "source", arguments={SELECTOR: "JMSType = 'refund'"})
        queue = exclusive_queue(channel)
        channel.queue_bind(queue, "target")
        channel.basic_publish("source", "", b"refund", pika.BasicProperties(type="refund"))
        channel.basic_publish("source", "", b"sale", pika.BasicProperties(type="sale"))
        assert bodies(channel, queue) == [b"refund"]


def test_a_durable_selector_binding_keeps_its_selector_after_a_restart(
    broker_life: BrokerLife,
) -> None:
    """Spec (queue.bind): bindings between durable ends survive a restart; the binding comes back
    with its arguments, so it selects as before."""
    with pika.BlockingConnection(pika.URLParameters(broker_life.current.url)) as connection:
        channel = connection.channel()
        channel.exchange_declare("orders", "direct", durable=True)
        channel.queue_declare("large-orders", durable=True)
        channel.queue_bind("large-orders", "orders", "new", arguments={SELECTOR: "total > 100"})
    broker = broker_life.restart(kill=False)
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for total in (50, 500):
            properties = pika.BasicProperties(headers={"total": total})
            channel.basic_publish("orders", "new", str(total).encode(), properties)
        assert bodies(channel, "large-orders") == [b"500"]
        channel.queue_unbind("large-orders", "orders", "new", arguments={SELECTOR: "total > 100"})
        channel.basic_publish(
            "orders", "new", b"unbound", pika.BasicProperties(headers={"total": 500})
        )
        assert bodies(channel, "large-orders") == []
