"""Who may do what in a virtual host: the ACL files of Qpid manual §2.2, asked at every AMQP
operation that touches a virtual host, an exchange or a queue.

Which files apply:

- No ACL at all (neither `[acl] file` nor a file in `[acl] vhost_dir`): every user who logged in
  may do whatever its RabbitMQ permissions allow (`batonmq.security.permissions`, asked beside
  the ACL by `require_permission`: an operation needs both). `enabled` is then false, and an
  ACL check of the engine API is that one attribute test.
- Otherwise an operation in virtual host V must be allowed by the broker-wide file (when one is
  configured) AND by V's own file (when `vhost_dir` holds one, named
  `urllib.parse.quote(V, safe="") + ".acl"`: "%2F.acl" for "/"). The broker-wide file is asked
  first, and a denial there is final. A virtual host without a file of its own answers to the
  broker-wide file alone, and to nothing when there is none.
- Each file ends with the implicit `ACL DENY ALL ALL` ("All ACL files end with a implict rule
  denying all operations to all users", §2.2.2): in a file, a request no rule matches is denied.

What is refused, and what is written down:

- A denied operation is channel error 403 ACCESS_REFUSED whose text names the operation, the
  object and the rule, e.g. "access to queue 'q' in vhost '/' refused for user 'bob': CONSUME
  denied by /etc/acl/broker.acl line 12". connection.open has no channel to close: a refused
  ACCESS VIRTUALHOST is connection.close 403 ACCESS_REFUSED (RabbitMQ says 530 NOT_ALLOWED
  there; 403 is what the issue asks for, and the code a refused login gets too).
- ALLOW-LOG and DENY-LOG ("… and log the action in the log", Table 2.2) write one line to the
  logger "batonmq.audit": user, virtual host, action, object type, properties, decision, and the
  deciding rule as file:line (INFO for allowed, WARNING for denied; the broker's `log.level`
  does not silence them: the file asked for them).

Loading: `AccessControl.load` reads every file at start; a file that does not parse is an
`AclSyntaxError` naming file, line and column, one that cannot be read an `AclFileError`, and the
broker refuses to start. `reload` (SIGHUP) reads them all again and swaps the new rules in only
when every file loaded; otherwise it keeps the old ones and raises the error.

The request each AMQP method makes (object names as the client gives them; booleans "true" or
"false"; a property a method has no value for is left out, so a rule naming it does not match):

=========================  ========  ===========  ============================================
method                     action    object       properties
=========================  ========  ===========  ============================================
connection.open            ACCESS    VIRTUALHOST  name
exchange.declare           CREATE    EXCHANGE     name type durable autodelete temporary
                                                  passive alternate
exchange.declare passive   ACCESS    EXCHANGE     name passive
exchange.delete            DELETE    EXCHANGE     name
exchange.bind / unbind     BIND /    EXCHANGE     name (the source) queuename (the destination
                           UNBIND                 exchange) routingkey durable temporary
queue.declare              CREATE    QUEUE        name durable autodelete exclusive temporary
                                                  passive
queue.declare passive      ACCESS    QUEUE        name passive
queue.bind / unbind        BIND /    EXCHANGE     name (the exchange) queuename routingkey
                           UNBIND                 durable temporary (of the queue)
queue.purge                PURGE     QUEUE        name durable autodelete exclusive temporary
queue.delete               DELETE    QUEUE        the same (name only for a missing queue)
basic.publish              PUBLISH   EXCHANGE     name routingkey
basic.consume, basic.get   CONSUME   QUEUE        name durable autodelete exclusive temporary
=========================  ========  ===========  ============================================

Everything else a client sends touches no virtual host object and is not checked: channel.*,
basic.qos, ack, nack, reject, recover and cancel (they act on deliveries and consumers the
channel already has: CONSUME was asked when it got them), tx.* (a publish inside a transaction
is checked when it is published) and confirm.select.

Choices where the seed says nothing for AMQP 0-9-1:

- `temporary`: a queue that goes away by itself, with its connection (exclusive) or its last
  consumer (auto-delete); a permanent queue is not temporary. This is the Qpid Java broker's
  reading (Broker-J: lifetime policy not PERMANENT; the older 0.x broker used auto-delete alone).
  It lets worked example 3's client create the reply queue the way AMQP 0-9-1 clients do,
  `queue.declare(queue="", exclusive=true)`. An exchange's `temporary` is its auto-delete flag,
  as in Qpid 0.x.
- The default exchange is named "amq.default" in requests (as in RabbitMQ's permissions): the
  ACL grammar has no empty value, so a rule could never name "".
- An exchange-to-exchange binding gives the destination exchange as `queuename`, with its
  durable and temporary flags, as Broker-J does: a rule on the queue name of a binding restricts
  where messages go, whatever kind of destination that is.
- `alternate` is the exchange's `alternate-exchange` argument. Queues have no alternate exchange
  in AMQP 0-9-1 (a dead-letter exchange is where rejected and expired messages go, not what
  Table 2.5 means), so a queue request carries none.
- A declare that finds the object already there is still a CREATE: whoever may only use an
  object declares it passively (RabbitMQ also asks "configure" of every declare).
- A server-named queue (queue.declare with an empty name) is asked about as name "" (the name
  is made by the virtual host after the check): only rules without a name, or `name="*"`, match.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote

from pamqp.common import FieldTable

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.config import AclConfig
from batonmq.engine.exchange import alternate_exchange_name
from batonmq.security.acl import AclError, AclRules, Action, Decision, ObjectType, Property
from batonmq.security.acl_parser import load_acl_file
from batonmq.security.permissions import Permission, Permissions, PermitCache, ResourceKind

if TYPE_CHECKING:
    from batonmq.engine.exchange import Exchange
    from batonmq.queues.protocol import RoutedQueue

audit_log = logging.getLogger("batonmq.audit")
# An ALLOW-LOG or DENY-LOG rule asks for its line: `log.level` = "warning" does not silence it.
audit_log.setLevel(logging.INFO)

#: The default exchange ("") as ACL requests name it: a rule cannot say name="".
DEFAULT_EXCHANGE: Final = "amq.default"
#: How a per-virtual-host file's name ends.
VHOST_FILE_SUFFIX: Final = ".acl"

Properties = Mapping[Property, str]


class AclDirectoryError(AclError):
    """The per-virtual-host ACL directory cannot be listed, or names one virtual host twice."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot use ACL directory {path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[AclDirectoryError], tuple[str, str]]:
        return (type(self), (self.path, self.reason))


