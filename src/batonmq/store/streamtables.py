"""Stream queues kept in the PostgreSQL store: the tables `stream_segments` and `stream_chunks`
(schema version 13) as a medium of stream logs (`batonmq.queues.streams.medium`).

A segment is a row of `stream_segments` (its first offset and the snapshot of producers' ids it
began with); a chunk is a row of `stream_chunks`, its bytes encoded as in a segment file, under
its first offset, with its segment and the time it was written. Every row carries the id of the
broker that owns it, as every owned row of the store, so that a takeover moves a failed member's
streams to the survivor with its queues (`batonmq.store.takeover`).

Durability: each append, segment creation, retention and deletion is one transaction, which
first checks the broker's fencing epoch as the store's commits do (`SELECT ... FOR SHARE` on its
record): a broker taken over writes nothing more to its streams, and the store learns that it is
fenced. An append returns once its transaction committed with the store's synchronous_commit,
so a publisher confirm sent after it names a chunk the database keeps. A transaction cannot be
torn: opening finds whole chunks or none.

The stream writer's thread (`batonmq.queues.streams.storage`) makes every call: it runs them on
an event loop of its own, over one session of its own outside the store's pool (connected again
after a failure), so that the broker's event loop is never blocked and the store's writes never
wait for a stream's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeAlias, TypeVar

import asyncpg

from batonmq.queues.streams.chunk import HEADER_SIZE, ChunkHeader, decode_header
from batonmq.queues.streams.medium import StoredChunk, StoredSegment
from batonmq.store.base import StoreFenced
from batonmq.store.pgerrors import DATABASE_ERRORS
from batonmq.store.pgsession import close
from batonmq.store.postgres import PostgresStore

_Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record]"
_T = TypeVar("_T")

_STREAM: Final = "broker_id = $1 AND vhost = $2 AND queue = $3"
#: Statements, "{s}" standing for the quoted schema; $1, $2, $3 name the stream.
SQL: Final = {
    "epoch": "SELECT epoch FROM {s}.brokers WHERE broker_id = $1 FOR SHARE",
    "segments": f"SELECT first_offset FROM {{s}}.stream_segments WHERE {_STREAM}"
    " ORDER BY first_offset",
    # The headers only: payloads are read when a consumer reads them.
    "chunks": f"SELECT segment, first_offset, substring(chunk FROM 1 FOR {HEADER_SIZE}),"
    f" octet_length(chunk) FROM {{s}}.stream_chunks WHERE {_STREAM} ORDER BY first_offset",
    "snapshot": f"SELECT producers FROM {{s}}.stream_segments WHERE {_STREAM}"
    " AND first_offset = $4",
    "create": "INSERT INTO {s}.stream_segments (broker_id, vhost, queue, first_offset,"
    " producers) VALUES ($1, $2, $3, $4, $5)",
    "append": "INSERT INTO {s}.stream_chunks (broker_id, vhost, queue, segment, first_offset,"
    " written_at, chunk) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    "payloads": f"SELECT first_offset, substring(chunk FROM {HEADER_SIZE + 1})"
    f" FROM {{s}}.stream_chunks WHERE {_STREAM} AND first_offset = ANY($4::bigint[])",
    **{
        f"drop_{table}": f"DELETE FROM {{s}}.stream_{table} WHERE {_STREAM} AND first_offset < $4"
        for table in ("chunks", "segments")
    },
    **{
        f"destroy_{table}": f"DELETE FROM {{s}}.stream_{table} WHERE {_STREAM}"
        for table in ("chunks", "segments")
    },
}


class PostgresStreamTables:
    """The streams of the broker whose store is `store` (`StreamTables`)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._sql = {name: text.replace("{s}", f'"{store.schema}"') for name, text in SQL.items()}
        #: The writer thread's event loop and session, made on its first call.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connection: _Connection | None = None
        #: The broker's event loop, told when a write finds the broker fenced.
        self._broker_loop: asyncio.AbstractEventLoop | None = None

    @property
    def broker_id(self) -> str:
        return self._store.broker_id

    def medium(self, vhost: str, queue: str) -> TableMedium:
        """On the broker's event loop, if it runs (to tell it of fencing)."""
        with contextlib.suppress(RuntimeError):
            self._broker_loop = asyncio.get_running_loop()
        return TableMedium(self, vhost, queue)

    def where(self, vhost: str, queue: str) -> str:
        return f"stream '{queue}' in vhost '{vhost}' at {self._store.location}"

    def read(self, name: str, *arguments: object) -> list[asyncpg.Record]:
        """Run query `name` (on the writer thread)."""
        return self._run(lambda connection: connection.fetch(self._sql[name], *arguments))

    def write(self, steps: Sequence[tuple[str, Sequence[object]]]) -> None:
        """Run the statements of `steps` (name, arguments) in one transaction, once the
        broker's epoch is found still its own (on the writer thread)."""

        async def work(connection: _Connection) -> None:
            async with connection.transaction():
                store = self._store
                epoch = await connection.fetchval(self._sql["epoch"], store.broker_id)
                if epoch != store.epoch:
                    why = f"its epoch {store.epoch} is now {epoch}"
                    if self._broker_loop is not None:
                        # A loop already closed (the broker stopping) has nothing to stop.
                        with contextlib.suppress(RuntimeError):
                            self._broker_loop.call_soon_threadsafe(store.fenced_elsewhere, why)
                    raise StoreFenced(
                        f"broker {store.broker_id!r} no longer owns its store at "
                        f"{store.location}: another broker has taken it over ({why})"
                    )
                for name, arguments in steps:
                    await connection.execute(self._sql[name], *arguments)

        self._run(work)

    def _run(self, work: Callable[[_Connection], Awaitable[_T]]) -> _T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self._call(work))

    async def _call(self, work: Callable[[_Connection], Awaitable[_T]]) -> _T:
        connection = self._connection
        if connection is None or connection.is_closed():
            connection = self._connection = await self._store.session()
        try:
            return await work(connection)
        except DATABASE_ERRORS as error:
            # The session may be what failed: the next call connects again.
            self._connection = None
            connection.terminate()
            raise self._store.failure("a stream's write or read failed on", error) from error

    def close(self) -> None:
        loop, connection = self._loop, self._connection
        self._loop = self._connection = None
        if loop is None:
            return
        try:
            if connection is not None:
                loop.run_until_complete(close(connection))
        finally:
            loop.close()


