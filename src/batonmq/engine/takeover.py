"""Take a failed broker of an HA cluster over, into this running broker (MQ 4.1 HA guide: the
takeover broker "takes over the failed broker's persistent data ... and serves them to clients
that reconnect to it").

The store claims the failed broker and moves its rows in one transaction
(`batonmq.store.takeover`); then the broker serves them, as a recovery would, without writing
them again: the exchanges, queues and bindings only the failed broker had are created; a queue
that only it had comes back with its entries paged in the store; a queue this broker has too
gets the taken-over entries after its own, in their order, all redelivered. A stream this broker
has too gets the failed broker's records after its own (`batonmq.store.streammerge`): the stream
writer is held while the store claims, so that each stream's end is known and stays put, and
each such stream opens its log again before anything else is written to it.

The engine's event feed tells `takeover.start`, then `takeover.complete` or `takeover.fail`,
each naming the failed broker (the HA guide's mq.broker.takeover.start, .complete and .fail
notifications); each is logged too.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from batonmq.engine.broker import Broker
from batonmq.engine.events import EventKind
from batonmq.engine.recovery import restore_definitions
from batonmq.queues.streams.appends import Span
from batonmq.queues.streams.storage import Hold
from batonmq.store.base import ObjectKey, PagedEntry, StoreError
from batonmq.store.members import SharedStore, StreamTail, TakenOver

log = logging.getLogger(__name__)

#: Whether this worker owns a virtual host (`batonmq.server.placement.WorkerSeat.owns`).
Owns = Callable[[str], bool]


@runtime_checkable
class _Stream(Protocol):
    """A queue whose log a takeover may extend (a stream: `batonmq.queues.streams.queue`)."""

    def stream_tail(self) -> StreamTail | None: ...

    def reopen_log(
        self, run: Callable[[Callable[[], Span], Callable[[Span | BaseException], None]], None]
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class TakeoverOutcome:
    """What a takeover attempt came to."""

    failed: str
    #: What moved, or None when the claim was lost (another broker won, or the failed one
    #: renewed its lease) or the store failed (`error`).
    taken: TakenOver | None
    seconds: float
    error: str | None = None


def next_sequences(broker: Broker) -> dict[ObjectKey, int]:
    """The next sequence of each of the broker's queues: entries taken over into a queue of the
    same name are numbered after it (`batonmq.store.members.SEQUENCE_GAP`)."""
    return {
        (vhost.name, name): queue.next_sequence
        for vhost in broker.vhosts.values()
        for name, queue in vhost.queues.items()
    }


def stream_tails(broker: Broker) -> dict[ObjectKey, StreamTail]:
    """Where each of the broker's open streams ends (its writer held: `StreamStorage.held`)."""
    tails: dict[ObjectKey, StreamTail] = {}
    for vhost in broker.vhosts.values():
        for name, queue in vhost.queues.items():
            tail = queue.stream_tail() if isinstance(queue, _Stream) else None
            if tail is not None:
                tails[vhost.name, name] = tail
    return tails


def _reopen_merged(broker: Broker, taken: TakenOver, hold: Hold) -> None:
    """Each stream that got the failed broker's records opens its log again once the hold
    ends; each merge is logged."""
    for merged in taken.merged_streams:
        log.info(
            "stream merged on takeover: offsets %d-%d now %d-%d",
            merged.old_first,
            merged.old_next - 1,
            merged.new_first,
            merged.new_next - 1,
            extra={"failed_broker": taken.failed, "vhost": merged.vhost, "queue": merged.queue},
        )
        vhost = broker.vhosts.get(merged.vhost)
        queue = None if vhost is None else vhost.queues.get(merged.queue)
        if isinstance(queue, _Stream):
            queue.reopen_log(hold.then)


