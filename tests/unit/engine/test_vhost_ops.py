"""A virtual host's topology operations, and how it treats queues that another worker runs.

A worker of a virtual host spread over workers routes to, binds and declares every queue of it,
but runs only its own; the others are stand-ins in `VirtualHost.remote`. `OtherWorker` is a
test double of the `Spreading` protocol for a worker that is neither the home nor the owner of
any queue: it answers what the virtual host asks and records nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.autocreate import AutocreatePolicy
from batonmq.engine.broker import Broker
from batonmq.engine.change import Change, Outcome
from batonmq.engine.exchange import Exchange
from batonmq.engine.recovery import restore
from batonmq.engine.session import Session
from batonmq.engine.snapshots import BindingInfo
from batonmq.engine.spreading import Declared
from batonmq.engine.vhost import VirtualHost
from batonmq.model.destination import Destination
from batonmq.model.message import Message
from batonmq.model.topology import (
    Bound,
    ConnectionRef,
    ExchangeDeclared,
    ExchangeDeleted,
    QueueDeclared,
    QueueDeleted,
    TopologyOp,
    Unbound,
)
from batonmq.queues.classic import ClassicQueue
from batonmq.queues.protocol import Queue
from batonmq.store.sqlite import SQLiteStore
from tests.memclient import LOOPBACK_PEER, MemClient, connect

#: The worker that runs every queue in `OtherWorker`'s view.
OWNER = 1


class OtherWorker:
    """A `Spreading` that owns no queue and is not the home (see the module docstring)."""

    is_home = False
    synced = True
    workers = 2

    def owns(self, queue: str) -> bool:
        return False

    def owner_of(self, queue: str) -> int:
        return OWNER

    def remote_queue(self, declared: QueueDeclared) -> ClassicQueue:
        """A stand-in that takes messages: a real classic queue holding no store."""
        return ClassicQueue(
            declared.name,
            durable=declared.durable,
            exclusive_owner=declared.exclusive_owner,
            auto_delete=declared.auto_delete,
            arguments=declared.arguments,
        )


def _run_elsewhere(vhost: VirtualHost, name: str) -> None:
    """Make queue `name` (declared in `vhost`) one that another worker runs."""
    vhost.spread = OtherWorker()  # type: ignore[assignment]
    vhost.remote[name] = vhost.queues.pop(name)


def test_a_queue_another_worker_runs_is_routed_to_and_bound() -> None:
    """A queue owned by another worker takes messages routed here (through the default
    exchange, AMQP 0-9-1 spec: "every queue is automatically bound to it with a routing key
    equal to the queue name", and through its bindings). Consuming it here goes through the
    link with that worker (tests/unit/engine/test_remoteconsumers.py)."""
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "r")
    client.call(
        1, commands.Queue.Bind(queue="r", exchange="amq.direct", routing_key="k"),
        commands.Queue.BindOk,
    )  # fmt: skip
    vhost = session.vhost
    _run_elsewhere(vhost, "r")
    default, direct = vhost.exchange(""), vhost.exchange("amq.direct")
    assert [queue.name for queue in vhost.route(default, _message("r"))] == ["r"]
    assert [queue.name for queue in vhost.route(direct, _message("k"))] == ["r"]


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


@contextlib.asynccontextmanager
async def _stored_vhost(directory: Path) -> AsyncIterator[VirtualHost]:
    """Virtual host "/" of a broker on a real SQLite store holding durable exchange "x", durable
    queue "q" and a binding between them, all committed; its journal running."""
    store = SQLiteStore(directory / "batonmq.sqlite3", broker_id="b1", sync=False)
    await store.open()
    broker = Broker(store=store)
    restore(broker, await store.recover())
    broker.journal.start()
    api = EngineApi(broker)
    try:
        await api.declare_exchange("guest", "/", "x", "direct", durable=True)
        await api.declare_queue("guest", "/", "q", durable=True)
        await api.bind("guest", BindingInfo("/", "x", "q", "queue", "k", {}))
        assert not broker.journal.dirty
        yield broker.vhosts["/"]
    finally:
        await broker.journal.stop()
        await store.close()


#: A change of every kind, to durable objects: a worker that owns their rows writes each.
DURABLE_CHANGES: list[TopologyOp] = [
    ExchangeDeclared("y", "direct", True, False, False, {}),
    ExchangeDeleted("x"),
    QueueDeclared("r", True, False, None, {}),
    Bound("x", Destination.queue("q"), "other", {}),
    Unbound("x", Destination.queue("q"), "k", {}),
    QueueDeleted("q"),
]


async def test_a_worker_writes_no_row_it_does_not_own(tmp_path: Path) -> None:
    """A spread virtual host's exchanges and bindings are written by its home, a queue's rows
    by the worker that runs it, and by nobody else (the spreading plan's "any replica-side
    write is a bug"): a worker that is neither records nothing for any change, where the same
    virtual host unspread records each."""
    async with _stored_vhost(tmp_path) as vhost:
        journal = vhost.paging.journal
        _run_elsewhere(vhost, "q")
        assert not vhost.writes_topology
        for op in DURABLE_CHANGES:
            assert vhost.write(op) is False, op
            assert not journal.dirty, op
        vhost.spread = None
        vhost.queues["q"] = vhost.remote.pop("q")  # type: ignore[assignment]
        assert vhost.writes_topology
        for op in DURABLE_CHANGES:
            assert vhost.write(op) is True, op
            assert journal.dirty, op


def test_a_queue_declared_elsewhere_is_a_stand_in_in_remote() -> None:
    """apply(QueueDeclared) makes the queue where its owner runs it; on another worker it is
    `Spreading.remote_queue`'s stand-in, known (routed to, bound) but not run here; deleting
    it removes it and the bindings to it."""
    vhost = VirtualHost("/")
    vhost.spread = OtherWorker()  # type: ignore[assignment]
    op = QueueDeclared("r", False, False, ConnectionRef(1, 3, 9), {"x-max-length": 5})
    stand_in = vhost.apply(op)
    assert vhost.remote == {"r": stand_in}
    assert "r" not in vhost.queues
    assert vhost.known_queue("r") is stand_in
    assert isinstance(stand_in, ClassicQueue)
    assert (stand_in.exclusive_owner, stand_in.arguments) == (
        ConnectionRef(1, 3, 9),
        {"x-max-length": 5},
    )
    vhost.apply(Bound("amq.direct", Destination.queue("r"), "k", {}))
    assert vhost.route(vhost.exchange("amq.direct"), _message("k")) == [stand_in]
    assert vhost.apply(QueueDeleted("r")) == 0
    assert vhost.remote == {}
    assert vhost.route(vhost.exchange("amq.direct"), _message("k")) == []


def _topology(vhost: VirtualHost) -> list[object]:
    """What a virtual host holds, as values."""
    return [
        sorted(
            (e.name, e.type_name, e.durable, e.auto_delete, e.internal, dict(e.arguments))
            for e in vhost.exchanges.values()
        ),
        sorted(
            (q.name, q.durable, q.auto_delete, q.exclusive_owner == ConnectionRef(0, 0, 1))
            for q in vhost.queues.values()
        ),
        sorted(
            (e.name, d.kind.value, d.name, key)
            for e in vhost.exchanges.values()
            for d, key, _arguments in e.router.bindings()
        ),
    ]


def test_the_composed_methods_do_what_check_write_and_apply_do() -> None:
    """declare, delete, bind and unbind are their check, write and apply composed: run either
    way, the same requests leave the same topology and answer the same."""
    owner = ConnectionRef(0, 0, 1)
    composed, split = VirtualHost("/"), VirtualHost("/")
    answers: list[object] = []

    def carry(change: Change[Any]) -> None:
        composed.carry_out(change, answers.append, _unwritten)

    carry(composed.declare_exchange("e", "topic", auto_delete=True))
    carry(composed.declare_queue("q", owner=owner, exclusive=True))
    carry(composed.declare_queue("p", owner=None, auto_delete=True))
    carry(composed.bind("e", Destination.queue("q"), "a.*", {}))
    carry(composed.bind("amq.fanout", Destination.exchange("e"), "", {}))
    carry(composed.unbind("e", Destination.queue("q"), "a.*", {}))  # e is still bound to
    carry(composed.delete_queue("p", owner=None))
    carry(composed.unbind("amq.fanout", Destination.exchange("e"), "", {}))

    ops = [
        split.check_exchange_declare(
            "e", "topic", durable=False, auto_delete=True, internal=False, arguments=None
        ),
        split.check_queue_declare(
            "q", generated_name=None, owner=owner, passive=False, durable=False, exclusive=True,
            auto_delete=False, arguments=None,
        ),
        split.check_queue_declare(
            "p", generated_name=None, owner=None, passive=False, durable=False, exclusive=False,
            auto_delete=True, arguments=None,
        ),
    ]  # fmt: skip
    split_answers: list[object] = []
    for declared in ops:
        assert isinstance(declared, (ExchangeDeclared, QueueDeclared))
        assert split.write(declared) is False
        split_answers.append(split.apply(declared))
    for op in (
        split.check_bind("e", Destination.queue("q"), "a.*", {}),
        split.check_bind("amq.fanout", Destination.exchange("e"), "", {}),
        split.check_unbind("e", Destination.queue("q"), "a.*", {}),
        split.check_queue_delete("p", owner=None, if_unused=False, if_empty=False),
        split.check_unbind("amq.fanout", Destination.exchange("e"), "", {}),
    ):
        assert op is not None
        assert split.write(op) is False
        split_answers.append(split.apply(op))

    assert _topology(composed) == _topology(split)
    assert "e" not in composed.exchanges  # auto-deleted with its last binding, both ways
    assert [_answered(answer) for answer in answers] == [
        _answered(answer) for answer in split_answers
    ]


def _answered(answer: object) -> object:
    """An answer as a value: a declared queue as queue.declare-ok has it."""
    if isinstance(answer, Declared):
        return ("queue", answer.name, answer.message_count, answer.consumer_count)
    if isinstance(answer, ClassicQueue):
        return ("queue", answer.name, answer.message_count, answer.consumer_count)
    if isinstance(answer, Exchange):
        return ("exchange", answer.name)
    return answer


class Starting(OtherWorker):
    """A `Spreading` whose worker has not yet had the topology from its home; `when_synced`
    callbacks wait in `waiting`."""

    synced = False

    def __init__(self) -> None:
        self.waiting: list[Callable[[bool], None]] = []

    def when_synced(self, callback: Callable[[bool], None]) -> None:
        self.waiting.append(callback)


@pytest.mark.parametrize("synced", [True, False])
def test_a_connection_opens_a_spread_vhost_once_its_topology_is_there(synced: bool) -> None:
    """connection.open-ok of a spread virtual host waits until this worker has its topology
    from the home; if that takes too long the connection is closed with 320 CONNECTION_FORCED
    (AMQP 0-9-1 spec: "An operator intervened to close the connection"; the client reconnects)."""
    starting = Starting()
    broker = Broker(spread_factory=lambda _vhost: starting)  # type: ignore[arg-type, return-value]
    client = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
    client.start()
    client.tune_and_open(client.expect(commands.Connection.Tune, channel=0))
    client.expect_nothing()
    assert len(starting.waiting) == 1
    starting.waiting[0](synced)
    if synced:
        client.expect(commands.Connection.OpenOk, channel=0)
    else:
        close = client.expect(commands.Connection.Close, channel=0)
        assert close.reply_code == ReplyCode.CONNECTION_FORCED
        assert close.reply_text == "CONNECTION_FORCED - home worker of vhost '/' is starting"


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ({"x-queue-type": "stream"}, "'x-queue-type' for queue 'q' in vhost '/': stream queues"),
        ({"x-max-producers": 2}, "'x-max-producers' for queue 'q' in vhost '/': producer limits"),
        ({"x-overflow": "flow-control"}, "'x-overflow' for queue 'q' in vhost '/': flow-control"),
    ],
)
def test_what_a_spread_queue_cannot_have_yet_is_refused_at_declare(
    arguments: dict[str, object], refused: str
) -> None:
    """406 PRECONDITION_FAILED at queue.declare, as RabbitMQ refuses an argument a queue type
    does not support ("invalid arg ..."), for what needs the owner's consumers or publishers
    in one process; the same declaration is fine where the virtual host is not spread."""
    vhost = VirtualHost("/")
    vhost.spread = OtherWorker()  # type: ignore[assignment]

    def declare() -> object:
        return vhost.check_queue_declare(
            "q", generated_name=None, owner=None, passive=False, durable=True, exclusive=False,
            auto_delete=False, arguments=arguments,  # type: ignore[arg-type]
        )  # fmt: skip

    with pytest.raises(ProtocolError) as error:
        declare()
    assert error.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert error.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg {refused} are not available in a virtual host "
        "spread over workers yet"
    )
    vhost.spread = None
    assert isinstance(declare(), QueueDeclared)


class OwnsHalf(OtherWorker):
    """A `Spreading` owning the queues whose name's next to last character has an even code
    (the last of a server-generated name carries only two random bits)."""

    def owns(self, queue: str) -> bool:
        return ord(queue[-2]) % 2 == 0


def test_a_server_named_queue_is_one_this_worker_runs() -> None:
    """The spreading plan: a server-named queue (an exclusive reply queue) runs where its
    connection is, so its name is drawn until this worker owns it."""
    vhost = VirtualHost("/")
    vhost.spread = OwnsHalf()  # type: ignore[assignment]
    names = {vhost.new_queue_name() for _ in range(64)}
    assert all(name.startswith("amq.gen-") and ord(name[-2]) % 2 == 0 for name in names)
    declared = vhost.check_queue_declare(
        "", generated_name=None, owner=None, passive=False, durable=False, exclusive=False,
        auto_delete=False, arguments=None,
    )  # fmt: skip
    assert isinstance(declared, QueueDeclared)
    assert ord(declared.name[-2]) % 2 == 0


class Told(OtherWorker):
    """A `Spreading` owning every queue, recording the queues it is told went."""

    def __init__(self) -> None:
        self.gone_queues: list[str] = []

    def owns(self, queue: str) -> bool:
        return True

    def gone(self, queue: Queue) -> None:
        self.gone_queues.append(queue.name)


def test_the_others_are_told_of_a_queue_removed_here_by_itself() -> None:
    """A queue its owner removes by itself (its exclusive connection closed: AMQP 0-9-1
    queue.declare "exclusive": "deleted when that connection closes") is forgotten by the other
    workers (`Spreading.gone`); one removed by the home's decision (apply) is not told back."""
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "mine", exclusive=True)
    client.declare_queue(1, "decided")
    told = Told()
    session.vhost.spread = told  # type: ignore[assignment]
    session.vhost.apply(QueueDeleted("decided"))
    assert "decided" not in session.vhost.queues
    session.teardown()
    assert told.gone_queues == ["mine"]
    assert "mine" not in session.vhost.queues


class Grouping(Told):
    """A `Spreading` recording how many messages queue "q" has as a tx group opens and ends."""

    def __init__(self, vhost: VirtualHost) -> None:
        super().__init__()
        self.vhost = vhost
        self.seen: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def tx_group(self) -> Iterator[None]:
        self.seen.append(("open", self.vhost.queues["q"].message_count))
        yield
        self.seen.append(("end", self.vhost.queues["q"].message_count))


def test_a_tx_commit_enqueues_its_publishes_inside_one_tx_group() -> None:
    """tx.commit hands every publish of the transaction over inside one tx group, so each
    worker owning queues takes its share at once (RabbitMQ "Broker Semantics": atomic per
    queue)."""
    broker = Broker()
    client, session = connect(broker)
    client.declare_queue(1, "q")
    grouping = Grouping(session.vhost)
    session.vhost.spread = grouping  # type: ignore[assignment]
    client.call(1, commands.Tx.Select(), commands.Tx.SelectOk)
    client.publish(1, b"one", routing_key="q")
    client.publish(1, b"two", routing_key="q")
    assert grouping.seen == []
    client.call(1, commands.Tx.Commit(), commands.Tx.CommitOk)
    assert grouping.seen == [("open", 0), ("end", 2)]


def test_a_policys_defaults_are_not_refused_as_if_the_client_asked_for_them() -> None:
    """MQ 3.5 admin guide, Table 2-10: an auto-create policy's limits are the broker's
    defaults, not the client's arguments; what a spread virtual host refuses (406, as RabbitMQ
    refuses an argument: "invalid arg ...") is judged of what the client asked for, so a plain
    queue.declare succeeds under a policy limiting producers."""
    policy = AutocreatePolicy(pattern=re.compile(".*"), defaults={"x-max-producers": 2})
    vhost = VirtualHost("/", autocreate=policy)
    vhost.spread = OtherWorker()  # type: ignore[assignment]
    declared = vhost.check_queue_declare(
        "q", generated_name=None, owner=None, passive=False, durable=True, exclusive=False,
        auto_delete=False, arguments={},
    )  # fmt: skip
    assert declared == QueueDeclared("q", True, False, None, {})


def test_server_names_none_of_which_this_worker_runs_end_in_541() -> None:
    """AMQP 0-9-1 541 INTERNAL_ERROR: "The server could not complete the method because of an
    internal problem"; drawing names that this worker owns stops after a bounded number of
    draws rather than never answering."""
    vhost = VirtualHost("/")
    vhost.spread = OtherWorker()  # type: ignore[assignment]
    with pytest.raises(ProtocolError) as error:
        vhost.new_queue_name()
    assert error.value.reply_code == ReplyCode.INTERNAL_ERROR


def test_applying_a_declaration_again_keeps_what_it_made() -> None:
    """RabbitMQ: exchange.declare and queue.declare of what exists (equivalent) change nothing
    (spec: "If the exchange/queue exists, the server MUST check ... and return declare-ok");
    a spread virtual host's copy may be given the same declaration twice (a change the home
    resends, a copy taken after it): the exchange keeps its bindings, the queue its
    messages."""
    vhost = VirtualHost("/")
    exchange_op = ExchangeDeclared("x", "direct", False, False, False, {})
    queue_op = QueueDeclared("q", False, False, None, {})
    exchange = vhost.apply(exchange_op)
    queue = vhost.apply(queue_op)
    vhost.apply(Bound("x", Destination.queue("q"), "k", {}))
    assert isinstance(queue, ClassicQueue)
    queue.publish(_message("k"))
    assert vhost.apply(exchange_op) is exchange
    assert vhost.apply(queue_op) is queue
    assert vhost.queues["q"] is queue and queue.message_count == 1
    assert [q.name for q in vhost.route(vhost.exchanges["x"], _message("k"))] == ["q"]
