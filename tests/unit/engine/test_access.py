"""ACL enforcement in the engine (Qpid manual §2.2; the Security requirements "Enforcement at every
operation"), driven by the in-memory client: each operation allowed by its rule and refused without
it, the first matching rule, the broker-wide file with a virtual host's own, reload, and audit
lines.

The ACL files live in a short temporary directory: a 403's text names the file, and the whole
text must fit in an AMQP short string.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from pamqp import base, commands

from batonmq.amqp.constants import ReplyCode
from batonmq.config import AclConfig
from batonmq.engine.access import AccessControl, AclDirectoryError
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from batonmq.security.acl import AclFileError, AclSyntaxError
from batonmq.security.passwords import Credential
from batonmq.security.permissions import UserPermission
from tests.memclient import LOOPBACK_PEER, MemClient
from tests.unit.security.test_acl import EXAMPLE_3

Basic = commands.Basic
Exchange = commands.Exchange
Queue = commands.Queue

PASSWORD = "secret"
USERS = ("bob", "alice", "client", "server")
#: The administrator who sets the scene: allowed everything.
ADMIN_RULE = "ACL ALLOW guest ALL"
#: The least a user needs to reach a channel at all.
BOB_CONNECTS = "ACL ALLOW bob ACCESS VIRTUALHOST"


@functools.cache
def user_credential() -> Credential:
    return Credential.from_password(PASSWORD)


@pytest.fixture
def acl_dir() -> Iterator[Path]:
    """A directory with a short name for ACL files (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="acl-") as name:
        yield Path(name)


def broker_with_acl(
    acl_dir: Path, text: str | None, *, vhost_files: dict[str, str] | None = None
) -> Broker:
    """A broker whose users are guest and USERS (password PASSWORD), with `text` as the
    broker-wide ACL file (none when None) and `vhost_files` as per-virtual-host files (each
    virtual host named there is created)."""
    broker = Broker()
    for user in USERS:
        broker.authenticator.users[user] = user_credential()
    file = None
    if text is not None:
        file = acl_dir / "broker.acl"
        file.write_text(text, encoding="utf-8")
    vhost_dir = None
    if vhost_files is not None:
        vhost_dir = acl_dir / "vhosts"
        vhost_dir.mkdir()
        for vhost, vhost_text in vhost_files.items():
            (vhost_dir / f"{quote(vhost, safe='')}.acl").write_text(vhost_text, encoding="utf-8")
            if vhost not in broker.vhosts:
                broker.add_vhost(vhost)
    broker.access = AccessControl.load(AclConfig(file=file, vhost_dir=vhost_dir))
    grant_everything(broker)
    return broker


def grant_everything(broker: Broker) -> None:
    """RabbitMQ's permissions out of the way: every user may do everything in every virtual
    host, so that the ACL alone decides."""
    for user in ("guest", *USERS):
        for vhost in broker.vhosts:
            broker.permissions.set(UserPermission.full(user, vhost))


def acl(*rules: str) -> str:
    return "\n".join(rules) + "\n"


def login(
    broker: Broker, user: str = "bob", *, vhost: str = "/", channels: tuple[int, ...] = (1,)
) -> MemClient:
    client = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
    client.handshake(user, "guest" if user == "guest" else PASSWORD, vhost=vhost)
    for channel in channels:
        client.open_channel(channel)
    return client


def refusal(client: MemClient, channel: int = 1) -> str:
    """The text of the channel.close 403 the last method got (the channel is opened again)."""
    close = client.expect(commands.Channel.Close, channel=channel)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED, close.reply_text
    client.send(channel, commands.Channel.CloseOk())
    client.open_channel(channel)
    prefix = "ACCESS_REFUSED - "
    assert close.reply_text.startswith(prefix)
    return close.reply_text.removeprefix(prefix)


def implicitly_denied(what: str, action: str, path: Path, user: str = "bob") -> str:
    return (
        f"access to {what} refused for user '{user}': {action} denied by the implicit DENY ALL "
        f"at the end of {path}"
    )


def denied_by(what: str, action: str, path: Path, line: int, user: str = "bob") -> str:
    return f"access to {what} refused for user '{user}': {action} denied by {path} line {line}"