@dataclass(frozen=True, slots=True)
class AclFile:
    """The rules of one file, and the file's name for 403 texts and audit lines."""

    path: str
    rules: AclRules

    @classmethod
    def read(cls, path: Path) -> AclFile:
        return cls(str(path), load_acl_file(path))


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the files said about one request, in the order they were asked; the last one
    decides when it denies."""

    decisions: tuple[tuple[AclFile, Decision], ...]

    @property
    def allowed(self) -> bool:
        return all(decision.allowed for _acl, decision in self.decisions)


def flag(value: bool) -> str:
    """A Boolean property's value (Table 2.5: "Boolean.")."""
    return "true" if value else "false"


def exchange_name(name: str) -> str:
    """An exchange's name in a request: the default exchange is "amq.default" ("amq." names
    are reserved, so no other exchange can have it)."""
    return name or DEFAULT_EXCHANGE


def exchange_declare_properties(
    name: str, type_name: str, durable: bool, auto_delete: bool, arguments: FieldTable | None
) -> dict[Property, str]:
    """CREATE EXCHANGE (Table 2.3: "Applied when an object is created, such as bindings,
    queues, exchanges"), with the alternate exchange when the arguments name one."""
    properties = {
        Property.NAME: exchange_name(name),
        Property.TYPE: type_name,
        Property.DURABLE: flag(durable),
        Property.AUTO_DELETE: flag(auto_delete),
        Property.TEMPORARY: flag(auto_delete),
        Property.PASSIVE: "false",
    }
    try:
        alternate = alternate_exchange_name(arguments or {})
    except TypeError:
        alternate = None  # not a name: the virtual host refuses it with 406
    if alternate is not None:
        properties[Property.ALTERNATE] = alternate
    return properties


def is_temporary(queue: RoutedQueue) -> bool:
    """A queue that goes away by itself: with its connection, or with its last consumer."""
    return queue.exclusive or queue.auto_delete


def queue_properties(queue: RoutedQueue) -> dict[Property, str]:
    """The properties of an existing queue, for PURGE, DELETE and CONSUME."""
    return {
        Property.NAME: queue.name,
        Property.DURABLE: flag(queue.durable),
        Property.AUTO_DELETE: flag(queue.auto_delete),
        Property.EXCLUSIVE: flag(queue.exclusive),
        Property.TEMPORARY: flag(is_temporary(queue)),
    }


