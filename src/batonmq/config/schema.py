"""The configuration as one tree of frozen dataclasses, and the table of known keys derived from it.

The TOML layout mirrors the dataclasses, except that the top-level `Config` fields live in a
``[broker]`` table (``broker.name``, ``broker.data_dir``, ``broker.default_vhost``). Every setting
is declared once, as a dataclass field whose default is its default and whose metadata carries its
validator; the table of known keys (`SETTINGS`) is derived from those declarations, so adding a
setting is adding a field.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from batonmq.config.checks import (
    Check,
    between,
    default_data_dir,
    names,
    non_empty,
    one_of,
    setting,
)
from batonmq.config.cluster import ClusterConfig
from batonmq.config.network import AmqpConfig, ListenersConfig, ServerConfig
from batonmq.config.protection import (
    AlertsConfig,
    AutocreateConfig,
    DiskConfig,
    LimitsConfig,
    MemoryConfig,
    SlowConsumerConfig,
)
from batonmq.config.security import AclConfig, AuthConfig
from batonmq.config.storage import MessageConfig, PersistConfig
from batonmq.config.telemetry import MetricsConfig

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: The most worker processes (`broker.workers`): a worker's store identity is the broker's and
#: "w<index>", at most 3 characters more.
WORKERS_MAX = 64
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = setting("info", check=one_of(*LOG_LEVELS))
    format: str = setting("text", check=one_of(*LOG_FORMATS))


@dataclass(frozen=True, slots=True)
class Config:
    broker_name: str = setting("batonmq", check=non_empty, key="broker.name")
    data_dir: Path = field(
        default_factory=default_data_dir,
        metadata={"check": non_empty, "key": "broker.data_dir"},
    )
    default_vhost: str = setting("/", check=non_empty, key="broker.default_vhost")
    #: Worker processes: more than 1 spreads the virtual hosts over that many processes, one
    #: core each (`batonmq.server.supervisor`), on either store.
    workers: int = setting(1, check=between(1, WORKERS_MAX), key="broker.workers")
    #: Virtual hosts whose queues are spread over the workers, each queue run by one of them
    #: (`batonmq.server.placement.queue_owner`); "*" is every virtual host. Any other virtual
    #: host is run whole by one worker. No effect with one worker.
    spread_vhosts: tuple[str, ...] = setting((), check=names, key="broker.spread_vhosts")
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
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)


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
