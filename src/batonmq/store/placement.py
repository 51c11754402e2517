"""Which of a broker's store identities owns each virtual host's rows in its SQLite store, and
moving them there when the broker starts with another number of worker processes.

A broker of one process writes its rows as `broker.name`; with `broker.workers` above 1, worker
k writes as "<broker.name>w<k>" (`worker_id`), the owner of the virtual hosts that the worker
map gives it (`batonmq.server.placement`). The SQLite store is one file that the workers
share, each with an append log of its own. Before the broker's processes start, with the
store's lock held and every append log replayed, each virtual host's exchanges, queues,
bindings, entries, quarantined entries and messages become its owner's now (`place_rows`), in
one transaction, and its stream directories move to its owner's (`place_streams`). So the
number of workers can change between two runs, clean or not: nothing moves when it did not
change.

A spread virtual host (`Placement.spread`) is placed per queue: the rows of each of its queues
(its queue, entries, quarantined entries, stream, and the messages its entries hold) are the
queue's owner's (`Placement.queue_owner_id`, the server's queue map), its exchanges and bindings
(to queues too) its owner's, its home. Whether a virtual host is spread may change between two
runs too: the rows move by the same rules. A message is one row per owner of entries that hold
it. Message ids are the `messages` table's key, unique across the store's identities, so when
the entries of one message come to have several owners (a message routed to queues of two
owners), the first owner in order keeps the row, unless the row's owner still holds it, and
every other gets a copy under a new id (from a block of ids that the placement takes, as a
broker's start does), its entries pointing to it. Copies stay apart once made: a later
placement that brings them under one owner keeps both rows.

Before rows leave an identity, that identity's recovery is done for it (what its own start
would do): after an unclean stop its entries count as delivered, and its transient entries and
the messages no entry holds go.

A stream's files live under its owner's directory (`streams_root`): `streams` in the data
directory for one process, `worker-<k>/streams` for worker k. A directory moves by a rename, after
the rows' transaction: a crash between the two leaves it where it was, and the next start moves
it (every start looks for a virtual host's directories under every root).

The statements are written once, in the plan's neutral form (`placement_sql`), for both stores:
PostgreSQL's family (`batonmq.store.pgfamily`) places its rows alike.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote

from batonmq.store.base import message_id_base
from batonmq.store.dialect import SQLITE

if TYPE_CHECKING:
    import sqlite3

#: The tables whose rows carry their owner and their virtual host (both stores) are those of a
#: virtual host's topology, whose rows a spread one's home keeps (its owner, `owner_of`) ...
TOPOLOGY_TABLES: Final = ("exchanges", "bindings")
#: ... and those whose rows belong to one queue, which go to the queue's owner in a spread one.
QUEUE_TABLES: Final = ("queues", "entries", "quarantined_messages")


def held_sql(queue_tables: Sequence[str], *, per_queue: bool) -> str:
    """The rows that may move, as (owner, virtual host, queue): the queue is None for a
    virtual host's topology, and for every row unless `per_queue` (when a virtual host is
    spread: a start with none reads no queue's name). Entries go with their queue's row (none
    without one is kept)."""
    return " UNION ".join(
        [
            *(
                f"SELECT broker_id, vhost, CAST(NULL AS TEXT) FROM {{s}}.{table}"
                for table in TOPOLOGY_TABLES
            ),
            *(
                f"SELECT broker_id, vhost,"
                f" {_queue_column(table) if per_queue else 'CAST(NULL AS TEXT)'} FROM {{s}}.{table}"
                for table in queue_tables
                if table != "entries"
            ),
        ]
    )


def move_sql(table: str, *, per_queue: bool) -> str:
    """The statement that gives a virtual host's rows of `table` ($3), or one queue's ($4),
    from one owner ($2) to another ($1)."""
    sql = f"UPDATE {{s}}.{table} SET broker_id = $1 WHERE broker_id = $2 AND vhost = $3"
    return f"{sql} AND {_queue_column(table)} = $4" if per_queue else sql


def _queue_column(table: str) -> str:
    return "name" if table == "queues" else "queue"


#: The statements that give each message a row of its entries' owner once they moved (in the
#: plan's neutral form, `batonmq.store.dialect`; both stores'). Message ids are the `messages`
#: table's key (unique across every identity, `batonmq.store.base`), so a message whose entries
#: now have two owners or more (a spread virtual host's message routed to queues of two) is
#: copied under a new id, from a block of ids taken for the placement, for each owner but one.
MESSAGE_SQL: Final = {
    # The row goes to an owner of entries of virtual host $2 that hold it when its own owner
    # holds it no more (a message is routed within one virtual host).
    "place_messages": "UPDATE {s}.messages AS m SET broker_id = $1 WHERE m.broker_id <> $1"
    " AND m.id IN (SELECT message_id FROM {s}.entries WHERE broker_id = $1 AND vhost = $2)"
    " AND NOT EXISTS (SELECT 1 FROM {s}.entries AS e"
    " WHERE e.broker_id = m.broker_id AND e.message_id = m.id)",
    # The messages the entries of $1 in virtual host $2 hold whose row is another owner's.
    "place_copies": "SELECT DISTINCT e.message_id FROM {s}.entries AS e"
    " JOIN {s}.messages AS m ON m.id = e.message_id"
    " WHERE e.broker_id = $1 AND e.vhost = $2 AND m.broker_id <> $1 ORDER BY e.message_id",
    "place_copy": "INSERT INTO {s}.messages"
    " (broker_id, id, exchange, routing_key, header_payload, body, checksum)"
    " SELECT $1, $2, exchange, routing_key, header_payload, body, checksum"
    " FROM {s}.messages WHERE id = $3",
    "place_repoint": "UPDATE {s}.entries SET message_id = $2"
    " WHERE broker_id = $1 AND message_id = $3",
}


def placement_sql(queue_tables: Sequence[str]) -> dict[str, str]:
    """A store's placement statements, neutral (`batonmq.store.dialect`), for its queue tables:
    `QUEUE_TABLES` and those of its own (PostgreSQL's stream rows)."""
    return {
        "placed_held": held_sql(queue_tables, per_queue=False),
        "placed_queues_held": held_sql(queue_tables, per_queue=True),
        **{
            f"place_{table}": move_sql(table, per_queue=False)
            for table in (*TOPOLOGY_TABLES, *queue_tables)
        },
        **{f"place_{table}_queue": move_sql(table, per_queue=True) for table in queue_tables},
        **MESSAGE_SQL,
    }


_SQL: Final = {name: SQLITE.render(text) for name, text in placement_sql(QUEUE_TABLES).items()}
_WORKER_SUFFIX: Final = re.compile(r"w(\d+)")


def worker_id(broker: str, worker: int) -> str:
    """The store identity of worker `worker` (from 0) of broker `broker`."""
    return f"{broker}w{worker}"


def worker_index(broker: str, broker_id: str) -> int | None:
    """The worker whose identity `broker_id` is among broker `broker`'s (None: not a worker's)."""
    if not broker_id.startswith(broker):
        return None
    found = _WORKER_SUFFIX.fullmatch(broker_id, len(broker))
    return None if found is None else int(found.group(1))


def is_spread(vhost: str, spread: Collection[str], workers: int) -> bool:
    """Whether `vhost` is spread over `workers` workers by `broker.spread_vhosts` (`spread`,
    "*" for every virtual host): never with one."""
    return workers > 1 and ("*" in spread or vhost in spread)


def streams_root(data_dir: Path, worker: int | None) -> Path:
    """Where the streams of a broker's one process (`worker` None), or of one worker, live."""
    return data_dir / "streams" if worker is None else data_dir / f"worker-{worker}" / "streams"


@dataclass(frozen=True, slots=True)
class Placement:
    """The layout a broker starts with: its name, its number of workers (1: one process), and
    the worker that owns a virtual host among them (`owner`: the server's worker map)."""

    broker: str
    workers: int
    owner: Callable[[str], int]
    data_dir: Path
    #: The virtual hosts whose queues are spread over the workers ("*": every one): each
    #: queue's rows are its owner's (`queue_owner`), the topology stays with the home (`owner`).
    spread: frozenset[str] = frozenset()
    #: The worker that owns a queue of a spread virtual host (the server's queue map).
    queue_owner: Callable[[str, str], int] | None = None

    def __post_init__(self) -> None:
        if self.spread and self.queue_owner is None:
            raise ValueError("a placement with spread virtual hosts needs their queue owner")

    def owner_id(self, vhost: str) -> str:
        return self.broker if self.workers == 1 else worker_id(self.broker, self.owner(vhost))

    def is_spread(self, vhost: str) -> bool:
        return is_spread(vhost, self.spread, self.workers)

    @property
    def held(self) -> str:
        """The name of the statement of `placement_sql` that reads the rows that may move."""
        return "placed_queues_held" if self.spread and self.workers > 1 else "placed_held"

    def queue_owner_id(self, vhost: str, queue: str) -> str:
        """The identity that owns queue `queue`'s rows: its owner's in a spread virtual host,
        else the virtual host's owner's."""
        if self.queue_owner is None or not self.is_spread(vhost):
            return self.owner_id(vhost)
        return worker_id(self.broker, self.queue_owner(vhost, queue))

    def is_ours(self, broker_id: str) -> bool:
        return broker_id == self.broker or worker_index(self.broker, broker_id) is not None

    def root_of(self, broker_id: str) -> Path:
        return streams_root(self.data_dir, worker_index(self.broker, broker_id))


@dataclass(frozen=True, slots=True)
class Moved:
    """Rows of virtual host `vhost` that went from identity `source` to `owner`."""

    vhost: str
    source: str
    owner: str
    #: The queue whose rows moved, of a spread virtual host; None: every row of the virtual
    #: host, or a spread one's topology (exchanges and bindings).
    queue: str | None = None
    spread: bool = False

    def statements(self, queue_tables: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """The names of the statements of `placement_sql(queue_tables)` that move these rows,
        each with its arguments."""
        if self.queue is not None:
            arguments = (self.owner, self.source, self.vhost, self.queue)
            return [(f"place_{table}_queue", arguments) for table in queue_tables]
        tables = TOPOLOGY_TABLES if self.spread else (*TOPOLOGY_TABLES, *queue_tables)
        return [(f"place_{table}", (self.owner, self.source, self.vhost)) for table in tables]


def planned_moves(held: Iterable[tuple[str, str, str | None]], placement: Placement) -> list[Moved]:
    """What moves of the rows `held` (the broker's identities' rows, from `Placement.held`): a
    virtual host's rows together, but a spread one's queues each on its own."""
    moves = set()
    for source, vhost, queue in held:
        if placement.is_spread(vhost) and queue is not None:
            move = Moved(vhost, source, placement.queue_owner_id(vhost, queue), queue, True)
        else:
            move = Moved(vhost, source, placement.owner_id(vhost), None, placement.is_spread(vhost))
        if move.owner != source:
            moves.add(move)
    return sorted(
        moves, key=lambda move: (move.vhost, move.source, move.queue is not None, move.queue or "")
    )


def message_owners(moves: Iterable[Moved]) -> list[tuple[str, str]]:
    """The (owner, virtual host) pairs whose entries' messages are placed ("place_messages",
    "place_copies"), in the order that decides which owner keeps a message's first row."""
    return sorted({(move.owner, move.vhost) for move in moves})


def place_rows(
    conn: sqlite3.Connection,
    placement: Placement,
    recovery: Mapping[str, str],
    unclean: Collection[str],
) -> list[Moved]:
    """Inside a write transaction: give every virtual host's rows, or every queue's of a spread
    one, to its owner (see the module docstring). `recovery`: the plan's statements
    "mark_delivered", "discard_entries", "discard_messages" and "next_block", rendered;
    `unclean`: the identities that did not stop cleanly. Returns what moved."""
    moves = planned_moves(
        (row for row in conn.execute(_SQL[placement.held]) if placement.is_ours(row[0])), placement
    )
    for source in sorted({move.source for move in moves}):
        if source in unclean:
            conn.execute(recovery["mark_delivered"], (source,))
        conn.execute(recovery["discard_entries"], (source,))
        conn.execute(recovery["discard_messages"], (source,))
    for move in moves:
        for name, arguments in move.statements(QUEUE_TABLES):
            conn.execute(_SQL[name], arguments)
    ids: Iterator[int] | None = None
    for owner, vhost in message_owners(moves):
        conn.execute(_SQL["place_messages"], (owner, vhost))
        held = [message_id for (message_id,) in conn.execute(_SQL["place_copies"], (owner, vhost))]
        if not held:
            continue
        if ids is None:
            block = conn.execute(recovery["next_block"]).fetchone()
            ids = itertools.count(message_id_base(block[0] if block else None, "the store"))
        copies = [(owner, next(ids), message_id) for message_id in held]
        conn.executemany(_SQL["place_copy"], copies)
        conn.executemany(_SQL["place_repoint"], copies)
    return moves


def place_streams(placement: Placement) -> list[Path]:
    """Move every stream directory found under a root of the broker's that is not its owner's
    (`Placement.queue_owner_id`: its virtual host's, or its own in a spread one) to the owner's
    (a stream already there stays, and the stray with it); returns the directories moved,
    where they are now."""
    roots = [
        streams_root(placement.data_dir, None),
        *sorted(placement.data_dir.glob("worker-*/streams")),
    ]
    moved = []
    for root in roots:
        for vhost_directory in sorted(root.glob("*")):
            if not vhost_directory.is_dir():
                continue
            vhost, left = unquote(vhost_directory.name), False
            for stream in sorted(vhost_directory.iterdir()):
                owner = placement.queue_owner_id(vhost, unquote(stream.name))
                target = placement.root_of(owner) / vhost_directory.name
                if target != vhost_directory and not (target / stream.name).exists():
                    target.mkdir(parents=True, exist_ok=True)
                    stream.rename(target / stream.name)
                    moved.append(target / stream.name)
                    left = True
            if left and not any(vhost_directory.iterdir()):
                vhost_directory.rmdir()
    return moved