def set_the_scene(admin: MemClient) -> None:
    """Exchanges x (direct) and x2 (fanout, bound to x by "k"), queue q (bound to x by "k")
    holding one message."""
    admin.call(1, Exchange.Declare(exchange="x", exchange_type="direct"), Exchange.DeclareOk)
    admin.call(1, Exchange.Declare(exchange="x2", exchange_type="fanout"), Exchange.DeclareOk)
    admin.declare_queue(1, "q")
    admin.call(1, Queue.Bind(queue="q", exchange="x", routing_key="k"), Queue.BindOk)
    admin.call(1, Exchange.Bind(destination="x2", source="x", routing_key="k"), Exchange.BindOk)
    admin.publish(1, b"m", routing_key="q")


# --- each operation, allowed by its rule and refused without it ---------------------------------


@dataclass(frozen=True)
class Operation:
    """One AMQP operation on the scene: the rule that allows it, with every property the
    request must carry (a property missing from the request would not match); what it sends;
    what an allowed one gets first (None: nothing); and the action and object its 403 names."""

    rule: str
    send: Callable[[MemClient], None]
    reply: type[base.Frame] | None
    action: str
    what: str


def sending(method: base.Frame) -> Callable[[MemClient], None]:
    return lambda client: client.send(1, method)


def publishing(exchange: str, routing_key: str) -> Callable[[MemClient], None]:
    return lambda client: client.publish(1, b"hello", exchange=exchange, routing_key=routing_key)


