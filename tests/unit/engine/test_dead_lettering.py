"""Dead-lettering, length limits and queue arguments through a `Session`, in memory: the
effects RabbitMQ documents (https://www.rabbitmq.com/docs/dlx, /maxlength, /queues)."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from tests.memclient import MemClient, connect

Basic = commands.Basic
Queue = commands.Queue


def declare(client: MemClient, name: str, **arguments: object) -> None:
    client.call(1, Queue.Declare(queue=name, arguments=arguments), Queue.DeclareOk)


def reject_next(client: MemClient, queue: str) -> None:
    got = client.get(1, queue)
    assert got is not None and isinstance(got.method, Basic.GetOk)
    client.send(1, Basic.Reject(delivery_tag=got.method.delivery_tag, requeue=False))


def test_a_rejected_message_goes_to_the_dead_letter_exchange() -> None:
    """ "The message is negatively acknowledged by a consumer using basic.reject or basic.nack
    with requeue parameter set to false" → republished to the DLX with its original routing
    key, "the exchange name is replaced with that of the latest dead-letter exchange"."""
    client, _session = connect(Broker())
    declare(client, "dead")
    client.call(1, Queue.Bind(queue="dead", exchange="amq.fanout", routing_key=""), Queue.BindOk)
    declare(client, "work", **{"x-dead-letter-exchange": "amq.fanout"})
    client.publish(1, b"job", routing_key="work", properties=Basic.Properties(app_id="a"))
    reject_next(client, "work")
    got = client.get(1, "dead")
    assert got is not None and isinstance(got.method, Basic.GetOk)
    assert (got.method.exchange, got.method.routing_key, got.body) == ("amq.fanout", "work", b"job")
    assert got.properties.app_id == "a"
    death = got.properties.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["exchange"], death["routing-keys"]) == (
        "rejected",
        "work",
        "",
        ["work"],
    )
    assert client.get(1, "work") is None


def test_a_dead_letter_routing_key_is_used() -> None:
    client, _session = connect(Broker())
    declare(client, "parking")
    declare(
        client,
        "work",
        **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "parking"},
    )
    client.publish(1, b"job", routing_key="work")
    reject_next(client, "work")
    got = client.get(1, "parking")
    assert got is not None and isinstance(got.method, Basic.GetOk)
    assert got.method.routing_key == "parking"


def test_an_expiry_cycle_is_dropped_but_a_rejection_cycle_is_not() -> None:
    """ "Messages in such cycles (i.e. messages that reach the same queue twice) will be dropped
    if there was no rejections in the entire cycle": a queue dead-lettering to itself through
    the default exchange loses an over-long message, and keeps a rejected one."""
    client, _session = connect(Broker())
    declare(client, "loop", **{"x-dead-letter-exchange": "", "x-max-length": 1})
    client.publish(1, b"first", routing_key="loop")
    client.publish(1, b"second", routing_key="loop")  # "first" is dropped: maxlen into itself
    reject_next(client, "loop")  # "second" is rejected: back into "loop"
    got = client.get(1, "loop")
    assert got is not None and got.body == b"second"
    assert got.properties.headers["x-death"][0]["reason"] == "rejected"
    assert client.get(1, "loop") is None


def test_reject_publish_nacks_under_confirms() -> None:
    """x-overflow reject-publish: "If publisher confirms are enabled, the publisher will be
    informed of the reject via a basic.nack message"."""
    client, _session = connect(Broker())
    declare(client, "small", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    client.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    client.publish(1, b"fits", routing_key="small")
    client.publish(1, b"full", routing_key="small")
    assert client.expect(Basic.Ack).delivery_tag == 1
    assert client.expect(Basic.Nack).delivery_tag == 2


def test_an_invalid_argument_is_a_precondition_failure() -> None:
    """RabbitMQ: queue.declare with an invalid x-argument is a channel error 406 naming it."""
    client, _session = connect(Broker())
    client.send(1, Queue.Declare(queue="q", arguments={"x-message-ttl": -5}))
    close = client.expect(commands.Channel.Close)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert "invalid arg 'x-message-ttl' for queue 'q'" in close.reply_text


def test_redeclaring_with_other_arguments_is_a_precondition_failure() -> None:
    """RabbitMQ: "inequivalent arg 'x-max-length' for queue ..." (406)."""
    client, _session = connect(Broker())
    declare(client, "q", **{"x-max-length": 5})
    declare(client, "q", **{"x-max-length": 5})
    client.send(1, Queue.Declare(queue="q", arguments={"x-max-length": 6}))
    close = client.expect(commands.Channel.Close)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert "inequivalent arg 'x-max-length'" in close.reply_text


def test_an_invalid_expiration_is_refused_at_publish() -> None:
    """RabbitMQ: a publish whose expiration is not a non-negative integer is 406."""
    client, _session = connect(Broker())
    declare(client, "q")
    client.publish(1, b"m", routing_key="q", properties=Basic.Properties(expiration="soon"))
    close = client.expect(commands.Channel.Close)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert "invalid expiration 'soon'" in close.reply_text
