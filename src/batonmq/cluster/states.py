"""The states a broker of an HA cluster is in, as `list bkr` shows them (MQ 4.1 HA guide, Example 1
and Table 19), and who may move to which."""

from __future__ import annotations

import enum

from batonmq.store.members import SERVING_STATES


class BrokerState(enum.StrEnum):
    #: Serving clients.
    OPERATING = "OPERATING"
    #: Taking over a failed broker's persistent state (Table 19, value 1).
    TAKEOVER_STARTED = "TAKEOVER_STARTED"
    #: Done taking over (Table 19, value 2).
    TAKEOVER_COMPLETE = "TAKEOVER_COMPLETE"
    #: A takeover this broker attempted failed (Table 19, value 3).
    TAKEOVER_FAILED = "TAKEOVER_FAILED"
    #: Shutting down (`shutdown bkr`).
    SHUTDOWN_STARTED = "SHUTDOWN_STARTED"
    #: Refusing new connections, serving existing ones (`quiesce bkr`) ...
    QUIESCING = "QUIESCING"
    #: ... and done with what was in flight.
    QUIESCE_COMPLETE = "QUIESCE_COMPLETE"
    #: The failed broker's side of a takeover: judged failed, not yet claimed by a survivor ...
    FAILOVER_PENDING = "FAILOVER_PENDING"
    #: ... claimed by a survivor, which is taking over its state ...
    FAILOVER_STARTED = "FAILOVER_STARTED"
    #: ... and its state now belongs to the survivor.
    FAILOVER_COMPLETE = "FAILOVER_COMPLETE"
    #: Not running, its lease released (the MQ 4.0 JMX guide's BrokerState.BROKER_DOWN).
    BROKER_DOWN = "BROKER_DOWN"


#: The states of a running member that it records in the store, beside OPERATING.
_RECORDED: frozenset[BrokerState] = frozenset(
    {BrokerState.QUIESCING, BrokerState.QUIESCE_COMPLETE, BrokerState.SHUTDOWN_STARTED}
)


def member_state(stored: str, *, lease_live: bool, no_failover: bool) -> BrokerState:
    """The state of a member as its store record gives it: the lease's "running" and "stopped",
    a state it recorded while running, or a failover state (`batonmq.store.members`). A member
    that recorded itself running but whose lease has run out, on the database's clock, has
    failed and waits for a survivor's claim: FAILOVER_PENDING (unless it was shut down with no
    failover: then no one will claim it)."""
    if stored == "stopped":
        return BrokerState.BROKER_DOWN
    if not lease_live and stored in SERVING_STATES:
        return BrokerState.BROKER_DOWN if no_failover else BrokerState.FAILOVER_PENDING
    if stored == "running":
        return BrokerState.OPERATING
    return BrokerState(stored)


def stored_state(state: BrokerState) -> str:
    """What a running member records of its `state` for the others to list: QUIESCING,
    QUIESCE_COMPLETE and SHUTDOWN_STARTED as they are; anything else as "running" (OPERATING;
    a takeover under way is too short-lived to be worth a write)."""
    return str(state) if state in _RECORDED else "running"
