"""The records by which a message published on one worker reaches queues another worker owns
(`batonmq.engine.remotequeue`), and comes back as that worker's answer.

Each is a dataclass with its record kind (`KIND`, registered with `record_kind`),
`encode()` (the payload) and `decode(payload)` (MalformedRecord for a payload that is not one);
slotted, not frozen: one is made for each message that crosses, and a frozen one costs about
four times as much to make. The layouts, all big-endian, with the fields of
`batonmq.cluster.recordfields`:

    16 PUBLISH  !QHB number of the first message (per link, counting from 1; the others
                follow it), count of messages (at least 1, at most MESSAGES_MAX), flags
                (tx 1); [!Q tx group, when flag tx]; names: vhost, exchange, routing key,
                then each queue (at most QUEUES_MAX); then each message: !II content header
                length, body length; content header payload; body
    17 QUEUED   !QQB first number, last number, ok (1: every queue took each message, and
                what was persistent is written; 0: not)
    18 TX_END   !Q tx group: the publishing worker sent every PUBLISH of that group

The content header crosses as the publisher sent it (it was checked where it arrived), and the
body as it is: no property is decoded on the way. One PUBLISH carries the messages of a loop turn
that share their names, transaction group and journal batch, numbered in a row: their names are
written, read and looked up once, and the link frames one record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Final

from batonmq.cluster.peerlink import MalformedRecord, record_kind
from batonmq.cluster.recordfields import Fields, names

PUBLISH: Final = record_kind(16, "publish")
QUEUED: Final = record_kind(17, "queued")
TX_END: Final = record_kind(18, "tx end")

_PUBLISH: Final = struct.Struct("!QHB")
_TX: Final = 1
#: The most queues one PUBLISH names, and the most messages it carries.
QUEUES_MAX: Final = 0xFFFF
MESSAGES_MAX: Final = 0xFFFF
_GROUP: Final = struct.Struct("!Q")
_MESSAGE: Final = struct.Struct("!II")

#: A message as it crosses: its content header payload and its body.
MessageOctets = tuple[bytes, bytes | memoryview]


@dataclass(slots=True)
class Publish:
    """Messages `number`, `number` + 1, ... of their link (one per `messages`), for `queues`
    (of one owner) of `vhost`; part of transaction group `tx_group`, or of none."""

    KIND: ClassVar[int] = PUBLISH

    number: int
    tx_group: int | None
    vhost: str
    exchange: str
    routing_key: str
    queues: tuple[str, ...]
    messages: list[MessageOctets]

    @property
    def octets(self) -> int:
        """The octets of its messages (content headers and bodies)."""
        return sum(len(header) + len(body) for header, body in self.messages)

    def encode(self) -> bytes:
        """The payload; ValueError for a name over 255 octets, more than QUEUES_MAX queues, or
        a count of messages outside 1 to MESSAGES_MAX."""
        queues, messages = self.queues, self.messages
        if len(queues) > QUEUES_MAX:
            raise ValueError(f"{len(queues)} queues: a publish record names at most {QUEUES_MAX}")
        if not 1 <= len(messages) <= MESSAGES_MAX:
            raise ValueError(
                f"{len(messages)} messages: a publish record carries 1 to {MESSAGES_MAX}"
            )
        tx_group = self.tx_group
        parts: list[bytes | memoryview]
        if tx_group is None:
            parts = [_PUBLISH.pack(self.number, len(messages), 0)]
        else:
            parts = [_PUBLISH.pack(self.number, len(messages), _TX), _GROUP.pack(tx_group)]
        parts.append(names((self.vhost, self.exchange, self.routing_key, *queues)))
        pack = _MESSAGE.pack
        for header_payload, body in messages:
            parts += (pack(len(header_payload), len(body)), header_payload, body)
        return b"".join(parts)

    @classmethod
    def decode(cls, payload: bytes) -> Publish:
        fields = Fields(payload)
        number, count, flags = fields.unpack(_PUBLISH)
        if flags & ~_TX:
            raise MalformedRecord(f"unknown publish flags {flags:#x}")
        if count == 0:
            raise MalformedRecord("a publish of no message")
        tx_group = fields.unpack(_GROUP)[0] if flags & _TX else None
        named = fields.names()
        if not 3 <= len(named) <= 3 + QUEUES_MAX:
            raise MalformedRecord(f"a publish naming {len(named)} names")
        unpack, octets = fields.unpack, fields.octets
        messages: list[MessageOctets] = []
        for _ in range(count):
            header_length, body_length = unpack(_MESSAGE)
            messages.append((octets(header_length), octets(body_length)))
        fields.end()
        return cls(number, tx_group, named[0], named[1], named[2], named[3:], messages)


_QUEUED: Final = struct.Struct("!QQB")


@dataclass(slots=True)
class Queued:
    """Messages `first` to `last` (numbers of the link they came on) are on their queues, or
    will never all be (`ok` False: a queue refused one, or a write failed)."""

    KIND: ClassVar[int] = QUEUED

    first: int
    last: int
    ok: bool

    def encode(self) -> bytes:
        return _QUEUED.pack(self.first, self.last, self.ok)

    @classmethod
    def decode(cls, payload: bytes) -> Queued:
        fields = Fields(payload)
        first, last, ok = fields.unpack(_QUEUED)
        fields.end()
        if ok > 1 or first > last:
            raise MalformedRecord(f"queued {first} to {last}, ok {ok}")
        return cls(first, last, bool(ok))


@dataclass(slots=True)
class TxEnd:
    """Every PUBLISH of transaction group `tx_group` was sent: its owner enqueues them now."""

    KIND: ClassVar[int] = TX_END

    tx_group: int

    def encode(self) -> bytes:
        return _GROUP.pack(self.tx_group)

    @classmethod
    def decode(cls, payload: bytes) -> TxEnd:
        fields = Fields(payload)
        [tx_group] = fields.unpack(_GROUP)
        fields.end()
        return cls(tx_group)
