"""What the broker persists, and the `Store` protocol the two stores (sqlite, postgres) implement.

The engine never calls a store from the hot path: it records changes in a `WriteBatch` (see
`batonmq.store.journal`), and one task hands each batch to `Store.commit`, which applies it in one
database transaction (the "coalescing sync" of Qpid manual §1.6.6.2). Calls to a store run in the
order they are made: a read issued after a commit sees that commit.

Every row carries the id of the broker that owns it (`broker_id`), so that several brokers, and
later an HA cluster, can share one PostgreSQL database (MQ 4.1 HA guide Table 8: a standalone
broker's tables vs a cluster's shared tables).

Message ids: the store hands each broker start a block of `MESSAGE_ID_BLOCK` ids that no other
start of any broker sharing the store gets (`Recovery.message_id_base`), which makes ids unique
across a cluster without a round trip per message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from pamqp.common import FieldTable

from batonmq.security.permissions import UserPermission

#: The schema version this code writes; `batonctl db upgrade` migrates older ones to it.
SCHEMA_VERSION: Final = 15
#: The index `entries_priority`, that a priority queue reads a level through (schema version 5),
#: in both stores. Partial: it holds only levels above 0, so it costs nothing for the entries of
#: plain queues, and it is never a candidate for a statement that names an entry by its key. With
#: every entry in it, PostgreSQL's planner, without statistics (a new or never analysed table),
#: deleted entries through it with `sequence` as a filter, walking every index entry of the queue
#: per delete: commits of a few thousand entries took seconds. A read of a level above 0 says
#: `priority > 0` so that both planners can prove the index applies; level 0 is read through the
#: primary key, as it is read only once every higher level is empty.
LEVEL_INDEX: Final = "(broker_id, vhost, queue, priority, sequence) WHERE priority > 0"
#: Ids per block: a broker start may assign this many message ids before it must restart.
MESSAGE_ID_BLOCK: Final = 1 << 40

#: The user every new store starts with: guest/guest (as RabbitMQ's default user; loopback only
#: unless auth.guest_loopback_only is off; `batonctl user delete guest` removes it). Salted scrypt.
GUEST_CREDENTIAL: Final = (
    "scrypt$n=16384,r=8,p=1$m1t2mOpD2eg37GvTK91XEA==$nBGL4s13fvZUahaiYFjiZywmlFqXTv3JHxMEFo50nqY="
)

#: (vhost, name) of an exchange or queue.
ObjectKey = tuple[str, str]


class StoreError(Exception):
    """The store cannot do what was asked; the text says what and why, for an operator."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or opened (wrong DSN, server down, unreadable file)."""


class StoreLocked(StoreError):
    """Another running broker holds this store."""


class StoreFenced(StoreError):
    """Another broker has taken this broker's store over: the fencing epoch this broker holds
    was superseded (a takeover, or a second broker started after this one's lease lapsed).
    The broker writes nothing more and exits."""


class StoreCorrupt(StoreError):
    """The file or schema is not a BatonMQ store, or is damaged."""


class SchemaTooNew(StoreError):
    """The store was written by a newer BatonMQ (its schema version is above SCHEMA_VERSION)."""


class SchemaTooOld(StoreError):
    """The store's schema is older than this code; `batonctl db upgrade` migrates it."""


@dataclass(frozen=True, slots=True)
class StoredExchange:
    vhost: str
    name: str
    type_name: str
    auto_delete: bool
    internal: bool
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class StoredQueue:
    vhost: str
    name: str
    auto_delete: bool
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class StoredBinding:
    vhost: str
    source: str
    #: "queue" or "exchange".
    destination_kind: str
    destination: str
    routing_key: str
    arguments: FieldTable


@dataclass(frozen=True, slots=True)
class StoredDefinitions:
    """One store identity's exchanges, queues and bindings, as its recovery reads them."""

    exchanges: list[StoredExchange]
    queues: list[StoredQueue]
    bindings: list[StoredBinding]


