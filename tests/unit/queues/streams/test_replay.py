"""Replaying a stream at disk speed: the issue asks that "a consumer replays a 1 GB stream at
disk speed (reads are sequential and batched, no per-message store round trip)". What makes the
disk and the event loop work at once is tested here as mechanisms (never as timings): the next
batch is read while the last is being sent, and the kernel is asked to read ahead of each read."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import QueueEntry
from batonmq.queues.paging import Paging
from batonmq.queues.protocol import Queue
from batonmq.queues.streams.chunk import HEADER_SIZE, Record
from batonmq.queues.streams.files import READ_AHEAD_BYTES, FileMedium, read_ahead
from batonmq.queues.streams.log import StreamLog
from batonmq.queues.streams.queue import READ_AHEAD_BELOW, READ_BATCH, StreamQueue
from batonmq.queues.streams.storage import StreamStorage
from batonmq.selectors import Selector

HEADER = encode_header_payload(commands.Basic.Properties(delivery_mode=2), 3)


@dataclass(eq=False)
class CreditedConsumer:
    """A consumer with `credit` deliveries left (its prefetch, never acked)."""

    credit: int
    tag: str = "c"
    exclusive: bool = False
    priority: int = 0
    arguments: FieldTable = field(default_factory=lambda: {"x-stream-offset": "first"})
    selector: Selector | None = None
    offsets: list[int] = field(default_factory=list)
    bodies: list[bytes | memoryview] = field(default_factory=list)

    def has_room(self) -> bool:
        return len(self.offsets) < self.credit

    def deliver(self, queue: Queue, entry: QueueEntry) -> None:
        self.offsets.append(entry.sequence)
        self.bodies.append(entry.message.body)


def filled_stream(root: Path, messages: int, segment_bytes: int = 1 << 20) -> None:
    """Stream "s" of the default virtual host, `messages` long, in chunks of ten."""
    stream_log = StreamLog(FileMedium(root / "%2F" / "s"), max_segment_bytes=segment_bytes)
    try:
        for _ in range(0, messages, 10):
            stream_log.append([Record("", "s", HEADER, b"abc")] * 10, 1)
    finally:
        stream_log.close()


def test_the_next_batch_is_read_while_the_consumer_still_has_entries_read_for_it(
    tmp_path: Path,
) -> None:
    """Reading only once everything read was sent left the socket idle during each read: a
    consumer that has fewer than READ_AHEAD_BELOW entries left gets its next batch read now,
    even while it has no credit to take them."""
    filled_stream(tmp_path, 1000)
    credit = READ_BATCH - READ_AHEAD_BELOW + 1  # leaves READ_AHEAD_BELOW - 1 read, unsent

    async def main() -> tuple[list[int], int]:
        storage = StreamStorage(tmp_path)
        queue = StreamQueue("s", paging=Paging(streams=storage))
        consumer = CreditedConsumer(credit)
        queue.add_consumer(consumer)
        queue.dispatch()
        cursor = queue.consumers.cursors[consumer]
        for _ in range(500):
            await asyncio.sleep(0.01)
            if len(cursor.read) > READ_AHEAD_BELOW and not cursor.reading:
                break
        buffered = len(cursor.read)
        queue.remove_consumer(consumer)
        await asyncio.to_thread(queue._medium.close)
        await asyncio.to_thread(storage.close)
        return consumer.offsets, buffered

    offsets, buffered = asyncio.run(asyncio.wait_for(main(), 20))

    assert offsets == list(range(credit))
    assert buffered == READ_AHEAD_BELOW - 1 + READ_BATCH


def consumed(root: Path, credit: int) -> CreditedConsumer:
    """A consumer of stream "s" from `first`, once it has `credit` deliveries or its reads
    stopped."""

    async def main() -> CreditedConsumer:
        storage = StreamStorage(root)
        queue = StreamQueue("s", paging=Paging(streams=storage))
        consumer = CreditedConsumer(credit)
        queue.add_consumer(consumer)
        queue.dispatch()
        cursor = queue.consumers.cursors[consumer]
        for _ in range(500):
            await asyncio.sleep(0.01)
            if len(consumer.offsets) == credit or (
                cursor.offset is not None and not cursor.reading
            ):
                break
        queue.remove_consumer(consumer)
        await asyncio.to_thread(queue._medium.close)
        await asyncio.to_thread(storage.close)
        return consumer

    return asyncio.run(asyncio.wait_for(main(), 20))


def test_a_delivered_body_is_a_view_of_the_chunk_read_from_the_segment(tmp_path: Path) -> None:
    """No copy of a body between the segment file and the socket: a delivery's body is a
    read-only view of the payload its chunk was read into, which the connection writes as it
    is (`ServerConnection.send_content`)."""
    filled_stream(tmp_path, 30)

    consumer = consumed(tmp_path, 30)

    assert consumer.offsets == list(range(30))
    assert all(isinstance(body, memoryview) and body.readonly for body in consumer.bodies)
    assert [bytes(body) for body in consumer.bodies] == [b"abc"] * 30
    # Ten records to a chunk: one payload under each ten bodies.
    payloads = [body.obj for body in consumer.bodies if isinstance(body, memoryview)]
    assert [len({id(payload) for payload in payloads[at : at + 10]}) for at in (0, 10, 20)] == [
        1,
        1,
        1,
    ]
    assert len({id(payload) for payload in payloads}) == 3


def test_a_damaged_chunk_is_refused_and_nothing_of_it_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bodies are views of what was read, and the CRC of the whole chunk is checked before any
    view of it is made: a chunk damaged on the disk is refused (the read fails, naming its
    segment), and none of its records reaches a consumer."""
    filled_stream(tmp_path, 100, segment_bytes=2000)
    medium = FileMedium(tmp_path / "%2F" / "s")
    try:
        segment = medium.open()[0]  # not the newest: opening reads none of its payloads
        damaged = segment.chunks[1]
    finally:
        medium.close()
    path = Path(medium.where(segment.first_offset))
    data = bytearray(path.read_bytes())
    data[damaged.locator + HEADER_SIZE + 5] ^= 0xFF
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.ERROR):
        consumer = consumed(tmp_path, 100)

    first = damaged.header.first_offset
    assert not set(consumer.offsets) & set(range(first, damaged.header.next_offset))
    assert "stream read failed" in caplog.text
    assert path.name in caplog.text


