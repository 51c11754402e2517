"""Durability policies of the PostgreSQL store, in the Apache Qpid broker manual's terms
(§1.6.6, "Durability Guarantees"), and what each means in PostgreSQL.

Qpid writes a policy as a triplet "<master sync policy>,<replica sync policy>,<replica
acknowledgement policy>": sync policies SYNC (written and flushed before the commit returns),
WRITE_NO_SYNC (written, not flushed), NO_SYNC (neither); acknowledgement policies ALL,
SIMPLE_MAJORITY (the replicas that must have the transaction before the commit returns) and NONE.
Qpid's coalescing-sync (on by default) has the master flush once for the commits that arrive
together, so that a master policy of NO_SYNC or WRITE_NO_SYNC is still written and flushed before
the commit returns; SYNC with coalescing-sync "cannot be used" (it costs without adding anything).

BatonMQ's replicas are PostgreSQL's streaming standbys, and PostgreSQL decides per transaction
with `synchronous_commit` how long a commit waits:

===================================  ========================  =====================================
policy                               synchronous_commit        a confirm means
===================================  ========================  =====================================
ack NONE, master SYNC, or any        local                     flushed on the primary
master with coalescing-sync
ack NONE, master NO_SYNC or          off                       nothing yet: a crash of PostgreSQL
WRITE_NO_SYNC, no coalescing-sync                              (or its machine) within about
                                                               3 x wal_writer_delay loses it
ack ALL / SIMPLE_MAJORITY,           on                        flushed on the primary and on the
replica SYNC                                                   synchronous standbys
ack ALL / SIMPLE_MAJORITY,           remote_write              flushed on the primary, written (not
replica WRITE_NO_SYNC or NO_SYNC                               flushed) on the synchronous standbys:
                                                               lost only if a standby's machine
                                                               fails with the primary
===================================  ========================  =====================================

What PostgreSQL cannot express is said where it happens: it has no wait for a standby's mere
receipt (replica NO_SYNC waits for the write, a little more than asked), and with a replica
acknowledgement the primary always flushes (a master NO_SYNC gets more than asked). Which
standbys, and how many, is the server's `synchronous_standby_names`: ALL is every standby
("FIRST n (...)" or "ANY n (...)" naming all n), SIMPLE_MAJORITY a majority of the primary and
its standbys ("ANY k (...)", k = ⌊(n + 1) / 2⌋ of n standbys). With none named, PostgreSQL waits
for no standby whatever the level, which the broker warns about at start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

SYNC_POLICIES: Final = ("SYNC", "WRITE_NO_SYNC", "NO_SYNC")
ACK_POLICIES: Final = ("ALL", "SIMPLE_MAJORITY", "NONE")


@dataclass(frozen=True, slots=True)
class Durability:
    master: str
    replica: str
    ack: str

    @property
    def waits_for_replicas(self) -> bool:
        return self.ack != "NONE"

    def __str__(self) -> str:
        return f"{self.master},{self.replica},{self.ack}"


def parse_durability(text: str) -> Durability:
    """`text` as Qpid writes it ("NO_SYNC,NO_SYNC,SIMPLE_MAJORITY"; case and spaces do not
    matter); ValueError saying what is wrong."""
    parts = [part.strip().upper() for part in text.split(",")]
    if len(parts) != 3:
        raise ValueError(
            "expected <master sync policy>,<replica sync policy>,<replica acknowledgement "
            f"policy>, for example NO_SYNC,NO_SYNC,SIMPLE_MAJORITY, got {text!r}"
        )
    master, replica, ack = parts
    for role, value in (("master", master), ("replica", replica)):
        if value not in SYNC_POLICIES:
            raise ValueError(
                f"the {role} sync policy must be one of {', '.join(SYNC_POLICIES)}, got {value!r}"
            )
    if ack not in ACK_POLICIES:
        raise ValueError(
            "the replica acknowledgement policy must be one of "
            f"{', '.join(ACK_POLICIES)}, got {ack!r}"
        )
    return Durability(master, replica, ack)


def synchronous_commit(durability: Durability, coalescing_sync: bool) -> str:
    """PostgreSQL's `synchronous_commit` for `durability` (the module docstring's table)."""
    if durability.waits_for_replicas:
        return "on" if durability.replica == "SYNC" else "remote_write"
    if durability.master == "SYNC" or coalescing_sync:
        return "local"
    return "off"
