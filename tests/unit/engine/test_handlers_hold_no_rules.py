"""The AMQP method handlers hold no business rules: they translate a frame into calls of the
engine (its service API, the channel, the session) and the result into a frame. The foundation
requirements: "business rules must not live in AMQP method handlers. Give the engine a public,
typed service API that the AMQP handlers themselves use"; and, proven by, "A test that the AMQP
handlers hold no business rules (they call the engine API)".

Two halves. The handlers' source is read with `ast` (as test_import_cycles reads imports): a
handler module that imports what a rule is decided with, reads a limit or a queue's or virtual
host's internals, or sets engine state itself fails, naming the module, line and what it did.
And the rule that lives in the engine is the same for AMQP and management: a queue a user may
not consume from is refused with one reply code and one text to basic.get, basic.consume and
the message API alike.
"""

from __future__ import annotations

import ast
import inspect
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pamqp import base, commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine import methods
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.dispatch import HANDLERS
from batonmq.engine.messages import AckMode
from batonmq.security.permissions import UserPermission
from tests.memclient import MemClient
from tests.unit.engine.test_access import ADMIN_RULE, BOB_CONNECTS, acl, broker_with_acl, login

Basic = commands.Basic

HANDLER_DIRECTORY = Path(methods.__file__ or "").parent

#: Modules a rule is decided with: the ACL and permissions, the configuration, the virtual
#: host's and queues' own modules, consumers and transactions (their rules live there).
FORBIDDEN_IMPORTS = (
    "batonmq.config",
    "batonmq.security",
    "batonmq.engine.access",
    "batonmq.engine.vhost",
    "batonmq.engine.consumer",
    "batonmq.engine.transaction",
    "batonmq.engine.confirms",
    "batonmq.queues",
)
#: Except the queue protocol, which handlers name as a type.
ALLOWED_IMPORTS = ("batonmq.queues.protocol",)

#: Attributes that are a rule's inputs: the broker's settings (its limits), the ACL and the
#: permissions, a queue's options, consumers and owner, a virtual host's queues, and the checks
#: the engine makes with them.
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "settings",
        "access",
        "permissions",
        "options",
        "consumers",
        "producers",
        "exclusive_owner",
        "exclusive_queues",
        "queues",
        "check_owner",
        "check_consume",
        "has_exclusive_consumer",
        "wait_for_held",
    }
)


def _forbidden_import(module: str) -> bool:
    if module.startswith(ALLOWED_IMPORTS):
        return False
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN_IMPORTS)


def rules_held(source: str) -> list[str]:
    """What in a handler module's `source` is a rule of its own, each as "line N: what"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            # Each name as a dotted path: `from batonmq.queues import protocol` is the protocol.
            imported = [f"{node.module}.{alias.name}" for alias in node.names]
            found.extend(
                f"line {node.lineno}: imports {name}"
                for name in imported
                if _forbidden_import(name)
            )
        elif isinstance(node, ast.Import):
            found.extend(
                f"line {node.lineno}: imports {alias.name}"
                for alias in node.names
                if _forbidden_import(alias.name)
            )
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(f"line {node.lineno}: uses .{node.attr}")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.extend(
                f"line {node.lineno}: sets .{target.attr}"
                for target in targets
                if isinstance(target, ast.Attribute)
            )
    return sorted(found, key=lambda held: int(held.split(":")[0].removeprefix("line ")))


def handler_modules() -> list[Path]:
    return sorted(path for path in HANDLER_DIRECTORY.glob("*.py") if path.name != "__init__.py")


@pytest.mark.parametrize("path", handler_modules(), ids=lambda path: path.name)
def test_a_handler_module_holds_no_rule_of_its_own(path: Path) -> None:
    """A check, a limit or a state change in a handler would be a second copy of what the
    engine decides for management too: the handler asks the engine instead."""
    assert rules_held(path.read_text()) == []


def test_every_handler_is_in_the_handler_modules() -> None:
    """The walk above sees every handler the dispatch table runs (one outside the package
    would escape it)."""
    assert len(HANDLERS) > 20
    for method, handler in HANDLERS.items():
        path = Path(inspect.getfile(handler))
        assert path.parent == HANDLER_DIRECTORY, (method, path)


def test_the_walk_finds_the_rules_a_handler_used_to_hold() -> None:
    """basic.consume as it was before its rules moved into the engine: the walk finds them."""
    source = """
from batonmq.engine.access import authorize
from batonmq.security.acl import Action

def consume(channel, method):
    queue = channel.session.vhost.queue(method.queue, channel.session)
    limit = channel.session.broker.settings.max_consumers_per_channel
    if limit and len(channel.consumers) >= limit:
        raise amqp_error(ReplyCode.NOT_ALLOWED, "reached maximum")
    if queue.options.max_active_consumers is not None:
        pass
    channel.consumer_prefetch = method.prefetch_count
