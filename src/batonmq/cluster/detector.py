"""Failure detection in an HA cluster (MQ 4.1 HA guide, "Failure Detection and Takeover
Properties"):

    "imq.cluster.heartbeat.threshold specifies the number of missed heartbeat intervals after which
    a broker is considered suspect of failure. When no heartbeat has been detected from a given
    broker for the specified number of heartbeat intervals, the other brokers in the cluster begin
    to monitor the suspect broker's state information in the persistent store to confirm whether
    the broker has indeed failed. [...] If the broker fails to update its state within the number
    of monitor intervals specified by imq.cluster.monitor.threshold, the broker is considered to
    have failed."

Two clocks, two jobs. Missed heartbeats are counted on this broker's monotonic clock: they only
make a peer *suspect*, which costs nothing but store reads. Whether a suspect has *failed* is
decided by the store's clock alone: a reading gives the age of the peer's last update as the
database measures it (its `now()` minus the time stamp it wrote), so no broker's clock, however
wrong, can make another fail. A peer whose heartbeats stopped but whose store updates go on (a
broken heartbeat link, a slow network) stays suspect and is never failed.

`FailureDetector` is a pure state machine: it is told what happened (a heartbeat, a tick of the
clock, a store reading, the member list) and returns what to do, as effects; it does no IO.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


class Health(enum.Enum):
    ALIVE = "alive"
    #: Heartbeats missed: watched in the store.
    SUSPECT = "suspect"
    #: Silent in the store past the monitor threshold: to be taken over.
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Heard:
    """The first heartbeat of `peer` as the member listed with fencing `epoch` arrived: it is
    watched. Once per member and epoch: a member that joins again is heard anew."""

    peer: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Suspected:
    """Start reading `peer`'s time stamp in the store, every monitor interval."""

    peer: str


@dataclass(frozen=True, slots=True)
class Cleared:
    """`peer` was heard from again: stop watching it in the store."""

    peer: str


@dataclass(frozen=True, slots=True)
class Failed:
    """`peer` has failed: try to take it over (the store decides who wins)."""

    peer: str
    #: How long, on the store's clock, it had been silent there.
    silent_for: float


Effect = Heard | Suspected | Cleared | Failed


@dataclass(slots=True)
class _Peer:
    #: When the last heartbeat arrived (or the peer became known), on this broker's clock.
    heard_at: float
    #: The fencing epoch it was listed with: a member that joins again claims a new one.
    epoch: int
    health: Health = Health.ALIVE
    #: Whether a heartbeat of this epoch has arrived.
    heard: bool = False


#: How many of the store's outages are kept to take off a silence: enough for a live peer's
#: (it writes again soon after the store is back), few enough that a dead peer's silence grows
#: past them while the store keeps going away.
OUTAGES_KEPT: Final = 8