def binding_properties(
    exchange: str, destination: str, routing_key: str, *, durable: bool, temporary: bool
) -> dict[Property, str]:
    """BIND and UNBIND EXCHANGE: the source exchange, the destination (queue or exchange) as
    queuename, and the destination's durable and temporary flags (worked example 3 allows the
    client to bind its temporary queues only)."""
    return {
        Property.NAME: exchange_name(exchange),
        Property.QUEUE_NAME: destination,
        Property.ROUTING_KEY: routing_key,
        Property.DURABLE: flag(durable),
        Property.TEMPORARY: flag(temporary),
    }


def exchange_binding_properties(
    source: str, destination: str, routing_key: str, destination_exchange: Exchange | None
) -> dict[Property, str]:
    """An exchange-to-exchange binding; a destination that does not exist has no flags (the
    virtual host refuses the binding with 404 after the check)."""
    if destination_exchange is None:
        return {
            Property.NAME: exchange_name(source),
            Property.QUEUE_NAME: destination,
            Property.ROUTING_KEY: routing_key,
        }
    return binding_properties(
        source,
        destination,
        routing_key,
        durable=destination_exchange.durable,
        temporary=destination_exchange.auto_delete,
    )


class AccessControl:
    """The broker-wide rules and each virtual host's, and the check every operation of the
    engine API makes."""

    __slots__ = ("_by_vhost", "_config", "broker_wide", "enabled")

    def __init__(
        self,
        broker_wide: AclFile | None = None,
        by_vhost: Mapping[str, AclFile] | None = None,
        config: AclConfig | None = None,
    ) -> None:
        """Rules given directly (tests); `load` reads them from files. `config` is what
        `reload` reads again; without one, reload reads nothing and allows everything."""
        self._config = config
        self._install(broker_wide, dict(by_vhost or {}))

    @classmethod
    def load(cls, config: AclConfig) -> AccessControl:
        """Read the configured files (AclError when one cannot be used)."""
        broker_wide, by_vhost = _read(config)
        return cls(broker_wide, by_vhost, config)

    def reload(self) -> None:
        """Read every file again and use the new rules; on any error keep the old rules and
        raise it (the caller logs it)."""
        if self._config is None:
            return
        broker_wide, by_vhost = _read(self._config)
        self._install(broker_wide, by_vhost)

    def _install(self, broker_wide: AclFile | None, by_vhost: dict[str, AclFile]) -> None:
        self.broker_wide = broker_wide
        self._by_vhost = by_vhost
        #: False when there is no rule at all: everything is allowed, and the engine API skips
        #: the check after reading this one attribute.
        self.enabled = broker_wide is not None or bool(by_vhost)

    def vhost_file(self, vhost: str) -> AclFile | None:
        return self._by_vhost.get(vhost)

    # Deciding -----------------------------------------------------------------------------

    def decide(
        self,
        user: str,
        vhost: str,
        action: Action,
        object_type: ObjectType,
        properties: Properties,
    ) -> Verdict:
        """Ask the broker-wide file, then the virtual host's; stop at the first denial."""
        decisions: list[tuple[AclFile, Decision]] = []
        for acl in (self.broker_wide, self._by_vhost.get(vhost)):
            if acl is None:
                continue
            decision = acl.rules.check(user, action, object_type, properties)
            decisions.append((acl, decision))
            if not decision.allowed:
                break
        return Verdict(tuple(decisions))

    def check(
        self,
        user: str,
        vhost: str,
        action: Action,
        object_type: ObjectType,
        properties: Properties,
    ) -> str | None:
        """None when the request is allowed, else the text of its refusal; writes the audit
        lines of ALLOW-LOG and DENY-LOG rules on the way."""
        verdict = self.decide(user, vhost, action, object_type, properties)
        for acl, decision in verdict.decisions:
            if decision.log:
                _audit(acl, decision, user, vhost, action, object_type, properties)
        if verdict.allowed:
            return None
        acl, decision = verdict.decisions[-1]
        return refusal_text(user, vhost, action, object_type, properties, acl, decision)

    def check_vhost(self, user: str, vhost: str) -> str | None:
        """connection.open: ACCESS VIRTUALHOST name=<vhost>; None when allowed, else the text
        of the refusal (connection.close 403: there is no channel to close)."""
        if not self.enabled:
            return None
        name = {Property.NAME: vhost}
        return self.check(user, vhost, Action.ACCESS, ObjectType.VIRTUALHOST, name)

    def require(
        self,
        user: str,
        vhost: str,
        action: Action,
        object_type: ObjectType,
        properties: Properties,
    ) -> None:
        """The check, refused as channel error 403 ACCESS_REFUSED."""
        refusal = self.check(user, vhost, action, object_type, properties)
        if refusal is not None:
            raise amqp_error(ReplyCode.ACCESS_REFUSED, refusal)


