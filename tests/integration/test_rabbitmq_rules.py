"""Behaviour that client libraries rely on, where BatonMQ used to differ from RabbitMQ (hardening,
"Behaviour that clients rely on"). Each was seen breaking a client library's own tests; each test
quotes RabbitMQ's rule, and runs against a RabbitMQ too (--amqp-url)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest
from pamqp import commands

from tests.brokerproc import RunningBroker
from tests.rawclient import open_connection

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def connection(broker: RunningBroker) -> Iterator[pika.BlockingConnection]:
    connected = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield connected
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            connected.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_unbinding_what_does_not_exist_replies_unbind_ok(broker: RunningBroker):
    """RabbitMQ: "queue.unbind and exchange.unbind of a binding, queue or exchange that does not
    exist reply unbind-ok" (rabbit_binding:remove is idempotent; aio-pika's RPC pattern unbinds
    an auto-deleted reply queue on close and failed here with 404)."""
    queue, exchange = unique("unbound"), unique("x")
    with connection(broker) as connected:
        channel = connected.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.exchange_declare(exchange, "direct")
        channel.queue_bind(queue, exchange, "bound")
        channel.queue_unbind(unique("no-such-queue"), exchange, "bound")
        channel.queue_unbind(queue, unique("no-such-exchange"), "bound")
        channel.queue_unbind(queue, exchange, "never-bound")
        channel.exchange_unbind(unique("no-such-destination"), exchange, "bound")
        channel.exchange_unbind(exchange, unique("no-such-source"), "bound")
        # The real binding is still there, and goes when unbound.
        channel.confirm_delivery()
        channel.basic_publish(exchange, "bound", b"routed", mandatory=True)
        channel.queue_unbind(queue, exchange, "bound")
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish(exchange, "bound", b"unrouted", mandatory=True)
        assert channel.queue_declare(queue, passive=True).method.message_count == 1
        channel.exchange_delete(exchange)


def test_another_connections_exclusive_queue_is_locked_before_any_equivalence(
    broker: RunningBroker,
):
    """RabbitMQ (rabbit_amqqueue:assert_equivalence): exclusive access is checked strictly, before
    durable, auto-delete and the arguments: "cannot obtain exclusive access to locked queue ...
    It could be originally declared on another connection or the exclusive property value does
    not match that of the original declaration" is 405 RESOURCE_LOCKED, never 406
    "inequivalent arg 'exclusive'"; consume and purge check it too."""
    queue, shared = unique("mine"), unique("shared")
    with connection(broker) as owner, connection(broker) as other:
        owner.channel().queue_declare(queue, exclusive=True, arguments={"x-max-length": 5})
        owner.channel().queue_declare(shared)
        attempts = {
            "declare as declared": lambda ch: ch.queue_declare(
                queue, exclusive=True, arguments={"x-max-length": 5}
            ),
            "declare with other arguments": lambda ch: ch.queue_declare(queue, durable=True),
            "declare passively": lambda ch: ch.queue_declare(queue, passive=True),
            "consume": lambda ch: ch.basic_consume(queue, lambda *_: None),
            "purge": lambda ch: ch.queue_purge(queue),
        }
        for what, attempt in attempts.items():
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                attempt(other.channel())
            assert refused.value.reply_code == 405, what
        # On its own connection, asking for another exclusive value is the same refusal.
        for what, attempt in {
            "own exclusive queue declared non-exclusive": lambda ch: ch.queue_declare(
                queue, arguments={"x-max-length": 5}
            ),
            "a shared queue declared exclusive": lambda ch: ch.queue_declare(
                shared, exclusive=True
            ),
        }.items():
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                attempt(owner.channel())
            assert refused.value.reply_code == 405, what
        owner.channel().queue_delete(shared)


def test_queue_delete_ok_comes_before_the_deleting_channels_cancel_notifications(
    broker: RunningBroker,
):
    """RabbitMQ replies queue.delete-ok before it sends basic.cancel to the consumers on the
    deleting channel ("a client that sees the cancel first tears down its pending reply");
    consumers on other channels are cancelled too."""
    queue = unique("going")
    with open_connection(broker, channel=1) as client:
        client.open_channel(2)
        client.send_frame(commands.Queue.Declare(queue=queue), 1)
        client.expect(commands.Queue.DeclareOk, 1)
        for channel, tag in ((1, "on-deleting-channel"), (2, "elsewhere")):
            client.send_frame(commands.Basic.Consume(queue=queue, consumer_tag=tag), channel)
            client.expect(commands.Basic.ConsumeOk, channel)
        client.send_frame(commands.Queue.Delete(queue=queue), 1)
        on_channel_1 = []
        cancelled_elsewhere = []
        while len(on_channel_1) < 2 or not cancelled_elsewhere:
            channel, frame = client.read_frame()
            if channel == 1:
                on_channel_1.append(frame)
            elif channel == 2:
                cancelled_elsewhere.append(frame)
    assert isinstance(on_channel_1[0], commands.Queue.DeleteOk)
    assert isinstance(on_channel_1[1], commands.Basic.Cancel)
    assert on_channel_1[1].consumer_tag == "on-deleting-channel"
    assert isinstance(cancelled_elsewhere[0], commands.Basic.Cancel)


def test_the_queue_type_argument_is_checked_and_compared_with_its_default(
    broker: RunningBroker,
):
    """RabbitMQ (rabbit_amqqueue): an unknown `x-queue-type` is refused with 406, "invalid arg
    'x-queue-type' ...: unsupported queue type"; a queue declared without it is "classic" (the
    default is injected at declaration), so redeclaring it as classic is equivalent, and as
    another type is not ("inequivalent arg 'x-queue-type'")."""
    queue = unique("typed")
    with connection(broker) as connected:
        channel = connected.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare(unique("odd"), arguments={"x-queue-type": "no-such-type"})
        assert refused.value.reply_code == 406
        assert "x-queue-type" in refused.value.reply_text
        assert "unsupported queue type" in refused.value.reply_text

        channel = connected.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_declare(queue, auto_delete=True, arguments={"x-queue-type": "classic"})
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare(queue, auto_delete=True, arguments={"x-queue-type": "stream"})
        assert refused.value.reply_code == 406
        assert "inequivalent arg 'x-queue-type'" in refused.value.reply_text