OPERATIONS = {
    "exchange.declare": Operation(
        'ACL ALLOW bob CREATE EXCHANGE name="bobx" type="topic" durable="true" '
        'autodelete="false" temporary="false" passive="false"',
        sending(Exchange.Declare(exchange="bobx", exchange_type="topic", durable=True)),
        Exchange.DeclareOk,
        "CREATE",
        "exchange 'bobx' in vhost '/'",
    ),
    "exchange.declare passive": Operation(
        'ACL ALLOW bob ACCESS EXCHANGE name="x" passive="true"',
        sending(Exchange.Declare(exchange="x", passive=True)),
        Exchange.DeclareOk,
        "ACCESS",
        "exchange 'x' in vhost '/'",
    ),
    "exchange.delete": Operation(
        'ACL ALLOW bob DELETE EXCHANGE name="x2"',
        sending(Exchange.Delete(exchange="x2")),
        Exchange.DeleteOk,
        "DELETE",
        "exchange 'x2' in vhost '/'",
    ),
    "exchange.bind": Operation(
        'ACL ALLOW bob BIND EXCHANGE name="x" queuename="x2" routingkey="k2" durable="false" '
        'temporary="false"',
        sending(Exchange.Bind(destination="x2", source="x", routing_key="k2")),
        Exchange.BindOk,
        "BIND",
        "exchange 'x' in vhost '/'",
    ),
    "exchange.unbind": Operation(
        'ACL ALLOW bob UNBIND EXCHANGE name="x" queuename="x2" routingkey="k"',
        sending(Exchange.Unbind(destination="x2", source="x", routing_key="k")),
        Exchange.UnbindOk,
        "UNBIND",
        "exchange 'x' in vhost '/'",
    ),
    "queue.declare": Operation(
        'ACL ALLOW bob CREATE QUEUE name="bobq" durable="false" autodelete="false" '
        'exclusive="true" temporary="true" passive="false"',
        sending(Queue.Declare(queue="bobq", exclusive=True)),
        Queue.DeclareOk,
        "CREATE",
        "queue 'bobq' in vhost '/'",
    ),
    "queue.declare passive": Operation(
        'ACL ALLOW bob ACCESS QUEUE name="q" passive="true"',
        sending(Queue.Declare(queue="q", passive=True)),
        Queue.DeclareOk,
        "ACCESS",
        "queue 'q' in vhost '/'",
    ),
    "queue.bind": Operation(
        'ACL ALLOW bob BIND EXCHANGE name="x" queuename="q" routingkey="k3" durable="false" '
        'temporary="false"',
        sending(Queue.Bind(queue="q", exchange="x", routing_key="k3")),
        Queue.BindOk,
        "BIND",
        "exchange 'x' in vhost '/'",
    ),
    "queue.unbind": Operation(
        'ACL ALLOW bob UNBIND EXCHANGE name="x" queuename="q" routingkey="k"',
        sending(Queue.Unbind(queue="q", exchange="x", routing_key="k")),
        Queue.UnbindOk,
        "UNBIND",
        "exchange 'x' in vhost '/'",
    ),
    "queue.purge": Operation(
        'ACL ALLOW bob PURGE QUEUE name="q" durable="false" autodelete="false" '
        'exclusive="false" temporary="false"',
        sending(Queue.Purge(queue="q")),
        Queue.PurgeOk,
        "PURGE",
        "queue 'q' in vhost '/'",
    ),
    "queue.delete": Operation(
        'ACL ALLOW bob DELETE QUEUE name="q" temporary="false" durable="false"',
        sending(Queue.Delete(queue="q")),
        Queue.DeleteOk,
        "DELETE",
        "queue 'q' in vhost '/'",
    ),
    "basic.publish": Operation(
        'ACL ALLOW bob PUBLISH EXCHANGE name="x" routingkey="k"',
        publishing("x", "k"),
        None,
        "PUBLISH",
        "exchange 'x' in vhost '/'",
    ),
    "basic.publish to the default exchange": Operation(
        'ACL ALLOW bob PUBLISH EXCHANGE name="amq.default" routingkey="q"',
        publishing("", "q"),
        None,
        "PUBLISH",
        "exchange 'amq.default' in vhost '/'",
    ),
    "basic.consume": Operation(
        'ACL ALLOW bob CONSUME QUEUE name="q" durable="false" autodelete="false" '
        'exclusive="false" temporary="false"',
        sending(Basic.Consume(queue="q", consumer_tag="t")),
        Basic.ConsumeOk,
        "CONSUME",
        "queue 'q' in vhost '/'",
    ),
    "basic.get": Operation(
        'ACL ALLOW bob CONSUME QUEUE name="q" temporary="false"',
        sending(Basic.Get(queue="q")),
        Basic.GetOk,
        "CONSUME",
        "queue 'q' in vhost '/'",
    ),
}


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_operation_is_allowed_by_its_rule(acl_dir: Path, name: str):
    """The Security requirements: "Enforcement at every operation: connection.open (ACCESS
    VIRTUALHOST), declares (CREATE; passive is ACCESS), bind/unbind, delete, purge, basic.publish
    (PUBLISH EXCHANGE with the routing key), basic.consume and basic.get (CONSUME QUEUE)." """
    operation = OPERATIONS[name]
    broker = broker_with_acl(acl_dir, acl(ADMIN_RULE, BOB_CONNECTS, operation.rule))
    set_the_scene(login(broker, "guest"))
    bob = login(broker)
    operation.send(bob)
    received = bob.receive()
    if operation.reply is None:
        assert received == []
    else:
        assert received, "no reply"
        assert isinstance(received[0].method, operation.reply), received[0].method


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_operation_is_refused_without_its_rule(acl_dir: Path, name: str):
    """The Security requirements: "A denied operation is channel error 403 ACCESS_REFUSED whose text
    names the operation and object"; Qpid manual §2.2.2: "All ACL files end with a implict rule
    denying all operations to all users." """
    operation = OPERATIONS[name]
    broker = broker_with_acl(acl_dir, acl(ADMIN_RULE, BOB_CONNECTS))
    admin = login(broker, "guest")
    set_the_scene(admin)
    bob = login(broker)
    operation.send(bob)
    assert refusal(bob) == implicitly_denied(
        operation.what, operation.action, acl_dir / "broker.acl"
    )
    # Nothing happened: the scene is as it was.
    vhost = broker.vhosts["/"]
    assert set(vhost.exchanges) >= {"x", "x2"} and "bobx" not in vhost.exchanges
    assert set(vhost.queues) == {"q"}
    assert vhost.queues["q"].message_count == 1
    assert len(vhost.exchanges["x"].router) == 2


