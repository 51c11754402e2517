"""The records by which a message published on one worker reaches queues another worker owns
(`batonmq.engine.remotequeue`), and comes back as that worker's answer.

Each is a dataclass with its record kind (`KIND`, registered with `record_kind`),
`encode()` (the payload) and `decode(payload)` (MalformedRecord for a payload that is not one);
slotted, not frozen: one is made for each message that crosses, and a frozen one costs about
four times as much to make. The layouts, all big-endian, with the fields of
`batonmq.cluster.recordfields`:

    16 PUBLISH  !QB number (per link, counting from 1), flags (tx 1); [!Q tx group, when
                flag tx]; names: vhost, exchange, routing key, then each queue (at most
                QUEUES_MAX); !I content header length; content header payload; body: the
                rest of the payload
    17 QUEUED   !QQB first number, last number, ok (1: every queue took each message, and
                what was persistent is written; 0: not)
    18 TX_END   !Q tx group: the publishing worker sent every PUBLISH of that group

The content header crosses as the publisher sent it (it was checked where it arrived), and the
body as it is: no property is decoded on the way.
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

_PUBLISH: Final = struct.Struct("!QB")
_TX: Final = 1
#: The most queues one PUBLISH names.
QUEUES_MAX: Final = 0xFFFF
_GROUP: Final = struct.Struct("!Q")
_LENGTH: Final = struct.Struct("!I")


@dataclass(slots=True)
class Publish:
    """Message `number` of its link, for `queues` (of one owner) of `vhost`; part of
    transaction group `tx_group`, or of none."""

    KIND: ClassVar[int] = PUBLISH

    number: int
    tx_group: int | None
    vhost: str
    exchange: str
    routing_key: str
    queues: tuple[str, ...]
    header_payload: bytes
    body: bytes | memoryview

    def encode(self) -> bytes:
        """The payload; ValueError for a name over 255 octets or more than QUEUES_MAX queues."""
        queues = self.queues
        if len(queues) > QUEUES_MAX:
            raise ValueError(f"{len(queues)} queues: a publish record names at most {QUEUES_MAX}")
        tx_group = self.tx_group
        if tx_group is None:
            head = _PUBLISH.pack(self.number, 0)
        else:
            head = _PUBLISH.pack(self.number, _TX) + _GROUP.pack(tx_group)
        return b"".join(
            [
                head,
                names((self.vhost, self.exchange, self.routing_key, *queues)),
                _LENGTH.pack(len(self.header_payload)),
                self.header_payload,
                self.body,
            ]
        )

    @classmethod
    def decode(cls, payload: bytes) -> Publish:
        fields = Fields(payload)
        number, flags = fields.unpack(_PUBLISH)
        if flags & ~_TX:
            raise MalformedRecord(f"unknown publish flags {flags:#x}")
        tx_group = fields.unpack(_GROUP)[0] if flags & _TX else None
        named = fields.names()
        if not 3 <= len(named) <= 3 + QUEUES_MAX:
            raise MalformedRecord(f"a publish naming {len(named)} names")
        [length] = fields.unpack(_LENGTH)
        header_payload = fields.octets(length)
        return cls(
            number,
            tx_group,
            named[0],
            named[1],
            named[2],
            named[3:],
            header_payload,
            fields.rest(),
        )


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
