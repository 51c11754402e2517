"""The statistics registry: every counter and gauge the broker keeps, declared once with its name,
unit and help text (Qpid's @ManagedStatistic), read by whatever exports them (the management API,
Prometheus, batonctl).

- A *counter* only grows. It lives in a slotted dataclass of its scope (a queue's, a channel's,
  a connection's, the broker's): the hot path does ``queue.counters.published += 1``, a plain
  attribute increment with no dictionary lookup and no lock (the engine runs on one event loop).
- A *gauge* is read from the live object when someone asks (ready messages, consumers): nothing
  is kept for it, so it costs nothing until it is read.
- Exporters walk `REGISTRY`: each scope's statistics, their exported names (``batonmq_`` + scope +
  name, ``_total`` for counters, as Prometheus names them), and how to read each from an object.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

_METADATA_KEY: Final = "batonmq.statistic"

Subject = TypeVar("Subject")


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"


class Scope(enum.Enum):
    """What a statistic is about; the exported name starts with it."""

    BROKER = "broker"
    #: The broker's message totals, RabbitMQ's "global" counters (those of every channel, open
    #: or closed).
    GLOBAL = "global"
    #: The store's writes (the journal's batches).
    STORE = "store"
    QUEUE = "queue"
    CHANNEL = "channel"
    CONNECTION = "connection"


@dataclass(frozen=True, slots=True)
class Statistic:
    scope: Scope
    #: The attribute (counter) or key (gauge) it is read by, e.g. "published".
    key: str
    kind: Kind
    unit: str
    help: str
    #: The exported name when it is not the scope's prefix and the key (RabbitMQ's names for
    #: what it counts without a scope, such as `rabbitmq_connections`).
    name: str | None = None

    @property
    def exported_name(self) -> str:
        suffix = "_total" if self.kind is Kind.COUNTER else ""
        return self.name or f"batonmq_{self.scope.value}_{self.key}{suffix}"


@dataclass(frozen=True, slots=True)
class _Declared:
    unit: str
    help: str


def counter(unit: str, help: str) -> int:
    """Declare a counter field of a counters dataclass: starts at 0, only grows."""
    declared: int = field(default=0, metadata={_METADATA_KEY: _Declared(unit, help)})
    return declared


@dataclass(frozen=True, slots=True)
class Gauge(Generic[Subject]):
    statistic: Statistic
    read: Callable[[Subject], float]


class ScopeStatistics(Generic[Subject]):
    """One scope's declarations: the counters dataclass its objects carry, and its gauges."""

    def __init__(
        self,
        scope: Scope,
        counters: type[Any] | None = None,
        counters_of: Callable[[Subject], Any] | None = None,
    ) -> None:
        """`counters`: the dataclass of the scope's counters (None: it has gauges only), and
        `counters_of` how to find an object's."""
        self.scope = scope
        self._counters_of = counters_of
        self.counters: tuple[Statistic, ...] = tuple(
            _counter_statistic(scope, item) for item in dataclasses.fields(counters or _NoCounters)
        )
        self.gauges: list[Gauge[Subject]] = []

    def gauge(
        self,
        key: str,
        unit: str,
        help: str,
        read: Callable[[Subject], float],
        *,
        name: str | None = None,
    ) -> None:
        """Declare a gauge, read from a subject when asked; `name`: see `Statistic.name`."""
        if any(declared.key == key for declared in self.statistics()):
            raise ValueError(f"{self.scope.value} statistic {key!r} is declared twice")
        self.gauges.append(Gauge(Statistic(self.scope, key, Kind.GAUGE, unit, help, name), read))

    def statistics(self) -> Iterator[Statistic]:
        yield from self.counters
        for gauge in self.gauges:
            yield gauge.statistic

    def read(self, subject: Subject) -> dict[str, float]:
        """Every statistic of `subject` by key: its counters as they are, its gauges read now."""
        values: dict[str, float] = {}
        if self._counters_of is not None:
            counters = self._counters_of(subject)
            values = {declared.key: getattr(counters, declared.key) for declared in self.counters}
        for gauge in self.gauges:
            values[gauge.statistic.key] = gauge.read(subject)
        return values


@dataclass(slots=True)
class _NoCounters:
    pass


def _counter_statistic(scope: Scope, item: dataclasses.Field[Any]) -> Statistic:
    declared = item.metadata.get(_METADATA_KEY)
    if not isinstance(declared, _Declared):
        raise TypeError(f"counter field {item.name!r} is not declared with counter()")
    return Statistic(scope, item.name, Kind.COUNTER, declared.unit, declared.help)


class Registry:
    """Every scope's statistics; a scope is registered once, by the module that owns its objects."""

    def __init__(self) -> None:
        self._scopes: dict[Scope, ScopeStatistics[Any]] = {}

    def register(self, statistics: ScopeStatistics[Subject]) -> ScopeStatistics[Subject]:
        if statistics.scope in self._scopes:
            raise ValueError(f"statistics of scope {statistics.scope.value!r} registered twice")
        self._scopes[statistics.scope] = statistics
        return statistics

    def scope(self, scope: Scope) -> ScopeStatistics[Any]:
        return self._scopes[scope]

    def statistics(self) -> Iterator[Statistic]:
        """Every declared statistic, scope by scope (for exporters' HELP and TYPE lines, docs)."""
        for scope in Scope:
            if scope in self._scopes:
                yield from self._scopes[scope].statistics()


REGISTRY: Final = Registry()
