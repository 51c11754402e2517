"""What one row measured on one broker, and the ratios of BatonMQ to RabbitMQ."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Measurement:
    workload: str
    target: str
    #: Length of the measured window (seconds), as the load generator saw it.
    seconds: float = 0.0
    published: int = 0
    delivered: int = 0
    publish_rate: float | None = None
    deliver_rate: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    latency_samples: int = 0
    #: The broker's user + system CPU seconds in the window (memory rows: the whole publish).
    cpu_seconds: float | None = None
    #: The part of `cpu_seconds` that the broker's database server took (BatonMQ on
    #: PostgreSQL: the postmaster and its backends), else None.
    store_cpu_seconds: float | None = None
    #: The load generator's CPU seconds in the window (all its processes).
    client_cpu_seconds: float = 0.0
    #: CPU seconds the rest of the machine used in the window (other processes: noise).
    other_cpu_seconds: float | None = None
    #: Largest sampled VmRSS of the broker's process tree during the row.
    peak_rss_bytes: int | None = None
    #: Memory rows: RSS growth per queued message minus the body.
    bytes_per_message: float | None = None
    #: Rows with idle connections: the broker's RSS growth per idle connection.
    bytes_per_connection: float | None = None
    #: Memory rows: how much the broker's data directories grew (a backlog paged to disk).
    disk_growth_bytes: int | None = None
    nacked: int = 0
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def cpu_us_per_message(self) -> float | None:
        """Broker CPU per message handled (delivered, else published)."""
        handled = self.delivered or self.published
        if self.cpu_seconds is None or not handled:
            return None
        return self.cpu_seconds / handled * 1e6

    @property
    def store_cpu_us_per_message(self) -> float | None:
        """The database server's part of `cpu_us_per_message`."""
        handled = self.delivered or self.published
        if self.store_cpu_seconds is None or not handled:
            return None
        return self.store_cpu_seconds / handled * 1e6

    def metric(self, name: str) -> float | None:
        value = getattr(self, name)
        return None if value is None else float(value)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cpu_us_per_message"] = self.cpu_us_per_message
        data["store_cpu_us_per_message"] = self.store_cpu_us_per_message
        return data


#: Metrics compared between brokers in the tables and the JSON, and whether more is better.
COMPARED_METRICS: dict[str, bool] = {
    "deliver_rate": True,
    "publish_rate": True,
    "p50_ms": False,
    "p99_ms": False,
    "p999_ms": False,
    "cpu_us_per_message": False,
    "peak_rss_bytes": False,
    "bytes_per_message": False,
    "bytes_per_connection": False,
}


def ratio(value: float | None, baseline: float | None) -> float | None:
    """value / baseline, or None when either is missing or the baseline is zero."""
    if value is None or baseline is None or baseline == 0:
        return None
    return value / baseline


def metric_value(measurement: Measurement, name: str) -> float | None:
    if name == "cpu_us_per_message":
        return measurement.cpu_us_per_message
    if name == "store_cpu_us_per_message":
        return measurement.store_cpu_us_per_message
    return measurement.metric(name)
