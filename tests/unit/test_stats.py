"""The statistics registry: each statistic declared once, with name, unit and help, and read by
exporters from live objects (Qpid's @ManagedStatistic: "declare an attribute or statistic once")."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from batonmq.stats import Kind, Registry, Scope, ScopeStatistics, counter


@dataclass(slots=True)
class _QueueCounters:
    published: int = counter("messages", "Messages routed to the queue")
    acknowledged: int = counter("messages", "Messages acknowledged by consumers")


@dataclass
class _Queue:
    counters: _QueueCounters
    ready: int = 0


def _queue_statistics() -> ScopeStatistics[_Queue]:
    statistics = ScopeStatistics(Scope.QUEUE, _QueueCounters, lambda queue: queue.counters)
    statistics.gauge("messages_ready", "messages", "Messages ready for delivery", lambda q: q.ready)
    return statistics


def test_counters_are_plain_attributes_that_start_at_zero() -> None:
    counters = _QueueCounters()
    counters.published += 2
    assert (counters.published, counters.acknowledged) == (2, 0)
    assert not hasattr(counters, "__dict__"), "slotted: no per-instance dictionary"


def test_each_statistic_is_declared_once_with_unit_help_and_exported_name() -> None:
    statistics = _queue_statistics()
    declared = {item.key: item for item in statistics.statistics()}
    assert set(declared) == {"published", "acknowledged", "messages_ready"}
    assert declared["published"].kind is Kind.COUNTER
    assert declared["published"].exported_name == "batonmq_queue_published_total"
    assert declared["messages_ready"].kind is Kind.GAUGE
    assert declared["messages_ready"].exported_name == "batonmq_queue_messages_ready"
    assert declared["acknowledged"].help == "Messages acknowledged by consumers"
    assert declared["messages_ready"].unit == "messages"


def test_read_takes_counters_as_they_are_and_gauges_now() -> None:
    statistics = _queue_statistics()
    queue = _Queue(_QueueCounters(), ready=7)
    queue.counters.published += 3
    assert statistics.read(queue) == {"published": 3, "acknowledged": 0, "messages_ready": 7}
    queue.ready = 1
    assert statistics.read(queue)["messages_ready"] == 1


def test_a_gauge_declared_twice_is_refused() -> None:
    statistics = _queue_statistics()
    with pytest.raises(ValueError, match="declared twice"):
        statistics.gauge("published", "messages", "again", lambda q: 0)


def test_a_counter_field_without_a_declaration_is_refused() -> None:
    @dataclass(slots=True)
    class Undeclared:
        published: int = 0

    with pytest.raises(TypeError, match="'published' is not declared"):
        ScopeStatistics(Scope.QUEUE, Undeclared, lambda queue: queue)


def test_registry_lists_every_scope_once() -> None:
    registry = Registry()
    registry.register(_queue_statistics())
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(_queue_statistics())
    assert [item.key for item in registry.statistics()] == [
        "published",
        "acknowledged",
        "messages_ready",
    ]
    assert registry.scope(Scope.QUEUE).scope is Scope.QUEUE
