"""Deduplication of what producers publish into a stream, as RabbitMQ's streams deduplicate: a
producer has a name (RabbitMQ's producer reference) and numbers its messages with a publishing id
that only grows; the stream keeps the last id it stored for each producer and drops a message
whose id is not above it. A dropped message is still confirmed, as RabbitMQ confirms it (its
stream clients' documentation, Deduplication): the message it repeats is stored.

Over AMQP 0-9-1, which has neither, a message names its producer and id in two headers,
`x-batonmq-producer` (a string) and `x-batonmq-sequence` (a non-negative integer). A message
without both, or with values of other types, is an ordinary message: the stream keeps it.

The ids are kept with the log (`log.py`): a segment begins with a snapshot of the last id of
every producer tracked (written with the segment, before anything is appended to it), and the
messages of the newest segment, whose headers carry their ids, bring it up to date when the log
is opened. A crash therefore loses none, and retention, which removes whole old segments, none.

The set is bounded (`MAX_PRODUCERS`, as RabbitMQ's osiris bounds its writers): producers are
kept in the order they last wrote and the least recent goes first. The order is that of the
stored messages, so what is forgotten does not depend on how appends were grouped into chunks
or when the log was reopened.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from batonmq.amqp.properties import decode_basic_properties
from batonmq.queues.streams.chunk import Record

PRODUCER_HEADER: Final = "x-batonmq-producer"
SEQUENCE_HEADER: Final = "x-batonmq-sequence"
#: How many producers a stream keeps the last id of: osiris's (RabbitMQ streams' log) default
#: max_sequences. Beyond it the least recently written producer is forgotten, as osiris trims its
#: writers by the chunk they last wrote; a forgotten producer's next message is stored whatever
#: its id.
MAX_PRODUCERS: Final = 255
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
    """The last publishing id stored for each producer, the most recently written last; at most
    `limit` of them (see the module docstring)."""

    def __init__(
        self, last: Mapping[str, int] | None = None, *, limit: int = MAX_PRODUCERS
    ) -> None:
        self.limit = limit
        #: In the order the producers last wrote, the least recent first.
        self._last: dict[str, int] = {}
        self.advance(last or {})

    @property
    def last(self) -> dict[str, int]:
        return dict(self._last)

    def __len__(self) -> int:
        return len(self._last)

    def admit(self, records: Iterable[Record]) -> tuple[list[Record], dict[str, int]]:
        """The records to store, in order, and the last ids they set, in the order their
        producers last wrote; those whose id is not above the last one stored (or admitted
        earlier in `records`) are left out. Nothing changes here until `advance` is given the
        ids, once the records are written."""
        kept: list[Record] = []
        advanced: dict[str, int] = {}
        for record in records:
            publishing = publishing_in(record)
            if publishing is not None:
                producer, sequence = publishing.producer, publishing.sequence
                last = advanced.get(producer, self._last.get(producer, -1))
                if sequence <= last:
                    continue
                advanced.pop(producer, None)  # to the end: it wrote last
                advanced[producer] = sequence
            kept.append(record)
        return kept, advanced

    def advance(self, advanced: Mapping[str, int]) -> None:
        """Take the ids `admit` returned (their order is the order of writing); the least
        recently written producers beyond `limit` are forgotten."""
        tracked = self._last
        for producer, sequence in advanced.items():
            tracked.pop(producer, None)
            tracked[producer] = sequence
        while len(tracked) > self.limit:
            del tracked[next(iter(tracked))]

    def replay(self, records: Iterable[Record]) -> None:
        """Take the ids of records that were stored (opening a log)."""
        for record in records:
            publishing = publishing_in(record)
            if publishing is not None and publishing.sequence > self._last.get(
                publishing.producer, -1
            ):
                self.advance({publishing.producer: publishing.sequence})

    def snapshot(self) -> bytes:
        """The ids as a segment's snapshot keeps them (JSON, in the order of writing)."""
        return json.dumps(self._last).encode()

    @classmethod
    def from_snapshot(cls, snapshot: bytes | None, where: str) -> Producers:
        """The ids a segment began with (None: a segment without a snapshot, the first one);
        ValueError naming `where` for bytes that are no snapshot."""
        if snapshot is None:
            return cls()
        try:
            last = json.loads(snapshot)
        except ValueError:
            last = None
        if not isinstance(last, dict) or not all(
            isinstance(name, str) and isinstance(value, int) for name, value in last.items()
        ):
            raise ValueError(f"{where}: not a snapshot of producers' ids")
        return cls(last)
