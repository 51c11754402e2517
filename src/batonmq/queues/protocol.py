"""What every queue type offers the engine (RabbitMQ's `rabbit_queue_type` behaviour): the engine
speaks only these protocols, and `batonmq.queues.types` maps each `x-queue-type` name to the
class that implements them.

A queue type is a class (`QueueType`): it checks the declare arguments of its queues
(`parse_arguments`, raising `InvalidArgument`, which the virtual host turns into 406
PRECONDITION_FAILED) and builds them. A queue (`Queue`) takes published messages, hands them to
its consumers within their room or to basic.get, takes them back (requeue) or lets them go
(settled, rejected: dead-lettered), purges, browses and removes its ready messages, tells its
statistics, and comes back from the store after a restart. Routing, publishing, confirms and
transactions need only `RoutedQueue`, the part a queue held by another process can offer too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from pamqp.common import FieldTable

from batonmq.model.message import Message, QueueEntry
from batonmq.model.topology import ConnectionRef
from batonmq.queues.arguments import QueueArguments
from batonmq.queues.counters import QueueCounters
from batonmq.queues.deadletter import Reason
from batonmq.queues.paging import Paging
from batonmq.selectors import Selector
from batonmq.store.base import PagedEntry, QueueBacklog
from batonmq.timers import Timers


class Enqueued(Enum):
    """What became of a message published to a queue."""

    KEPT = "kept"
    #: Kept and written to the store: a publisher confirm waits for the commit.
    STORED = "stored"
    #: Refused: the queue is full and its overflow is reject-publish(-dlx).
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class BrowsedMessage:
    """A ready message seen without being consumed: `position` 0 is the next one out."""

    position: int
    message_id: int
    redelivered: bool
    message: Message


class QueueHooks(Protocol):
    """What a queue asks of its virtual host."""

    def dead_letter(self, queue: Queue, entry: QueueEntry, reason: Reason) -> None:
        """Republish `entry`'s message to the queue's dead-letter exchange (if it has one)."""

    def expire_queue(self, queue: Queue) -> None:
        """Delete `queue`: it was unused for its x-expires."""


class QueueConsumer(Protocol):
    """What a queue needs of a consumer: whether it can take one more, which entries it takes,
    and a way to hand it one."""

    @property
    def tag(self) -> str: ...

    @property
    def exclusive(self) -> bool: ...

    @property
    def priority(self) -> int:
        """x-priority: higher goes first; 0 when not given."""
        ...

    @property
    def arguments(self) -> FieldTable:
        """Its basic.consume arguments (checked by `Queue.check_consume`)."""
        ...

    @property
    def selector(self) -> Selector | None:
        """x-selector: the messages it takes; None for all of them."""
        ...

    def has_room(self) -> bool: ...

    def deliver(self, queue: Queue, entry: QueueEntry) -> None: ...


class Consumers(Protocol):
    """A queue's consumers as the engine sees them."""

    @property
    def single_active(self) -> bool:
        """x-single-active-consumer: one consumer at a time gets entries."""
        ...

    @property
    def hands_over(self) -> bool:
        """Whether a consumer that goes hands its work to a backup."""
        ...

    def __len__(self) -> int: ...

    def __bool__(self) -> bool: ...

    def __iter__(self) -> Iterator[QueueConsumer]: ...

    def clear(self) -> None: ...


