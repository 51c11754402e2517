"""The members of an HA cluster as the shared store records them, and the takeover of a failed
member's persistent state, in one PostgreSQL transaction (MQ 4.1 HA guide: "When a broker fails,
another broker in the cluster takes over its persistent data ... The takeover broker ... acquires
a lock on the failed broker's data in the persistent store").

The lock is the failed broker's fencing epoch. The claim bumps it, naming the epoch the claimant
read, and only while the failed broker's lease has run out on the database's clock and it was not
shut down with no failover (`shutdown bkr -nofailover`), or when an operator forces it: of two
survivors claiming at once, the second finds the epoch changed and claims nothing; the failed
broker, if it was only paused, finds its epoch superseded in its next write and stops
(`StoreFenced`). In the same transaction the failed broker's rows become the claimant's:

- exchanges, queues and bindings it alone had become the claimant's; those both had (a Sun MQ
  cluster's destinations are cluster-wide) stay the claimant's;
- its append log (`batonmq.store.postgres_log`) is checkpointed first, so that what it confirmed
  and had not yet written to the tables (a broker killed between an append and its checkpoint)
  moves with the rest;
- its persistent messages and their queue entries move over. A queue's entries keep their order:
  they are renumbered to follow everything the claimant has numbered in the queue of that name
  (its next sequence plus `SEQUENCE_GAP`, which leaves room for what it numbers meanwhile);
- every entry comes back redelivered: whether the failed broker delivered it before it stopped
  is unknown (a pending acknowledgement becomes a ready message, delivered again);
- its transient entries and the messages no entry holds any more go, as in a recovery;
- its streams kept in the store (`batonmq.store.streamtables`) become the claimant's, segments
  and chunks, at the offsets they had: a consumer of the survivor finds every confirmed message
  at the offset it was confirmed at. A stream the claimant has too (a stream of that name on
  both) is merged (`batonmq.store.streammerge`): the offsets of two logs cannot both be kept,
  so the failed broker's records follow the claimant's, renumbered from its next offset, with
  their timestamps, filters and producers' ids.

A broker with several worker processes writes as one store identity per worker, each with a
lease and an epoch of its own, and is one member to its peers (`batonmq.store.members.as_members`):
it is claimed whole, every identity in the one transaction, and only when every one of them may
be claimed (a broker one of whose workers still renews its lease is alive); the epoch a claimant
read is the sum of theirs. Their rows then move one identity after another.

The claim waits for a lock on the failed broker's record at most `claim_lock_timeout` seconds
(see there): a claim given up is a failed takeover, tried again at a later monitor round.

The failed broker's record says FAILOVER_STARTED, then FAILOVER_COMPLETE, with the claimant's id.
What a takeover returns, and the members' records, are in `batonmq.store.members`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

import asyncpg

from batonmq.store.base import (
    ObjectKey,
    QueueBacklog,
    StoredBinding,
    StoredExchange,
    StoredQueue,
    StoreError,
)
from batonmq.store.fields import decode_table
from batonmq.store.members import SEQUENCE_GAP, Member, StreamTail, TakenOver
from batonmq.store.pgsession import Connection
from batonmq.store.plan import Plan
from batonmq.store.postgres_log import apply_log
from batonmq.store.streammerge import SQL as MERGE_SQL
from batonmq.store.streammerge import merge_streams

_MEMBER_COLUMNS: Final = (
    "b.broker_id, b.state, b.address, b.heartbeat_address, b.version, b.epoch, b.taken_over_by,"
    " b.heartbeat_at, EXTRACT(EPOCH FROM now() - COALESCE(b.heartbeat_at, b.started_at))::float8,"
    " COALESCE(b.lease_expires > now(), false), b.no_failover, b.settings"
)

#: The tables whose rows name a virtual host.
_VHOST_TABLES: Final = (
    "exchanges",
    "queues",
    "bindings",
    "entries",
    "quarantined_messages",
    "stream_segments",
)

#: Statements, "{s}" standing for the quoted schema.
SQL: Final = {
    # For the rest of the claim's transaction (`claim_lock_timeout`), in milliseconds.
    "claim_lock_timeout": "SELECT set_config('lock_timeout', $1::text, true)",
    "members": f"SELECT {_MEMBER_COLUMNS}, NULL, b.member_of FROM {{s}}.brokers AS b"
    " ORDER BY b.broker_id",
    "members_counted": f"SELECT {_MEMBER_COLUMNS}, (SELECT count(*) FROM {{s}}.messages AS m"
    " WHERE m.broker_id = b.broker_id), b.member_of FROM {s}.brokers AS b ORDER BY b.broker_id",
    "register": "UPDATE {s}.brokers SET address = $3, heartbeat_address = $4, version = $5,"
    " settings = $6, taken_over_by = NULL WHERE broker_id = $1 AND epoch = $2",
    "claim_failed": "UPDATE {s}.brokers SET epoch = epoch + 1, state = 'FAILOVER_STARTED',"
    " taken_over_by = $1, holder = NULL, lease_expires = NULL WHERE broker_id = $2"
    " AND broker_id <> $1 AND epoch = $3"
    " AND ($4 OR lease_expires IS NULL OR lease_expires < now()) AND ($4 OR NOT no_failover)"
    " RETURNING epoch",
    # The identities a member claimed whose rows its workers have not all adopted yet.
    "adoptable": "SELECT broker_id, epoch FROM {s}.brokers WHERE taken_over_by = $1"
    " AND state = 'FAILOVER_STARTED' ORDER BY broker_id FOR UPDATE",
    "inherit": "UPDATE {s}.brokers SET taken_over_by = $1 WHERE taken_over_by = $2"
    " AND state = 'FAILOVER_STARTED' RETURNING broker_id, epoch",
    # A member's store identities (its own, and its workers': `batonmq.store.members.as_members`),
    # locked for the claim, each with whether it may be claimed.
    "identities": "SELECT broker_id, epoch, member_of, ($2 OR lease_expires IS NULL"
    " OR lease_expires < now()) AND ($2 OR NOT no_failover) AND broker_id <> $3"
    " FROM {s}.brokers WHERE broker_id = $1 OR member_of = $1 ORDER BY broker_id FOR UPDATE",
    "no_failover": "UPDATE {s}.brokers SET no_failover = true WHERE broker_id = $1 AND epoch = $2",
    "record_state": "UPDATE {s}.brokers SET state = $3 WHERE broker_id = $1 AND epoch = $2",
    "levels": "SELECT e.vhost, e.queue, e.priority, count(*),"
    " COALESCE(sum(length(m.body)), 0), min(e.sequence), max(e.sequence) FROM {s}.entries AS e"
    " LEFT JOIN {s}.messages AS m ON m.id = e.message_id WHERE e.broker_id = $1"
    " AND ($2::text[] IS NULL OR e.vhost = ANY($2::text[]))"
    " GROUP BY e.vhost, e.queue, e.priority ORDER BY e.vhost, e.queue, e.priority",
    "move_exchanges": "INSERT INTO {s}.exchanges (broker_id, vhost, name, type, auto_delete,"
    " internal, arguments) SELECT $1, vhost, name, type, auto_delete, internal, arguments"
    " FROM {s}.exchanges WHERE broker_id = $2 AND ($3::text[] IS NULL OR vhost = ANY($3::text[]))"
    " ON CONFLICT DO NOTHING"
    " RETURNING vhost, name, type, auto_delete, internal, arguments",
    "move_queues": "INSERT INTO {s}.queues (broker_id, vhost, name, auto_delete, arguments)"
    " SELECT $1, vhost, name, auto_delete, arguments FROM {s}.queues WHERE broker_id = $2"
    " AND ($3::text[] IS NULL OR vhost = ANY($3::text[])) ON CONFLICT DO NOTHING"
    " RETURNING vhost, name, auto_delete, arguments",
    "move_bindings": "INSERT INTO {s}.bindings (broker_id, vhost, source, destination_kind,"
    " destination, routing_key, arguments) SELECT $1, vhost, source, destination_kind,"
    " destination, routing_key, arguments FROM {s}.bindings WHERE broker_id = $2"
    " AND ($3::text[] IS NULL OR vhost = ANY($3::text[])) ON CONFLICT DO NOTHING"
    " RETURNING vhost, source, destination_kind, destination, routing_key, arguments",
    **{
        f"drop_{table}": f"DELETE FROM {{s}}.{table} WHERE broker_id = $1"
        " AND ($2::text[] IS NULL OR vhost = ANY($2::text[]))"
        for table in ("exchanges", "queues", "bindings")
    },
    # Before the entries move: a message is routed within one virtual host, and moves with
    # the entries that hold it.
    "move_messages": "UPDATE {s}.messages AS m SET broker_id = $1 WHERE broker_id = $2"
    " AND ($3::text[] IS NULL OR EXISTS (SELECT 1 FROM {s}.entries AS e"
    " WHERE e.message_id = m.id AND e.broker_id = $2 AND e.vhost = ANY($3::text[])))",
    "move_quarantined": "UPDATE {s}.quarantined_messages SET broker_id = $1 WHERE broker_id = $2"
    " AND ($3::text[] IS NULL OR vhost = ANY($3::text[]))",
    "move_entries": "UPDATE {s}.entries AS e SET broker_id = $1, sequence = e.sequence + o.shift,"
    " delivery_count = GREATEST(e.delivery_count, 1)"
    " FROM unnest($3::text[], $4::text[], $5::bigint[]) AS o(vhost, queue, shift)"
    " WHERE e.broker_id = $2 AND e.vhost = o.vhost AND e.queue = o.queue",
    # The virtual hosts an identity holds rows of (its share of them goes to a worker).
    "held_vhosts": " UNION ".join(
        f"SELECT vhost FROM {{s}}.{table} WHERE broker_id = $1" for table in _VHOST_TABLES
    ),
    # Once none of its rows is left to adopt (`adopt`).
    "failover_complete": "UPDATE {s}.brokers SET state = 'FAILOVER_COMPLETE' WHERE broker_id = $1"
    " AND NOT EXISTS (SELECT 1 FROM {s}.queues WHERE broker_id = $1)"
    " AND NOT EXISTS (SELECT 1 FROM {s}.exchanges WHERE broker_id = $1)"
    " AND NOT EXISTS (SELECT 1 FROM {s}.entries WHERE broker_id = $1)",
    # The rows of streams whose queue is gone (deleted, and the broker stopped before it
    # removed them; or made by a declaration that never committed), as a recovery discards
    # entries of no queue.
    **{
        f"discard_stream_{table}": f"DELETE FROM {{s}}.stream_{table} AS t"
        " WHERE t.broker_id = $1 AND NOT EXISTS (SELECT 1 FROM {s}.queues AS q"
        " WHERE q.broker_id = $1 AND q.vhost = t.vhost AND q.name = t.queue)"
        for table in ("chunks", "segments")
    },
    # Chunks first: both read the claimant's segments as they were before the move.
    **{
        f"move_stream_{table}": f"UPDATE {{s}}.stream_{table} AS t SET broker_id = $1"
        " WHERE t.broker_id = $2 AND ($3::text[] IS NULL OR t.vhost = ANY($3::text[]))"
        " AND NOT EXISTS (SELECT 1 FROM {s}.stream_segments AS c"
        " WHERE c.broker_id = $1 AND c.vhost = t.vhost AND c.queue = t.queue)"
        for table in ("chunks", "segments")
    },
    **MERGE_SQL,
}


def claim_lock_timeout(lease_seconds: float, renew_every: float) -> float:
    """How long a claim waits for a row lock before it is given up, in seconds, for a claimant
    whose lease lasts `lease_seconds` and is renewed every `renew_every` seconds.

    The claim's transaction first checks the claimant's own epoch, which share-locks its own
    record until the transaction ends; its lease renewal, an update of that record on another
    session, waits meanwhile. The claim itself may wait on the failed broker's record: a
    statement of the failed broker still running (paused, or a long statement of a broker that
    vanished mid-statement) holds its epoch check's lock there, and so does a rival claimant
    while it moves the rows. Waiting without bound, the claimant could miss its own renewals
    and lose its lease to the others' failure detectors. A claim that begins just before a
    renewal is due holds that renewal up for as long as it waits, and the lease then lasts
    `lease_seconds - renew_every` more seconds: the claim waits half of that, leaving the other
    half to the renewal's round trip. An HA member's lease is `monitor.interval * threshold`,
    renewed every `min(monitor.interval, lease / 2)` (`batonmq.store.configured`): 15 s with
    the defaults (30 s, 2), 0.5 s with 1 s and 2. A lease renewed less often than every half
    lease (a store of the tests) is taken as renewed every half lease."""
    return (lease_seconds - min(renew_every, lease_seconds / 2)) / 2


def member_record(row: asyncpg.Record) -> tuple[Member, str | None]:
    """A broker record of SQL's "members" or "members_counted", and the member it is a worker
    of (`batonmq.store.members.as_members`)."""
    *fields, member_of = row
    return Member(*fields), member_of


async def discard_streams(connection: Connection, sql: Mapping[str, str], broker: str) -> None:
    """Remove `broker`'s rows of streams that have no queue any more (see `SQL`)."""
    for table in ("chunks", "segments"):
        await connection.execute(sql[f"discard_stream_{table}"], broker)