"""
    assert rules_held(source) == [
        "line 2: imports batonmq.engine.access.authorize",
        "line 3: imports batonmq.security.acl.Action",
        "line 7: uses .settings",
        "line 8: uses .consumers",
        "line 10: uses .options",
        "line 12: sets .consumer_prefetch",
    ]


# --- one rule for the queues a user may consume from ------------------------------------------

#: Another connection's exclusive queue.
LOCKED = "locked"

#: Each queue bob may not consume from, and why (the reply code).
REFUSED = {
    "a queue that is not there (404)": ("missing", ReplyCode.NOT_FOUND),
    "another connection's exclusive queue (405)": (LOCKED, ReplyCode.RESOURCE_LOCKED),
    "a queue the ACL denies CONSUME on (403)": ("hidden", ReplyCode.ACCESS_REFUSED),
    "a queue bob may not read (403)": ("secret", ReplyCode.ACCESS_REFUSED),
}


@pytest.fixture
def acl_dir() -> Iterator[Path]:
    """A short directory name: a refusal names the ACL file, within a short string's 255."""
    with tempfile.TemporaryDirectory(prefix="acl-") as name:
        yield Path(name)


def _scene(acl_dir: Path) -> tuple[Broker, MemClient]:
    """Queues plain, hidden (the ACL denies bob CONSUME on it), secret (bob's permissions do
    not let him read it) and guest's exclusive queue LOCKED; guest stays connected."""
    broker = broker_with_acl(
        acl_dir,
        acl(
            ADMIN_RULE, BOB_CONNECTS, "ACL DENY bob CONSUME QUEUE name=hidden", "ACL ALLOW bob ALL"
        ),
    )
    broker.permissions.set(UserPermission("bob", "/", ".*", ".*", "^(plain|hidden|locked)$"))
    guest = login(broker, "guest")
    for name in ("plain", "hidden", "secret"):
        guest.declare_queue(1, name)
    guest.declare_queue(1, LOCKED, exclusive=True)
    return broker, guest


def _closed_by(client: MemClient, method: base.Frame) -> tuple[int, str]:
    client.send(1, method)
    close = client.expect(commands.Channel.Close, channel=1)
    client.send(1, commands.Channel.CloseOk())
    client.open_channel(1)
    return close.reply_code, close.reply_text


@pytest.mark.parametrize(("name", "code"), REFUSED.values(), ids=REFUSED.keys())
async def test_consuming_is_refused_alike_over_amqp_and_by_the_api(
    acl_dir: Path, name: str, code: int
) -> None:
    """basic.get, basic.consume, and management's get, browse and pause of a queue ask one
    engine function, so they refuse with the same reply code and text: RabbitMQ's "no queue
    'q' in vhost '/'" (404), its "cannot obtain exclusive access to locked queue" (405), the
    ACL's CONSUME QUEUE (Qpid manual Table 2.3: "Applied when subscriptions are created") and
    RabbitMQ's read permission ("basic.get, basic.consume: read on the queue") as 403."""
    broker, _guest = _scene(acl_dir)
    bob = login(broker, "bob")
    api = EngineApi(broker)

    over_amqp = {
        "basic.get": _closed_by(bob, Basic.Get(queue=name)),
        "basic.consume": _closed_by(bob, Basic.Consume(queue=name)),
    }
    with pytest.raises(ApiError) as got:
        await api.get_messages("bob", "/", name, 1, AckMode.ACK_REQUEUE_TRUE)
    with pytest.raises(ApiError) as browsed:
        api.browse("bob", "/", name)
    with pytest.raises(ApiError) as paused:
        api.pause_queue("bob", "/", name, paused=True)
    by_the_api = {
        "get": (got.value.reply_code, got.value.text),
        "browse": (browsed.value.reply_code, browsed.value.text),
        "pause": (paused.value.reply_code, paused.value.text),
    }

    assert {reply[0] for reply in over_amqp.values()} == {code}
    assert set(by_the_api.values()) == set(over_amqp.values()), (over_amqp, by_the_api)


async def test_a_queue_bob_may_consume_from_is_found_by_both(acl_dir: Path) -> None:
    """The same function lets through what it should: the refusals above are not everything."""
    broker, _guest = _scene(acl_dir)
    bob = login(broker, "bob")
    bob.call(1, Basic.Get(queue="plain"), Basic.GetEmpty)
    bob.call(1, Basic.Consume(queue="plain", consumer_tag="c"), Basic.ConsumeOk)
    assert (
        await EngineApi(broker).get_messages("bob", "/", "plain", 1, AckMode.ACK_REQUEUE_TRUE) == []
    )


async def test_read_taken_away_through_the_api_is_in_force_at_the_next_consume(
    acl_dir: Path,
) -> None:
    """The foundation requirements: permission changes "work through the API while clients are
    connected, and take effect on the next access check". basic.get and basic.consume share
    the channel's memory of what it may read; a change of the permissions empties it."""
    broker, _guest = _scene(acl_dir)
    bob = login(broker, "bob")
    bob.call(1, Basic.Get(queue="plain"), Basic.GetEmpty)  # the channel remembers: read plain
    await EngineApi(broker).set_permissions(UserPermission("bob", "/", ".*", ".*", "^hidden$"))

    assert _closed_by(bob, Basic.Consume(queue="plain")) == _closed_by(
        bob, Basic.Get(queue="plain")
    )
    assert _closed_by(bob, Basic.Consume(queue="plain")) == (
        ReplyCode.ACCESS_REFUSED,
        "ACCESS_REFUSED - read access to queue 'plain' in vhost '/' refused for user 'bob'",
    )
