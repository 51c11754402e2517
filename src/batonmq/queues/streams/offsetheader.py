"""The content header a stream delivers a message with: the one it was published with, and the
`x-stream-offset` header field (a long-long-int, as RabbitMQ sends it) set to its offset.

A stream's messages mostly share their publisher's header, and a long-long field has the same
size whatever its value, so the header is rewritten once per distinct header into the octets
before and after the offset's eight; each delivery then only packs its offset between them.
Rewriting every delivered header took more than half of a replay's time.
"""

from __future__ import annotations

import struct
from typing import Final

from batonmq.amqp.properties import rewrite_headers
from batonmq.queues.streams.offsets import OFFSET_ARGUMENT

_LONG_LONG: Final = struct.Struct(">q")
#: Two offsets that differ in every octet: where their rewritten headers differ is the field.
_PROBES: Final = (0x0101010101010101, 0x1010101010101010)
#: Distinct headers kept (a stream's publishers rarely use more); all are dropped when full.
_KEPT: Final = 256

_templates: dict[bytes, tuple[bytes, bytes]] = {}


def with_offset(header: bytes, offset: int) -> bytes:
    """`header` (a content-header payload checked at the edge) with x-stream-offset = `offset`."""
    template = _templates.get(header)
    if template is None:
        template = _template(header)
        if len(_templates) >= _KEPT:
            _templates.clear()
        _templates[header] = template
    before, after = template
    return before + _LONG_LONG.pack(offset) + after


def _template(header: bytes) -> tuple[bytes, bytes]:
    first, second = (
        rewrite_headers(header, {}, long_fields={OFFSET_ARGUMENT: probe}) for probe in _PROBES
    )
    at = next(index for index, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
    return first[:at], first[at + _LONG_LONG.size :]