async def take_over(
    connection: Connection,
    sql: Mapping[str, str],
    plan: Plan,
    *,
    claimant: str,
    member: str,
    failed: str,
    seen_epoch: int,
    force: bool,
    next_sequences: Mapping[ObjectKey, int],
    stream_tails: Mapping[ObjectKey, StreamTail],
    owns: Callable[[str], bool] | None = None,
) -> TakenOver | None:
    """Claim member `failed` for member `member` and move its rows to store identity
    `claimant` (`member`'s own, or one of its workers'), inside the transaction under way on
    `connection` (whose caller has checked the claimant's own epoch); None when the claim found
    the epoch changed or a lease running (another broker won, or the failed one came back). A
    member with workers is claimed whole, every store identity of it in this one transaction or
    none (`claim`), and its identities' rows move one identity after another. With `owns`, only
    the rows of the virtual hosts it owns move (of those the identities hold rows of, whether
    or not the catalogue still has them): the claimant's siblings adopt the others (`adopt`).
    `sql`: SQL and the plan's recovery statements, rendered for the schema (`plan`'s).
    `next_sequences`: the next sequence of each of the claimant's queues;
    `stream_tails`: where each of its streams ends."""
    claimed = await claim(connection, sql, plan, member, failed, seen_epoch, force=force)
    if claimed is None:
        return None
    return await _move_all(
        connection, sql, claimant, failed, claimed, next_sequences, stream_tails, owns
    )


