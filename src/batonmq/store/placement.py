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

Before rows leave an identity, that identity's recovery is done for it (what its own start
would do): after an unclean stop its entries count as delivered, and its transient entries and
the messages no entry holds go.

A stream's files live under its owner's directory (`streams_root`): `streams` in the data
directory for one process, `worker-<k>/streams` for worker k. A directory moves by a rename, after
the rows' transaction: a crash between the two leaves it where it was, and the next start moves
it (every start looks for a virtual host's directories under every root).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote

if TYPE_CHECKING:
    import sqlite3

#: The tables whose rows carry their owner and their virtual host (both stores).
VHOST_TABLES: Final = ("exchanges", "queues", "bindings", "entries", "quarantined_messages")
_HELD: Final = " UNION ".join(
    f"SELECT broker_id, vhost FROM {table}" for table in VHOST_TABLES if table != "entries"
)
#: A message moves with the entries that hold it (a message is routed within one virtual host).
_MOVE_MESSAGES: Final = (
    "UPDATE messages SET broker_id = ?1 WHERE broker_id = ?2 AND id IN"
    " (SELECT message_id FROM entries WHERE broker_id = ?1 AND vhost = ?3)"
)
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

    def owner_id(self, vhost: str) -> str:
        return self.broker if self.workers == 1 else worker_id(self.broker, self.owner(vhost))

    def is_ours(self, broker_id: str) -> bool:
        return broker_id == self.broker or worker_index(self.broker, broker_id) is not None

    def root_of(self, broker_id: str) -> Path:
        return streams_root(self.data_dir, worker_index(self.broker, broker_id))


@dataclass(frozen=True, slots=True)
class Moved:
    vhost: str
    source: str
    owner: str


def place_rows(
    conn: sqlite3.Connection,
    placement: Placement,
    recovery: Mapping[str, str],
    unclean: Collection[str],
) -> list[Moved]:
    """Inside a write transaction: give every virtual host's rows to its owner (see the module
    docstring). `recovery`: the plan's statements "mark_delivered", "discard_entries" and
    "discard_messages", rendered; `unclean`: the identities that did not stop cleanly. Returns
    what moved."""
    moves = [
        Moved(vhost, source, placement.owner_id(vhost))
        for source, vhost in conn.execute(_HELD)
        if placement.is_ours(source) and placement.owner_id(vhost) != source
    ]
    for source in sorted({move.source for move in moves}):
        if source in unclean:
            conn.execute(recovery["mark_delivered"], (source,))
        conn.execute(recovery["discard_entries"], (source,))
        conn.execute(recovery["discard_messages"], (source,))
    for move in moves:
        for table in VHOST_TABLES:
            conn.execute(
                f"UPDATE {table} SET broker_id = ? WHERE broker_id = ? AND vhost = ?",
                (move.owner, move.source, move.vhost),
            )
        conn.execute(_MOVE_MESSAGES, (move.owner, move.source, move.vhost))
    return moves


def place_streams(placement: Placement) -> list[Path]:
    """Move every stream directory found under a root of the broker's that is not its virtual
    host's owner's to the owner's (a stream already there stays, and the stray with it);
    returns the directories moved, where they are now."""
    roots = [
        streams_root(placement.data_dir, None),
        *sorted(placement.data_dir.glob("worker-*/streams")),
    ]
    moved = []
    for root in roots:
        for vhost_directory in sorted(root.glob("*")):
            if not vhost_directory.is_dir():
                continue
            owner_root = placement.root_of(placement.owner_id(unquote(vhost_directory.name)))
            if owner_root == root:
                continue
            target = owner_root / vhost_directory.name
            for stream in sorted(vhost_directory.iterdir()):
                if not (target / stream.name).exists():
                    target.mkdir(parents=True, exist_ok=True)
                    stream.rename(target / stream.name)
                    moved.append(target / stream.name)
            if not any(vhost_directory.iterdir()):
                vhost_directory.rmdir()
    return moved