class RoutedQueue(Protocol):
    """What routing, publishing, publisher confirms and transactions touch of a queue: its
    declaration, its limits and taking a message. A queue that lives elsewhere (another worker
    of a virtual host spread over workers) offers only this; everything else is `Queue`'s."""

    #: Its message statistics, counted by the engine as it routes, delivers and settles.
    counters: QueueCounters

    @property
    def name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def exclusive_owner(self) -> ConnectionRef | None: ...

    @property
    def auto_delete(self) -> bool: ...

    @property
    def exclusive(self) -> bool: ...

    @property
    def arguments(self) -> FieldTable:
        """As declared (compared on redeclaration)."""
        ...

    @property
    def options(self) -> QueueArguments:
        """What the queue works by: its arguments, with a policy's limits."""
        ...

    @property
    def producers(self) -> set[object]:
        """The channels counted as its producers (x-max-producers), kept by the engine."""
        ...

    @property
    def persists(self) -> bool:
        """Whether its persistent messages survive a restart."""
        ...

    @property
    def writes_itself(self) -> bool:
        """Whether it writes its messages itself (a stream's log) rather than through the
        journal: a publisher confirm waits for `when_written`."""
        ...

    @property
    def deleted(self) -> bool: ...

    @property
    def overfull(self) -> bool:
        """x-overflow flow-control: whoever publishes to it waits (`when_underfull`)."""
        ...

    def publish(self, message: Message, *, until_batch: int | None = None) -> Enqueued:
        """Enqueue `message`, or refuse it (the queue's limits). With `until_batch` (a journal
        batch number) it is held back, seen by nobody, until that batch is over
        (`release_held`): a durable publish becomes visible only after its write commits."""
        ...

    def when_written(self, callback: Callable[[bool], None]) -> None:
        """A queue that `writes_itself`: call `callback(ok)` once the last message published
        to it is durable, or will never be."""
        ...

    def release_held(self, batch: int, committed: bool) -> None:
        """Journal batch `batch` is over: the entries held for it become ready (`committed`)
        or are dropped (the store does not have them, and their publishers were told so)."""
        ...

    def when_underfull(self, callback: Callable[[], None]) -> None:
        """Call `callback` once this overfull queue is underfull again, or deleted."""
        ...