async def take_over(
    broker: Broker,
    store: SharedStore,
    failed: str,
    seen_epoch: int,
    *,
    force: bool = False,
    owns: Owns | None = None,
) -> TakeoverOutcome:
    """Claim broker `failed` (as the store last saw it, at `seen_epoch`), move its persistent
    state to this broker and serve it; tell the event feed and the log how it went. With
    `owns` (this broker is a worker of a member with several), the state of the virtual hosts
    it owns only: the sibling workers adopt the rest (`adopt`)."""
    started = time.monotonic()
    me = store.broker_id
    broker.events.publish(EventKind.TAKEOVER_START, failed, by=me, forced=force)
    log.info("takeover started", extra={"failed_broker": failed, "forced": force})
    error: str | None = None
    try:
        async with broker.streams.held() as hold:
            taken = await store.take_over(
                failed,
                seen_epoch,
                force=force,
                next_sequences=next_sequences(broker),
                stream_tails=stream_tails(broker),
                owns=owns,
            )
            if taken is not None:
                _reopen_merged(broker, taken, hold)
        if taken is not None:
            await _serve(broker, store, taken)
    except StoreError as failure:
        taken, error = None, str(failure)
    seconds = time.monotonic() - started
    if taken is None:
        reason = error or "another broker claimed it first, or it updated the store meanwhile"
        broker.events.publish(EventKind.TAKEOVER_FAIL, failed, by=me, reason=reason)
        log.warning("takeover failed: %s", reason, extra={"failed_broker": failed})
        return TakeoverOutcome(failed, None, seconds, error)
    broker.events.publish(
        EventKind.TAKEOVER_COMPLETE,
        failed,
        by=me,
        messages=taken.messages,
        queues=len({(b.vhost, b.queue) for b in taken.backlogs}),
        seconds=round(seconds, 3),
    )
    log.info(
        "takeover complete: %d messages in %.3f s",
        taken.messages,
        seconds,
        extra={"failed_broker": failed, "epoch": taken.epoch},
    )
    return TakeoverOutcome(failed, taken, seconds)


async def adopt(broker: Broker, store: SharedStore, owns: Owns) -> TakenOver | None:
    """Serve what a takeover by a sibling worker left to this worker: the rows of the virtual
    hosts it owns held by the identities its member claimed (`SharedStore.adopt`); None when
    there were none. Run when the sibling asks, and at start."""
    async with broker.streams.held() as hold:
        taken = await store.adopt(
            owns, next_sequences=next_sequences(broker), stream_tails=stream_tails(broker)
        )
        if taken is not None:
            _reopen_merged(broker, taken, hold)
    if taken is not None:
        await _serve(broker, store, taken)
    if taken is not None and (taken.exchanges or taken.queues or taken.backlogs):
        vhosts = {
            row.vhost for rows in (taken.exchanges, taken.queues, taken.backlogs) for row in rows
        }
        log.info(
            "takeover adopted: %d messages",
            taken.messages,
            extra={"failed_broker": taken.failed, "vhosts": ",".join(sorted(vhosts))},
        )
    return taken


async def _serve(broker: Broker, store: SharedStore, taken: TakenOver) -> None:
    """Serve what the store moved to this broker (see the module docstring)."""
    for name in taken.vhosts:
        if name not in broker.vhosts:
            broker.add_vhost(name)
    # A virtual host deleted while the failed broker was down comes back with its rows, as at
    # a recovery (`restore_definitions`).
    new_queues = {
        (stored.vhost, stored.name)
        for stored in taken.queues
        if stored.vhost not in broker.vhosts
        or stored.name not in broker.vhosts[stored.vhost].queues
    }
    restore_definitions(broker, taken.exchanges, taken.queues, taken.bindings)
    merged: list[tuple[ObjectKey, int]] = []
    for key, backlogs in itertools.groupby(taken.backlogs, key=lambda b: (b.vhost, b.queue)):
        levels = list(backlogs)
        queue = broker.vhosts[key[0]].queues.get(key[1])
        if queue is None:
            # Deleted here while the takeover committed: its entries went with it.
            continue
        if key in new_queues:
            queue.recover(levels)
        else:
            merged.append((key, sum(level.count for level in levels)))
    for (vhost, name), count in merged:
        first = taken.first_sequences[vhost, name]
        paged = await store.read_entries(vhost, name, first - 1, count)
        queue = broker.vhosts[vhost].queues.get(name)
        if queue is not None:
            # A quarantined entry (its message failed its checksum) left for good.
            queue.adopt([entry for entry in paged if isinstance(entry, PagedEntry)])
