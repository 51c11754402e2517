"""The queue's side of a delivery: an entry handed to a client (basic.deliver or get-ok) is
counted, and done with at once under no_ack, else delivered and unacked; an unacked one settled
(basic.ack, nack, reject, or whatever requeues it) is done with, dead-lettered, or put back in
its place. A local channel (`batonmq.engine.channel`) and the owner of a queue consumed from
another worker (`batonmq.engine.linkedconsumers`) both hand out and settle through these, so
that a queue counts and keeps its entries the same whoever its consumers are."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from batonmq.engine.cleanup import each
from batonmq.engine.consumer import ConsumedQueue
from batonmq.engine.outcome import Outcome
from batonmq.model.message import QueueEntry


def hand_out(queue: ConsumedQueue, entry: QueueEntry, *, no_ack: bool, get: bool) -> None:
    """The queue's side of handing `entry` to a client (basic.deliver, or get-ok when `get`):
    counted, and with no_ack done with at once (it is settled as it is sent); else it is
    delivered, and unacked until the client settles it (`settle_entries`)."""
    counters = queue.counters
    if entry.redelivered:
        counters.redeliver += 1
    if no_ack:
        if get:
            counters.get_no_ack += 1
        else:
            counters.deliver_no_ack += 1
        entry.delivery_count += 1
        queue.settled(entry)
    else:
        if get:
            counters.get += 1
        else:
            counters.deliver += 1
        queue.delivered(entry)
        queue.unacked += 1


def settle_entries(
    entries: Iterable[tuple[ConsumedQueue, QueueEntry]],
    outcome: Outcome,
    fields: Callable[[], Mapping[str, object]],
) -> set[ConsumedQueue]:
    """The queues' side of settling delivered entries (basic.ack, nack, reject, or whatever
    requeues them), each as `settle_entry`, then `requeue_returned`. The queues that took some
    back (and dispatched them). `fields` names who settles in the log, if a step raises."""
    returned: defaultdict[ConsumedQueue, list[QueueEntry]] = defaultdict(list)
    for queue, entry in entries:
        settle_entry(queue, entry, outcome, returned)
    requeue_returned(returned, fields)
    return set(returned)


def settle_entry(
    queue: ConsumedQueue,
    entry: QueueEntry,
    outcome: Outcome,
    returned: defaultdict[ConsumedQueue, list[QueueEntry]],
) -> None:
    """The queue's side of settling one delivered entry: acked, it is done with; rejected,
    dead-lettered where the queue says so; requeued, it is gathered in `returned` for
    `requeue_returned`."""
    queue.unacked -= 1
    if outcome is Outcome.REQUEUE:
        returned[queue].append(entry)
    elif outcome is Outcome.REJECT:
        queue.rejected(entry)
    else:
        queue.counters.ack += 1
        queue.settled(entry)


def requeue_returned(
    returned: defaultdict[ConsumedQueue, list[QueueEntry]],
    fields: Callable[[], Mapping[str, object]],
) -> None:
    """The requeued entries `settle_entry` gathered go back to their places in their queues,
    those delivered before marked redelivered (`batonmq.queues.redelivery`)."""
    each(returned.items(), lambda item: item[0].requeue(item[1]), "requeueing", fields)
