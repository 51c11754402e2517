"""A published message, stored once however many queues hold it (queues hold `QueueEntry`s)."""

from __future__ import annotations

import itertools
import struct
import sys
from dataclasses import dataclass, field
from typing import Final

from pamqp import commands

from batonmq.amqp.properties import decode_basic_properties

_TABLE_SIZE: Final = struct.Struct(">I")
_FLAGS_OFFSET: Final = 12
#: Property-flag bits of the first flags word (amqp0-9-1.xml, basic class properties, in order:
#: content-type is bit 15, content-encoding 14, headers 13, delivery-mode 12, ... user-id 4).
FLAG_CONTENT_TYPE: Final = 1 << 15
FLAG_CONTENT_ENCODING: Final = 1 << 14
FLAG_HEADERS: Final = 1 << 13
FLAG_DELIVERY_MODE: Final = 1 << 12
FLAG_PRIORITY: Final = 1 << 11
FLAG_EXPIRATION: Final = 1 << 8
FLAG_USER_ID: Final = 1 << 4
#: basic.properties delivery-mode: "2 = persistent".
PERSISTENT: Final = 2

_message_ids = itertools.count(1)


def next_message_id() -> int:
    """A broker-assigned id. With a store, ids continue from the block the store gave this
    broker start (`set_message_id_base`), which makes them unique across every broker sharing
    the store (BatonMQ architecture: "unique across a cluster")."""
    return next(_message_ids)


def set_message_id_base(base: int) -> None:
    global _message_ids  # noqa: PLW0603 - one id sequence per broker process, set at start
    _message_ids = itertools.count(base)


@dataclass(slots=True, eq=False)
class Message:
    """What a publisher sent: where it was published, its content header as received, its body.

    The header was checked when it arrived (amqp/properties.py: every client decodes it), so it
    is trusted here (How BatonMQ code reads, 14). Properties are decoded only when something
    needs them (headers exchange, user-id check, persistence); the header payload is forwarded
    to consumers unchanged. The body is bytes, except in a delivery read from a stream: there,
    a read-only view of the chunk it was read from (not copied out of it); what must keep or
    store a body takes `bytes(body)`, which does not copy bytes.
    """

    exchange: str
    routing_key: str
    header_payload: bytes
    body: bytes | memoryview
    id: int = field(default_factory=next_message_id)
    _properties: commands.Basic.Properties | None = None

    @property
    def property_flags(self) -> int:
        payload = self.header_payload
        return payload[_FLAGS_OFFSET] << 8 | payload[_FLAGS_OFFSET + 1]

    def has_property(self, flag: int) -> bool:
        return bool(self.property_flags & flag)

    @property
    def properties(self) -> commands.Basic.Properties:
        if self._properties is None:
            self._properties = decode_basic_properties(self.header_payload)
        return self._properties

    @property
    def persistent(self) -> bool:
        """delivery-mode 2, read straight from the header bytes: the three properties before it
        are skipped by their lengths, nothing is decoded."""
        payload = self.header_payload
        flags = self.property_flags
        if not flags & FLAG_DELIVERY_MODE:
            return False
        offset = _FLAGS_OFFSET + 2
        if flags & FLAG_CONTENT_TYPE:
            offset += 1 + payload[offset]
        if flags & FLAG_CONTENT_ENCODING:
            offset += 1 + payload[offset]
        if flags & FLAG_HEADERS:
            offset += 4 + int(_TABLE_SIZE.unpack_from(payload, offset)[0])
        return payload[offset] == PERSISTENT

    @property
    def priority(self) -> int:
        """The `priority` property; 0 when absent (RabbitMQ's default)."""
        if not self.property_flags & FLAG_PRIORITY:
            return 0
        return self.properties.priority or 0

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
    #: This entry is in the store (or in a batch on its way): settling it must delete it there.
    stored: bool = False
    #: When it expires (wall-clock milliseconds, `batonmq.queues.expiry`); None for never.
    expires_at: int | None = None


def _entry_cost() -> int:
    message = Message("", "", b"", b"")
    objects = sys.getsizeof(QueueEntry(message, 0)) + sys.getsizeof(message)
    pointer = struct.calcsize("P")  # the queue's reference to the entry
    return objects + 2 * sys.getsizeof(b"") + pointer


#: What one ready entry costs in memory besides its body (for the management API's queue
#: `memory`): the entry and message objects, their two bytes objects without their content, and
#: the queue's reference. Not counted: the content header's bytes (tens, typically) and that a
#: message routed to several queues is in memory once.
ENTRY_COST: Final = _entry_cost()