class Queue(RoutedQueue, Protocol):
    """One queue, of any type (see the module docstring), held by this process. An entry
    (`QueueEntry`) is one queue's reference to a message, which several queues may share."""

    #: Set by the virtual host that holds the queue.
    hooks: QueueHooks | None
    #: Its deliveries not yet settled (RabbitMQ's messages_unacknowledged), counted by the
    #: channels that hold them.
    unacked: int

    @property
    def next_sequence(self) -> int:
        """The sequence the next published entry gets (publish order)."""
        ...

    @property
    def consumers(self) -> Consumers: ...

    @property
    def ever_stored(self) -> bool:
        """Whether it or any entry of it was ever written (deleting it must clean up)."""
        ...

    # Statistics ---------------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """Ready messages (those in the store included)."""
        ...

    @property
    def message_bytes(self) -> int:
        """Body bytes of the ready messages (those in the store included)."""
        ...

    @property
    def consumer_count(self) -> int: ...

    @property
    def memory(self) -> int:
        """An estimate of the bytes its ready messages take in memory: each one held in memory
        costs its body and `ENTRY_COST` (batonmq.model.message); those paged out to the store,
        or kept in a stream's log, cost nothing here."""
        ...

    @property
    def head_size(self) -> int | None:
        """Body bytes of the next message out when it is in memory, else None."""
        ...

    def oldest_sequence_bound(self) -> int | None:
        """A sequence at or after that of the next entry out, None when nothing is ready: how
        `batonmq.queues.arrivals` ages the oldest message."""
        ...

    # Holding back -------------------------------------------------------------------------

    @property
    def holds_back(self) -> bool:
        """Whether messages published to it wait for their commit before anyone sees them."""
        ...

    def when_released(self, callback: Callable[[], None]) -> None:
        """Call `callback` once nothing is held back, or the queue is deleted."""
        ...

    # Consuming ----------------------------------------------------------------------------

    def check_consume(
        self, *, no_ack: bool, prefetch_count: int, global_prefetch: int, arguments: FieldTable
    ) -> None:
        """Raise the ProtocolError that refuses a basic.consume of this queue type (its
        acknowledgement mode, prefetch or consumer arguments), before the consumer exists."""
        ...

    def add_consumer(self, consumer: QueueConsumer) -> None: ...

    def remove_consumer(self, consumer: QueueConsumer) -> None: ...

    def has_exclusive_consumer(self) -> bool: ...

    def dispatch(self) -> None:
        """Hand ready entries to consumers with room (`QueueConsumer.deliver`) until either
        runs out."""
        ...

    def get(self) -> QueueEntry | None:
        """The next ready entry (basic.get); None when empty or when the next entries are
        still being read from the store (`waiting_for_page_in`: wait with `when_paged_in`)."""
        ...

    @property
    def waiting_for_page_in(self) -> bool:
        """Messages are ready but the next ones are still being read from the store."""
        ...

    def when_paged_in(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the entries being read back from the store have arrived."""
        ...

    def delivered(self, entry: QueueEntry) -> None:
        """`entry` went to a client that must settle it: its delivery count goes up, so that
        if it comes back, or the broker restarts before it is settled, it is marked
        redelivered."""
        ...

    def settled(self, entry: QueueEntry) -> None:
        """`entry` is done with (acknowledged, rejected without requeue, sent with no-ack)."""
        ...

    def rejected(self, entry: QueueEntry) -> None:
        """`entry` was rejected without requeue (basic.reject, basic.nack requeue=false): it
        is dead-lettered."""
        ...

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
        """Put unsettled entries back in their old places, those delivered before marked
        redelivered (`batonmq.queues.redelivery`); a deleted queue takes nothing back."""
        ...

    # Managing -----------------------------------------------------------------------------

    def touched(self) -> None:
        """The queue was used (redeclared, or read with basic.get): x-expires starts again."""
        ...

    def purge(self) -> int:
        """Remove every ready message (not those delivered and unsettled); how many. Their
        store rows' deletion is recorded, and retried by the journal if its batch fails (as an
        acknowledgement is): who answers a client does so once the journal is durable."""
        ...

    def browse(self, start: int = 0, count: int | None = None) -> list[BrowsedMessage]:
        """Up to `count` (all, for None) ready messages from position `start`, in the order
        they would go out, none of them consumed."""
        ...

    def remove(self, message_ids: Iterable[int]) -> int:
        """Remove the ready messages with these ids, as `purge` removes all; how many went."""
        ...

    def delete(self) -> int:
        """The queue is deleted: everything ready goes (the store's copies are deleted with
        the queue by the caller), the publishers it held back are released. Its ready count."""
        ...

    def expire(self) -> int:
        """The periodic sweep: dead-letter every expired message; how many went."""
        ...

    def page_out(self) -> None:
        """Write out what is over the queue's window now (the memory guard narrowed it)."""
        ...

    def recover(self, backlogs: list[QueueBacklog]) -> None:
        """Come back from the store holding `backlogs` (one per priority level)."""
        ...

    def adopt(self, entries: list[PagedEntry]) -> None:
        """Take in, as ready messages, entries that a takeover moved to this queue in the store
        from a failed broker's queue of the same name (`batonmq.engine.takeover`): stored
        already, in order, numbered after every entry this queue has numbered; the queue
        numbers on after them."""
        ...

    def stop_timers(self) -> None: ...


class QueueType(Protocol):
    """A queue type: the class of its queues."""

    @staticmethod
    def parse_arguments(arguments: FieldTable) -> QueueArguments:
        """The declare `arguments` checked for this type (InvalidArgument if not valid)."""
        ...

    @staticmethod
    def refused_property(*, durable: bool, exclusive: bool, auto_delete: bool) -> str | None:
        """The queue property (RabbitMQ's name) this type's queues cannot have, or None."""
        ...

    def __call__(
        self,
        name: str,
        *,
        durable: bool = ...,
        exclusive_owner: ConnectionRef | None = ...,
        auto_delete: bool = ...,
        arguments: FieldTable | None = ...,
        paging: Paging | None = ...,
        timers: Timers = ...,
        options: QueueArguments | None = ...,
    ) -> Queue: ...
