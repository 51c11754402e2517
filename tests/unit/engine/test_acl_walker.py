"""The ACL walker (the Security requirements, "Proven by"): "A test that walks every AMQP method
touching a virtual host, exchange or queue and shows each is refused without permission, so a method
added later cannot bypass the ACL."

Every method class pamqp knows is in exactly one of three lists: the client methods that touch a
virtual host, an exchange or a queue (each refused with 403 under `ACL DENY ALL ALL`, with only
what it takes to reach it allowed); the client methods that touch none (each shown to go through
under the same file); and the methods only a server sends. A method class in none of them fails
the walk, and so does a handler registered in the engine's dispatch table for a method that is
not a client method of the first two lists.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pamqp import base, commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from batonmq.engine.dispatch import HANDLERS
from batonmq.engine.session import Session
from tests.memclient import LOOPBACK_PEER, MemClient
from tests.unit.engine.test_access import (
    ADMIN_RULE,
    BOB_CONNECTS,
    OPERATIONS,
    PASSWORD,
    acl,
    broker_with_acl,
    login,
    set_the_scene,
)

Basic = commands.Basic
Channel = commands.Channel
Confirm = commands.Confirm
Connection = commands.Connection
Exchange = commands.Exchange
Queue = commands.Queue
Tx = commands.Tx

#: Client methods that touch a virtual host, an exchange or a queue, with the operations of
#: test_access.OPERATIONS that send them (connection.open has its own test below).
TOUCHING: dict[type[base.Frame], tuple[str, ...]] = {
    Connection.Open: (),
    Exchange.Declare: ("exchange.declare", "exchange.declare passive"),
    Exchange.Delete: ("exchange.delete",),
    Exchange.Bind: ("exchange.bind",),
    Exchange.Unbind: ("exchange.unbind",),
    Queue.Declare: ("queue.declare", "queue.declare passive"),
    Queue.Bind: ("queue.bind",),
    Queue.Unbind: ("queue.unbind",),
    Queue.Purge: ("queue.purge",),
    Queue.Delete: ("queue.delete",),
    Basic.Publish: ("basic.publish", "basic.publish to the default exchange"),
    Basic.Consume: ("basic.consume",),
    Basic.Get: ("basic.get",),
}

#: Client methods that touch no virtual host object, and why no ACL check applies.
NOT_TOUCHING: dict[type[base.Frame], str] = {
    Connection.StartOk: "the login: authentication, before any virtual host",
    Connection.SecureOk: "the login: authentication, before any virtual host",
    Connection.TuneOk: "the login: frame and channel limits",
    Connection.UpdateSecret: "a new secret for the same login",
    Connection.Close: "ends the connection",
    Connection.CloseOk: "ends the connection",
    Channel.Open: "a channel holds nothing until a method uses an object",
    Channel.Close: "ends the channel",
    Channel.CloseOk: "ends the channel",
    Channel.Flow: "pauses deliveries the channel was allowed to get",
    Channel.FlowOk: "answers the server's channel.flow",
    Basic.Qos: "a prefetch limit on the channel's own deliveries",
    Basic.Cancel: "ends a consumer that CONSUME allowed",
    Basic.Ack: "settles a delivery that CONSUME allowed",
    Basic.Nack: "settles a delivery that CONSUME allowed",
    Basic.Reject: "settles a delivery that CONSUME allowed",
    Basic.Recover: "redelivers deliveries that CONSUME allowed",
    Basic.RecoverAsync: "redelivers deliveries that CONSUME allowed",
    Tx.Select: "a mode of the channel; its publishes are checked as they are published",
    Tx.Commit: "applies publishes and settlements already checked",
    Tx.Rollback: "drops publishes and settlements already checked",
    Confirm.Select: "a mode of the channel",
}
#: The login methods, which every connection sends before anything the walker can do.
HANDSHAKE = {Connection.StartOk, Connection.SecureOk, Connection.TuneOk}

#: Methods only a server sends (BatonMQ answers any of them from a client with an error).
SERVER_ONLY: frozenset[type[base.Frame]] = frozenset(
    {
        Connection.Start,
        Connection.Secure,
        Connection.Tune,
        Connection.OpenOk,
        Connection.Blocked,
        Connection.Unblocked,
        Connection.UpdateSecretOk,
        Channel.OpenOk,
        Exchange.DeclareOk,
        Exchange.DeleteOk,
        Exchange.BindOk,
        Exchange.UnbindOk,
        Queue.DeclareOk,
        Queue.BindOk,
        Queue.UnbindOk,
        Queue.PurgeOk,
        Queue.DeleteOk,
        Basic.QosOk,
        Basic.ConsumeOk,
        Basic.CancelOk,
        Basic.Return,
        Basic.Deliver,
        Basic.GetOk,
        Basic.GetEmpty,
        Basic.RecoverOk,
        Tx.SelectOk,
        Tx.CommitOk,
        Tx.RollbackOk,
        Confirm.SelectOk,
    }
)

#: Bob may reach a channel and nothing else: "ACL DENY ALL ALL" (Qpid manual §2.2.2) for the rest.
DENY_ALL = acl(ADMIN_RULE, BOB_CONNECTS, "ACL DENY ALL ALL")
DENY_ALL_LINE = 3


@pytest.fixture
def acl_dir() -> Iterator[Path]:
    """A directory with a short name: a 403's text names the ACL file and must fit 255 octets."""
    with tempfile.TemporaryDirectory(prefix="acl-") as name:
        yield Path(name)