def require_permission(
    permissions: Permissions,
    user: str,
    vhost: str,
    permission: Permission,
    kind: ResourceKind,
    name: str,
    permits: PermitCache | None = None,
) -> None:
    """403 ACCESS_REFUSED (a channel error, as RabbitMQ's) unless `user`'s permissions in
    `vhost` give it `permission` on the resource: asked beside the ACL, which must allow the
    operation too. `permits`, a channel's, remembers what was allowed while the permissions do
    not change (RabbitMQ's channels cache their checks too)."""
    if permits is None:
        refusal = permissions.refusal(user, vhost, permission, kind, name)
    else:
        refusal = permits.refusal(permissions, user, vhost, permission, kind, name)
    if refusal is not None:
        raise amqp_error(ReplyCode.ACCESS_REFUSED, refusal)


# Texts --------------------------------------------------------------------------------------


def refusal_text(
    user: str,
    vhost: str,
    action: Action,
    object_type: ObjectType,
    properties: Properties,
    acl: AclFile,
    decision: Decision,
) -> str:
    """ "access to queue 'q' in vhost '/' refused for user 'bob': CONSUME denied by FILE line
    12", or "… denied by the implicit DENY ALL at the end of FILE" when no rule matched."""
    name = properties.get(Property.NAME, "")
    if object_type is ObjectType.VIRTUALHOST:
        what = f"vhost '{name}'"
    else:
        what = f"{object_type.value.lower()} '{name}' in vhost '{vhost}'"
    by = _by(acl, decision)
    return f"access to {what} refused for user '{user}': {action.value} denied by {by}"


def _by(acl: AclFile, decision: Decision) -> str:
    if decision.rule is None:
        return f"the implicit DENY ALL at the end of {acl.path}"
    return f"{acl.path} line {decision.rule.line}"


def _audit(
    acl: AclFile,
    decision: Decision,
    user: str,
    vhost: str,
    action: Action,
    object_type: ObjectType,
    properties: Properties,
) -> None:
    rule = decision.rule
    assert rule is not None, "only a rule logs"
    audit_log.log(
        logging.INFO if decision.allowed else logging.WARNING,
        "ACL %s",
        rule.permission.value,
        extra={
            "user": user,
            "vhost": vhost,
            "action": action.value,
            "object": object_type.value,
            "properties": " ".join(f"{prop.value}={value}" for prop, value in properties.items()),
            "decision": "allowed" if decision.allowed else "denied",
            "rule": f"{acl.path}:{rule.line}",
        },
    )


# Reading ------------------------------------------------------------------------------------


def _read(config: AclConfig) -> tuple[AclFile | None, dict[str, AclFile]]:
    broker_wide = None if config.file is None else AclFile.read(config.file)
    by_vhost = {} if config.vhost_dir is None else _read_vhost_dir(config.vhost_dir)
    return broker_wide, by_vhost


def _read_vhost_dir(directory: Path) -> dict[str, AclFile]:
    """Each `*.acl` file of the directory, by the virtual host its name %-decodes to."""
    try:
        paths = sorted(directory.iterdir())
    except OSError as error:
        raise AclDirectoryError(str(directory), error.strerror or str(error)) from error
    by_vhost: dict[str, AclFile] = {}
    for path in paths:
        stem = path.name.removesuffix(VHOST_FILE_SUFFIX)
        if stem == path.name or not stem:
            continue  # not an ACL file (a README, an editor's backup "x.acl~")
        vhost = unquote(stem)
        if vhost in by_vhost:
            raise AclDirectoryError(
                str(directory),
                f"{by_vhost[vhost].path} and {path} are both for virtual host '{vhost}'",
            )
        by_vhost[vhost] = AclFile.read(path)
    return by_vhost