class FailureDetector:
    def __init__(
        self,
        *,
        heartbeat_interval: float,
        heartbeat_threshold: int,
        monitor_interval: float,
        monitor_threshold: int,
    ) -> None:
        #: Seconds without a heartbeat after which a peer is suspect.
        self.suspect_after = heartbeat_interval * heartbeat_threshold
        #: Seconds without a store update, on the store's clock, after which a suspect fails.
        self.fail_after = monitor_interval * monitor_threshold
        self._peers: dict[str, _Peer] = {}
        #: When this broker last listed the members (read the store), on its clock.
        self._read_at: float | None = None
        #: Since when the store has been out of this broker's reach (its last reading then).
        self._lost_since: float | None = None
        #: The store's last outages as this broker saw them, (from, to) on its clock.
        self._outages: deque[tuple[float, float]] = deque(maxlen=OUTAGES_KEPT)

    def health(self, peer: str) -> Health | None:
        """What this broker thinks of `peer` (None: not a member it knows)."""
        known = self._peers.get(peer)
        return None if known is None else known.health

    def members(self, peers: Mapping[str, int], now: float) -> list[Effect]:
        """The other live members, as the store lists them, with their fencing epochs: a new
        one is given a full heartbeat threshold from `now` before it can be suspect; one no
        longer listed is forgotten. A member listed with another epoch than before joined
        again (after a takeover, or a restart) and is new, whatever was thought of it: a
        takeover's end and the member's return can fall between two readings of the list.
        Listed after `store_lost`, the store is back: its outage ends at `now`."""
        effects: list[Effect] = [
            Cleared(peer)
            for peer, known in self._peers.items()
            if peer not in peers and known.health is Health.SUSPECT
        ]
        self._peers = {
            peer: known
            if (known := self._peers.get(peer)) is not None and known.epoch == epoch
            else _Peer(heard_at=now, epoch=epoch)
            for peer, epoch in peers.items()
        }
        if self._lost_since is not None:
            self._outages.append((self._lost_since, now))
            self._lost_since = None
        self._read_at = now
        return effects

    def store_lost(self) -> None:
        """This broker could not read the store (since its last reading, at the latest). Its
        peers could not write there either, so once the store is back its clock shows them all
        silent, a live peer as well as a failed one until it writes again: a store reading
        does not count the outage as a peer's silence (`store_reading`). A peer being taken
        over (failed) may not have been claimed: it is watched anew from the last reading, and
        taken over once it fails again."""
        if self._lost_since is None and self._read_at is not None:
            self._lost_since = self._read_at
            for peer, known in self._peers.items():
                if known.health is Health.FAILED:
                    self.claim_lost(peer, self._read_at)

    def heartbeat(self, peer: str, now: float) -> list[Effect]:
        """A heartbeat from `peer` arrived at `now` (this broker's monotonic clock)."""
        known = self._peers.get(peer)
        if known is None or known.health is Health.FAILED:
            # Not a member (yet), or already judged failed: a failed broker is fenced by its
            # takeover, and comes back only as a new member.
            return []
        known.heard_at = max(known.heard_at, now)
        effects: list[Effect] = []
        if not known.heard:
            known.heard = True
            effects.append(Heard(peer, known.epoch))
        if known.health is Health.SUSPECT:
            known.health = Health.ALIVE
            effects.append(Cleared(peer))
        return effects

    def tick(self, now: float) -> list[Effect]:
        """Time passed: peers silent for the heartbeat threshold become suspect."""
        effects: list[Effect] = []
        for peer, known in self._peers.items():
            if known.health is Health.ALIVE and now - known.heard_at >= self.suspect_after:
                known.health = Health.SUSPECT
                effects.append(Suspected(peer))
        return effects

    def claim_lost(self, peer: str, now: float) -> None:
        """A takeover of the failed `peer` came to nothing (another broker won it, or it updated
        the store again): it is watched anew from `now`, as a member just listed is (its
        epoch, heard before, is not heard anew)."""
        if (known := self._peers.get(peer)) is not None:
            self._peers[peer] = _Peer(heard_at=now, epoch=known.epoch, heard=known.heard)

    def store_reading(self, peer: str, silent_for: float, now: float) -> list[Effect]:
        """A suspect's last store update is `silent_for` seconds old, as the store measures it,
        read at `now`. The part of those seconds the store was out of this broker's reach, in
        its last outages, is not the peer's silence: nobody could write (a member that joined
        just before, unheard yet, would otherwise be failed as the store comes back)."""
        known = self._peers.get(peer)
        if known is None or known.health is not Health.SUSPECT:
            return []  # heard from meanwhile: the reading is stale
        if silent_for - self._in_outages(silent_for, now) < self.fail_after:
            return []
        known.health = Health.FAILED
        return [Failed(peer, silent_for)]

    def _in_outages(self, silent_for: float, now: float) -> float:
        """How many of the `silent_for` seconds before `now` fell in the store's last outages
        (durations on the two clocks are taken alike; the times are each broker's own)."""
        since = now - silent_for
        return sum(max(0.0, end - max(since, start)) for start, end in self._outages)