async def adopt(
    connection: Connection,
    sql: Mapping[str, str],
    *,
    claimant: str,
    member: str,
    next_sequences: Mapping[ObjectKey, int],
    stream_tails: Mapping[ObjectKey, StreamTail],
    owns: Callable[[str], bool],
) -> TakenOver | None:
    """Move to worker identity `claimant` the rows of the virtual hosts it `owns` that the
    identities member
    `member` claimed (`take_over` by another of its workers) still hold, inside the transaction
    under way on `connection` (whose caller has checked the claimant's own epoch); None when
    there is nothing to adopt. A worker adopts when its sibling that claimed asks it, and when
    it starts, in case it was down then: the rows move in one transaction of the worker's, so
    they are served once, by it."""
    rows = await connection.fetch(sql["adoptable"], member)
    if not rows:
        return None
    return await _move_all(
        connection,
        sql,
        claimant,
        member,
        [(identity, epoch) for identity, epoch in rows],
        next_sequences,
        stream_tails,
        owns,
    )


async def _move_all(
    connection: Connection,
    sql: Mapping[str, str],
    claimant: str,
    failed: str,
    claimed: list[tuple[str, int]],
    next_sequences: Mapping[ObjectKey, int],
    stream_tails: Mapping[ObjectKey, StreamTail],
    owns: Callable[[str], bool] | None,
) -> TakenOver:
    sequences = dict(next_sequences)
    parts: list[TakenOver] = []
    for identity, epoch in claimed:
        vhosts = None
        if owns is not None:
            held = await connection.fetch(sql["held_vhosts"], identity)
            vhosts = [vhost for (vhost,) in held if owns(vhost)]
        part = await _move(
            connection,
            sql,
            claimant=claimant,
            failed=identity,
            epoch=epoch,
            next_sequences=sequences,
            stream_tails=stream_tails,
            vhosts=vhosts,
        )
        # The next identity's entries of a queue follow this one's.
        for backlog in part.backlogs:
            key = (backlog.vhost, backlog.queue)
            sequences[key] = max(sequences.get(key, 0), backlog.last_sequence + 1 - SEQUENCE_GAP)
        parts.append(part)
    return parts[0] if len(parts) == 1 else _joined(failed, parts)