class TableMedium:
    """One stream's segments in the tables (`StreamMedium`)."""

    def __init__(self, tables: PostgresStreamTables, vhost: str, queue: str) -> None:
        self._tables = tables
        self._key = (tables.broker_id, vhost, queue)
        self._vhost, self._queue = vhost, queue

    def where(self, segment: int) -> str:
        return f"{self._tables.where(self._vhost, self._queue)}, segment {segment}"

    def open(self) -> list[StoredSegment]:
        segments = {
            first: StoredSegment(first, 0) for (first,) in self._tables.read("segments", *self._key)
        }
        for segment, first_offset, header, size in self._tables.read("chunks", *self._key):
            stored = segments.get(segment)
            if stored is None:
                # A chunk of no segment: the write that made them both is one transaction.
                stored = segments[segment] = StoredSegment(segment, 0)
            stored.chunks.append(StoredChunk(segment, first_offset, decode_header(header)))
            stored.size += size
        return [segments[first] for first in sorted(segments)]

    def create(self, first_offset: int, snapshot: bytes | None) -> int:
        self._tables.write([("create", (*self._key, first_offset, snapshot))])
        return 0

    def append(self, segment: int, header: ChunkHeader, chunk: bytes) -> StoredChunk:
        first = header.first_offset
        self._tables.write([("append", (*self._key, segment, first, header.timestamp, chunk))])
        return StoredChunk(segment, first, header)

    def payloads(self, chunks: Sequence[StoredChunk]) -> list[bytes]:
        if not chunks:
            return []
        rows = self._tables.read("payloads", *self._key, [chunk.locator for chunk in chunks])
        found = {first: bytes(payload) for first, payload in rows}
        return [found.get(chunk.locator, b"") for chunk in chunks]

    def snapshot(self, segment: int) -> bytes | None:
        rows = self._tables.read("snapshot", *self._key, segment)
        return None if not rows or rows[0][0] is None else bytes(rows[0][0])

    def drop(self, segments: Sequence[int], until: int) -> None:
        del segments  # every row below `until` is theirs
        self._tables.write(
            [("drop_chunks", (*self._key, until)), ("drop_segments", (*self._key, until))]
        )

    def close(self) -> None:
        """The session is the broker's streams', closed with them."""

    def destroy(self) -> None:
        self._tables.write([("destroy_chunks", self._key), ("destroy_segments", self._key)])