@dataclass(frozen=True, slots=True)
class StoredUser:
    """A user who may log in; `credential` is `batonmq.security.passwords.Credential.encode()`.
    Users and virtual hosts belong to the store, not to one broker: brokers sharing a store (an
    HA cluster) share them."""

    name: str
    credential: str
    #: RabbitMQ's user tags (administrator, monitoring, policymaker, management), which decide
    #: what the user may do over the management HTTP API; none: AMQP only.
    tags: tuple[str, ...] = ()

    @property
    def tags_text(self) -> str:
        """The tags as the users table keeps them: comma-separated."""
        return ",".join(self.tags)

    @staticmethod
    def parse_tags(text: str) -> tuple[str, ...]:
        return tuple(tag for tag in text.split(",") if tag)


#: Version 8 gives the user `guest` this tag when the migration creates the store (RabbitMQ's
#: default user is an administrator); users of an older store get no tags.
GUEST_TAGS: Final = "administrator"


# The two records every persistent message makes are named tuples: as immutable as a frozen
# dataclass, and built several times faster (a frozen dataclass sets each field through
# object.__setattr__, about a microsecond per record on the hot path).
class StoredMessage(NamedTuple):
    id: int
    exchange: str
    routing_key: str
    #: The content header payload as the publisher sent it (class id through property list).
    header_payload: bytes
    body: bytes


class StoredEntry(NamedTuple):
    """One queue's hold on a stored message. Transient entries (a non-persistent message, or
    any message of a non-durable queue, written only to page it out of memory) are deleted when
    the store is opened."""

    vhost: str
    queue: str
    sequence: int
    message_id: int
    delivery_count: int = 0
    transient: bool = False
    #: When the entry expires (wall-clock milliseconds); None for never.
    expires_at: int | None = None
    #: The entry's priority level in a priority queue (x-max-priority), which pages each level
    #: on its own; 0 in any other queue.
    priority: int = 0


@dataclass(frozen=True, slots=True)
class PagedEntry:
    """A queue entry read back with its message (recovery and paging in)."""

    sequence: int
    delivery_count: int
    message: StoredMessage
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class QuarantinedEntry:
    """A queue entry whose message failed its check when read back (`batonmq.store.integrity`):
    the store has moved it to its quarantine, so it is never delivered and leaves its queue."""

    sequence: int
    message_id: int
    #: The entry's priority level, as in StoredEntry.
    priority: int
    #: The length of the body as stored (what the queue's backlog counted).
    body_bytes: int
    #: Why, for the log: the checksum does not match, or the header does not decode.
    reason: str = "its bytes in the store do not match their checksum"


#: What `Store.read_entries` returns: entries in sequence order, each with its message or
#: quarantined.
PageRead = list[PagedEntry | QuarantinedEntry]


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """What a durable queue holds in the store when the broker starts, per priority level (a
    queue with entries at several levels has one backlog for each)."""

    vhost: str
    queue: str
    count: int
    bytes: int
    #: Highest sequence stored (-1 when empty): new entries continue after it.
    last_sequence: int
    priority: int = 0


@dataclass(slots=True)
class Recovery:
    """Everything `Store.recover` brings back, except the entries themselves, which queues read
    with `Store.read_entries` (so that a backlog larger than memory is never loaded whole)."""

    exchanges: list[StoredExchange]
    queues: list[StoredQueue]
    bindings: list[StoredBinding]
    #: In (vhost, queue) order, a queue's levels together.
    backlogs: list[QueueBacklog]
    #: The first message id of this start's block.
    message_id_base: int
    users: list[StoredUser] = field(default_factory=list)
    #: The virtual hosts created (the configured default one may not be among them yet).
    vhosts: list[str] = field(default_factory=list)
    #: Each user's permissions in each virtual host (RabbitMQ's), by user then virtual host.
    permissions: list[UserPermission] = field(default_factory=list)
    #: Transient entries and orphaned messages removed at open.
    discarded_entries: int = 0
    #: Whether the broker that held the store before did not stop cleanly (it crashed, or was
    #: killed, or lost its store), as its broker record still said "running".
    unclean_stop: bool = False