async def claim(
    connection: Connection,
    sql: Mapping[str, str],
    plan: Plan,
    member: str,
    failed: str,
    seen_epoch: int,
    *,
    force: bool,
) -> list[tuple[str, int]] | None:
    """Claim for `member` every store identity of member `failed`, seen at `seen_epoch` (the
    sum of their epochs: `batonmq.store.members.as_members`): its own, and its workers'. Each
    must be claimable (its lease run out, no failover not asked for, or `force`); each epoch is
    bumped and each record says FAILOVER_STARTED, taken over by `member`; each append log goes
    to the tables, and what a recovery discards goes. The identities `failed` had claimed and
    its workers had not all adopted yet are `member`'s now too. Returns each identity with its
    new epoch, or None when any is not claimable or an epoch changed since, with nothing
    claimed. StoreError when `failed` names a worker's identity rather than its member."""
    rows = await connection.fetch(sql["identities"], failed, force, member)
    if any(member_of is not None and identity == failed for identity, _, member_of, _ in rows):
        member_of = next(m for identity, _, m, _ in rows if identity == failed)
        raise StoreError(
            f"{failed!r} is the store identity of a worker of broker {member_of!r}: a broker "
            f"is taken over whole, as {member_of!r}"
        )
    if not rows or sum(epoch for _, epoch, _, _ in rows) != seen_epoch:
        return None
    if not all(claimable for _, _, _, claimable in rows):
        return None
    claimed: list[tuple[str, int]] = []
    for identity, epoch, _, _ in rows:
        # The rows are locked: each claim finds its epoch as read.
        bumped = await connection.fetchval(sql["claim_failed"], member, identity, epoch, force)
        # What it confirmed and had not checkpointed yet: its append log goes to the tables
        # first. The claim holds its record, so no append of its can follow.
        await apply_log(connection, sql, plan, identity)
        # As a recovery does: transient entries and entries of no queue go, then orphaned
        # messages.
        await connection.execute(sql["discard_entries"], identity)
        await connection.execute(sql["discard_messages"], identity)
        await discard_streams(connection, sql, identity)
        claimed.append((identity, bumped))
    # What `failed` claimed and its workers had not all adopted yet goes with it.
    claimed += [tuple(row) for row in await connection.fetch(sql["inherit"], member, failed)]
    return claimed


