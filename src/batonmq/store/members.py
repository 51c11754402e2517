"""The members of an HA cluster as the shared store records them (`list bkr`, MQ 4.1 HA guide
Example 1), what a takeover moved from a failed member to its claimant, the catalogue the members
share, and what a store shared by a cluster offers beyond `Store` (the PostgreSQL store:
`batonmq.store.takeover`, `batonmq.store.postgres_catalogue`)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from batonmq.security.permissions import UserPermission
from batonmq.store.base import (
    ObjectKey,
    PageRead,
    QueueBacklog,
    StoredBinding,
    StoredExchange,
    StoredQueue,
    StoredUser,
    WriteBatch,
)

#: How far after a queue's next sequence the entries taken over into it start: a live queue
#: numbers what arrives while the takeover commits, and must never reach them.
SEQUENCE_GAP: Final = 1 << 32

#: The states a broker record can hold besides the lease's "running" and "stopped" (see
#: `batonmq.cluster.states.BrokerState`, which names them all).
FAILOVER_STARTED: Final = "FAILOVER_STARTED"
FAILOVER_COMPLETE: Final = "FAILOVER_COMPLETE"
#: The states a running member's record holds: "running" (OPERATING) as its claim of the store
#: writes it, or the server's state that the member recorded since (`SharedStore.record_state`:
#: `quiesce bkr`, `shutdown bkr`), so that every member lists it.
SERVING_STATES: Final = frozenset({"running", "QUIESCING", "QUIESCE_COMPLETE", "SHUTDOWN_STARTED"})


@dataclass(frozen=True, slots=True)
class Member:
    """A broker registered in the shared store (`list bkr`, Example 1)."""

    broker_id: str
    #: As stored: "running" (it holds its lease) or another of SERVING_STATES, "stopped"
    #: (released it), FAILOVER_STARTED or FAILOVER_COMPLETE (taken over);
    #: `batonmq.cluster.states.member_state` names it.
    state: str
    #: The AMQP listener's host:port, and the heartbeat service's (None: not an HA member).
    address: str | None
    heartbeat_address: str | None
    version: str | None
    epoch: int
    taken_over_by: str | None
    #: Its last update in the store (the lease renewal), on the database's clock.
    last_heartbeat: datetime.datetime | None
    #: Seconds since then, measured by the database.
    silent_for: float
    #: Whether its lease is still running.
    lease_live: bool
    #: Whether it was shut down with no failover: no survivor takes it over unless forced.
    no_failover: bool
    #: The settings every member must share, as it registered them (JSON; None: not yet).
    settings: str | None
    #: Messages it holds in the store (None: not counted).
    messages: int | None = None
    #: The store identities of a member with several worker processes, one per worker and the
    #: member's own if it has a record too (`as_members`); empty: its one identity is its id.
    identities: tuple[str, ...] = ()

    @property
    def taken_over(self) -> bool:
        return self.state in (FAILOVER_STARTED, FAILOVER_COMPLETE)


def as_members(records: Iterable[tuple[Member, str | None]]) -> list[Member]:
    """The members as their peers see them, from the store's broker records, each with the
    member its identity is a worker of (None: its own). A member with workers is one member:
    its id, address, heartbeat endpoint, state and settings are those it registered last (its
    worker 0's, or its own process's if it runs one: of the identities that registered, the one
    heard from last, since the member may have run with another number of workers before); it
    is silent in the store only while every identity is, its lease runs
    while any does, it refuses failover if any identity does, its messages are summed, and its
    epoch is the sum of theirs, which any claim or restart of one of them changes."""
    listed = list(records)
    grouped: dict[str, list[Member]] = {}
    for record, member_of in listed:
        if member_of is not None:
            grouped.setdefault(member_of, []).append(record)
    members: list[Member] = []
    for record, member_of in listed:
        if member_of is None and record.broker_id not in grouped:
            members.append(record)
    for member_id, workers in grouped.items():
        own = [record for record, of in listed if of is None and record.broker_id == member_id]
        every = [*own, *workers]
        registered = [record for record in every if record.address is not None]
        voice = min(registered, key=lambda record: record.silent_for, default=workers[0])
        heard = [record.last_heartbeat for record in every if record.last_heartbeat is not None]
        counted = [record.messages for record in every]
        members.append(
            dataclasses.replace(
                voice,
                broker_id=member_id,
                epoch=sum(record.epoch for record in every),
                last_heartbeat=max(heard, default=None),
                silent_for=min(record.silent_for for record in every),
                lease_live=any(record.lease_live for record in every),
                no_failover=any(record.no_failover for record in every),
                messages=None if None in counted else sum(n for n in counted if n is not None),
                identities=tuple(sorted(record.broker_id for record in every)),
            )
        )
    return sorted(members, key=lambda member: member.broker_id)


@dataclass(frozen=True, slots=True)
class StreamTail:
    """Where a claimant's stream ends when it claims, for the records of the failed member's
    stream of that name that its log takes after its own (`batonmq.store.streammerge`)."""

    #: The offset the stream's next record gets.
    next_offset: int
    #: The last publishing id of each producer it tracks (`Producers.snapshot`).
    producers: bytes


@dataclass(frozen=True, slots=True)
class MergedStream:
    """A stream both had: the failed member's records, at `old_first` up to `old_next`, now
    at `new_first` up to `new_next`, after the claimant's own."""

    vhost: str
    queue: str
    old_first: int
    old_next: int
    new_first: int
    new_next: int


