"""Deleting a stream kept in files, crash-safely: its deletion is committed in the store first,
then its directory is renamed to a marked name (durably) and removed; at start, marked
directories, and those of streams the store no longer holds, go. Otherwise a stream deleted
just before a crash left its segments behind, and a stream declared again under its name
would have started with the deleted one's messages."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import quote

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.files import MARKED_SUFFIX, FileMedium, remove_leftovers
from batonmq.queues.streams.log import StreamLog
from batonmq.queues.streams.storage import StreamStorage


def written_stream(directory: Path) -> None:
    stream_log = StreamLog(FileMedium(directory))
    try:
        stream_log.append([Record("", "q", b"", b"body")], 1)
    finally:
        stream_log.close()


def test_destroying_renames_the_directory_to_its_marked_name_then_removes_it(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "%2F" / "q"
    written_stream(directory)
    leftover = directory.with_name("q" + MARKED_SUFFIX)
    leftover.mkdir()  # an earlier deletion's, cut short by a crash
    (leftover / "00000000000000000000.segment").write_bytes(b"old")
    medium = FileMedium(directory)
    medium.open()

    medium.destroy()

    assert list((tmp_path / "%2F").iterdir()) == []


def test_no_encoded_stream_name_ends_as_a_marked_directory() -> None:
    """Queue names are %-encoded (urllib's quote, nothing safe); "%-" is no escape."""
    for name in ("q%-deleted", "%", "-deleted", "a%2D"):
        assert not quote(name, safe="").endswith(MARKED_SUFFIX)


def test_leftovers_are_the_directories_of_streams_the_store_does_not_hold(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "%2F" / "kept"
    deleted = tmp_path / "%2F" / "deleted"  # its deletion committed, then the crash
    cut_short = tmp_path / "other" / ("q" + MARKED_SUFFIX)
    other_vhost = tmp_path / "other" / "q"
    for directory in (kept, deleted, cut_short, other_vhost):
        written_stream(directory)

    removed = remove_leftovers(tmp_path, {kept, other_vhost})

    assert sorted(removed) == sorted([deleted, cut_short])
    assert kept.exists() and other_vhost.exists()
    assert not deleted.exists() and not cut_short.exists()


def test_the_storage_keeps_the_directories_of_the_streams_it_was_asked_for(
    tmp_path: Path,
) -> None:
    """At start every stream the store holds asks for its medium before the leftovers go."""
    written_stream(tmp_path / "%2F" / "recovered")
    written_stream(tmp_path / "%2F" / "gone")

    async def main() -> None:
        storage = StreamStorage(tmp_path)
        storage.medium("/", "recovered")
        storage.remove_leftovers()
        await asyncio.to_thread(storage.close)

    asyncio.run(main())

    assert [path.name for path in (tmp_path / "%2F").iterdir()] == ["recovered"]
