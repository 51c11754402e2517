"""AMQP 0-9-1 octets that both test clients build by hand: SASL responses and raw frames.

Written from the spec, not imported from batonmq: tests/rawclient.py speaks to the broker as an
outsider would, so its bytes must not share the broker's mistakes.
"""

from __future__ import annotations

import struct

from pamqp import base, encode

#: AMQP 0-9-1 section 4.2.3: every frame ends with this octet.
FRAME_END = 0xCE


def plain_response(username: str, password: str) -> str:
    """SASL PLAIN (RFC 4616): authzid NUL authcid NUL passwd."""
    return f"\x00{username}\x00{password}"


def amqplain_response(username: str, password: str) -> str:
    """AMQPLAIN: a field table holding LOGIN and PASSWORD, without the table's length prefix."""
    return encode.field_table({"LOGIN": username, "PASSWORD": password})[4:].decode("ascii")


def raw_frame(frame_type: int, channel: int, payload: bytes, frame_end: int = FRAME_END) -> bytes:
    """One frame as bytes, with any type, payload and frame-end octet (for malformed input)."""
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([frame_end])


def method_payload(method: base.Frame) -> bytes:
    """The payload of a method frame: class id, method id, arguments."""
    return struct.pack(">I", method.index) + method.marshal()