def test_read_ahead_asks_for_the_window_past_a_read_once_half_of_it_was_read() -> None:
    window = READ_AHEAD_BYTES

    # The first read of a segment asks for the whole window after it.
    assert read_ahead(1000, 0, window) == (1000, window)
    # Reads well inside what was asked for ask nothing more.
    assert read_ahead(1000 + window // 2 - 1, 1000 + window, window) is None
    # Past half of it, the rest of the window after the read, from where the last ask ended.
    assert read_ahead(1000 + window // 2 + 1, 1000 + window, window) == (
        1000 + window,
        window // 2 + 1,
    )
    # A read past everything asked for (another reader asked behind it) asks from there.
    assert read_ahead(5 * window, window, window) == (5 * window, window)


def test_reading_a_segment_records_how_far_the_kernel_was_asked_to_read_ahead(
    tmp_path: Path,
) -> None:
    filled_stream(tmp_path, 100, segment_bytes=2000)
    medium = FileMedium(tmp_path / "%2F" / "s")
    try:
        segment = medium.open()[0]  # not the newest: opening read none of it
        first, second = segment.chunks[0], segment.chunks[1]

        medium.payloads([first])
        asked = medium._read_ahead[segment.first_offset]
        medium.payloads([second])

        assert asked == first.locator + first.header.size + READ_AHEAD_BYTES
        assert medium._read_ahead[segment.first_offset] == asked  # nothing asked again
    finally:
        medium.close()