def pamqp_methods() -> set[type[base.Frame]]:
    """Every AMQP method class pamqp.commands defines, class by class."""
    found: set[type[base.Frame]] = set()
    for amqp_class in vars(commands).values():
        if inspect.isclass(amqp_class) and not issubclass(amqp_class, base.Frame):
            found.update(
                member
                for member in vars(amqp_class).values()
                if inspect.isclass(member)
                and issubclass(member, base.Frame)
                and isinstance(getattr(member, "index", None), int)
            )
    return found


class RecordingClient(MemClient):
    """The in-memory client, noting the class of every method it sends."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.sent: set[type[base.Frame]] = set()

    def send(self, channel: int, method: base.Frame) -> None:
        self.sent.add(type(method))
        super().send(channel, method)

    def content_bytes(
        self,
        channel: int,
        method: base.Frame,
        body: bytes,
        properties: commands.Basic.Properties | None = None,
    ) -> bytes:
        self.sent.add(type(method))
        return super().content_bytes(channel, method, body, properties)


def recording_login(broker: Broker, user: str = "bob") -> RecordingClient:
    client = RecordingClient(Session(broker, LOOPBACK_PEER, lambda: None))
    client.handshake(user, PASSWORD)
    client.open_channel(1)
    client.sent.clear()
    return client


# --- the lists -----------------------------------------------------------------------------------


def test_every_pamqp_method_is_classified():
    """A method class that is in no list fails here, until someone decides whether it touches a
    virtual host, an exchange or a queue."""
    methods = pamqp_methods()
    assert len(methods) > 60  # the walk found pamqp's methods at all
    touching, not_touching = set(TOUCHING), set(NOT_TOUCHING)
    assert not touching & not_touching
    assert not (touching | not_touching) & SERVER_ONLY
    unclassified = methods - touching - not_touching - SERVER_ONLY
    assert not unclassified, sorted(method.name for method in unclassified)
    assert touching | not_touching | SERVER_ONLY == methods


def test_every_engine_handler_is_for_a_classified_client_method():
    """A handler added to the dispatch table for a method in no list fails here."""
    client_methods = set(TOUCHING) | set(NOT_TOUCHING)
    unclassified = set(HANDLERS) - client_methods
    assert not unclassified, sorted(method.name for method in unclassified)


def test_every_touching_method_has_a_probe():
    for method, operations in TOUCHING.items():
        assert operations or method is Connection.Open, method.name
        assert set(operations) <= set(OPERATIONS), method.name
    probed = {name for names in TOUCHING.values() for name in names}
    assert probed == set(OPERATIONS)


# --- touching: refused ---------------------------------------------------------------------------


PROBES = [
    pytest.param(method, name, id=name) for method, names in TOUCHING.items() for name in names
]


@pytest.mark.parametrize(("method", "name"), PROBES)
def test_each_touching_method_is_refused_without_permission(
    acl_dir: Path,
    method: type[base.Frame],
    name: str,
):
    """The Security requirements: "A denied operation is channel error 403 ACCESS_REFUSED whose text
    names the operation and object"; here every such method, under "ACL DENY ALL ALL"."""
    operation = OPERATIONS[name]
    broker = broker_with_acl(acl_dir, DENY_ALL)
    set_the_scene(login(broker, "guest"))
    bob = recording_login(broker)
    operation.send(bob)
    assert bob.sent == {method}
    close = bob.expect(Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED
    assert (close.class_id, close.method_id) == (method.index >> 16, method.index & 0xFFFF)
    assert close.reply_text == (
        f"ACCESS_REFUSED - access to {operation.what} refused for user 'bob': "
        f"{operation.action} denied by {acl_dir / 'broker.acl'} line {DENY_ALL_LINE}"
    )


def test_connection_open_is_refused_without_permission(acl_dir: Path):
    """The Security requirements: "connection.open (ACCESS VIRTUALHOST)"; the refusal closes the
    connection: there is no channel yet."""
    broker = broker_with_acl(acl_dir, acl(ADMIN_RULE, "ACL DENY ALL ALL"))
    client = RecordingClient(Session(broker, LOOPBACK_PEER, lambda: None))
    client.start("bob", PASSWORD)
    client.tune_and_open(client.expect(Connection.Tune))
    assert Connection.Open in client.sent
    close = client.expect(Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED
    assert close.reply_text == (
        "ACCESS_REFUSED - access to vhost '/' refused for user 'bob': ACCESS denied by "
        f"{acl_dir / 'broker.acl'} line 2"
    )


# --- not touching: not checked -------------------------------------------------------------------


def test_methods_that_touch_nothing_are_not_checked(acl_dir: Path):
    """Under "ACL DENY ALL ALL", with only the connection and consuming from q allowed, every
    client method that touches no virtual host object still does what it does."""
    broker = broker_with_acl(
        acl_dir,
        acl(ADMIN_RULE, BOB_CONNECTS, 'ACL ALLOW bob CONSUME QUEUE name="q"', "ACL DENY ALL ALL"),
    )
    admin = login(broker, "guest")
    set_the_scene(admin)
    for body in (b"2", b"3", b"4"):
        admin.publish(1, body, routing_key="q")
    bob = recording_login(broker)
    bob.call(1, Basic.Qos(prefetch_count=10), Basic.QosOk)
    bob.call(1, Channel.Flow(active=False), Channel.FlowOk)
    bob.call(1, Basic.Consume(queue="q", consumer_tag="c"), Basic.ConsumeOk)
    bob.expect_nothing()  # flow is off
    bob.call(1, Channel.Flow(active=True), Channel.FlowOk)
    deliveries = [delivery.method for delivery in bob.deliveries(1)]
    tags = [method.delivery_tag for method in deliveries if isinstance(method, Basic.Deliver)]
    assert len(tags) == 4
    bob.send(1, Basic.Ack(delivery_tag=tags[0]))
    bob.send(1, Basic.Reject(delivery_tag=tags[1], requeue=False))
    bob.send(1, Basic.Nack(delivery_tag=tags[2], requeue=False))
    bob.expect_nothing()
    bob.send(1, Basic.Recover(requeue=False))
    redelivered, recover_ok = bob.receive()
    assert isinstance(redelivered.method, Basic.Deliver) and redelivered.method.redelivered
    assert isinstance(recover_ok.method, Basic.RecoverOk)
    with pytest.warns(DeprecationWarning, match="deprecated in AMQP 0-9-1"):
        recover_async = Basic.RecoverAsync(requeue=False)
    bob.send(1, recover_async)
    assert len(bob.deliveries(1)) == 1
    bob.call(1, Basic.Cancel(consumer_tag="c"), Basic.CancelOk)
    bob.call(1, Tx.Select(), Tx.SelectOk)
    bob.call(1, Tx.Commit(), Tx.CommitOk)
    bob.call(1, Tx.Rollback(), Tx.RollbackOk)
    bob.open_channel(2)
    bob.call(2, Confirm.Select(), Confirm.SelectOk)
    bob.send(2, Channel.FlowOk(active=True))  # an answer to a flow the server never sent
    bob.call(
        2,
        Channel.Close(reply_code=200, reply_text="done", class_id=0, method_id=0),
        Channel.CloseOk,
    )
    bob.call(0, Connection.UpdateSecret(new_secret="s", reason="r"), Connection.UpdateSecretOk)
    # The channel.close-ok and connection.close-ok a client sends when the server closes: an
    # unknown delivery tag is 406 (not 403), a channel method on channel 0 is 503.
    bob.send(1, Basic.Ack(delivery_tag=99))
    assert bob.expect(Channel.Close, channel=1).reply_code == ReplyCode.PRECONDITION_FAILED
    bob.send(1, Channel.CloseOk())
    bob.send(0, Basic.Qos(prefetch_count=1))
    assert bob.expect(Connection.Close, channel=0).reply_code == ReplyCode.COMMAND_INVALID
    bob.send(0, Connection.CloseOk())
    other = recording_login(broker)
    other.call(
        0,
        Connection.Close(reply_code=200, reply_text="done", class_id=0, method_id=0),
        Connection.CloseOk,
    )
    assert bob.sent | other.sent >= set(NOT_TOUCHING) - HANDSHAKE
