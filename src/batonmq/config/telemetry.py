"""Settings of the metrics the broker publishes on a topic exchange (Sun MQ 3.5 admin guide,
"Metrics Message Producer" and Table 2-9, "Monitoring Service Properties": imq.metrics.topic.
enabled, interval, persist and timetolive, with their defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field

from batonmq.config.checks import between, setting


@dataclass(frozen=True, slots=True)
class MetricsTopicConfig:
    #: Metrics messages are produced (imq.metrics.topic.enabled).
    enabled: bool = setting(True)
    #: Seconds between metrics messages (imq.metrics.topic.interval).
    interval: int = setting(60, check=between(1, 86400))
    #: Metrics messages are persistent (imq.metrics.topic.persist).
    persist: bool = setting(False)
    #: Seconds a metrics message lives before it expires (imq.metrics.topic.timetolive).
    timetolive: int = setting(300, check=between(1, 86400 * 365))


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    topic: MetricsTopicConfig = field(default_factory=MetricsTopicConfig)
