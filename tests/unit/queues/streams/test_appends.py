"""The way into a stream's log (`appends.py`), with a real log on a real writer thread: group
commit, messages held for a journal batch, and who is told what."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path

from batonmq.queues.streams.appends import Appends, Span
from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.files import FileMedium
from batonmq.queues.streams.log import StreamLog
from batonmq.queues.streams.storage import StreamStorage


def record(body: bytes) -> Record:
    return Record("", "q", b"", body)


async def _settled(outcomes: list[bool], count: int) -> None:
    while len(outcomes) < count:
        await asyncio.sleep(0.01)


def run_appends(tmp_path: Path, scenario) -> tuple[list[list[bytes]], list[Span]]:
    """Run `scenario(appends, outcomes)` on an event loop; the chunks written (their bodies)
    and the spans reported."""
    storage = StreamStorage(tmp_path)
    stream_log = StreamLog(FileMedium(tmp_path / "stream"))
    chunks: list[list[bytes]] = []
    spans: list[Span] = []

    def append(records: list[Record]) -> Span:
        chunks.append([r.body for r in records])
        stream_log.append(records, 1)
        return Span.of(stream_log)

    async def main() -> None:
        appends = Appends(storage, append, spans.append, queue="q")
        await scenario(appends)
        await asyncio.to_thread(storage.close)

    try:
        asyncio.run(asyncio.wait_for(main(), 10))
    finally:
        stream_log.close()
    return chunks, spans


def test_what_is_added_in_one_loop_turn_is_one_chunk_and_its_writers_are_told(tmp_path):
    """BatonMQ architecture: "Never fsync per message": one append (one fsync) per group."""
    outcomes: list[bool] = []

    async def scenario(appends: Appends) -> None:
        for body in (b"a", b"b", b"c"):
            appends.add(record(body), None)
            appends.when_written(outcomes.append)
        await _settled(outcomes, 3)

    chunks, spans = run_appends(tmp_path, scenario)
    assert chunks == [[b"a", b"b", b"c"]]
    assert outcomes == [True, True, True]
    assert spans[-1].next == 3


def test_a_record_held_for_a_failed_batch_is_never_written_and_what_followed_it_is(tmp_path):
    """State follows the store: a message that also went to a durable queue waits for that
    queue's commit, and a failed commit leaves it on no queue (its publisher is nacked); what
    was published behind it waited in order and is written once it is released."""
    outcomes: list[tuple[str, bool]] = []

    async def scenario(appends: Appends) -> None:
        appends.add(record(b"held"), 7)
        appends.when_written(lambda ok: outcomes.append(("held", ok)))
        appends.add(record(b"behind"), None)
        appends.when_written(lambda ok: outcomes.append(("behind", ok)))
        assert appends.holding
        appends.release_held(7, committed=False)
        assert not appends.holding
        while len(outcomes) < 2:
            await asyncio.sleep(0.01)

    chunks, _spans = run_appends(tmp_path, scenario)
    assert chunks == [[b"behind"]]
    assert outcomes == [("held", False), ("behind", True)]


def test_closing_nacks_what_was_not_written(tmp_path):
    """A deleted stream writes nothing more: its waiting publishers are nacked."""
    outcomes: list[bool] = []

    async def scenario(appends: Appends) -> None:
        appends.add(record(b"late"), 3)
        appends.when_written(outcomes.append)
        appends.close()

    chunks, _spans = run_appends(tmp_path, scenario)
    assert chunks == []
    assert outcomes == [False]


def test_each_batch_is_synced_to_the_disk_after_its_bytes_and_before_its_confirms(
    tmp_path, monkeypatch
):
    """The stream-queues issue: segments are "stored in segments on disk (...), fsync per
    batch", and "a stream survives SIGKILL with every confirmed message at its offset". With the
    real log, segment file and writer thread, and the system calls recorded: each group of
    appends is written, then synced once (the same file, after all of its bytes), and only then
    are its publishers told it is written; the next group's bytes come after that."""
    events: list[tuple[str, object]] = []
    pwrite, fdatasync, fsync = os.pwrite, os.fdatasync, os.fsync

    def recorded_pwrite(fd: int, data: bytes | memoryview, position: int) -> int:
        events.append(("write", (fd, bytes(data))))
        return pwrite(fd, data, position)

    def recorded_sync(sync, fd: int) -> None:
        sync(fd)
        events.append(("sync", fd))

    async def scenario(appends: Appends) -> None:
        # The log and its segment file are open: from here on, only the appends write.
        monkeypatch.setattr(os, "pwrite", recorded_pwrite)
        monkeypatch.setattr(os, "fdatasync", functools.partial(recorded_sync, fdatasync))
        monkeypatch.setattr(os, "fsync", functools.partial(recorded_sync, fsync))
        for group in ([b"a1", b"a2", b"a3"], [b"b1", b"b2"]):
            told: list[bool] = []
            for body in group:
                appends.add(record(body), None)
                appends.when_written(told.append)
                appends.when_written(lambda ok, body=body: events.append(("confirmed", body)))
            await _settled(told, len(group))
            assert told == [True] * len(group)

    chunks, _spans = run_appends(tmp_path, scenario)
    assert chunks == [[b"a1", b"a2", b"a3"], [b"b1", b"b2"]]
    kinds = [kind for kind, _what in events]
    assert kinds == ["write", "sync", *["confirmed"] * 3, "write", "sync", *["confirmed"] * 2]
    (_, (written_a, chunk_a)), (_, synced_a) = events[0], events[1]
    (_, (written_b, chunk_b)), (_, synced_b) = events[5], events[6]
    assert synced_a == written_a == written_b == synced_b  # the segment file's descriptor
    assert all(body in chunk_a for body in (b"a1", b"a2", b"a3"))
    assert all(body in chunk_b for body in (b"b1", b"b2"))
    assert [what for kind, what in events if kind == "confirmed"] == [
        b"a1",
        b"a2",
        b"a3",
        b"b1",
        b"b2",
    ]
