"""The broker's one configuration: typed, frozen, loaded once, validated with clear errors.

Sources, lowest precedence first:

1. the defaults declared on the dataclasses below;
2. a TOML file (``load_config(path)``, or the file named by ``BATONMQ_CONFIG``);
3. environment variables ``BATONMQ__SECTION__KEY`` (``BATONMQ__LISTENERS__AMQP__PORT=5674``),
   whose value is read as a TOML value when it parses as one, else taken as a string;
4. ``overrides``: dotted keys (``{"listeners.amqp.port": 5673}``), which is what command-line
   flags become.

The TOML layout mirrors the dataclasses, except that the top-level `Config` fields live in a
``[broker]`` table (``broker.name``, ``broker.data_dir``, ``broker.default_vhost``). Every setting
is declared once, as a dataclass field whose metadata carries its validator; the table of known
keys (`SETTINGS`) is derived from those declarations, so adding a setting is adding a field.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import os
import re
import tomllib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "CONFIG_FILE_VARIABLE",
    "ENV_PREFIX",
    "SETTINGS",
    "TABLES",
    "AmqpConfig",
    "AuthConfig",
    "Config",
    "ConfigError",
    "HttpListenerConfig",
    "LimitsConfig",
    "ListenerConfig",
    "ListenersConfig",
    "LogConfig",
    "PersistConfig",
    "PostgresConfig",
    "ServerConfig",
    "Setting",
    "default_data_dir",
    "load_config",
]

#: Names the configuration file when `load_config` is given no path.
CONFIG_FILE_VARIABLE = "BATONMQ_CONFIG"
#: Prefix of the environment variables that set one key each: BATONMQ__LOG__LEVEL=debug.
ENV_PREFIX = "BATONMQ__"

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")

# The AMQP 0-9-1 spec, section 4.2.3: "The minimum frame size is 4096 octets"; 131072 is the
# largest frame this broker negotiates (RabbitMQ's default frame_max).
FRAME_MIN = 4096
FRAME_MAX = 131072

_T = TypeVar("_T")
_DC = TypeVar("_DC", bound="DataclassInstance")


class ConfigError(ValueError):
    """The configuration cannot be used; the message says where, which key, and what is wrong.

    ``source`` is the file (or environment variable, or "overrides") the bad value came from,
    ``key`` the dotted key, ``problem`` what was wrong; ``str(error)`` joins those present.
    """

    def __init__(self, problem: str, *, source: str | None = None, key: str | None = None):
        self.problem = problem
        self.source = source
        self.key = key
        super().__init__(": ".join(part for part in (source, key, problem) if part))


class _Invalid(Exception):
    """Raised by a validator; `load_config` turns it into a ConfigError naming source and key."""


#: A validator takes a value of the setting's type and returns it (possibly normalised), or
#: raises _Invalid with a message that completes "<key>: ...".
Check = Callable[[object], object]


def _between(low: float, high: float | None = None) -> Check:
    def check(value: object) -> object:
        assert isinstance(value, int | float)
        if high is None and value < low:
            raise _Invalid(f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise _Invalid(f"must be between {low} and {high}, got {value}")
        return value

    return check


def _positive_finite(value: object) -> object:
    assert isinstance(value, float)
    if not math.isfinite(value) or value <= 0:
        raise _Invalid(f"must be a finite number greater than 0, got {value}")
    return value


def _one_of(*choices: str) -> Check:
    """One of `choices`, in any case, given back spelt as the choice is."""
    by_folded_case = {choice.casefold(): choice for choice in choices}

    def check(value: object) -> object:
        assert isinstance(value, str)
        choice = by_folded_case.get(value.strip().casefold())
        if choice is None:
            expected = ", ".join(repr(choice) for choice in choices)
            raise _Invalid(f"expected one of {expected}, got {value!r}")
        return choice

    return check


def _non_empty(value: object) -> object:
    assert isinstance(value, str | Path)
    if not str(value):
        raise _Invalid("must not be empty")
    return value


# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, at most 63
# characters each and 253 in all.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _bind_address(value: object) -> object:
    assert isinstance(value, str)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        return value
    labels = value.removesuffix(".").split(".")
    if (
        len(value) > 253
        or not all(_HOST_LABEL.fullmatch(label) for label in labels)
        # "1.2.3.999" is a mistyped address, not a host name: top-level domains are not numeric.
        or labels[-1].isdigit()
    ):
        raise _Invalid(f"expected an IP address or a host name, got {value!r}")
    return value


def _setting(default: _T, *, check: Check | None = None, key: str | None = None) -> _T:
    """A field with a default, its validator and (for `Config`'s own fields) its TOML key."""
    return field(default=default, metadata={"check": check, "key": key})


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/batonmq``, or ``~/.local/share/batonmq`` (the XDG base-directory spec,
    which also says to ignore a relative ``XDG_DATA_HOME``)."""
    env = os.environ if environ is None else environ
    xdg_data_home = env.get("XDG_DATA_HOME", "")
    if xdg_data_home and Path(xdg_data_home).is_absolute():
        return Path(xdg_data_home) / "batonmq"
    return _home(env) / ".local" / "share" / "batonmq"


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    return Path(home) if home else Path.home()


SASL_MECHANISMS = ("PLAIN", "AMQPLAIN", "EXTERNAL")
TLS_VERIFY_MODES = ("none", "optional", "required")


def _mechanisms(value: object) -> object:
    """A space-separated list of SASL mechanisms, as connection.start's `mechanisms` field."""
    assert isinstance(value, str)
    names = value.upper().split()
    if not names:
        raise _Invalid("must name at least one SASL mechanism")
    unknown = [name for name in names if name not in SASL_MECHANISMS]
    if unknown:
        raise _Invalid(f"unknown SASL mechanism {unknown[0]!r}: use {', '.join(SASL_MECHANISMS)}")
    return " ".join(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """One listening socket (MQ 3.5 admin guide "connection services": the jms/ssljms pair maps onto
    amqp/amqps)."""

    bind: str = _setting("0.0.0.0", check=_bind_address)
    #: 0 asks the operating system for a free port.
    port: int = _setting(5672, check=_between(0, 65535))
    #: false turns the plain listener off, so that clients must use amqps (Qpid manual sslOnly).
    enabled: bool = _setting(True)
    #: SASL mechanisms offered on this listener, space-separated.
    mechanisms: str = _setting("PLAIN AMQPLAIN", check=_mechanisms)


@dataclass(frozen=True, slots=True)
class TlsListenerConfig:
    """The amqps listener: AMQP over TLS 1.2 or later (Qpid manual §2.3)."""

    enabled: bool = _setting(False)
    bind: str = _setting("0.0.0.0", check=_bind_address)
    port: int = _setting(5671, check=_between(0, 65535))
    #: Add EXTERNAL to log in as the client certificate's subject CN (it needs verify =
    #: "optional" or "required").
    mechanisms: str = _setting("PLAIN AMQPLAIN", check=_mechanisms)
    #: PEM files: the server's certificate chain and its private key.
    certfile: Path | None = field(default=None)
    keyfile: Path | None = field(default=None)
    #: PEM bundle of the certificate authorities that client certificates are checked against.
    cafile: Path | None = field(default=None)
    #: Client certificates: "none" (not asked for), "optional" (checked if sent), "required".
    verify: str = _setting("none", check=_one_of(*TLS_VERIFY_MODES))
    #: OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are OpenSSL's); empty keeps the default.
    ciphers: str = _setting("")


@dataclass(frozen=True, slots=True)
class HttpListenerConfig:
    """The management HTTP API, on RabbitMQ's management port (15672) by default."""

    enabled: bool = _setting(True)
    bind: str = _setting("0.0.0.0", check=_bind_address)
    #: 0 asks the operating system for a free port.
    port: int = _setting(15672, check=_between(0, 65535))
    #: HTTPS, with the certificate, key and client-certificate settings of `[listeners.amqps]`.
    tls: bool = _setting(False)


@dataclass(frozen=True, slots=True)
class ListenersConfig:
    amqp: ListenerConfig = field(default_factory=ListenerConfig)
    amqps: TlsListenerConfig = field(default_factory=TlsListenerConfig)
    http: HttpListenerConfig = field(default_factory=HttpListenerConfig)


@dataclass(frozen=True, slots=True)
class AmqpConfig:
    """What the broker proposes in connection.tune."""

    frame_max: int = _setting(FRAME_MAX, check=_between(FRAME_MIN, FRAME_MAX))
    channel_max: int = _setting(2047, check=_between(1, 65535))
    #: Seconds; 0 turns heartbeats off.
    heartbeat: int = _setting(60, check=_between(0, 65535))
    #: Largest message body accepted, in bytes (MQ 3.5 admin guide imq.message.max_size, default
    #: 70m); a larger one is refused with 406 before its body is read.
    max_message_size: int = _setting(70 * 1024 * 1024, check=_between(1, 512 * 1024 * 1024))


@dataclass(frozen=True, slots=True)
class AuthConfig:
    #: The guest user may connect only from a loopback address (as RabbitMQ's loopback_users).
    guest_loopback_only: bool = _setting(True)
    #: Failed logins of one user from one address within `failure_window` seconds that lock
    #: that user out from that address for `lockout` seconds; each failure also delays that
    #: user's next answer there (security/lockout.py has the rules).
    max_failures: int = _setting(5, check=_between(1))
    failure_window: float = _setting(60.0, check=_positive_finite)
    lockout: float = _setting(300.0, check=_positive_finite)


@dataclass(frozen=True, slots=True)
class AclConfig:
    """Access control lists in Qpid's syntax (Qpid manual §2.2). With neither file, any user who
    logs in may do anything in the virtual hosts that exist."""

    #: The broker-wide ACL file: every operation must be allowed by it.
    file: Path | None = field(default=None)
    #: A directory of per-virtual-host ACL files, named after the virtual host with "/" and other
    #: reserved characters %-encoded ("%2F.acl" for "/", "test.acl" for "test"): an operation in
    #: a virtual host that has one must be allowed by it too.
    vhost_dir: Path | None = field(default=None)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Limits on what clients may hold open (the Overload requirements, "Other limits"); 0 means
    unlimited.

    The seeds name none of these, so they follow RabbitMQ: its per-virtual-host and per-user
    ``max-connections`` limits and its ``consumer_max_per_channel`` setting, refused as RabbitMQ
    refuses them, with 530 NOT_ALLOWED, which closes the connection. Unlike RabbitMQ's vhost
    limit, where 0 refuses every connection, 0 here is "no limit", as for RabbitMQ's
    ``channel_max``. Channels per connection are limited by ``amqp.channel_max``, negotiated in
    connection.tune; a per-user channel limit (RabbitMQ's user ``max-channels``) is not offered:
    ``max_connections_per_user`` times ``amqp.channel_max`` bounds a user's channels.
    """

    #: Open connections one user may have on this broker, across virtual hosts.
    max_connections_per_user: int = _setting(0, check=_between(0))
    #: Open connections to one virtual host on this broker, whoever the users.
    max_connections_per_vhost: int = _setting(0, check=_between(0))
    #: Consumers one channel may have at once (RabbitMQ consumer_max_per_channel).
    max_consumers_per_channel: int = _setting(0, check=_between(0))
    #: Messages the broker holds in all its queues together (MQ 3.5 admin guide Table 2-4,
    #: imq.system.max_count); a publish beyond it is refused. The largest message is
    #: ``amqp.max_message_size`` (imq.message.max_size).
    max_messages: int = _setting(0, check=_between(0))
    #: Body bytes the broker holds in all its queues together (imq.system.max_size).
    max_bytes: int = _setting(0, check=_between(0))


@dataclass(frozen=True, slots=True)
class SlowConsumerConfig:
    """Slow consumer detection (Qpid manual §2.11, §1.5.2): a consumer whose subscription queue (a
    queue bound to a topic or fanout exchange) backs up past a threshold has its connection
    closed with 506 RESOURCE_ERROR. 0 turns a threshold off."""

    #: Check subscription queues at all (Qpid manual §2.11.3.1 slow-consumer-detection).
    enabled: bool = _setting(False)
    #: Seconds between checks (the seed's delay and timeunit, 60 seconds in its example).
    delay: float = _setting(60.0, check=_positive_finite)
    #: Bytes of ready messages in the queue above which its consumers are slow (<depth>).
    depth: int = _setting(0, check=_between(0))
    #: Milliseconds the oldest message in the queue may wait before its consumers are slow
    #: (<messageAge>).
    message_age: int = _setting(0, check=_between(0))
    #: Messages in the queue above which its consumers are slow (<messageCount>).
    message_count: int = _setting(0, check=_between(0))
    #: Binding keys ("topic names"), space-separated, whose subscription queues are checked,
    #: matched by straight string comparison (§1.5.2.3); empty checks every subscription queue.
    topics: str = _setting("")
    #: Also delete a slow consumer's durable subscription queue (<topicDelete>
    #: <delete-persistent/>); temporary ones (exclusive or auto-delete) always go.
    delete_persistent: bool = _setting(False)


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """Threshold alerts (Qpid manual "Set threshold values for queue monitor alerting to log"):
    a warning in the log when a queue goes over one; 0 turns a threshold off."""

    #: Bytes of ready messages in a queue (maximumQueueDepth).
    max_queue_depth: int = _setting(0, check=_between(0))
    #: Bytes of one message body (maximumMessageSize).
    max_message_size: int = _setting(0, check=_between(0))
    #: Milliseconds the oldest message of a queue has waited (maximumMessageAge).
    max_message_age: int = _setting(0, check=_between(0))
    #: Messages in a queue (maximumMessageCount).
    max_message_count: int = _setting(0, check=_between(0))
    #: Seconds between checks of every queue.
    interval: float = _setting(30.0, check=_positive_finite)
    #: Seconds before an alert that still holds is logged again (Qpid's minimumAlertRepeatGap,
    #: 30 s); a queue that went back under alerts again as soon as it is over.
    repeat_gap: float = _setting(30.0, check=_positive_finite)


MEMORY_STATES = ("green", "yellow", "orange", "red")


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Memory thresholds (MQ 3.5 admin guide Table 2-4: imq.{green,yellow,orange,red}.threshold and
    .count): the broker's resident memory as a percentage of ``budget`` sets its state; each
    state lets a publishing connection run at most ``*_count`` messages before its input waits
    a turn, and red (count 0) blocks every publisher with connection.blocked."""

    #: Bytes of memory the broker may use; 0 means 40% of the machine's RAM (RabbitMQ's
    #: default vm_memory_high_watermark).
    budget: int = _setting(0, check=_between(0))
    yellow_threshold: int = _setting(80, check=_between(1, 100))
    orange_threshold: int = _setting(90, check=_between(1, 100))
    red_threshold: int = _setting(98, check=_between(1, 100))
    green_count: int = _setting(5000, check=_between(1))
    yellow_count: int = _setting(500, check=_between(1))
    orange_count: int = _setting(50, check=_between(1))
    #: Seconds between readings of the broker's memory.
    check_interval: float = _setting(0.25, check=_positive_finite)


@dataclass(frozen=True, slots=True)
class DiskConfig:
    """Disk quota (Qpid manual §1.5.1.2.2) and the free-disk alarm."""

    #: Bytes the store may use before every producer is blocked (MST-1008); 0: no quota.
    store_overfull: int = _setting(0, check=_between(0))
    #: Producers are released when the store is back under this (MST-1009); 0: the overfull
    #: size.
    store_underfull: int = _setting(0, check=_between(0))
    #: Free bytes on the data directory's disk below which every producer is blocked
    #: (RabbitMQ's disk_free_limit, 50 MB); 0: no alarm.
    free_limit: int = _setting(50_000_000, check=_between(0))
    #: Seconds between checks of the store's size and the free disk space.
    check_interval: float = _setting(1.0, check=_positive_finite)


LIMIT_BEHAVIORS = ("FLOW_CONTROL", "REMOVE_OLDEST", "REMOVE_LOW_PRIORITY", "REJECT_NEWEST")


@dataclass(frozen=True, slots=True)
class AutocreateConfig:
    """Auto-created queues (MQ 3.5 admin guide Table 2-10, imq.autocreate.*): the queues clients
    declare whose names match ``pattern`` (a regular expression, as in a RabbitMQ policy; empty
    matches none) get these limits unless their declare sets its own, and are deleted once they
    have had no consumers and no messages for ``delete_after`` seconds. 0 means no limit."""

    pattern: str = _setting("")
    #: imq.autocreate.destination.maxNumMsgs
    max_messages: int = _setting(0, check=_between(0))
    #: imq.autocreate.destination.maxTotalMsgBytes
    max_bytes: int = _setting(0, check=_between(0))
    #: imq.autocreate.destination.limitBehavior
    limit_behavior: str = _setting("REJECT_NEWEST", check=_one_of(*LIMIT_BEHAVIORS))
    #: imq.autocreate.destination.maxBytesPerMsg
    max_message_size: int = _setting(0, check=_between(0))
    #: imq.autocreate.destination.maxNumProducers
    max_producers: int = _setting(0, check=_between(0))
    #: imq.autocreate.queue.maxNumActiveConsumers and maxNumBackupConsumers
    max_active_consumers: int = _setting(0, check=_between(0))
    max_backup_consumers: int = _setting(0, check=_between(0))
    #: Seconds an auto-created queue may be unused (no consumers, no messages); 0: kept.
    delete_after: float = _setting(120.0, check=_between(0))


@dataclass(frozen=True, slots=True)
class ServerConfig:
    #: Bytes buffered for a client's socket above which the broker stops reading from it...
    write_buffer_high: int = _setting(4 * 1024 * 1024, check=_between(1))
    #: ...and below which it resumes.
    write_buffer_low: int = _setting(1024 * 1024, check=_between(0))
    #: Seconds a graceful shutdown waits for connections to close before closing them.
    shutdown_timeout: float = _setting(10.0, check=_positive_finite)


STORE_KINDS = ("sqlite", "postgres")


@dataclass(frozen=True, slots=True)
class PostgresConfig:
    #: libpq connection string or URI ("postgresql://user:pass@host:5432/db").
    dsn: str = _setting("")
    #: PostgreSQL schema holding this broker's tables; empty means "batonmq_s_<broker id>"
    #: (MQ 4.1 HA guide Table 8: a standalone store's tables are suffixed S<brokerID>).
    schema: str = _setting("")


@dataclass(frozen=True, slots=True)
class PersistConfig:
    """The persistent store (MQ 3.5 admin guide Table 2-5, imq.persist.*)."""

    #: "sqlite" (one file under the data directory) or "postgres" (imq.persist.store).
    store: str = _setting("sqlite", check=_one_of(*STORE_KINDS))
    #: Flush each commit to the disk before confirming it (imq.persist.file.sync.enabled); false
    #: leaves writes to the operating system, which survives a broker crash but not a power cut.
    sync: bool = _setting(True)
    #: Entries a queue keeps in memory; a longer backlog waits in the store (paging).
    page_window: int = _setting(10_000, check=_between(16))
    postgres: PostgresConfig = field(default_factory=PostgresConfig)


@dataclass(frozen=True, slots=True)
class MessageConfig:
    #: Seconds between sweeps that remove expired messages from anywhere in a queue (MQ 3.5 admin
    #: guide imq.message.expiration.interval, default 60); an expired message at the head of a queue
    #: goes at once, sweep or not.
    expiration_interval: float = _setting(60.0, check=_positive_finite)


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = _setting("info", check=_one_of(*LOG_LEVELS))
    format: str = _setting("text", check=_one_of(*LOG_FORMATS))


@dataclass(frozen=True, slots=True)
class Config:
    broker_name: str = _setting("batonmq", check=_non_empty, key="broker.name")
    data_dir: Path = field(
        default_factory=default_data_dir,
        metadata={"check": _non_empty, "key": "broker.data_dir"},
    )
    default_vhost: str = _setting("/", check=_non_empty, key="broker.default_vhost")
    listeners: ListenersConfig = field(default_factory=ListenersConfig)
    amqp: AmqpConfig = field(default_factory=AmqpConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    acl: AclConfig = field(default_factory=AclConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    disk: DiskConfig = field(default_factory=DiskConfig)
    autocreate: AutocreateConfig = field(default_factory=AutocreateConfig)
    slow_consumer: SlowConsumerConfig = field(default_factory=SlowConsumerConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    persist: PersistConfig = field(default_factory=PersistConfig)
    message: MessageConfig = field(default_factory=MessageConfig)
    log: LogConfig = field(default_factory=LogConfig)


# ---------------------------------------------------------------------------------------------
# The table of known keys, derived from the dataclasses.


@dataclass(frozen=True, slots=True)
class Setting:
    """One configurable key: its dotted name, where it lives in `Config`, its type and check."""

    key: str
    attribute_path: tuple[str, ...]
    kind: type
    check: Check | None


def _derive_settings(
    cls: type[DataclassInstance], key_prefix: str, attribute_path: tuple[str, ...]
) -> tuple[dict[str, Setting], set[str]]:
    settings: dict[str, Setting] = {}
    tables: set[str] = set()
    hints = typing.get_type_hints(cls)
    for dataclass_field in dataclasses.fields(cls):
        kind = hints[dataclass_field.name]
        path = (*attribute_path, dataclass_field.name)
        key = dataclass_field.metadata.get("key") or f"{key_prefix}{dataclass_field.name}"
        if dataclasses.is_dataclass(kind):
            assert isinstance(kind, type)
            tables.add(key)
            nested_settings, nested_tables = _derive_settings(kind, f"{key}.", path)
            settings.update(nested_settings)
            tables.update(nested_tables)
        else:
            settings[key] = Setting(key, path, kind, dataclass_field.metadata.get("check"))
    return settings, tables


_derived_settings, _derived_tables = _derive_settings(Config, "", ())
#: Every configurable key, by dotted name ("listeners.amqp.port").
SETTINGS: Mapping[str, Setting] = _derived_settings
#: The TOML tables ("sections"): "broker", "listeners", "listeners.amqp", "amqp", ...
TABLES: frozenset[str] = frozenset(
    _derived_tables | {key.rpartition(".")[0] for key in SETTINGS if "." in key}
)


# ---------------------------------------------------------------------------------------------
# Types: TOML values into the types the dataclasses declare.

_EXPECTED: dict[object, str] = {
    int: "an integer",
    float: "a number",
    bool: "a boolean (true or false)",
    str: "a string",
    Path: "a string (a path)",
    Path | None: "a string (a path)",
}


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value!s}"


def _coerce(setting: Setting, value: object, base_dir: Path, environ: Mapping[str, str]) -> object:
    """`value` as the setting's type, or _Invalid. Booleans are not integers."""
    kind = setting.kind
    ok = False
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value, ok = float(value), True
    elif kind is str:
        ok = isinstance(value, str)
    elif kind is Path or kind == Path | None:
        if isinstance(value, str | os.PathLike):
            value, ok = _resolve_path(os.fspath(value), base_dir, environ), True
            if kind != Path and value == "":
                value = None  # an optional path left empty is unset
    else:  # pragma: no cover - a field of a type _coerce does not know is a programming error
        raise TypeError(f"{setting.key}: unsupported setting type {kind!r}")
    if not ok:
        raise _Invalid(f"expected {_EXPECTED[kind]}, got {_describe(value)}")
    return value


def _resolve_path(text: str | bytes, base_dir: Path, environ: Mapping[str, str]) -> Path | str:
    """An absolute path: ``~`` is the home directory; relative is relative to `base_dir`."""
    text = os.fsdecode(text)
    if not text:
        return text  # the check reports it
    if text == "~" or text.startswith("~/"):
        path = _home(environ) / text[2:]
    else:
        path = Path(text).expanduser()
    return path if path.is_absolute() else base_dir / path


# ---------------------------------------------------------------------------------------------
# Loading.


@dataclass(frozen=True, slots=True)
class _Value:
    """A validated value and the source it came from, for errors that involve two keys."""

    value: object
    source: str | None


def _not_a_setting(
    key: str, source: str | None, *, kind: str = "key", spell: Callable[[str], str] = repr
) -> ConfigError:
    """The error for a key that is not a setting: a section, or unknown (with the closest key,
    spelled as the source spells keys)."""
    if key in TABLES:
        example = next(name for name in SETTINGS if name.startswith(f"{key}."))
        problem = f"is a section, not a key: set one of its keys, as in {spell(example)}"
    else:
        suggestion = _closest(key)
        problem = f"unknown {kind}" + (f"; did you mean {spell(suggestion)}?" if suggestion else "")
    return ConfigError(problem, source=source, key=key)


def _closest(key: str) -> str | None:
    """The known key the user most likely meant by `key`, if any is close."""
    known = sorted(SETTINGS)
    leaf = key.rpartition(".")[2]
    # A known key in the wrong section ("frame_max" under [listeners.amqp]): name its section.
    for name in known:
        if name.rpartition(".")[2] == leaf:
            return name
    matches = difflib.get_close_matches(key, sorted({*known, *TABLES}), n=1, cutoff=0.6)
    if matches:
        return matches[0]
    # A misspelt key in the wrong section ("prot" at the top level): match its last part alone.
    by_leaf = {name.rpartition(".")[2]: name for name in known}
    leaf_matches = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
    return by_leaf[leaf_matches[0]] if leaf_matches else None


def _flatten(table: Mapping[str, object], prefix: str, source: str) -> dict[str, object]:
    """A parsed TOML document as {dotted key: value}, refusing unknown sections and keys."""
    flat: dict[str, object] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if key in SETTINGS:
            flat[key] = value
        elif key in TABLES:
            if not isinstance(value, dict):
                raise ConfigError(
                    f"is a section: expected a table, got {_describe(value)}",
                    source=source,
                    key=key,
                )
            flat.update(_flatten(value, f"{key}.", source))
        else:
            raise _not_a_setting(key, source, kind="section" if isinstance(value, dict) else "key")
    return flat


_TOML_POSITION = re.compile(r"^(?P<reason>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")


def _read_file(path: Path, source: str) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a configuration file", source=source) from None
    except PermissionError:
        raise ConfigError("cannot read the file: permission denied", source=source) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(f"cannot read the file: {reason}", source=source) from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"not valid UTF-8 text (byte {error.start}): TOML files are UTF-8", source=source
        ) from None
    except tomllib.TOMLDecodeError as error:
        # Python 3.11's TOMLDecodeError has no lineno/colno attributes (3.14 adds them); its
        # message ends "(at line L, column C)".
        message = str(error)
        position = _TOML_POSITION.match(message)
        if position:
            message = (
                f"TOML syntax error at line {position['line']}, column {position['column']}: "
                f"{position['reason']}"
            )
        else:
            message = f"TOML syntax error: {message}"
        raise ConfigError(message, source=source) from None


def _environment_layer(environ: Mapping[str, str]) -> list[tuple[str, object, str]]:
    """[(key, value, source)] from the BATONMQ__SECTION__KEY variables, sorted by name."""
    layer: list[tuple[str, object, str]] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        source = f"environment variable {name}"
        key = name[len(ENV_PREFIX) :].replace("__", ".").lower()
        if key not in SETTINGS:
            raise _not_a_setting(key, source, spell=_variable_name)
        layer.append((key, _environment_value(SETTINGS[key], environ[name]), source))
    return layer


def _variable_name(key: str) -> str:
    """The environment variable that sets `key`: listeners.amqp.port -> BATONMQ__LISTENERS__..."""
    return ENV_PREFIX + key.replace(".", "__").upper()


def _environment_value(setting: Setting, text: str) -> object:
    """The variable's text read as a TOML value (5674, true, "x"), else the text itself."""
    try:
        document = tomllib.loads(f"value = {text}")
    except tomllib.TOMLDecodeError:
        return text
    if document.keys() != {"value"}:  # "1\nother = 2" is not one value
        return text
    value = document["value"]
    # A name or a path that happens to read as a number (broker name "42") stays as written.
    if setting.kind in (str, Path) and not isinstance(value, str):
        return text
    return value


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Load, merge and validate the configuration; raises ConfigError.

    `path` is the TOML file (``BATONMQ_CONFIG`` names one when `path` is None; no file is read
    when neither does). `environ` defaults to ``os.environ``. `overrides` maps dotted keys to
    values of the setting's type (a None value means "not given"). Overrides take precedence over
    the environment, which takes precedence over the file. Relative paths are relative to the
    file's directory for values from the file, to the working directory otherwise.
    """
    env = os.environ if environ is None else environ
    cwd = Path.cwd()
    layers: list[tuple[str, object, str | None, Path]] = []

    if path is None and env.get(CONFIG_FILE_VARIABLE):
        path = Path(env[CONFIG_FILE_VARIABLE])
        file_source = f"{path} (named by {CONFIG_FILE_VARIABLE})"
    else:
        file_source = str(path)
    if path is not None:
        document = _read_file(path, file_source)
        base_dir = (cwd / path).parent
        for key, value in _flatten(document, "", file_source).items():
            layers.append((key, value, file_source, base_dir))

    for key, value, variable in _environment_layer(env):
        layers.append((key, value, variable, cwd))

    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in SETTINGS:
            raise _not_a_setting(key, "overrides")
        layers.append((key, value, "overrides", cwd))

    values: dict[str, _Value] = {
        "broker.data_dir": _Value(default_data_dir(env), None),
    }
    for key, raw, source, base_dir in layers:
        setting = SETTINGS[key]
        try:
            value = _coerce(setting, raw, base_dir, env)
            if setting.check is not None:
                value = setting.check(value)
        except _Invalid as invalid:
            raise ConfigError(str(invalid), source=source, key=key) from None
        values[key] = _Value(value, source)

    config = _build(Config(), (), {SETTINGS[k].attribute_path: v.value for k, v in values.items()})
    _check_together(config, values)
    return config


def _build(
    instance: _DC, attribute_path: tuple[str, ...], values: Mapping[tuple[str, ...], object]
) -> _DC:
    changes: dict[str, object] = {}
    for dataclass_field in dataclasses.fields(instance):
        path = (*attribute_path, dataclass_field.name)
        current = getattr(instance, dataclass_field.name)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            changes[dataclass_field.name] = _build(current, path, values)
        elif path in values:
            changes[dataclass_field.name] = values[path]
    return dataclasses.replace(instance, **changes)


def _source(values: Mapping[str, _Value], *keys: str) -> str | None:
    """Where the first of `keys` that was set came from (None: all are defaults)."""
    return next((values[key].source for key in keys if key in values), None)


def _check_together(config: Config, values: Mapping[str, _Value]) -> None:
    """Rules that involve more than one key."""
    low, high = config.server.write_buffer_low, config.server.write_buffer_high
    if low >= high:
        raise ConfigError(
            f"must be less than server.write_buffer_high ({high}), got {low}",
            source=_source(values, "server.write_buffer_low", "server.write_buffer_high"),
            key="server.write_buffer_low",
        )
    memory = config.memory
    if not memory.yellow_threshold < memory.orange_threshold < memory.red_threshold:
        raise ConfigError(
            "the thresholds must rise from yellow to orange to red, got "
            f"{memory.yellow_threshold}, {memory.orange_threshold}, {memory.red_threshold}",
            source=_source(
                values,
                "memory.yellow_threshold",
                "memory.orange_threshold",
                "memory.red_threshold",
            ),
            key="memory.orange_threshold",
        )
    disk = config.disk
    if disk.store_underfull > disk.store_overfull:
        raise ConfigError(
            f"must not exceed disk.store_overfull ({disk.store_overfull}), "
            f"got {disk.store_underfull}",
            source=_source(values, "disk.store_underfull", "disk.store_overfull"),
            key="disk.store_underfull",
        )
    try:
        re.compile(config.autocreate.pattern)
    except re.error as error:
        raise ConfigError(
            f"is not a regular expression: {error}",
            source=_source(values, "autocreate.pattern"),
            key="autocreate.pattern",
        ) from None
    persist = config.persist
    if persist.store == "postgres" and not persist.postgres.dsn:
        raise ConfigError(
            'must be set when persist.store is "postgres"',
            source=_source(values, "persist.store"),
            key="persist.postgres.dsn",
        )
