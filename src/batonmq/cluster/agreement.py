"""The settings every member of an HA cluster must share (MQ 4.1 HA guide, Table 6: "Must have
the same value for all brokers in a cluster"; the Qpid broker manual's durability policy and
coalescing-sync: "It is important that all nodes use the same value"): each member records its
own in the shared store when it registers, and a broker joining is refused, naming the setting,
when one of its own differs from a running member's. (The cluster identifier needs no check: it
names the schema the members share.)"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from batonmq.config.checks import ConfigError
from batonmq.config.schema import Config
from batonmq.store.members import Member


def shared_settings(config: Config) -> dict[str, object]:
    """This broker's values of the settings every member must share, by configuration key."""
    heartbeat, monitor = config.cluster.heartbeat, config.cluster.monitor
    postgres = config.persist.postgres
    return {
        "cluster.heartbeat.interval": heartbeat.interval,
        "cluster.heartbeat.threshold": heartbeat.threshold,
        "cluster.monitor.interval": monitor.interval,
        "cluster.monitor.threshold": monitor.threshold,
        "persist.postgres.durability": postgres.durability,
        "persist.postgres.coalescing_sync": postgres.coalescing_sync,
    }


def disagreement(
    mine: Mapping[str, object], members: Iterable[Member], broker_id: str
) -> ConfigError | None:
    """The error that refuses broker `broker_id` with settings `mine`: the first setting a
    running member (its lease live) recorded with another value; None when all agree."""
    for member in members:
        if member.broker_id == broker_id or not member.lease_live or member.settings is None:
            continue
        try:
            theirs = json.loads(member.settings)
        except ValueError:
            continue  # not a record this release wrote
        for key, value in mine.items():
            if key in theirs and theirs[key] != value:
                return ConfigError(
                    f"is {value!r} here but {theirs[key]!r} on the running member "
                    f"{member.broker_id}: every member of an HA cluster must have the same "
                    "value",
                    key=key,
                )
    return None
