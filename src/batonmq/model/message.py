"""A published message, stored once however many queues hold it (queues hold `QueueEntry`s)."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field
from typing import Final

from pamqp import commands

from batonmq.amqp.frames import decode_properties

_FLAGS: Final = struct.Struct(">H")
_FLAGS_OFFSET: Final = 12
#: Property-flag bits of the first flags word (amqp0-9-1.xml, basic class properties, in order).
FLAG_USER_ID: Final = 1 << 4

_message_ids = itertools.count(1)


def next_message_id() -> int:
    """A broker-assigned id, unique within this broker process (made cluster-unique with the
    broker's id when messages are stored)."""
    return next(_message_ids)


@dataclass(slots=True, eq=False)
class Message:
    """What a publisher sent: where it was published, its content header as received, its body.

    Properties are decoded only when something needs them (headers exchange, user-id check,
    persistence); the header payload is forwarded to consumers unchanged.
    """

    exchange: str
    routing_key: str
    header_payload: bytes
    body: bytes
    id: int = field(default_factory=next_message_id)
    _properties: commands.Basic.Properties | None = None

    @property
    def property_flags(self) -> int:
        return int(_FLAGS.unpack_from(self.header_payload, _FLAGS_OFFSET)[0])

    def has_property(self, flag: int) -> bool:
        return bool(self.property_flags & flag)

    @property
    def properties(self) -> commands.Basic.Properties:
        if self._properties is None:
            self._properties = decode_properties(self.header_payload)
        return self._properties

    @property
    def body_size(self) -> int:
        return len(self.body)


@dataclass(slots=True, eq=False)
class QueueEntry:
    """One queue's hold on a message. `sequence` orders the queue, so a requeued entry goes back
    to its original place."""

    message: Message
    sequence: int
    redelivered: bool = False
    delivery_count: int = 0
