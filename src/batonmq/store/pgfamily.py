"""A standalone broker's store identities in its PostgreSQL schema, taken as one store.

A broker of one process owns its rows as `broker.name`; with `broker.workers` above 1, worker k
owns the rows of its virtual hosts as "<broker.name>w<k>" (`batonmq.store.placement.worker_id`),
each identity with a lease of its own. The identities of one broker are its family:

- One lock. The broker's own identity and its workers' exclude each other: while a worker
  holds its lease, the broker's own identity cannot be claimed (by a broker of one process, a
  broker's supervisor, or `batonctl db create`, `upgrade` and `restore`), and while that is held
  no worker's can be. Siblings do not exclude each other. Each claim checks its rivals' leases
  under an advisory lock of the family, so that two claims cannot both miss each other. One
  exception: `batonctl user`, `vhost` and `permissions` write the catalogue, which running
  workers share as HA members do (`Store.open`'s `catalogue_only`), beside them.
- One store to place. Opened as the broker's own identity with a placement (a broker of one
  process, or the supervisor of a broker's workers, before it forks them), the store gives each
  virtual host's rows, or each queue's of a spread one, to the identity that owns it now
  (`place_rows`, with the statements and rules of `batonmq.store.placement`, as for SQLite):
  the family's lock means no worker runs. So the
  number of workers may change between two runs on PostgreSQL too, and a store written by a
  broker of one process (an earlier release's) is found by its workers.
- One store to read and to copy. `batonctl db stats` and `backup`, opened as the broker's own
  identity, count and copy the rows of every identity of the family that the store has enrolled
  (each `brokers` row), whatever number of workers wrote them; `restore` replaces them all and
  enrols the identities of the backup.

An HA cluster's members stand alone (no family): a member's id is a member's, whatever it reads.
A member's own identities are placed alike, by whichever of its processes starts first
(`place_member`): an HA member may change its number of workers between two runs too.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from batonmq.store.base import StoreLocked, message_id_base
from batonmq.store.members import FAILOVER_STARTED, SERVING_STATES
from batonmq.store.pgsession import Connection
from batonmq.store.placement import (
    QUEUE_TABLES,
    Moved,
    Placement,
    message_owners,
    placement_sql,
    planned_moves,
    worker_id,
    worker_index,
)
from batonmq.store.plan import Plan
from batonmq.store.postgres_log import apply_log
from batonmq.store.takeover import discard_streams

#: How often a placement looks again for a lease it waits out, or a start for the member's
#: lock, in seconds.
_PLACE_RETRY: Final = 0.1
#: The tables whose rows belong to one queue: a stream's rows too.
_QUEUE_TABLES: Final = (*QUEUE_TABLES, "stream_segments", "stream_chunks")
#: Statements, with {s} for the quoted schema.
SQL: Final = {
    "enrolled": "SELECT broker_id FROM {s}.brokers",
    "live_leases": "SELECT broker_id, holder, lease_expires FROM {s}.brokers "
    "WHERE broker_id <> $1 AND lease_expires > now() AND state = ANY($2::text[])",
    "family_lock": "SELECT pg_advisory_xact_lock($1)",
    "placed_unclean": "SELECT broker_id FROM {s}.brokers WHERE state = ANY($1::text[])",
    "placed_streams": "SELECT count(DISTINCT queue) FROM {s}.stream_segments"
    " WHERE broker_id = $1 AND vhost = $2 AND (CAST($3 AS TEXT) IS NULL OR queue = $3)",
    # Each virtual host's rows, or each queue's of a spread one, and their messages.
    **placement_sql(_QUEUE_TABLES),
    # An HA member's identities: its own and its workers' (`batonmq.store.members.as_members`).
    "member_lock": "SELECT pg_try_advisory_lock($1)",
    # The session holding an advisory lock, by its key's high and low 32 bits.
    "member_lock_holder": "SELECT a.application_name, a.pid FROM pg_locks AS l"
    " JOIN pg_stat_activity AS a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.objsubid = 1",
    "member_unlock": "SELECT pg_advisory_unlock($1)",
    "member_identities": "SELECT broker_id, state, holder, lease_expires,"
    " COALESCE(lease_expires > now(), false)"
    " FROM {s}.brokers WHERE broker_id = $1 OR member_of = $1 ORDER BY broker_id FOR UPDATE",
    # The identities whose rows were placed elsewhere: whatever a process of theirs that is
    # only paused would write is refused, and their next claim finds them stopped cleanly.
    "fence_placed": "UPDATE {s}.brokers SET epoch = epoch + 1, state = 'stopped', holder = NULL,"
    " lease_expires = NULL WHERE broker_id = ANY($1::text[])",
    # The other identities whose append log was applied, their rows kept: whatever a paused
    # process of theirs would write is refused too, and their next claim finds how they stopped.
    "fence_applied": "UPDATE {s}.brokers SET epoch = epoch + 1 WHERE broker_id = ANY($1::text[])",
}


def is_rival(family: str, claimant: str, other: str) -> bool:
    """Whether `other`'s lease keeps `claimant` (both of `family`, or `other` of none) from
    claiming its own: the broker's own identity and any of its workers' exclude each other."""
    if worker_index(family, claimant) is not None:
        return other == family
    return claimant == family and worker_index(family, other) is not None


async def rival_lease(
    connection: Connection,
    sql: Mapping[str, str],
    family: str,
    claimant: str,
    gone: Callable[[str | None], bool],
) -> tuple[str, datetime.datetime] | None:
    """Inside the claim's transaction, holding the family's advisory lock: the holder and expiry
    of a live lease that keeps `claimant` from claiming its own (`is_rival`), or None. `gone`
    tells a holder whose process no longer runs, whose lease is not waited out."""
    for other, holder, expires in await connection.fetch(
        sql["live_leases"], claimant, sorted(SERVING_STATES)
    ):
        if is_rival(family, claimant, other) and not gone(holder):
            return holder, expires
    return None


async def identities(connection: Connection, sql: Mapping[str, str], family: str) -> list[str]:
    """The broker's own identity, then each of its workers' that the store has enrolled."""
    workers = {
        index
        for (broker_id,) in await connection.fetch(sql["enrolled"])
        if (index := worker_index(family, broker_id)) is not None
    }
    return [family, *(worker_id(family, index) for index in sorted(workers))]


async def place_rows(
    connection: Connection,
    sql: Mapping[str, str],
    plan: Plan,
    placement: Placement,
    *,
    claimant: str,
    claimant_unclean: bool,
    ours: Collection[str],
) -> tuple[list[Moved], int]:
    """Inside a transaction of `claimant`, which checked its epoch and holds the lock that
    keeps every other identity of `ours` (the broker's, `claimant` among them) from running:
    every other identity's append log written to the tables, then every virtual host's rows,
    or every queue's of a spread one, given to the identity that owns it now (messages and
    their copies as `batonmq.store.placement` says). Before rows leave an identity, its
    recovery is done for it (what its own start would do): after an unclean stop
    (`claimant_unclean` for the claimant) its entries count as delivered, and its transient
    entries, the messages no entry holds and the streams with no queue go. What moved, and how
    many streams."""
    for other in sorted(set(ours) - {claimant}):
        await apply_log(connection, sql, plan, other)
    held = await connection.fetch(sql[placement.held])
    moves = planned_moves(
        ((source, vhost, queue) for source, vhost, queue in held if source in ours), placement
    )
    unclean = {
        broker_id
        for (broker_id,) in await connection.fetch(sql["placed_unclean"], sorted(SERVING_STATES))
        if broker_id != claimant
    }
    if claimant_unclean:
        unclean.add(claimant)
    for source in sorted({move.source for move in moves}):
        if source in unclean:
            await connection.execute(sql["mark_delivered"], source)
        await connection.execute(sql["discard_entries"], source)
        await connection.execute(sql["discard_messages"], source)
        await discard_streams(connection, sql, source)
    streams = 0
    for move in moves:
        if move.queue is not None or not move.spread:
            streams += int(
                await connection.fetchval(
                    sql["placed_streams"], move.source, move.vhost, move.queue
                )
            )
        for name, arguments in move.statements(_QUEUE_TABLES):
            await connection.execute(sql[name], *arguments)
    ids: Iterator[int] | None = None
    for owner, vhost in message_owners(moves):
        await connection.execute(sql["place_messages"], owner, vhost)
        held_ids = [row[0] for row in await connection.fetch(sql["place_copies"], owner, vhost)]
        if not held_ids:
            continue
        if ids is None:
            block = await connection.fetchval(sql["next_block"])
            ids = itertools.count(message_id_base(block, "the store"))
        copies = [(owner, next(ids), message_id) for message_id in held_ids]
        await connection.executemany(sql["place_copy"], copies)
        await connection.executemany(sql["place_repoint"], copies)
    return moves, streams


async def lock_member(
    connection: Connection, sql: Mapping[str, str], key: int, *, member: str, wait: float
) -> None:
    """Take HA member `member`'s lock (`member_lock`, a session's advisory lock of key `key`;
    see `place_member`), waiting `wait` seconds at most for the sibling that holds it: one
    paused in its claim holds the others' starts up no longer. Then StoreLocked, naming the
    session that holds it."""
    deadline = asyncio.get_running_loop().time() + wait
    while not await connection.fetchval(sql["member_lock"], key):
        if asyncio.get_running_loop().time() >= deadline:
            unsigned = key % (1 << 64)
            holder = await connection.fetchrow(
                sql["member_lock_holder"], unsigned >> 32, unsigned & 0xFFFFFFFF
            )
            held_by = (
                "another session"
                if holder is None
                else f"the session {holder[0]!r} (PostgreSQL backend pid {holder[1]})"
            )
            raise StoreLocked(
                f"HA member {member!r} cannot start: {held_by} has held the member's lock for "
                f"over {wait:g} s, starting another process of the member (one that is paused "
                "or stuck there holds it until it goes on or its session ends)"
            )
        await asyncio.sleep(_PLACE_RETRY)


async def place_member(
    connection: Connection,
    sql: Mapping[str, str],
    plan: Plan,
    placement: Placement,
    *,
    claimant: str,
    claimant_unclean: bool,
    gone: Callable[[str | None], bool],
    same_run: Callable[[str | None], bool],
    check_epoch: Callable[[Connection], Awaitable[None]],
    wait: float,
) -> tuple[list[Moved], int] | None:
    """For `claimant`, an identity of HA member `placement.broker` that has just claimed its
    lease, holding the member's lock (`member_lock`, which every identity of the member holds
    from before its claim until it is placed), in a transaction of its own: when no other
    identity of the member runs, the member's process that starts first, every virtual host's
    rows of the member go to the identity that owns it now (`place_rows`), and every other
    identity, whose append log it applied, is fenced: the identities the rows left are
    stopped, the others keep how they stopped for their next claim.

    None, with nothing moved, when another identity runs: its lease is live and its holder a
    process of this run of the member (`same_run`: its lease names this run's token) that has
    not ended (`gone`; a SIGKILLed broker's leases run on), so it placed the rows as it
    started. A live lease of any other holder (a paused process of an earlier run, on this host
    or another) is waited out, as a claim waits for its own, for `wait` seconds at most,
    then StoreLocked: until it runs out, that process could still write. Nothing is placed
    either while a survivor has not adopted everything it claimed of the member: those rows are
    the survivor's."""

    async def attempt() -> tuple[list[Moved], int] | _Held | None:
        """One attempt, inside its transaction. The member's rows are locked first, in the
        order a survivor's claim locks them (`batonmq.store.takeover`), and only then is the
        claimant's epoch checked (`check_epoch`, which locks its row too): the other way round,
        a restart racing a takeover would deadlock."""
        records = await connection.fetch(sql["member_identities"], placement.broker)
        await check_epoch(connection)
        others = [record for record in records if record[0] != claimant]
        held = [
            _Held(identity, holder, expires)
            for identity, state, holder, expires, live in others
            if state in SERVING_STATES and live and not gone(holder)
        ]
        if any(same_run(other.holder) for other in held):
            return None
        if any(state == FAILOVER_STARTED for _, state, _, _, _ in others):
            return None
        if held:
            return held[0]
        moves, streams = await place_rows(
            connection,
            sql,
            plan,
            placement,
            claimant=claimant,
            claimant_unclean=claimant_unclean,
            ours=[record[0] for record in records],
        )
        left = {move.source for move in moves} - {claimant}
        if left:
            await connection.execute(sql["fence_placed"], sorted(left))
        applied = {record[0] for record in others} - left
        if applied:
            await connection.execute(sql["fence_applied"], sorted(applied))
        return moves, streams

    deadline = asyncio.get_running_loop().time() + wait
    while True:
        async with connection.transaction():
            placed = await attempt()
        if not isinstance(placed, _Held):
            return placed
        if asyncio.get_running_loop().time() >= deadline:
            raise StoreLocked(
                f"the rows of HA member {placement.broker!r} cannot be placed: its identity "
                f"{placed.identity!r} is held by a process of another run of the member "
                f"({placed.holder}), whose lease expires at {placed.expires:%Y-%m-%d %H:%M:%S %Z}"
                " unless it renews it"
            )
        await asyncio.sleep(_PLACE_RETRY)


@dataclass(frozen=True)
class _Held:
    """An identity of the member whose live lease no process of this run holds."""

    identity: str
    holder: str | None
    expires: datetime.datetime
