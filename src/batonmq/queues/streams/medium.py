"""What a stream's log (`log.py`) needs from where its segments are kept: the one interface that
segment files (`files.py`) and the PostgreSQL store's tables (`batonmq.store.streamtables`)
implement, so that everything else about a log (offsets, chunk decoding, Bloom filters,
retention decisions, producers' ids) is written once, in the log.

A segment is named by its first offset. It holds whole chunks (`chunk.py`), appended in offset
order, and begins with the snapshot of producers' ids it was created with (`dedup.py`; none for
a stream's first segment). A medium keeps nothing in memory that the log needs: the log indexes
the chunks' headers the medium lists when it opens, and asks for payloads by the chunks it
indexed.

Every call blocks (on the disk, or on the database) and runs on the stream writer's thread; a
call that fails raises (OSError, or the store's StoreError) and leaves what was stored as it was:
an append is durable when it returns, or absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from batonmq.queues.streams.chunk import ChunkHeader


class StreamCorrupt(Exception):
    """What is stored is not what the log wrote; the message names the segment."""


@dataclass(frozen=True, slots=True)
class StoredChunk:
    #: The first offset of the segment that holds it.
    segment: int
    #: Where the medium finds it again (a byte position in a file, a key in a table).
    locator: int
    header: ChunkHeader


@dataclass(slots=True)
class StoredSegment:
    first_offset: int
    #: The bytes the segment takes in its medium.
    size: int
    #: Its chunks, in offset order.
    chunks: list[StoredChunk] = field(default_factory=list)


class StreamMedium(Protocol):
    def open(self) -> list[StoredSegment]:
        """The segments stored, oldest first, each with the headers of its chunks. A medium in
        which a crash can leave a torn append (a file) drops it here: it was never confirmed."""
        ...

    def where(self, segment: int) -> str:
        """The segment, named for an operator (its file, or its stream in the store)."""
        ...

    def create(self, first_offset: int, snapshot: bytes | None) -> int:
        """Store a new, empty segment that begins at `first_offset` with `snapshot` (the
        producers' ids), durably; the bytes it takes. Appends go to it from now on."""
        ...

    def append(self, segment: int, header: ChunkHeader, chunk: bytes) -> StoredChunk:
        """Store the encoded `chunk` (whose header is `header`) at the end of `segment`, the
        newest, durably; on failure nothing of it is kept."""
        ...

    def payloads(self, chunks: Sequence[StoredChunk]) -> list[bytes]:
        """The payloads (what follows each header) of `chunks`, in their order."""
        ...

    def snapshot(self, segment: int) -> bytes | None:
        """The snapshot `segment` was created with."""
        ...

    def drop(self, segments: Sequence[int], until: int) -> None:
        """Remove the oldest `segments` whole: every chunk below offset `until` is in them, and
        the segment that begins at `until` stays."""
        ...

    def close(self) -> None:
        """Release what the medium holds open; what is stored stays."""
        ...

    def destroy(self) -> None:
        """The stream is deleted: remove everything stored for it."""
        ...