@dataclass(frozen=True, slots=True)
class TakenOver:
    """What a takeover moved to the claimant: the objects it did not have, and the entries."""

    failed: str
    #: The failed broker's epoch after the claim.
    epoch: int
    exchanges: list[StoredExchange]
    queues: list[StoredQueue]
    bindings: list[StoredBinding]
    #: Per queue and priority level, the entries moved, renumbered (`last_sequence`), and
    #: where they start (`first_sequences`).
    backlogs: list[QueueBacklog]
    first_sequences: dict[ObjectKey, int] = field(default_factory=dict)
    #: Every virtual host of the store (the failed broker's among them).
    vhosts: list[str] = field(default_factory=list)
    #: The streams both had, whose logs the claimant opens again.
    merged_streams: list[MergedStream] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return sum(backlog.count for backlog in self.backlogs)


@dataclass(frozen=True, slots=True)
class Catalogue:
    """The users, virtual hosts and permissions the members share, as one snapshot of the store,
    and its catalogue version: the number of commits that changed them so far."""

    users: list[StoredUser]
    vhosts: list[str]
    permissions: list[UserPermission]
    version: int


#: Told of the catalogue's version: with the id of the member whose commit made it (a
#: notification), or None (read by the watch itself, at each round or on connecting again).
CatalogueChanged = Callable[[int, str | None], None]


def changes_catalogue(batch: WriteBatch) -> bool:
    """Whether `batch` changes the catalogue (and so its version)."""
    return bool(
        batch.users_put
        or batch.users_deleted
        or batch.permissions_put
        or batch.permissions_deleted
        or batch.vhosts_put
        or batch.vhosts_deleted
    )


@runtime_checkable
class CatalogueSource(Protocol):
    """A store whose catalogue several processes share and keep their copies of in line
    (`batonmq.cluster.catalogue`): an HA cluster's PostgreSQL store, or the store of a broker
    with several worker processes (PostgreSQL or SQLite)."""

    @property
    def broker_id(self) -> str: ...

    @property
    def catalogue_writes(self) -> int:
        """How many commits that change the catalogue this store has been handed: a snapshot
        read while it did not change is not older than anything applied to memory since."""
        ...

    async def catalogue(self) -> Catalogue:
        """The catalogue as one snapshot, after the writes called before."""
        ...

    def watch_catalogue(
        self, on_change: CatalogueChanged, interval: float
    ) -> Callable[[], Coroutine[object, object, None]]:
        """The watch of the catalogue's changes, to run as a task until cancelled: it tells
        `on_change` of the version it reads every `interval` seconds, and of every member's
        commit that changes it as soon as the store can tell (PostgreSQL's notifications)."""
        ...


@runtime_checkable
class SharedStore(CatalogueSource, Protocol):
    """The store of an HA cluster's member."""

    async def register(
        self, address: str, heartbeat_address: str, version: str, settings: str
    ) -> None:
        """Record where this member serves AMQP and heartbeats, its version, and the settings
        every member must share (JSON)."""
        ...

    async def refuse_failover(self) -> None:
        """Mark this member so that no survivor takes it over once it stops, until it starts
        again (`shutdown bkr -nofailover`)."""
        ...

    async def record_state(self, state: str) -> None:
        """Record this member's state, one of SERVING_STATES, in its record."""
        ...

    async def members(self, *, count_messages: bool = False) -> list[Member]:
        """Every broker recorded in the store, by id."""
        ...

    async def take_over(
        self,
        failed: str,
        seen_epoch: int,
        *,
        force: bool = False,
        next_sequences: Mapping[ObjectKey, int],
        stream_tails: Mapping[ObjectKey, StreamTail] | None = None,
        owns: Callable[[str], bool] | None = None,
    ) -> TakenOver | None:
        """Claim `failed` and take its rows over (with `owns`, those of the virtual hosts it
        owns; the claimant's sibling workers adopt the others); None when the claim was lost.
        `stream_tails`: where each of the claimant's streams ends, read while its stream
        writer is held (`StreamStorage.held`)."""
        ...

    async def adopt(
        self,
        owns: Callable[[str], bool],
        *,
        next_sequences: Mapping[ObjectKey, int],
        stream_tails: Mapping[ObjectKey, StreamTail] | None = None,
    ) -> TakenOver | None:
        """Take over the rows of the virtual hosts it `owns` that a sibling worker's claim left
        to this worker; None when there are none."""
        ...

    async def read_entries(
        self, vhost: str, queue: str, after_sequence: int, limit: int, priority: int | None = None
    ) -> PageRead: ...
