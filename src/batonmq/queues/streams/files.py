"""A stream's segments as files in a directory of its own (`medium.py`'s interface).

Layout: ``<first offset, 20 digits>.segment`` files, each a 16-byte file header then chunks
(`chunk.py`) back to back; beside each segment but the first, ``<first offset>.producers``,
its snapshot of producers' ids, written (fsynced, then renamed into place) before the segment
file is created, the directory fsynced after both.

Durability: with `sync`, an append is flushed to the disk (fdatasync) before it returns, so a
publisher confirm sent after it names a message that survives a crash at its offset. A crash
mid-append leaves a torn chunk at the end of the newest segment: opening drops it (it was never
confirmed). A bad chunk anywhere else is corruption and stops the opening with an error naming
the file.

Deleting: the directory is renamed to a marked name (`MARKED_SUFFIX`) and the rename made
durable before its files are removed, so that a crash mid-removal leaves no half-removed
directory under a stream's name; at start (`remove_leftovers`), marked directories go, and so
do those of streams the store no longer holds (a crash after a deletion was committed and
before the writer thread began removing its directory), so that a stream declared again under
the name starts empty.

Reading: segments are read front to back, so each is opened for sequential access
(posix_fadvise SEQUENTIAL: a larger kernel read-ahead), and each read asks the kernel to read the
next `READ_AHEAD_BYTES` of its segment (WILLNEED) before they are wanted: the disk reads them
while the broker decodes and sends what it has, instead of waiting for each read in turn.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Final

from batonmq.fsync import fsync_directory
from batonmq.queues.streams.chunk import (
    HEADER_SIZE,
    ChunkError,
    ChunkHeader,
    decode_header,
    decode_records,
)
from batonmq.queues.streams.medium import StoredChunk, StoredSegment, StreamCorrupt

log = logging.getLogger(__name__)

SUFFIX: Final = ".segment"
#: The suffix of a segment's snapshot of producers' last ids.
SNAPSHOT_SUFFIX: Final = ".producers"
FILE_HEADER: Final = b"BATONMQ-STREAM\x00\x01"
#: What a deleted stream's directory is renamed to the name of, with this after it: "%-" is in
#: no %-encoded name, so no stream's directory ends so.
MARKED_SUFFIX: Final = "%-deleted"
#: How far past a read the kernel is asked to have a segment read (about 20 ms of a disk that
#: reads 800 MB/s).
READ_AHEAD_BYTES: Final = 16 << 20


class FileMedium:
    def __init__(self, directory: Path, *, sync: bool = True) -> None:
        self.directory = directory
        self.sync = sync
        #: Each open segment's file descriptor, by first offset.
        self._fds: dict[int, int] = {}
        #: The size of the newest segment (where the next append goes).
        self._end = 0
        #: How far into each segment the kernel was asked to read ahead, by first offset.
        self._read_ahead: dict[int, int] = {}

    def where(self, segment: int) -> str:
        return str(self._path(segment))

    # --- opening --------------------------------------------------------------------------

    def open(self) -> list[StoredSegment]:
        self.directory.mkdir(parents=True, exist_ok=True)
        firsts = sorted(
            int(path.stem) for path in self.directory.glob(f"*{SUFFIX}") if path.stem.isdigit()
        )
        segments: list[StoredSegment] = []
        expected: int | None = None
        for number, first_offset in enumerate(firsts):
            segment = self._load(first_offset, expected, newest=number == len(firsts) - 1)
            segments.append(segment)
            if segment.chunks:
                expected = segment.chunks[-1].header.next_offset
        return segments

    def _load(self, first_offset: int, expected: int | None, *, newest: bool) -> StoredSegment:
        path = self._path(first_offset)
        fd = os.open(path, os.O_RDWR if newest else os.O_RDONLY)
        self._fds[first_offset] = fd
        _advise(fd, 0, 0, _SEQUENTIAL)
        segment = StoredSegment(first_offset, os.fstat(fd).st_size)
        if newest:
            self._end = segment.size
        if os.pread(fd, len(FILE_HEADER), 0) != FILE_HEADER:
            if newest and segment.size < len(FILE_HEADER):
                # Created by a crash-interrupted roll: nothing was ever appended to it.
                os.ftruncate(fd, 0)
                _write_all(fd, FILE_HEADER, 0)
                os.fsync(fd)
                segment.size = self._end = len(FILE_HEADER)
                return segment
            raise StreamCorrupt(f"{path}: not a BatonMQ stream segment")
        position = len(FILE_HEADER)
        expected = first_offset if expected is None else expected
        while position < segment.size:
            try:
                header = self._scan(fd, position, segment.size, expected)
            except ChunkError as error:
                if not (newest and _torn(fd, position, segment.size)):
                    raise StreamCorrupt(f"{path}: at byte {position}: {error}") from None
                self._cut_torn(segment, position)
                break
            segment.chunks.append(StoredChunk(first_offset, position, header))
            expected = header.next_offset
            position += header.size
        if newest and segment.chunks and not self._intact(segment.chunks[-1]):
            self._cut_torn(segment, segment.chunks.pop().locator)
        return segment

    @staticmethod
    def _scan(fd: int, position: int, size: int, expected: int) -> ChunkHeader:
        """The header of the chunk at `position`; ChunkError if it is not where the last chunk
        ended, or runs past the end of the file. Payloads are checked when they are read."""
        header = decode_header(os.pread(fd, HEADER_SIZE, position))
        if header.first_offset != expected:
            raise ChunkError(f"chunk starts at offset {header.first_offset}, expected {expected}")
        if position + header.size > size:
            raise ChunkError("chunk runs past the end of the file")
        return header

    def _intact(self, chunk: StoredChunk) -> bool:
        """Whether the last chunk's payload passes its CRC (an append torn after its header)."""
        try:
            list(decode_records(chunk.header, self.payloads([chunk])[0]))
        except ChunkError:
            return False
        return True

    def _cut_torn(self, segment: StoredSegment, position: int) -> None:
        log.warning(
            "stream segment ends in a torn chunk; dropping it (it was never confirmed)",
            extra={"segment": self.where(segment.first_offset), "at_byte": position},
        )
        fd = self._fds[segment.first_offset]
        os.ftruncate(fd, position)
        os.fsync(fd)
        segment.size = self._end = position

    # --- writing --------------------------------------------------------------------------

    def create(self, first_offset: int, snapshot: bytes | None) -> int:
        if self._fds:
            os.fsync(self._fds[max(self._fds)])  # the segment it follows is whole on the disk
        if snapshot is not None:
            _save_snapshot(self._snapshot_path(first_offset), snapshot)
        path = self._path(first_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, FILE_HEADER, 0)
            os.fsync(fd)
            fsync_directory(self.directory)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fds[first_offset] = fd
        _advise(fd, 0, 0, _SEQUENTIAL)
        self._end = len(FILE_HEADER)
        return self._end

    def append(self, segment: int, header: ChunkHeader, chunk: bytes) -> StoredChunk:
        fd = self._fds[segment]
        position = self._end
        try:
            _write_all(fd, chunk, position)
            if self.sync:
                os.fdatasync(fd)
        except OSError:
            _truncate_quietly(fd, position)
            raise
        self._end = position + len(chunk)
        return StoredChunk(segment, position, header)

    def drop(self, segments: Sequence[int], until: int) -> None:
        del until  # a file holds one segment
        for first_offset in segments:
            os.close(self._fds.pop(first_offset))
            self._read_ahead.pop(first_offset, None)
            self._path(first_offset).unlink()
            self._snapshot_path(first_offset).unlink(missing_ok=True)
        fsync_directory(self.directory)

    # --- reading --------------------------------------------------------------------------

    def payloads(self, chunks: Sequence[StoredChunk]) -> list[bytes]:
        payloads = [
            os.pread(
                self._fds[chunk.segment],
                chunk.header.payload_length,
                chunk.locator + HEADER_SIZE,
            )
            for chunk in chunks
        ]
        if chunks:
            last = chunks[-1]
            self._ask_read_ahead(last.segment, last.locator + last.header.size)
        return payloads

    def _ask_read_ahead(self, segment: int, position: int) -> None:
        wanted = read_ahead(position, self._read_ahead.get(segment, 0), READ_AHEAD_BYTES)
        if wanted is not None:
            start, length = wanted
            _advise(self._fds[segment], start, length, _WILLNEED)
            self._read_ahead[segment] = start + length

    def snapshot(self, segment: int) -> bytes | None:
        try:
            return self._snapshot_path(segment).read_bytes()
        except FileNotFoundError:
            return None

    # --- closing --------------------------------------------------------------------------

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._read_ahead.clear()

    def destroy(self) -> None:
        self.close()
        if not self.directory.exists():
            return
        marked = self.directory.with_name(self.directory.name + MARKED_SUFFIX)
        shutil.rmtree(marked, ignore_errors=True)  # an earlier one's that a crash left
        os.rename(self.directory, marked)
        fsync_directory(self.directory.parent)
        shutil.rmtree(marked)

    def _path(self, first_offset: int) -> Path:
        return self.directory / f"{first_offset:020d}{SUFFIX}"

    def _snapshot_path(self, first_offset: int) -> Path:
        return self.directory / f"{first_offset:020d}{SNAPSHOT_SUFFIX}"


