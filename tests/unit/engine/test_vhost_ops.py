"""A virtual host's topology operations, and how it treats queues that another worker runs.

A worker of a virtual host spread over workers routes to, binds and declares every queue of it,
but runs only its own; the others are stand-ins in `VirtualHost.remote`. `OtherWorker` is a
test double of the `Spreading` protocol for a worker that is neither the home nor the owner of
any queue: it answers what the virtual host asks and records nothing else.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.change import Change, Outcome
from batonmq.engine.vhost import VirtualHost
from batonmq.model.message import Message
from batonmq.model.topology import ConnectionRef
from tests.memclient import connect

#: The worker that runs every queue in `OtherWorker`'s view.
OWNER = 1


class OtherWorker:
    """A `Spreading` that owns no queue and is not the home (see the module docstring)."""

    is_home = False
    synced = True

    def owns(self, queue: str) -> bool:
        return False

    def owner_of(self, queue: str) -> int:
        return OWNER


def _run_elsewhere(vhost: VirtualHost, name: str) -> None:
    """Make queue `name` (declared in `vhost`) one that another worker runs."""
    vhost.spread = OtherWorker()  # type: ignore[assignment]
    vhost.remote[name] = vhost.queues.pop(name)


def test_a_queue_another_worker_runs_is_routed_to_and_bound_but_not_consumed_here() -> None:
    """A queue owned by another worker takes messages routed here (through the default
    exchange, AMQP 0-9-1 spec: "every queue is automatically bound to it with a routing key
    equal to the queue name", and through a binding made here); consuming it here is refused
    with 540 NOT_IMPLEMENTED (a connection exception, spec 1.3 "Constants"), as basic.qos
    refuses a prefetch size it does not implement."""
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "r")
    vhost = session.vhost
    _run_elsewhere(vhost, "r")
    client.call(
        1, commands.Queue.Bind(queue="r", exchange="amq.direct", routing_key="k"),
        commands.Queue.BindOk,
    )  # fmt: skip
    default, direct = vhost.exchange(""), vhost.exchange("amq.direct")
    assert [queue.name for queue in vhost.route(default, _message("r"))] == ["r"]
    assert [queue.name for queue in vhost.route(direct, _message("k"))] == ["r"]
    client.send(1, commands.Basic.Get(queue="r"))
    close = client.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_IMPLEMENTED
    assert close.reply_text == (
        f"NOT_IMPLEMENTED - queue 'r' in vhost '/' is owned by worker {OWNER}: consuming across "
        "workers is not built yet"
    )


def _message(routing_key: str) -> Message:
    """A message with no properties (a header payload of class, weight, size, flags)."""
    return Message("", routing_key, struct.pack(">HHQH", 60, 0, 4, 0), b"body")


def _declare_exclusive(vhost: VirtualHost, owner: ConnectionRef) -> None:
    vhost.carry_out(
        vhost.declare_queue("mine", owner=owner, exclusive=True), lambda _queue: None, _unwritten
    )


def _unwritten(_error: object = None) -> None:
    raise AssertionError("nothing is written in a broker without a store")


def test_an_exclusive_queue_belongs_to_a_connection_value_not_to_an_object() -> None:
    """AMQP 0-9-1 queue.declare, "exclusive": "Exclusive queues may only be accessed by the
    current connection ... If the queue already exists ... and is exclusive to another
    connection, the server MUST raise a channel exception 405 (RESOURCE_LOCKED)". The owner is
    the connection, named by worker, start id and number: an equal reference made anew (the
    same connection as another worker names it) is the owner; any other is not."""
    vhost = VirtualHost("/")
    _declare_exclusive(vhost, ConnectionRef(0, 7, 1))
    _declare_exclusive(vhost, ConnectionRef(0, 7, 1))
    assert vhost.queue("mine", ConnectionRef(0, 7, 1)).name == "mine"
    for other in (ConnectionRef(0, 7, 2), ConnectionRef(1, 7, 1), ConnectionRef(0, 8, 1), None):
        with pytest.raises(ProtocolError) as locked:
            _declare_exclusive(vhost, other)  # type: ignore[arg-type]
        assert locked.value.reply_code == ReplyCode.RESOURCE_LOCKED


def test_a_new_session_with_an_equal_ref_redeclares_the_exclusive_queue() -> None:
    """The same rule over AMQP: a session whose `ref` equals the declaring connection's gets
    declare-ok, another connection gets 405 RESOURCE_LOCKED."""
    broker = Broker()
    owner, owning_session = connect(broker)
    owner.declare_queue(1, "mine", exclusive=True)
    same, same_session = connect(broker)
    same_session.ref = owning_session.ref
    assert same.declare_queue(1, "mine", exclusive=True) == "mine"
    other, _session = connect(broker)
    other.send(1, commands.Queue.Declare(queue="mine", exclusive=True))
    assert other.expect(commands.Channel.Close, channel=1).reply_code == ReplyCode.RESOURCE_LOCKED


def _decided_elsewhere(
    applied: list[str],
) -> tuple[Change[str], list[Callable[[Outcome], None]]]:
    """A change of queue "q" that waits for the answer of whoever decides it (`after`), and
    where that answer goes."""
    answers: list[Callable[[Outcome], None]] = []

    def apply() -> str:
        applied.append("q")
        return "q"

    return Change(apply, keys=(("queue", "q"),), after=answers.append), answers


def test_a_change_applies_only_once_whoever_decides_it_says_yes() -> None:
    """ "How BatonMQ code reads" 13, commit then apply: the reply comes after the change is
    made, and nothing is made before the answer."""
    applied: list[str] = []
    change, answers = _decided_elsewhere(applied)
    client, session = connect(Broker())
    session.channels[1].carry_out(
        change, lambda name: commands.Queue.DeclareOk(name, 0, 0), commands.Queue.Declare
    )
    client.expect_nothing()
    assert applied == []
    answers[0](True)
    assert client.expect(commands.Queue.DeclareOk, channel=1).queue == "q"
    assert applied == ["q"]


@pytest.mark.parametrize(
    ("code", "closed"),
    [
        (ReplyCode.PRECONDITION_FAILED, commands.Channel.Close),
        (ReplyCode.RESOURCE_LOCKED, commands.Channel.Close),
        (ReplyCode.INTERNAL_ERROR, commands.Connection.Close),
    ],
)
def test_a_refused_change_closes_the_channel_or_connection_with_the_refusal(
    code: ReplyCode, closed: type[commands.Channel.Close] | type[commands.Connection.Close]
) -> None:
    """A change refused by whoever decides it (another worker of a spread virtual host) is
    refused to the client as if this worker had refused it: the spec's soft errors (406, 405)
    close the channel, hard ones (541) the connection (AMQP 0-9-1 spec 1.3 "Constants"),
    naming the method; nothing is applied."""
    applied: list[str] = []
    change, answers = _decided_elsewhere(applied)
    client, session = connect(Broker())
    session.channels[1].carry_out(
        change, lambda name: commands.Queue.DeclareOk(name, 0, 0), commands.Queue.Declare
    )
    answers[0](amqp_error(code, "refused by the home worker"))
    close = client.expect(closed)
    assert (close.reply_code, close.reply_text) == (
        code,
        f"{code.name} - refused by the home worker",
    )
    assert (close.class_id, close.method_id) == (50, 10)  # queue.declare
    assert applied == []


async def test_a_refused_change_is_the_api_error_of_the_refusal() -> None:
    """Management gets the same refusal, as an ApiError with the AMQP code and text."""
    broker = Broker()
    applied: list[str] = []
    change, answers = _decided_elsewhere(applied)
    refusal = amqp_error(ReplyCode.PRECONDITION_FAILED, "refused by the home worker")
    carried = asyncio.ensure_future(
        EngineApi(broker)._carry_out(broker.vhosts["/"], lambda: change)
    )
    await asyncio.sleep(0)
    answers[0](refusal)
    with pytest.raises(ApiError) as refused:
        await carried
    assert (refused.value.reply_code, refused.value.text) == (
        ReplyCode.PRECONDITION_FAILED,
        "PRECONDITION_FAILED - refused by the home worker",
    )
    assert applied == []