def test_a_rule_for_other_property_values_does_not_allow(acl_dir: Path):
    """Table 2.5 properties restrict a rule: bob may create queue "mine" only."""
    broker = broker_with_acl(
        acl_dir, acl(BOB_CONNECTS, 'ACL ALLOW bob CREATE QUEUE name="mine" durable="true"')
    )
    bob = login(broker)
    bob.call(1, Queue.Declare(queue="mine", durable=True), Queue.DeclareOk)
    bob.send(1, Queue.Declare(queue="mine2", durable=True))
    path = acl_dir / "broker.acl"
    assert refusal(bob) == implicitly_denied("queue 'mine2' in vhost '/'", "CREATE", path)
    bob.send(1, Queue.Declare(queue="mine", durable=False))
    assert refusal(bob) == implicitly_denied("queue 'mine' in vhost '/'", "CREATE", path)


# --- connection.open -----------------------------------------------------------------------------


def test_connection_open_needs_access_virtualhost(acl_dir: Path):
    """The Security requirements: "connection.open (ACCESS VIRTUALHOST)"; Qpid manual §2.2.4.1:
    "Neither 'operator' nor 'readonly' should be allow to connect for messaging." Refused:
    connection.close 403 naming connection.open."""
    broker = broker_with_acl(acl_dir, acl(BOB_CONNECTS, "ACL DENY alice ACCESS VIRTUALHOST"))
    login(broker, "bob")
    alice = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
    alice.start("alice", PASSWORD)
    alice.tune_and_open(alice.expect(commands.Connection.Tune))
    close = alice.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.ACCESS_REFUSED
    assert (close.class_id, close.method_id) == (10, 40)
    assert close.reply_text == "ACCESS_REFUSED - " + denied_by(
        "vhost '/'", "ACCESS", acl_dir / "broker.acl", 2, user="alice"
    )


def test_without_an_acl_everyone_may_do_everything():
    """The lead's rule: with no ACL configured at all, every logged-in user may do everything
    (its RabbitMQ permissions allowing)."""
    broker = Broker()
    assert not broker.access.enabled
    broker.authenticator.users["bob"] = user_credential()
    grant_everything(broker)
    bob = login(broker)
    set_the_scene(bob)
    bob.call(1, Queue.Purge(queue="q"), Queue.PurgeOk)
    bob.call(1, Queue.Delete(queue="q"), Queue.DeleteOk)


def test_an_empty_vhost_directory_is_no_acl(acl_dir: Path):
    broker = broker_with_acl(acl_dir, None, vhost_files={})
    assert not broker.access.enabled
    set_the_scene(login(broker, "bob"))


# --- first match ---------------------------------------------------------------------------------


def test_the_first_matching_rule_decides(acl_dir: Path):
    """Qpid manual §2.2.2: "If the desire is to allow bob to create all exchanges except "myexch",
    order of the rules must be reversed: ACL DENY bob CREATE EXCHANGE name="myexch" ACL ALLOW bob
    ALL EXCHANGE" """
    broker = broker_with_acl(
        acl_dir,
        acl(
            BOB_CONNECTS,
            'ACL DENY bob CREATE EXCHANGE name="myexch"',
            "ACL ALLOW bob ALL EXCHANGE",
        ),
    )
    bob = login(broker)
    bob.send(1, Exchange.Declare(exchange="myexch", exchange_type="direct"))
    assert refusal(bob) == denied_by(
        "exchange 'myexch' in vhost '/'", "CREATE", acl_dir / "broker.acl", 2
    )
    bob.call(1, Exchange.Declare(exchange="other", exchange_type="direct"), Exchange.DeclareOk)


def test_a_rule_after_a_matching_one_is_dead(acl_dir: Path):
    """Qpid manual §2.2.2: "if the user bob tries to create an exchange "myexch", the operation will
    be allowed by the first rule. The second rule will never be considered." """
    broker = broker_with_acl(
        acl_dir,
        acl(
            BOB_CONNECTS,
            "ACL ALLOW bob ALL EXCHANGE",
            'ACL DENY bob CREATE EXCHANGE name="myexch" # Dead rule',
        ),
    )
    bob = login(broker)
    bob.call(1, Exchange.Declare(exchange="myexch", exchange_type="direct"), Exchange.DeclareOk)


