"""A standalone broker's store identities in its PostgreSQL schema, taken as one store.

A broker of one process owns its rows as `broker.name`; with `broker.workers` above 1, worker k
owns the rows of its virtual hosts as "<broker.name>w<k>" (`batonmq.store.placement.worker_id`),
each identity with a lease of its own. The identities of one broker are its family:

- One lock. The broker's own identity and its workers' exclude each other: while a worker
  holds its lease, the broker's own identity cannot be claimed (by a broker of one process, a
  broker's supervisor, or `batonctl db create`, `upgrade` and `restore`), and while that is held
  no worker's can be. Siblings do not exclude each other. Each claim checks its rivals' leases
  under an advisory lock of the family, so that two claims cannot both miss each other.
- One store to read and to copy. `batonctl db stats` and `backup`, opened as the broker's own
  identity, count and copy the rows of every identity of the family that the store has enrolled
  (each `brokers` row), whatever number of workers wrote them; `restore` replaces them all and
  enrols the identities of the backup.

An HA cluster's members stand alone (no family): a member's id is a member's, whatever it reads.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Final, TypeAlias

import asyncpg

from batonmq.store.members import SERVING_STATES
from batonmq.store.placement import worker_id, worker_index

_Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)

#: Statements, with {s} for the quoted schema.
SQL: Final = {
    "enrolled": "SELECT broker_id FROM {s}.brokers",
    "live_leases": "SELECT broker_id, holder, lease_expires FROM {s}.brokers "
    "WHERE broker_id <> $1 AND lease_expires > now() AND state = ANY($2::text[])",
    "family_lock": "SELECT pg_advisory_xact_lock($1)",
}


def is_rival(family: str, claimant: str, other: str) -> bool:
    """Whether `other`'s lease keeps `claimant` (both of `family`, or `other` of none) from
    claiming its own: the broker's own identity and any of its workers' exclude each other."""
    if worker_index(family, claimant) is not None:
        return other == family
    return claimant == family and worker_index(family, other) is not None


async def rival_lease(
    connection: _Connection,
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


async def identities(connection: _Connection, sql: Mapping[str, str], family: str) -> list[str]:
    """The broker's own identity, then each of its workers' that the store has enrolled."""
    workers = {
        index
        for (broker_id,) in await connection.fetch(sql["enrolled"])
        if (index := worker_index(family, broker_id)) is not None
    }
    return [family, *(worker_id(family, index) for index in sorted(workers))]
