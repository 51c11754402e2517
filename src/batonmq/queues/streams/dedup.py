"""Deduplication of what producers publish into a stream, as RabbitMQ's streams deduplicate: a
producer has a name (RabbitMQ's producer reference) and numbers its messages with a publishing id
that only grows; the stream keeps the last id it stored for each producer and drops a message
whose id is not above it. A dropped message is still confirmed, as RabbitMQ confirms it (its
stream clients' documentation, Deduplication): the message it repeats is stored.

Over AMQP 0-9-1, which has neither, a message names its producer and id in two headers,
`x-batonmq-producer` (a string) and `x-batonmq-sequence` (a non-negative integer). A message
without both, or with values of other types, is an ordinary message: the stream keeps it.

The ids are kept with the log (`log.py`): a segment begins with a snapshot file of the last id
of every producer (`<first offset>.producers`, written before the segment is created), and the
messages of the newest segment, whose headers carry their ids, bring it up to date when the log
is opened. A crash therefore loses none, and retention, which removes whole old segments, none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batonmq.amqp.properties import decode_basic_properties
from batonmq.queues.streams.chunk import Record

PRODUCER_HEADER: Final = "x-batonmq-producer"
SEQUENCE_HEADER: Final = "x-batonmq-sequence"
#: The suffix of a segment's snapshot of producers' last ids.
SNAPSHOT_SUFFIX: Final = ".producers"
_PRODUCER_OCTETS: Final = PRODUCER_HEADER.encode()


@dataclass(frozen=True, slots=True)
class Publishing:
    """Who published a message, and its publishing id."""

    producer: str
    sequence: int


def publishing_of(headers: Mapping[str, object] | None) -> Publishing | None:
    """The producer and id that `headers` name; None unless both are there and well typed."""
    if not headers:
        return None
    producer = headers.get(PRODUCER_HEADER)
    sequence = headers.get(SEQUENCE_HEADER)
    if isinstance(producer, bytes):
        producer = producer.decode("utf-8", errors="replace")
    if not isinstance(producer, str) or not producer:
        return None
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 0:
        return None
    return Publishing(producer, sequence)


def publishing_in(record: Record) -> Publishing | None:
    """The producer and id of a record, from its content header (parsed only when it can name
    a producer at all)."""
    if _PRODUCER_OCTETS not in record.header:
        return None
    return publishing_of(decode_basic_properties(record.header).headers)


class Producers:
    """The last publishing id stored for each producer."""

    def __init__(self, last: Mapping[str, int] | None = None) -> None:
        self.last: dict[str, int] = dict(last or {})

    def admit(self, records: Iterable[Record]) -> tuple[list[Record], dict[str, int]]:
        """The records to store, in order, and the last ids they set; those whose id is not
        above the last one stored (or admitted earlier in `records`) are left out. Nothing
        changes here until `advance` is given the ids, once the records are written."""
        kept: list[Record] = []
        advanced: dict[str, int] = {}
        for record in records:
            publishing = publishing_in(record)
            if publishing is not None:
                producer, sequence = publishing.producer, publishing.sequence
                last = advanced.get(producer, self.last.get(producer, -1))
                if sequence <= last:
                    continue
                advanced[producer] = sequence
            kept.append(record)
        return kept, advanced

    def advance(self, advanced: Mapping[str, int]) -> None:
        self.last.update(advanced)

    def replay(self, records: Iterable[Record]) -> None:
        """Take the ids of records that were stored (opening a log)."""
        for record in records:
            publishing = publishing_in(record)
            if publishing is not None and publishing.sequence > self.last.get(
                publishing.producer, -1
            ):
                self.last[publishing.producer] = publishing.sequence


def snapshot_path(segment: Path) -> Path:
    return segment.with_suffix(SNAPSHOT_SUFFIX)


def save_snapshot(path: Path, producers: Producers) -> None:
    """Write the last ids to `path` atomically and durably (a temporary file, fsynced, renamed;
    the caller fsyncs the directory with the segment it creates next)."""
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(producers.last, sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def load_snapshot(path: Path) -> Producers:
    """The ids a segment began with; none for a segment without a snapshot (the first one)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Producers()
    try:
        last = json.loads(text)
    except ValueError:
        last = None
    if not isinstance(last, dict) or not all(
        isinstance(name, str) and isinstance(value, int) for name, value in last.items()
    ):
        raise ValueError(f"{path}: not a snapshot of producers' ids")
    return Producers(last)