# --- choices the seed leaves open ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("exclusive", "auto_delete", "durable", "temporary"),
    [
        (True, False, False, True),
        (False, True, False, True),
        (True, True, True, True),
        (False, False, False, False),
        (False, False, True, False),
    ],
)
def test_a_temporary_queue_is_exclusive_or_auto_delete(
    acl_dir: Path, exclusive: bool, auto_delete: bool, durable: bool, temporary: bool
):
    """Table 2.5 temporary: "Indicates the presence of an temporary flag"; AMQP 0-9-1 has no such
    flag: a queue that goes with its connection or its last consumer is temporary."""
    broker = broker_with_acl(
        acl_dir, acl(BOB_CONNECTS, 'ACL ALLOW bob CREATE QUEUE temporary="true"')
    )
    bob = login(broker)
    bob.send(
        1, Queue.Declare(queue="t", exclusive=exclusive, auto_delete=auto_delete, durable=durable)
    )
    if temporary:
        bob.expect(Queue.DeclareOk, channel=1)
    else:
        assert "CREATE denied" in refusal(bob)


def test_a_server_named_queue_is_asked_about_with_an_empty_name(acl_dir: Path):
    broker = broker_with_acl(
        acl_dir,
        acl(BOB_CONNECTS, 'ACL ALLOW bob CREATE QUEUE name="*" exclusive="true"'),
    )
    bob = login(broker)
    declare_ok = bob.call(1, Queue.Declare(queue="", exclusive=True), Queue.DeclareOk)
    assert declare_ok.queue.startswith("amq.gen-")


def test_an_exchange_declare_carries_its_alternate_exchange(acl_dir: Path):
    """Table 2.5 alternate: "Name of the alternate exchange" (the alternate-exchange argument)."""
    broker = broker_with_acl(
        acl_dir, acl(BOB_CONNECTS, 'ACL ALLOW bob CREATE EXCHANGE alternate="ae"')
    )
    bob = login(broker)
    with_ae = Exchange.Declare(
        exchange="e1", exchange_type="direct", arguments={"alternate-exchange": "ae"}
    )
    bob.call(1, with_ae, Exchange.DeclareOk)
    bob.send(1, Exchange.Declare(exchange="e2", exchange_type="direct"))
    assert "CREATE denied" in refusal(bob)


def test_deleting_a_missing_queue_is_judged_by_its_name_alone(acl_dir: Path):
    broker = broker_with_acl(
        acl_dir,
        acl(BOB_CONNECTS, 'ACL ALLOW bob DELETE QUEUE name="gone"', "ACL DENY bob DELETE QUEUE"),
    )
    bob = login(broker)
    bob.call(1, Queue.Delete(queue="gone"), Queue.DeleteOk)
    bob.send(1, Queue.Delete(queue="other"))
    assert refusal(bob) == denied_by(
        "queue 'other' in vhost '/'", "DELETE", acl_dir / "broker.acl", 3
    )


def test_a_publish_in_a_transaction_is_refused_when_published(acl_dir: Path):
    """A held publish is checked when it is published, not at tx.commit."""
    broker = broker_with_acl(acl_dir, acl(BOB_CONNECTS))
    bob = login(broker)
    bob.call(1, commands.Tx.Select(), commands.Tx.SelectOk)
    bob.publish(1, b"m", routing_key="q")
    assert "PUBLISH denied" in refusal(bob)


# --- a virtual host's own file -------------------------------------------------------------------


VHOSTS_OPEN = "ACL ALLOW ALL ACCESS VIRTUALHOST"


def test_a_vhost_file_must_allow_too(acl_dir: Path):
    """Qpid manual §2.2: "In the Java Broker, the ACL may be imposed broker wide or applied to
    individual virtual hosts." The lead: an operation in V must be allowed by the broker-wide
    file and by V's file."""
    broker = broker_with_acl(
        acl_dir,
        acl(VHOSTS_OPEN, "ACL ALLOW bob ALL QUEUE"),
        vhost_files={"test": acl(VHOSTS_OPEN, "ACL DENY bob DELETE QUEUE", "ACL ALLOW ALL ALL")},
    )
    in_root = login(broker, vhost="/")
    in_root.declare_queue(1, "q")
    in_root.call(1, Queue.Delete(queue="q"), Queue.DeleteOk)
    in_test = login(broker, vhost="test")
    in_test.declare_queue(1, "q")
    in_test.send(1, Queue.Delete(queue="q"))
    assert refusal(in_test) == denied_by(
        "queue 'q' in vhost 'test'", "DELETE", acl_dir / "vhosts" / "test.acl", 2
    )
    assert "q" in broker.vhosts["test"].queues


