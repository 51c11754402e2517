"""The way into a stream's log (`appends.py`), with a real log on a real writer thread: group
commit, messages held for a journal batch, and who is told what."""

from __future__ import annotations

import asyncio
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
