"""RabbitMQ's permissions, asked by every AMQP operation that touches an exchange or a queue,
beside the ACL; and connection.open refused to a user without permissions on the virtual host.

RabbitMQ's access control guide, "how permissions are checked" (the table of which operation
needs which permission on which resource): declare and delete need configure; queue.bind needs
write on the queue and read on the exchange, exchange.bind write on the destination and read on
the source; publish needs write on the exchange; consume, get and purge need read on the queue;
a passive declare needs nothing; a declare with an alternate or dead-letter exchange needs write
on that exchange and read on what is declared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from pamqp import base, commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from batonmq.security.permissions import UserPermission
from batonmq.store.base import StoreError
from tests.memclient import LOOPBACK_PEER, MemClient
from tests.unit.engine.test_access import (
    PASSWORD,
    login,
    publishing,
    refusal,
    sending,
    set_the_scene,
    user_credential,
)

Basic = commands.Basic
Exchange = commands.Exchange
Queue = commands.Queue


def broker_with_bob(configure: str = ".*", write: str = ".*", read: str = ".*") -> Broker:
    """No ACL; guest (full permissions, as a new store has it) sets the scene; bob has
    the given patterns in "/"."""
    broker = Broker()
    broker.authenticator.users["bob"] = user_credential()
    set_the_scene(login(broker, "guest"))
    broker.permissions.set(UserPermission("bob", "/", configure, write, read))
    return broker


@dataclass(frozen=True)
class Needs:
    """An operation on the scene, what an allowed one gets (None: nothing), and each
    permission it needs: (the pattern left empty, the refusal's resource)."""

    send: Callable[[MemClient], None]
    reply: type[base.Frame] | None
    refused: tuple[tuple[str, str], ...]
    #: Whether the reply carries content (a delivery follows basic.consume-ok, too).
    content: bool = False


OPERATIONS = {
    "exchange.declare": Needs(
        sending(Exchange.Declare(exchange="bx", exchange_type="topic")),
        Exchange.DeclareOk,
        (("configure", "exchange 'bx'"),),
    ),
    "exchange.declare with AE": Needs(
        sending(
            Exchange.Declare(
                exchange="bx", exchange_type="topic", arguments={"alternate-exchange": "x"}
            )
        ),
        Exchange.DeclareOk,
        (("configure", "exchange 'bx'"), ("write", "exchange 'x'"), ("read", "exchange 'bx'")),
    ),
    "exchange.delete": Needs(
        sending(Exchange.Delete(exchange="x2")),
        Exchange.DeleteOk,
        (("configure", "exchange 'x2'"),),
    ),
    "queue.declare": Needs(
        sending(Queue.Declare(queue="bq")), Queue.DeclareOk, (("configure", "queue 'bq'"),)
    ),
    "queue.declare with DLX": Needs(
        sending(Queue.Declare(queue="bq", arguments={"x-dead-letter-exchange": ""})),
        Queue.DeclareOk,
        (
            ("configure", "queue 'bq'"),
            ("write", "exchange 'amq.default'"),
            ("read", "queue 'bq'"),
        ),
    ),
    "queue.delete": Needs(
        sending(Queue.Delete(queue="q")), Queue.DeleteOk, (("configure", "queue 'q'"),)
    ),
    "queue.purge": Needs(sending(Queue.Purge(queue="q")), Queue.PurgeOk, (("read", "queue 'q'"),)),
    "queue.bind": Needs(
        sending(Queue.Bind(queue="q", exchange="x", routing_key="k3")),
        Queue.BindOk,
        (("write", "queue 'q'"), ("read", "exchange 'x'")),
    ),
    "queue.unbind": Needs(
        sending(Queue.Unbind(queue="q", exchange="x", routing_key="k")),
        Queue.UnbindOk,
        (("write", "queue 'q'"), ("read", "exchange 'x'")),
    ),
    "exchange.bind": Needs(
        sending(Exchange.Bind(destination="x2", source="x", routing_key="k2")),
        Exchange.BindOk,
        (("write", "exchange 'x2'"), ("read", "exchange 'x'")),
    ),
    "basic.publish": Needs(publishing("x", "k"), None, (("write", "exchange 'x'"),)),
    "basic.publish to the default exchange": Needs(
        publishing("", "q"), None, (("write", "exchange 'amq.default'"),)
    ),
    "basic.consume": Needs(
        sending(Basic.Consume(queue="q", consumer_tag="t")),
        Basic.ConsumeOk,
        (("read", "queue 'q'"),),
        content=True,
    ),
    "basic.get": Needs(
        sending(Basic.Get(queue="q")), Basic.GetOk, (("read", "queue 'q'"),), content=True
    ),
}


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_operation_needs_its_permissions(name: str):
    operation = OPERATIONS[name]
    allowed = login(broker_with_bob(), "bob")
    operation.send(allowed)
    if operation.content:
        received = [item.method for item in allowed.receive()]
        assert operation.reply is not None and isinstance(received[0], operation.reply)
    else:
        if operation.reply is not None:
            allowed.expect(operation.reply, channel=1)
        allowed.expect_nothing()
    for permission, resource in operation.refused:
        patterns = {"configure": ".*", "write": ".*", "read": ".*", permission: ""}
        bob = login(broker_with_bob(**patterns), "bob")
        operation.send(bob)
        assert refusal(bob) == (
            f"{permission} access to {resource} in vhost '/' refused for user 'bob'"
        )


def test_a_passive_declare_needs_no_permission():
    """RabbitMQ's table: exchange.declare and queue.declare with passive=true need nothing."""
    bob = login(broker_with_bob("", "", ""), "bob")
    bob.call(1, Exchange.Declare(exchange="x", passive=True), Exchange.DeclareOk)
    bob.call(1, Queue.Declare(queue="q", passive=True), Queue.DeclareOk)


def test_a_server_named_queue_is_judged_by_the_name_it_gets():
    """RabbitMQ names the queue ("amq.gen-...") before it checks configure on it."""
    bob = login(broker_with_bob(configure=r"^amq\.gen-"), "bob")
    declared = bob.call(1, Queue.Declare(queue="", exclusive=True), Queue.DeclareOk)
    assert declared.queue.startswith("amq.gen-")
    bob.send(1, Queue.Declare(queue="mine"))
    assert refusal(bob) == "configure access to queue 'mine' in vhost '/' refused for user 'bob'"


def test_connection_open_without_permissions_is_refused_as_rabbitmq_refuses_it():
    """rabbit_access_control:check_vhost_access: connection.close 530 NOT_ALLOWED "access to
    vhost '/' refused for user 'bob'"; BatonMQ adds the command that grants access."""
    broker = Broker()
    broker.authenticator.users["bob"] = user_credential()
    client = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
    client.start("bob", PASSWORD)
    client.tune_and_open(client.expect(commands.Connection.Tune, 0), vhost="/")
    close = client.expect(commands.Connection.Close, 0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED
    assert close.reply_text == (
        "NOT_ALLOWED - access to vhost '/' refused for user 'bob': it has no permissions there "
        "(batonctl permissions set bob '.*' '.*' '.*' --vhost /)"
    )


async def test_a_permission_changed_while_bob_publishes_is_in_force_at_his_next_publish():
    """The foundation requirements: permission changes "work through the API while clients are
    connected, and take effect on the next access check"; the channel's cache of exchanges it
    may write to (RabbitMQ's) does not outlive the change."""
    broker = broker_with_bob()
    api = EngineApi(broker)
    events: list[tuple[str, str, str | None]] = []
    bob = login(broker, "bob")
    broker.events.subscribe(lambda event: events.append((event.kind, event.name, event.vhost)))
    bob.publish(1, b"one", exchange="x", routing_key="k")
    bob.expect_nothing()
    await api.set_permissions(UserPermission("bob", "/", ".*", "^x2$", ".*"))
    bob.publish(1, b"two", exchange="x", routing_key="k")
    assert refusal(bob) == "write access to exchange 'x' in vhost '/' refused for user 'bob'"
    await api.clear_permissions("bob", "/")
    bob.send(1, Basic.Get(queue="q"))
    assert refusal(bob) == "read access to queue 'q' in vhost '/' refused for user 'bob'"
    assert [event for event in events if event[0].startswith("permission.")] == [
        ("permission.created", "bob", "/"),
        ("permission.deleted", "bob", "/"),
    ]


class FailingStore:
    """A store whose every write fails (a database that refuses it)."""

    location = "failing"

    async def commit(self, _batch: object) -> None:
        raise StoreError("the disk is full")


async def test_a_failed_write_changes_no_permission():
    """State follows the store: a change whose write failed is an ApiError 541 and leaves
    memory as it was (the user keeps what it had)."""
    broker = Broker(store=FailingStore())  # type: ignore[arg-type]
    broker.authenticator.users["bob"] = user_credential()
    before = UserPermission("bob", "/", ".*", "", "")
    broker.permissions.set(before)
    api = EngineApi(broker)
    broker.journal.start()
    try:
        with pytest.raises(ApiError) as failed:
            await api.set_permissions(UserPermission.full("bob", "/"))
        assert failed.value.reply_code == ReplyCode.INTERNAL_ERROR
        with pytest.raises(ApiError):
            await api.clear_permissions("bob", "/")
        assert api.permissions() == [before, UserPermission.full("guest", "/")]
    finally:
        await broker.journal.stop()


async def test_a_permission_names_a_user_and_virtual_host_that_exist_and_patterns_that_compile():
    """RabbitMQ refuses permissions for a user or virtual host it does not have (404 over HTTP)
    and a pattern that is not a regular expression (400)."""
    api = EngineApi(Broker())
    refused = {
        UserPermission.full("nobody", "/"): ReplyCode.NOT_FOUND,
        UserPermission.full("guest", "nowhere"): ReplyCode.NOT_FOUND,
        UserPermission("guest", "/", "[", ".*", ".*"): ReplyCode.PRECONDITION_FAILED,
    }
    for record, code in refused.items():
        with pytest.raises(ApiError) as error:
            await api.set_permissions(record)
        assert error.value.reply_code == code, record
    with pytest.raises(ApiError) as missing:
        await api.clear_permissions("guest", "nowhere")
    assert missing.value.reply_code == ReplyCode.NOT_FOUND
    assert api.permissions() == [UserPermission.full("guest", "/")]