def test_a_denial_in_the_broker_wide_file_is_final(acl_dir: Path):
    broker = broker_with_acl(
        acl_dir,
        acl(VHOSTS_OPEN, "ACL ALLOW bob ALL QUEUE"),
        vhost_files={"test": acl("ACL ALLOW ALL ALL")},
    )
    bob = login(broker, vhost="test")
    bob.declare_queue(1, "q")
    bob.publish(1, b"m", routing_key="q")
    assert refusal(bob) == implicitly_denied(
        "exchange 'amq.default' in vhost 'test'", "PUBLISH", acl_dir / "broker.acl"
    )


def test_a_vhost_file_alone_governs_its_vhost_only(acl_dir: Path):
    """The file for "/" is "%2F.acl"; a virtual host without a file, and no broker-wide file:
    everything allowed there."""
    broker = broker_with_acl(acl_dir, None, vhost_files={"/": acl(BOB_CONNECTS), "other": ""})
    assert (acl_dir / "vhosts" / "%2F.acl").exists()
    broker.add_vhost("free")
    grant_everything(broker)
    login(broker, vhost="free").declare_queue(1, "q")
    bob = login(broker, vhost="/")
    bob.send(1, Queue.Declare(queue="q"))
    assert refusal(bob) == implicitly_denied(
        "queue 'q' in vhost '/'", "CREATE", acl_dir / "vhosts" / "%2F.acl"
    )
    # "other" has an empty file: its implicit DENY ALL keeps everyone out.
    refused = MemClient(Session(broker, LOOPBACK_PEER, lambda: None))
    refused.start("bob", PASSWORD)
    refused.tune_and_open(refused.expect(commands.Connection.Tune), vhost="other")
    assert refused.expect(commands.Connection.Close).reply_code == ReplyCode.ACCESS_REFUSED


# --- loading and reloading -----------------------------------------------------------------------


def test_a_broken_file_names_file_line_and_column(acl_dir: Path):
    """The Security requirements: "A file that does not parse names the file, line and column: the
    broker refuses to start with it"."""
    path = acl_dir / "broker.acl"
    path.write_text("ACL ALLOW bob ALL\nACL ALLOW bob PUBLSH\n", encoding="utf-8")
    with pytest.raises(AclSyntaxError) as raised:
        AccessControl.load(AclConfig(file=path))
    assert str(raised.value) == f"{path}:2:15: unknown action 'PUBLSH'"


def test_a_broken_vhost_file_names_itself(acl_dir: Path):
    vhost_dir = acl_dir / "vhosts"
    vhost_dir.mkdir()
    (vhost_dir / "test.acl").write_text("ACL ALLOW\n", encoding="utf-8")
    (vhost_dir / "README").write_text("not an ACL", encoding="utf-8")
    with pytest.raises(AclSyntaxError) as raised:
        AccessControl.load(AclConfig(vhost_dir=vhost_dir))
    assert raised.value.path == str(vhost_dir / "test.acl")
    assert (raised.value.line, raised.value.column) == (1, 10)


def test_missing_files_and_directories_are_errors(acl_dir: Path):
    with pytest.raises(AclFileError):
        AccessControl.load(AclConfig(file=acl_dir / "missing.acl"))
    with pytest.raises(AclDirectoryError) as raised:
        AccessControl.load(AclConfig(vhost_dir=acl_dir / "missing"))
    assert str(raised.value).startswith(f"cannot use ACL directory {acl_dir / 'missing'}: ")


def test_two_files_for_one_vhost_are_an_error(acl_dir: Path):
    vhost_dir = acl_dir / "vhosts"
    vhost_dir.mkdir()
    (vhost_dir / "%2F.acl").write_text("", encoding="utf-8")
    (vhost_dir / "%2f.acl").write_text("", encoding="utf-8")
    with pytest.raises(AclDirectoryError) as raised:
        AccessControl.load(AclConfig(vhost_dir=vhost_dir))
    assert "are both for virtual host '/'" in str(raised.value)


