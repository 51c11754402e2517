"""Nothing a client sends makes `Session.receive_data` raise (rule 7 of
`batonmq/amqp/connection.py`, carried through the engine): every error becomes a channel.close or
connection.close. Known ways in, then any sequence of valid client methods (hypothesis)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pamqp import base, commands, encode

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.frames import FrameReader, MethodFrame
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from tests.memclient import LOOPBACK_PEER, MemClient, connect
from tests.wire import raw_frame

Basic = commands.Basic
Queue = commands.Queue
Exchange = commands.Exchange
Channel = commands.Channel


def short_string(text: str) -> bytes:
    encoded = text.encode("utf-8")
    return bytes((len(encoded),)) + encoded


# Error texts that are not ASCII ------------------------------------------------------------------

#: 127 two-octet characters: a legal short string (254 octets) that pamqp's client-side validation
#: would refuse, so it is sent as raw bytes.
WIDE_NAME = "\u00e9" * 127


def test_a_channel_error_naming_a_wide_queue_name_closes_the_channel():
    """Domain reply-text is a short string: at most 255 octets. A 404 naming a queue of 127
    two-octet characters must still become channel.close (truncated to 255 octets), not an
    exception out of receive_data."""
    client, session = connect(Broker())
    payload = struct.pack(">IH", Basic.Get.index, 0) + short_string(WIDE_NAME) + b"\x00"
    client.send_bytes(raw_frame(1, 1, payload))
    close = client.expect(Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert len(close.reply_text.encode("utf-8")) <= 255
    assert session.connection.is_open


def test_a_connection_error_naming_a_wide_vhost_name_closes_the_connection():
    """The same for connection.close: 530 for an unknown vhost whose name is 127 two-octet
    characters."""
    client = MemClient(Session(Broker(), LOOPBACK_PEER, lambda: None))
    client.start()
    client.expect(commands.Connection.Tune)
    client.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    payload = struct.pack(">I", commands.Connection.Open.index) + short_string(WIDE_NAME)
    client.send_bytes(raw_frame(1, 0, payload + b"\x00\x00"))
    close = client.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED
    assert len(close.reply_text.encode("utf-8")) <= 255


def test_an_amqplain_response_nested_too_deep_is_refused_with_403():
    """AMQPLAIN's response is a field table; one nested 1500 tables deep is not a login, and
    must be refused like any other bad response (403), not crash the decoder's caller with
    RecursionError."""
    response = b"\x01kV"
    for _ in range(1500):
        response = b"\x01kF" + struct.pack(">I", len(response)) + response
    arguments = (
        encode.field_table({"capabilities": {"authentication_failure_close": True}})
        + short_string("AMQPLAIN")
        + struct.pack(">I", len(response))
        + response
        + short_string("en_US")
    )
    client = MemClient(Session(Broker(), LOOPBACK_PEER, lambda: None))
    client.send_header()
    client.expect(commands.Connection.Start)
    client.send_bytes(
        raw_frame(1, 0, struct.pack(">I", commands.Connection.StartOk.index) + arguments)
    )
    close = client.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED


# Any sequence of valid client methods ------------------------------------------------------------

#: Few names, so that methods meet the same queues and exchanges; "" (the default exchange, or
#: "the last queue declared") and amq.* (reserved) now and then.
queue_names = st.sampled_from(["q1", "q1", "q1", "q2", "q2", "q2", "", "amq.q"])
exchange_names = st.sampled_from(["x1", "x1", "x2", "amq.direct", "amq.topic", "amq.headers", ""])
keys = st.sampled_from(["", "q1", "q2", "a.b", "#", "*.b"])
tags = st.sampled_from(["", "", "", "c1", "c2"])
flags = st.booleans()
delivery_tags = st.integers(0, 8)
tables = st.sampled_from([{}, {"x-match": "any", "a": 1}, {"x-match": "all", "a": 1}, {"a": 1}])

#: The methods of the message flow, drawn often.
flow_methods: st.SearchStrategy[base.Frame] = st.one_of(
    st.builds(Basic.Qos, prefetch_count=st.integers(0, 3), global_=flags),
    st.builds(Basic.Consume, queue=queue_names, consumer_tag=tags, no_ack=flags, exclusive=flags),
    st.builds(Basic.Cancel, consumer_tag=st.sampled_from(["c1", "c2", "nobody"])),
    st.builds(Basic.Get, queue=queue_names, no_ack=flags),
    st.builds(Basic.Ack, delivery_tag=delivery_tags, multiple=flags),
    st.builds(Basic.Nack, delivery_tag=delivery_tags, multiple=flags, requeue=flags),
    st.builds(Basic.Reject, delivery_tag=delivery_tags, requeue=flags),
)

#: Everything else a client may send on a channel, drawn less often.
other_methods: st.SearchStrategy[base.Frame] = st.one_of(
    st.builds(Channel.Flow, active=flags),
    st.builds(
        Exchange.Declare,
        exchange=exchange_names,
        exchange_type=st.sampled_from(["direct", "fanout", "topic", "headers"]),
        passive=flags,
        durable=flags,
        auto_delete=flags,
        internal=flags,
        arguments=tables,
    ),
    st.builds(Exchange.Delete, exchange=exchange_names, if_unused=flags),
    st.builds(
        Exchange.Bind,
        destination=exchange_names,
        source=exchange_names,
        routing_key=keys,
        arguments=tables,
    ),
    st.builds(
        Exchange.Unbind,
        destination=exchange_names,
        source=exchange_names,
        routing_key=keys,
        arguments=tables,
    ),
    st.builds(
        Queue.Declare,
        queue=queue_names,
        passive=flags,
        durable=flags,
        exclusive=flags,
        auto_delete=flags,
        arguments=tables,
    ),
    st.builds(
        Queue.Bind, queue=queue_names, exchange=exchange_names, routing_key=keys, arguments=tables
    ),
    st.builds(
        Queue.Unbind, queue=queue_names, exchange=exchange_names, routing_key=keys, arguments=tables
    ),
    st.builds(Queue.Purge, queue=queue_names),
    st.builds(Queue.Delete, queue=queue_names, if_unused=flags, if_empty=flags),
    # basic.recover-async is left out: decoding it raises DeprecationWarning (see
    # tests/unit/amqp/test_frames.py::test_decode_method_of_basic_recover_async_does_not_warn).
    st.builds(Basic.Recover, requeue=flags),
    st.just(commands.Tx.Select()),
    st.just(commands.Tx.Commit()),
    st.just(commands.Tx.Rollback()),
    st.builds(commands.Confirm.Select, nowait=flags),
    st.just(Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)),
)


@dataclass(frozen=True)
class Publish:
    exchange: str
    routing_key: str
    mandatory: bool
    body: bytes
    persistent: bool


publishes = st.builds(
    Publish,
    st.sampled_from(["", "", "x1", "amq.direct", "amq.topic", "amq.headers"]),
    keys,
    flags,
    st.binary(max_size=10),
    flags,
)

steps = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.integers(1, 2),
        # one_of would flatten into one uniform choice among ~40 leaves; weigh the groups.
        st.sampled_from([publishes] * 4 + [flow_methods] * 4 + [other_methods] * 2).flatmap(
            lambda group: group
        ),
    ),
    min_size=10,
    max_size=80,
)


class FuzzClient:
    """A well-behaved client process around a random one: it answers the server's
    channel.close (close-ok, then opens the channel again) and connection.close (close-ok, then
    connects again), and reopens a channel it closed itself, so that the random methods keep
    reaching an open channel."""

    def __init__(self, broker: Broker, capabilities: dict[str, bool] | None = None) -> None:
        self.broker = broker
        self.capabilities = capabilities
        self.connect()

    def connect(self) -> None:
        self.client, self.session = connect(
            self.broker, channels=(1, 2), capabilities=self.capabilities
        )
        self.reader = FrameReader(1 << 32)

    def send(self, channel: int, step: base.Frame | Publish) -> None:
        if isinstance(step, Publish):
            properties = Basic.Properties(delivery_mode=2 if step.persistent else 1)
            self.client.publish(
                channel,
                step.body,
                exchange=step.exchange,
                routing_key=step.routing_key,
                mandatory=step.mandatory,
                properties=properties,
            )
        else:
            self.client.send(channel, step)

    def answer(self) -> list[str]:
        """Read the output (it must be well-formed frames), answer closes; the method names."""
        self.reader.feed(b"".join(self.session.flush()))
        names: list[str] = []
        closed_channels: list[int] = []
        reopen_channels: list[int] = []
        connection_closed = False
        while (decoded := self.reader.next_frame()) is not None:
            if not isinstance(decoded, MethodFrame):
                continue
            method = decoded.method
            names.append(method.name)
            if isinstance(method, commands.Connection.Close):
                assert not ReplyCode(method.reply_code).is_soft, method.reply_text
                connection_closed = True
            elif isinstance(method, Channel.Close):
                assert ReplyCode(method.reply_code).is_soft, method.reply_text
                closed_channels.append(decoded.channel)
            elif isinstance(method, Channel.CloseOk):
                reopen_channels.append(decoded.channel)
        if connection_closed:
            self.client.send(0, commands.Connection.CloseOk())
            assert self.session.connection.should_close_transport
            assert self.session.ended
            self.connect()
        else:
            for channel in closed_channels:
                self.client.send(channel, Channel.CloseOk())
                self.client.send(channel, Channel.Open())
            for channel in reopen_channels:
                self.client.send(channel, Channel.Open())
        return names


def check_accounting(session: Session) -> None:
    """Each consumer's count of unacked deliveries is the number of unsettled deliveries on its
    channel that it received, and never above its prefetch (basic.qos, prefetch-count: the
    server "MUST NOT send more")."""
    for channel in session.channels.values():
        for consumer in channel.consumers.values():
            held = sum(1 for u in channel.unsettled.values() if u.consumer is consumer)
            assert consumer.unacked == held, (consumer.tag, consumer.unacked, held)
            if consumer.prefetch_count and not consumer.no_ack:
                assert consumer.unacked <= consumer.prefetch_count


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(plan=steps)
def test_any_sequence_of_client_methods_never_makes_receive_data_raise(plan):
    """Two connections on one broker, channels 1 and 2 each, queues q1 and q2 routed from the
    default exchange, amq.topic and a fanout x1; then any sequence of valid methods and
    publishes: receive_data never raises, the output is always well-formed frames, channel
    errors are soft codes and connection errors hard ones, and the prefetch accounting stays
    true. When both connections end, no queue keeps a consumer or an exclusive owner."""
    broker = Broker()
    fuzz_clients = [FuzzClient(broker), FuzzClient(broker, {"consumer_cancel_notify": True})]
    setup = fuzz_clients[0].client
    setup.declare_queue(1, "q1")
    setup.declare_queue(1, "q2")
    setup.call(1, Exchange.Declare(exchange="x1", exchange_type="fanout"), Exchange.DeclareOk)
    setup.call(1, Queue.Bind(queue="q2", exchange="x1"), Queue.BindOk)
    setup.call(1, Queue.Bind(queue="q1", exchange="amq.topic", routing_key="#"), Queue.BindOk)
    for index, channel, step in plan:
        fuzz_clients[index].send(channel, step)
        for each in fuzz_clients:
            for name in each.answer():
                event(name)
            check_accounting(each.session)
    for each in fuzz_clients:
        each.session.teardown()
    for queue in broker.vhosts["/"].queues.values():
        assert queue.consumer_count == 0
        assert not queue.exclusive
