"""Encoders for the server-to-client methods that carry exchange, queue or routing-key names.

pamqp's `marshal` runs its client-side `validate`, which allows only names matching
`^[a-zA-Z0-9-_.:@#,/+ ]*$` (and exchange names up to 127 characters). RabbitMQ, and so BatonMQ,
accept any UTF-8 name a client declares (the wire limit is a short string, 255 octets); such a
name must reach its consumers. These encoders write the frames directly. They are also the
delivery hot path (BatonMQ architecture: a specialised encoder kept byte-equal to pamqp's, which
tests/unit/amqp/test_outgoing.py checks).
"""

from __future__ import annotations

import functools
import struct
from typing import Final

from batonmq.amqp.constants import FRAME_END, FRAME_METHOD

_FRAME_START: Final = struct.Struct(">BHI")
_END: Final = bytes((FRAME_END,))
_DELIVER: Final = struct.pack(">HH", 60, 60)
_GET_OK: Final = struct.pack(">HH", 60, 71)
_RETURN: Final = struct.pack(">HH", 60, 50)
_DECLARE_OK: Final = struct.pack(">HH", 50, 11)
_TAG_AND_FLAG: Final = struct.Struct(">QB")
_LONG: Final = struct.Struct(">I")
_SHORT: Final = struct.Struct(">H")
_TWO_LONGS: Final = struct.Struct(">II")


@functools.lru_cache(maxsize=4096)
def short_string(text: str) -> bytes:
    """An AMQP short string. Names that came in as short strings always fit. Cached: every
    delivery writes its consumer tag, exchange and routing key, which repeat."""
    encoded = text.encode("utf-8")
    if len(encoded) > 255:
        raise ValueError(f"short string of {len(encoded)} octets")
    return bytes((len(encoded),)) + encoded


def _method_frame(channel: int, payload: bytes) -> bytes:
    return _FRAME_START.pack(FRAME_METHOD, channel, len(payload)) + payload + _END


def basic_deliver(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
) -> bytes:
    before, after, size = _deliver_parts(consumer_tag, exchange, routing_key)
    return b"".join(
        (
            _FRAME_START.pack(FRAME_METHOD, channel, size),
            before,
            _TAG_AND_FLAG.pack(delivery_tag, redelivered),
            after,
        )
    )


@functools.lru_cache(maxsize=4096)
def _deliver_parts(consumer_tag: str, exchange: str, routing_key: str) -> tuple[bytes, bytes, int]:
    """What basic.deliver writes before the delivery tag and after the redelivered flag (with
    the frame-end octet), and its payload size. Cached: a consumer's deliveries repeat them."""
    before = _DELIVER + short_string(consumer_tag)
    after = short_string(exchange) + short_string(routing_key)
    return before, after + _END, len(before) + _TAG_AND_FLAG.size + len(after)


def basic_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
) -> bytes:
    return _method_frame(
        channel,
        _GET_OK
        + _TAG_AND_FLAG.pack(delivery_tag, redelivered)
        + short_string(exchange)
        + short_string(routing_key)
        + _LONG.pack(message_count),
    )


def basic_return(
    channel: int, reply_code: int, reply_text: str, exchange: str, routing_key: str
) -> bytes:
    return _method_frame(
        channel,
        _RETURN
        + _SHORT.pack(reply_code)
        + short_string(reply_text)
        + short_string(exchange)
        + short_string(routing_key),
    )


def queue_declare_ok(channel: int, queue: str, message_count: int, consumer_count: int) -> bytes:
    return _method_frame(
        channel, _DECLARE_OK + short_string(queue) + _TWO_LONGS.pack(message_count, consumer_count)
    )