def test_reload_applies_new_rules_to_open_connections(acl_dir: Path):
    """The Security requirements: "Reload on SIGHUP and with `batonctl acl reload`, without a
    restart." """
    broker = broker_with_acl(acl_dir, acl(BOB_CONNECTS))
    bob = login(broker)
    bob.send(1, Queue.Declare(queue="q"))
    refusal(bob)
    (acl_dir / "broker.acl").write_text(acl(BOB_CONNECTS, "ACL ALLOW bob CREATE QUEUE"))
    broker.access.reload()
    bob.declare_queue(1, "q")


def test_reload_picks_up_a_new_vhost_file(acl_dir: Path):
    broker = broker_with_acl(acl_dir, None, vhost_files={})
    bob = login(broker)
    bob.declare_queue(1, "q")
    (acl_dir / "vhosts" / "%2F.acl").write_text(acl(BOB_CONNECTS))
    broker.access.reload()
    assert broker.access.enabled
    bob.send(1, Queue.Declare(queue="q"))
    assert "CREATE denied" in refusal(bob)


@pytest.mark.parametrize("broken", ["ACL ALLOW bob CREAT QUEUE\n", None])
def test_reload_keeps_the_old_rules_when_a_file_cannot_be_used(acl_dir: Path, broken: str | None):
    """The Security requirements: "a reload keeps the old rules"."""
    broker = broker_with_acl(acl_dir, acl(BOB_CONNECTS, "ACL ALLOW bob CREATE QUEUE"))
    path = acl_dir / "broker.acl"
    if broken is None:
        path.unlink()
        expected: type[Exception] = AclFileError
    else:
        path.write_text(broken, encoding="utf-8")
        expected = AclSyntaxError
    with pytest.raises(expected):
        broker.access.reload()
    bob = login(broker)
    bob.declare_queue(1, "q")
    bob.send(1, Queue.Purge(queue="q"))
    assert "PURGE denied" in refusal(bob)


def test_reload_keeps_every_old_rule_when_one_vhost_file_is_broken(acl_dir: Path):
    broker = broker_with_acl(
        acl_dir, acl(VHOSTS_OPEN), vhost_files={"/": acl(BOB_CONNECTS, "ACL ALLOW bob ALL ALL")}
    )
    (acl_dir / "broker.acl").write_text(acl("ACL ALLOW ALL ALL"))
    (acl_dir / "vhosts" / "%2F.acl").write_text("GROUP g\n")
    with pytest.raises(AclSyntaxError):
        broker.access.reload()
    bob = login(broker)
    bob.send(1, Queue.Declare(queue="q"))
    assert "CREATE denied" in refusal(bob)  # the old broker-wide file, not the new one


def test_rules_given_directly_have_nothing_to_reload():
    access = AccessControl()
    access.reload()
    assert not access.enabled


# --- audit lines ---------------------------------------------------------------------------------


def audit_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "batonmq.audit"]


def test_allow_log_and_deny_log_write_an_audit_line(
    acl_dir: Path, caplog: pytest.LogCaptureFixture
):
    """Qpid manual Table 2.2: "ALLOW-LOG Allow the action and log the action in the log", "DENY-LOG
    Deny the action and log the action in the log"."""
    broker = broker_with_acl(
        acl_dir,
        acl(
            BOB_CONNECTS,
            'ACL ALLOW-LOG bob CREATE QUEUE name="q"',
            "ACL DENY-LOG bob PURGE QUEUE",
        ),
    )
    bob = login(broker)
    caplog.set_level(logging.INFO, logger="batonmq.audit")
    bob.declare_queue(1, "q")
    bob.send(1, Queue.Purge(queue="q"))
    refusal(bob)
    path = acl_dir / "broker.acl"
    allowed, denied = audit_records(caplog)
    assert (allowed.levelno, allowed.getMessage()) == (logging.INFO, "ACL ALLOW-LOG")
    assert {
        key: vars(allowed)[key] for key in ("user", "action", "object", "decision", "rule")
    } == {
        "user": "bob",
        "action": "CREATE",
        "object": "QUEUE",
        "decision": "allowed",
        "rule": f"{path}:2",
    }
    assert vars(allowed)["properties"] == (
        "name=q durable=false autodelete=false exclusive=false temporary=false passive=false"
    )
    assert (denied.levelno, denied.getMessage()) == (logging.WARNING, "ACL DENY-LOG")
    assert {key: vars(denied)[key] for key in ("user", "vhost", "action", "decision", "rule")} == {
        "user": "bob",
        "vhost": "/",
        "action": "PURGE",
        "decision": "denied",
        "rule": f"{path}:3",
    }


