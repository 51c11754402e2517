"""The content header a stream delivers a message with: the one it was published with, and two
header fields, each a long-long-int:

- `x-stream-offset`, its offset, as RabbitMQ's streams send it to AMQP 0-9-1 consumers;
- `x-batonmq-stream-timestamp` (`TIMESTAMP_HEADER`), when the stream appended it: its chunk's
  timestamp, in milliseconds since the epoch, the moment that a consumer attaching with an
  `x-stream-offset` timestamp is compared with. RabbitMQ's streams give every chunk such a
  timestamp but send an AMQP 0-9-1 consumer only the offset (`rabbit_stream_queue`
  `entry_to_msg`); BatonMQ sends both, so that a reader (the Spark data source's `timestamp`
  column) sees the moment it can seek by. The publisher's `timestamp` property is left as it
  was published.

A stream's messages mostly share their publisher's header, and a long-long field has the same
size whatever its value, so the header is rewritten once per distinct header into the octets
around the two fields' values; each delivery then packs its offset and timestamp between them
in one `struct` call. Rewriting every delivered header took more than half of a replay's time.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from batonmq.amqp.properties import rewrite_headers
from batonmq.queues.streams.offsets import OFFSET_ARGUMENT

TIMESTAMP_HEADER: Final = "x-batonmq-stream-timestamp"

#: The octets of a long-long-int value.
_VALUE_SIZE: Final = struct.calcsize(">q")
#: Two values that differ in every octet: where two rewritten headers differ is a field.
_PROBES: Final = (0x0101010101010101, 0x1010101010101010)
#: Distinct headers kept (a stream's publishers rarely use more); all are dropped when full.
_KEPT: Final = 256


class _Template(NamedTuple):
    """A rewritten header cut around its two values: `before`, value, `between`, value, `after`
    (`layout` packs the five), the offset's value first unless the publisher's header put the
    timestamp's first."""

    layout: struct.Struct
    before: bytes
    between: bytes
    after: bytes
    offset_first: bool


_templates: dict[bytes, _Template] = {}


def delivery_header(header: bytes, offset: int, timestamp: int) -> bytes:
    """`header` (a content-header payload checked at the edge) with x-stream-offset = `offset`
    and TIMESTAMP_HEADER = `timestamp` (milliseconds since the epoch)."""
    template = _templates.get(header)
    if template is None:
        template = _template(header)
        if len(_templates) >= _KEPT:
            _templates.clear()
        _templates[header] = template
    layout, before, between, after, offset_first = template
    if offset_first:
        return layout.pack(before, offset, between, timestamp, after)
    return layout.pack(before, timestamp, between, offset, after)


def rewritten(header: bytes, offset: int, timestamp: int) -> bytes:
    """What `delivery_header` gives, by rewriting `header` in full."""
    return rewrite_headers(
        header, {}, long_fields={OFFSET_ARGUMENT: offset, TIMESTAMP_HEADER: timestamp}
    )


def _template(header: bytes) -> _Template:
    low, high = _PROBES
    base = rewritten(header, low, low)
    offset_at = _first_difference(base, rewritten(header, high, low))
    timestamp_at = _first_difference(base, rewritten(header, low, high))
    first_at, second_at = sorted((offset_at, timestamp_at))
    before, between, after = (
        base[:first_at],
        base[first_at + _VALUE_SIZE : second_at],
        base[second_at + _VALUE_SIZE :],
    )
    layout = struct.Struct(f">{len(before)}sq{len(between)}sq{len(after)}s")
    return _Template(layout, before, between, after, offset_first=offset_at < timestamp_at)


def _first_difference(first: bytes, second: bytes) -> int:
    return next(index for index, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