def _joined(failed: str, parts: list[TakenOver]) -> TakenOver:
    """What the takeover of a member with workers moved, from what each identity's move did."""
    levels: dict[tuple[str, str, int], QueueBacklog] = {}
    for backlog in (backlog for part in parts for backlog in part.backlogs):
        key = (backlog.vhost, backlog.queue, backlog.priority)
        found = levels.get(key)
        levels[key] = (
            backlog
            if found is None
            else QueueBacklog(
                backlog.vhost,
                backlog.queue,
                found.count + backlog.count,
                found.bytes + backlog.bytes,
                max(found.last_sequence, backlog.last_sequence),
                backlog.priority,
            )
        )
    first: dict[ObjectKey, int] = {}
    for part in parts:
        for queue, sequence in part.first_sequences.items():
            first[queue] = min(first.get(queue, sequence), sequence)
    return TakenOver(
        failed=failed,
        epoch=sum(part.epoch for part in parts),
        exchanges=[exchange for part in parts for exchange in part.exchanges],
        queues=[queue for part in parts for queue in part.queues],
        bindings=[binding for part in parts for binding in part.bindings],
        backlogs=[levels[key] for key in sorted(levels)],
        first_sequences=first,
        vhosts=parts[-1].vhosts,
        merged_streams=[merged for part in parts for merged in part.merged_streams],
    )