def remove_leftovers(root: Path, streams: Collection[Path]) -> list[Path]:
    """Remove the stream directories under `root` (``<vhost>/<queue>``) that are not in
    `streams` (the directories of the streams the store holds): those marked by a deletion cut
    short, and those of streams deleted in the store whose removal never began. Returns what
    went."""
    removed = []
    for directory in sorted(root.glob("*/*")):
        if directory.is_dir() and directory not in streams:
            shutil.rmtree(directory)
            removed.append(directory)
    return removed


def read_ahead(position: int, asked_until: int, window: int) -> tuple[int, int] | None:
    """What to ask the kernel to read ahead (start, length) after a read of a segment that ended
    at `position`, when read-ahead was asked up to `asked_until`: the rest of `window` bytes past
    `position`, once less than half of it is still asked for (not once per read: most reads
    would ask for pages already on their way)."""
    if asked_until - position >= window // 2:
        return None
    start = max(position, asked_until)
    return start, position + window - start


_SEQUENTIAL: Final = getattr(os, "POSIX_FADV_SEQUENTIAL", 0)
_WILLNEED: Final = getattr(os, "POSIX_FADV_WILLNEED", 0)


def _advise(fd: int, start: int, length: int, advice: int) -> None:
    """posix_fadvise, a hint: nothing where the system has none."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, start, length, advice)


def _torn(fd: int, position: int, size: int) -> bool:
    """Whether a bad chunk at `position` is the one an interrupted append was writing: it
    reaches the end of the file (appends are sequential, so only the last one can tear)."""
    if size - position < HEADER_SIZE:
        return True
    try:
        header = decode_header(os.pread(fd, HEADER_SIZE, position))
    except ChunkError:
        return False
    return position + header.size >= size


def _save_snapshot(path: Path, snapshot: bytes) -> None:
    """Write `snapshot` to `path` atomically and durably (a temporary file, fsynced, renamed;
    the caller fsyncs the directory with the segment it creates next)."""
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, snapshot, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def _write_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def _truncate_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        log.exception("could not cut a failed append off a stream segment")
