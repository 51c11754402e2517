"""What the engine's API shows of an HA cluster and asks of it (`batonctl list bkr`, `query bkr`,
`takeover bkr`; `/api/nodes`): a snapshot of each member as the shared store records it (MQ 4.1
HA guide, Example 1), and the member runtime's small interface (`batonmq.cluster.member` is the
one implementation; the engine never imports it)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Protocol

from batonmq.cluster.states import BrokerState, member_state
from batonmq.engine.takeover import TakeoverOutcome
from batonmq.store.members import Member


class ClusterService(Protocol):
    """This broker as a member of its HA cluster."""

    @property
    def broker_id(self) -> str: ...

    @property
    def state(self) -> BrokerState:
        """TAKEOVER_STARTED while it takes a member over, else the server's state."""
        ...

    async def listed_members(self) -> list[Member]:
        """Every member the store records, with the messages each holds there."""
        ...

    async def take_over(self, failed: str, *, force: bool = False) -> TakeoverOutcome: ...

    async def refuse_failover(self) -> None:
        """Mark this member so that no survivor takes it over once it stops."""
        ...


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A row of `list bkr` (Example 1: broker id, address, state, messages in the store, id of
    the broker performing a takeover, time since the last heartbeat in the store)."""

    broker_id: str
    #: The AMQP listener's host:port (None: never registered as an HA member).
    address: str | None
    state: BrokerState
    messages: int | None
    taken_over_by: str | None
    last_heartbeat: datetime.datetime | None
    #: Seconds since its last update in the store, by the database's clock.
    silent_for: float
    #: Whether its store lease still runs (a takeover without -f waits for it to end).
    lease_live: bool
    #: Whether it was shut down with no failover (`shutdown bkr -nofailover`): no survivor
    #: takes it over unless forced.
    no_failover: bool
    version: str | None
    epoch: int
    heartbeat_address: str | None
    #: Whether it is the broker answering.
    local: bool


def member_info(member: Member, cluster: ClusterService) -> MemberInfo:
    local = member.broker_id == cluster.broker_id
    state = (
        cluster.state
        if local
        else member_state(
            member.state, lease_live=member.lease_live, no_failover=member.no_failover
        )
    )
    return MemberInfo(
        broker_id=member.broker_id,
        address=member.address,
        state=state,
        messages=member.messages,
        taken_over_by=member.taken_over_by,
        last_heartbeat=member.last_heartbeat,
        silent_for=member.silent_for,
        lease_live=member.lease_live,
        no_failover=member.no_failover,
        version=member.version,
        epoch=member.epoch,
        heartbeat_address=member.heartbeat_address,
        local=local,
    )