@dataclass(slots=True)
class WriteBatch:
    """Changes to apply in one transaction. The order they are written in is the write plan's
    (`batonmq.store.plan.Plan.write_steps`): deletions, then puts, then entry updates and
    deletions, then users (deleted, then put), then permissions; last, the messages no entry
    refers to any more. A user's or a virtual host's deletion takes its permissions with it.

    The journal that fills a batch resolves conflicts inside it (an entry put and deleted in the
    same batch is in neither list), so that order is always right.
    """

    vhosts_deleted: list[str] = field(default_factory=list)
    exchanges_deleted: list[ObjectKey] = field(default_factory=list)
    queues_deleted: list[ObjectKey] = field(default_factory=list)
    bindings_deleted: list[StoredBinding] = field(default_factory=list)
    #: (vhost, queue, first sequence, last sequence, priority): entries in that range, inclusive,
    #: and of that priority level (of any, for None), go.
    ranges_deleted: list[tuple[str, str, int, int, int | None]] = field(default_factory=list)
    vhosts_put: list[str] = field(default_factory=list)
    exchanges_put: list[StoredExchange] = field(default_factory=list)
    queues_put: list[StoredQueue] = field(default_factory=list)
    bindings_put: list[StoredBinding] = field(default_factory=list)
    messages_put: list[StoredMessage] = field(default_factory=list)
    entries_put: list[StoredEntry] = field(default_factory=list)
    #: (vhost, queue, sequence, delivery_count)
    entries_updated: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: (vhost, queue, sequence, message_id): the message id says which message may be orphaned.
    entries_deleted: list[tuple[str, str, int, int]] = field(default_factory=list)
    users_put: list[StoredUser] = field(default_factory=list)
    users_deleted: list[str] = field(default_factory=list)
    permissions_put: list[UserPermission] = field(default_factory=list)
    #: (user, vhost)
    permissions_deleted: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(
            (
                self.vhosts_deleted,
                self.vhosts_put,
                self.users_put,
                self.users_deleted,
                self.permissions_put,
                self.permissions_deleted,
                self.exchanges_deleted,
                self.queues_deleted,
                self.bindings_deleted,
                self.ranges_deleted,
                self.exchanges_put,
                self.queues_put,
                self.bindings_put,
                self.messages_put,
                self.entries_put,
                self.entries_updated,
                self.entries_deleted,
            )
        )


@dataclass(frozen=True, slots=True)
class StoreStats:
    """`batonctl db stats`: what is in the store."""

    kind: str
    location: str
    schema_version: int
    broker_id: str
    exchanges: int
    queues: int
    bindings: int
    messages: int
    entries: int
    message_bytes: int
    #: Entries quarantined because their message failed its checksum (`quarantined_messages`).
    quarantined: int