def test_allow_and_deny_and_the_implicit_deny_write_no_audit_line(
    acl_dir: Path, caplog: pytest.LogCaptureFixture
):
    broker = broker_with_acl(
        acl_dir,
        acl(BOB_CONNECTS, 'ACL ALLOW bob CREATE QUEUE name="q"', "ACL DENY bob PURGE QUEUE"),
    )
    bob = login(broker)
    caplog.set_level(logging.INFO, logger="batonmq.audit")
    bob.declare_queue(1, "q")
    bob.send(1, Queue.Purge(queue="q"))
    refusal(bob)
    bob.send(1, Queue.Delete(queue="q"))
    refusal(bob)
    assert audit_records(caplog) == []


def test_the_audit_line_ignores_the_broker_log_level(
    acl_dir: Path, caplog: pytest.LogCaptureFixture
):
    """An ACL that asks for a line gets it even when the broker logs warnings only."""
    broker = broker_with_acl(acl_dir, acl("ACL ALLOW-LOG ALL ACCESS VIRTUALHOST"))
    batonmq_logger = logging.getLogger("batonmq")
    previous = batonmq_logger.level
    batonmq_logger.setLevel(logging.WARNING)
    try:
        with caplog.at_level(logging.INFO):
            login(broker, channels=())
    finally:
        batonmq_logger.setLevel(previous)
    (record,) = audit_records(caplog)
    assert (vars(record)["action"], vars(record)["object"]) == ("ACCESS", "VIRTUALHOST")


# --- worked example 3, in memory -----------------------------------------------------------------


def test_worked_example_3_request_and_response_through_temporary_queues(acl_dir: Path):
    """Qpid manual §2.2.4.3: "Two users: 'client' publishes requests; 'server' consumes the
    requests and generates a response." The client's reply queue is temporary (exclusive,
    server-named); it binds, consumes and deletes it with the temporary="true" rules."""
    broker = broker_with_acl(acl_dir, EXAMPLE_3)
    server = login(broker, "server")
    server.declare_queue(1, "example.RequestQueue")
    server.call(
        1,
        Queue.Bind(
            queue="example.RequestQueue", exchange="amq.direct", routing_key="example.RequestQueue"
        ),
        Queue.BindOk,
    )
    server.consume(1, "example.RequestQueue", "requests", no_ack=True)
    client = login(broker, "client")
    reply_queue = client.declare_queue(1, "", exclusive=True)
    client.call(
        1,
        Queue.Bind(queue=reply_queue, exchange="amq.direct", routing_key="TempQueue"),
        Queue.BindOk,
    )
    client.consume(1, reply_queue, "replies", no_ack=True)
    client.publish(1, b"request", exchange="amq.direct", routing_key="example.RequestQueue")
    (request,) = server.deliveries(1)
    assert request.body == b"request"
    server.publish(1, b"response", exchange="amq.direct", routing_key="TempQueue")
    (response,) = client.deliveries(1)
    assert response.body == b"response"
    client.call(
        1,
        Queue.Unbind(queue=reply_queue, exchange="amq.direct", routing_key="TempQueue"),
        Queue.UnbindOk,
    )
    client.call(1, Queue.Delete(queue=reply_queue), Queue.DeleteOk)
    # Neither may do the other's part.
    client.send(1, Basic.Consume(queue="example.RequestQueue"))
    assert "CONSUME denied" in refusal(client)
    server.publish(1, b"m", exchange="amq.direct", routing_key="example.RequestQueue")
    assert "PUBLISH denied" in refusal(server)
    client.send(1, Queue.Declare(queue="durable", durable=True))
    assert "CREATE denied" in refusal(client)
