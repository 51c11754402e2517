"""Settings of an HA cluster: brokers sharing one PostgreSQL store, their heartbeats, and how long a
silent broker is watched in the store before another takes over its messages.

Names and defaults are those of the MQ 4.1 HA guide (Tables 1, 4 and 6): imq.cluster.ha,
imq.cluster.clusterid, imq.brokerid, imq.cluster.heartbeat.{hostname,port,interval,threshold} and
imq.cluster.monitor.{interval,threshold}. The guide's rule for both identifiers: "an alphanumeric
string of no more than n - 13 characters, where n is the maximum table name length allowed by
the database"; BatonMQ holds both to 21 characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from batonmq.config.checks import Invalid, between, setting

#: The longest cluster or broker identifier.
IDENTIFIER_MAX: Final = 21
_IDENTIFIER = re.compile(r"[A-Za-z0-9]*")


def identifier(value: object) -> object:
    """An alphanumeric identifier of at most IDENTIFIER_MAX characters (empty: not set)."""
    assert isinstance(value, str)
    if not _IDENTIFIER.fullmatch(value):
        raise Invalid(f"must be alphanumeric (letters and digits only), got {value!r}")
    if len(value) > IDENTIFIER_MAX:
        raise Invalid(f"must be at most {IDENTIFIER_MAX} characters, got {len(value)}")
    return value


@dataclass(frozen=True, slots=True)
class HeartbeatConfig:
    """The heartbeat connection service between the brokers of a cluster (HA guide Table 6)."""

    #: Host name or address the heartbeat service listens on; empty: the AMQP listener's.
    hostname: str = setting("")
    #: imq.cluster.heartbeat.port.
    port: int = setting(7676, check=between(0, 65535))
    #: Seconds between heartbeats (imq.cluster.heartbeat.interval).
    interval: int = setting(2, check=between(1, 3600))
    #: Missed heartbeat intervals after which a broker is suspect of failure and watched in the
    #: store (imq.cluster.heartbeat.threshold).
    threshold: int = setting(3, check=between(1, 1000))
    #: Mutual TLS on the heartbeat connections, with `[listeners.amqps]` certfile, keyfile, cafile
    #: and ciphers: each member presents its certificate and requires one from the CA bundle.
    tls: bool = setting(False)


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """How a broker shows it is alive in the shared store, and how long a suspect broker may be
    silent there before it is failed (HA guide Table 6)."""

    #: Seconds between a broker's updates of its time stamp in the store
    #: (imq.cluster.monitor.interval).
    interval: int = setting(30, check=between(1, 86400))
    #: Missed monitor intervals after which a suspect broker is failed and taken over
    #: (imq.cluster.monitor.threshold).
    threshold: int = setting(2, check=between(1, 1000))


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    #: This broker is a member of an HA cluster (imq.cluster.ha): it needs the PostgreSQL store,
    #: `clusterid` and `brokerid`.
    ha: bool = setting(False)
    #: The cluster's identifier, the same on every member (imq.cluster.clusterid).
    clusterid: str = setting("", check=identifier)
    #: This broker's identifier, different on every member (imq.brokerid).
    brokerid: str = setting("", check=identifier)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