class Store(Protocol):
    """A broker's persistent store. All methods run off the event loop's thread (or are truly
    asynchronous) and in the order they are called."""

    @property
    def kind(self) -> str:
        """ "sqlite" or "postgres"."""
        ...

    @property
    def location(self) -> str:
        """Where the data lives, for log lines (a file path, or a DSN without its password)."""
        ...

    async def open(
        self,
        *,
        create: bool = True,
        migrate: bool = True,
        lock: bool = True,
        replace_lost: bool = False,
        catalogue_only: bool = False,
    ) -> None:
        """Connect. With `lock`, take the broker's lock (StoreLocked if another running broker
        or batonctl holds it); without it, only reads (stats, backup) are allowed. An empty store
        gets the schema when `create` is true; an older schema is migrated when `migrate` is true
        (as a broker does at start) and left for `upgrade` otherwise. SchemaTooNew when the
        schema is newer than SCHEMA_VERSION; StoreUnavailable / StoreCorrupt otherwise.

        A store known to have existed whose data is gone (the SQLite store's file missing or
        empty: see `batonmq.store.sqlite`) is StoreCorrupt, never silently started anew, unless
        `replace_lost` (with `create`) says to make a new one there: `batonctl db create` and
        `db restore`, which an operator runs to do just that.

        `catalogue_only`: the opener writes users, virtual hosts and permissions only, which a
        running broker's workers share with it (`batonctl user`, `vhost`, `permissions`): on
        PostgreSQL the leases of the broker's workers do not refuse its lock then
        (`batonmq.store.pgfamily`)."""
        ...

    @property
    def schema_version(self) -> int:
        """The schema version found (0 before `open`, or in an empty store)."""
        ...

    async def recover(self) -> Recovery:
        """Remove transient entries and orphaned messages; return durable objects, each durable
        queue's backlog, and a fresh message-id block."""
        ...

    async def commit(self, batch: WriteBatch) -> None:
        """Apply `batch` in one transaction; durable on return when `sync` is on. Raises
        StoreError (and applies nothing) when the write fails (a full disk, a lost server)."""
        ...

    async def definitions_of(self, broker_ids: Sequence[str]) -> dict[str, StoredDefinitions]:
        """The exchanges, queues and bindings that the identities `broker_ids` (other workers'
        of this broker) hold, by identity, read as their own recoveries read them: a spread
        virtual host's home needs the other workers' queues to bring its bindings to them back."""
        ...

    async def read_entries(
        self, vhost: str, queue: str, after_sequence: int, limit: int, priority: int | None = None
    ) -> PageRead:
        """Up to `limit` entries of the queue with sequence > `after_sequence`, in order; only
        those of priority level `priority` unless it is None. An entry whose message fails its
        checksum comes back as a QuarantinedEntry, having been moved to the quarantine and
        logged (`batonmq.store.integrity`)."""
        ...

    async def users(self) -> list[StoredUser]:
        """Every user, by name."""
        ...

    async def vhosts(self) -> list[str]:
        """Every virtual host created, by name."""
        ...

    async def permissions(self) -> list[UserPermission]:
        """Every user's permissions in every virtual host, by user then virtual host."""
        ...

    async def stats(self) -> StoreStats: ...

    async def used_bytes(self) -> int:
        """The bytes the store uses now, for the disk quota (Qpid manual §1.5.1.2.2, which is
        "best effort"): it grows as messages are written and falls as they are deleted, without
        any compaction, so that a quota that blocked producers releases them once consumers
        have drained the store. Cheap enough to be called every second; what each store counts
        is in its module."""
        ...

    async def backup(self, directory: Path) -> None:
        """Write a consistent snapshot to `directory` (created; must be empty), while the broker
        may be running."""
        ...

    async def restore(self, directory: Path) -> None:
        """Replace this store's contents with the snapshot in `directory` (the broker must not be
        running)."""
        ...

    async def upgrade(self) -> tuple[int, int]:
        """Migrate the schema to SCHEMA_VERSION; returns (from, to)."""
        ...

    async def connection_settings(self) -> dict[str, str]:
        """How far a commit reaches before it returns, as the database says (SQLite's journal
        mode and synchronous level; PostgreSQL's synchronous_commit and standbys)."""
        ...

    async def close(self) -> None:
        """Release the lock and the connection; safe to call twice."""
        ...

    def on_fenced(self, handler: Callable[[StoreFenced], None]) -> None:
        """Have `handler` called, once, when the store finds that another broker has taken it
        over (StoreFenced): from then on every write fails, and the broker must stop."""
        ...


def message_id_base(block: object, location: str) -> int:
    """The first message id of block number `block`, as read from the store's block counter;
    StoreCorrupt for a counter that is no block (ids are signed 64-bit integers in the
    database, so a block past them is no block)."""
    if not isinstance(block, int) or not 0 < block < (1 << 63) // MESSAGE_ID_BLOCK:
        raise StoreCorrupt(f"{location}: bad message id block counter {block!r}")
    return block * MESSAGE_ID_BLOCK
