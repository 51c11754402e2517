"""Wire constants of AMQP 0-9-1 (amqp0-9-1.xml: frame types, frame-end, reply codes)."""

from __future__ import annotations

import enum
from typing import Final

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
#: The AMQP 0-9 header that some old clients send; treated as 0-9-1 (they agree on the wire).
PROTOCOL_HEADER_0_9: Final = b"AMQP\x01\x01\x00\x09"
PROTOCOL_HEADER_SIZE: Final = 8

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
#: type (1) + channel (2) + size (4) before the payload, and the frame-end octet after it.
FRAME_OVERHEAD: Final = 8
#: "frame-min-size": every peer accepts frames this large before tuning (spec 4.2.3).
FRAME_MIN_SIZE: Final = 4096

CONNECTION_CLASS_ID: Final = 10
BASIC_CLASS_ID: Final = 60


class ReplyCode(enum.IntEnum):
    """Reply codes of amqp0-9-1.xml; the spec's class attribute says which close what."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def is_soft(self) -> bool:
        """True for the spec's "soft-error" codes, which close only the channel."""
        return self in _SOFT_ERRORS


_SOFT_ERRORS: Final = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)
