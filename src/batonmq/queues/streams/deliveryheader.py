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
around the two fields' values; each delivery then only packs its offset and timestamp between
them. Rewriting every delivered header took more than half of a replay's time.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from batonmq.amqp.properties import rewrite_headers
from batonmq.queues.streams.offsets import OFFSET_ARGUMENT

TIMESTAMP_HEADER: Final = "x-batonmq-stream-timestamp"

_LONG_LONG: Final = struct.Struct(">q")
#: Two values that differ in every octet: where two rewritten headers differ is a field.
_PROBES: Final = (0x0101010101010101, 0x1010101010101010)
#: Distinct headers kept (a stream's publishers rarely use more); all are dropped when full.
_KEPT: Final = 256


class _Template(NamedTuple):
    """A rewritten header cut around its two values: `before`, value, `between`, value, `after`,
    the offset's value first unless the publisher's header put the timestamp's first."""

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
    first, second = (offset, timestamp) if template.offset_first else (timestamp, offset)
    return b"".join(
        (
            template.before,
            _LONG_LONG.pack(first),
            template.between,
            _LONG_LONG.pack(second),
            template.after,
        )
    )


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
    size = _LONG_LONG.size
    return _Template(
        base[:first_at],
        base[first_at + size : second_at],
        base[second_at + size :],
        offset_first=offset_at < timestamp_at,
    )


def _first_difference(first: bytes, second: bytes) -> int:
    return next(index for index, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
