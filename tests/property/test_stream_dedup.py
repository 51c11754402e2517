"""A stream's deduplication on arbitrary publishes (RabbitMQ's streams: a named producer's
message is stored only if its publishing id is above the last one stored for that producer):
what is stored does not depend on how the messages were grouped into appends, nor on a reopening
of the log between any two of them, and it is exactly the messages whose id is above every
earlier id of their producer."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp.header import ContentHeader

from batonmq.queues.streams.chunk import Record
from batonmq.queues.streams.dedup import PRODUCER_HEADER, SEQUENCE_HEADER
from batonmq.queues.streams.files import FileMedium
from batonmq.queues.streams.log import StreamLog

#: (producer, id), or None for a message without them.
publishes = st.lists(
    st.none() | st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 12)), max_size=40
)


def record(number: int, publishing: tuple[str, int] | None) -> Record:
    headers = None
    if publishing is not None:
        headers = {PRODUCER_HEADER: publishing[0], SEQUENCE_HEADER: publishing[1]}
    header = ContentHeader(0, 4, commands.Basic.Properties(headers=headers)).marshal()
    return Record("", "events", header, f"{number:04d}".encode())


def expected(messages: list[tuple[str, int] | None]) -> list[int]:
    last: dict[str, int] = {}
    kept = []
    for number, publishing in enumerate(messages):
        if publishing is not None:
            producer, sequence = publishing
            if sequence <= last.get(producer, -1):
                continue
            last[producer] = sequence
        kept.append(number)
    return kept


@settings(max_examples=60, deadline=None)
@given(messages=publishes, cuts=st.lists(st.integers(1, 40), max_size=10), data=st.data())
def test_what_is_stored_does_not_depend_on_appends_or_reopenings(messages, cuts, data):
    bounds = sorted({0, len(messages), *(cut for cut in cuts if cut < len(messages))})
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "stream"
        log = StreamLog(FileMedium(path, sync=False), max_segment_bytes=300)
        try:
            for start, end in itertools.pairwise(bounds):
                log.append([record(n, messages[n]) for n in range(start, end)], timestamp=1)
                if data.draw(st.booleans()):
                    log.close()
                    log = StreamLog(FileMedium(path, sync=False), max_segment_bytes=300)
            stored = [
                int(entry.record.body) for entry in log.read(0, max_records=100, max_bytes=1 << 30)
            ]
        finally:
            log.close()
    assert stored == expected(messages)