async def _move(
    connection: Connection,
    sql: Mapping[str, str],
    *,
    claimant: str,
    failed: str,
    epoch: int,
    next_sequences: Mapping[ObjectKey, int],
    stream_tails: Mapping[ObjectKey, StreamTail],
    vhosts: list[str] | None,
) -> TakenOver:
    """Move the rows of store identity `failed`, claimed (now at `epoch`), to `claimant`: all,
    or those of `vhosts`."""
    levels = await connection.fetch(sql["levels"], failed, vhosts)
    first: dict[ObjectKey, int] = {}
    for vhost, queue, _priority, _count, _bytes, lowest, _highest in levels:
        key = (vhost, queue)
        first[key] = min(first.get(key, lowest), lowest)
    shifts = {
        key: next_sequences.get(key, 0) + SEQUENCE_GAP - lowest for key, lowest in first.items()
    }
    exchanges = await connection.fetch(sql["move_exchanges"], claimant, failed, vhosts)
    queues = await connection.fetch(sql["move_queues"], claimant, failed, vhosts)
    bindings = await connection.fetch(sql["move_bindings"], claimant, failed, vhosts)
    for table in ("bindings", "queues", "exchanges"):
        await connection.execute(sql[f"drop_{table}"], failed, vhosts)
    await connection.execute(sql["move_messages"], claimant, failed, vhosts)
    await connection.execute(sql["move_quarantined"], claimant, failed, vhosts)
    await connection.execute(
        sql["move_entries"],
        claimant,
        failed,
        [key[0] for key in shifts],
        [key[1] for key in shifts],
        list(shifts.values()),
    )
    merged = await merge_streams(
        connection, sql, claimant=claimant, failed=failed, tails=stream_tails
    )
    for table in ("chunks", "segments"):
        await connection.execute(sql[f"move_stream_{table}"], claimant, failed, vhosts)
    await connection.execute(sql["failover_complete"], failed)
    every_vhost = await connection.fetch(sql["vhosts"])
    return TakenOver(
        failed=failed,
        epoch=epoch,
        exchanges=[
            StoredExchange(v, n, t, auto, internal, decode_table(a))
            for v, n, t, auto, internal, a in exchanges
        ],
        queues=[StoredQueue(v, n, auto, decode_table(a)) for v, n, auto, a in queues],
        bindings=[
            StoredBinding(v, s, kind, d, k, decode_table(a)) for v, s, kind, d, k, a in bindings
        ],
        backlogs=[
            QueueBacklog(vhost, queue, count, size, highest + shifts[vhost, queue], priority)
            for vhost, queue, priority, count, size, _lowest, highest in levels
        ],
        first_sequences={key: lowest + shifts[key] for key, lowest in first.items()},
        vhosts=[name for (name,) in every_vhost],
        merged_streams=merged,
    )
