"""The records by which a client of one worker consumes from, or gets from, a queue another
worker owns (`batonmq.engine.remoteconsumers` on the consuming worker,
`batonmq.engine.linkedconsumers` on the owner).

Each is a dataclass with its record kind (`KIND`, registered with `record_kind`),
`encode()` (the payload) and `decode(payload)` (MalformedRecord for a payload that is not one);
slotted, not frozen, as the publish records (`batonmq.cluster.publishrecords`). The layouts,
all big-endian, with the fields of `batonmq.cluster.recordfields` (str8, table, ref):

    19 CONSUME      !QBIII consumer id (the consuming worker's), flags (no_ack 1, exclusive 2),
                    credit, prefetch count, global prefetch; str8 vhost; str8 queue; str8 tag;
                    ref requester (its connection: exclusive queues); table arguments
    20 CONSUMED     !QH consumer id, reply code (0: the consumer runs); str8 text (of a refusal)
    21 DELIVER      !QH consumer id, count of messages (1 to DELIVERIES_MAX); then each: !QB
                    delivery id (the owner's; 0: settled there already, no_ack),
                    redelivered; content
    22 CREDIT       !QI consumer id, how many more deliveries it takes
    23 SETTLE       !BH outcome (0 ack, 1 requeue, 2 reject), count; per run: !QQ first, last
                    delivery id (inclusive)
    24 CANCEL       !Q consumer id: the consuming worker's consumer is gone
    25 CANCELLED    !QB consumer id, slow (1: it was a slow consumer, its connection is to be
                    closed); when slow: str8 the threshold's setting; !QQ its limit, the
                    queue's value
    26 GET          !QB request id, flags (no_ack 1); str8 vhost; str8 queue; ref requester
    27 GOT          !QHB request id, reply code (0: answered), found; then str8 text (a
                    refusal), or, when found, !QQB delivery id (0 with no_ack), message count,
                    redelivered; content

content: names: exchange, routing key; !II content header length, body length; content header
payload; body. The content header crosses as the publisher sent it, and the body as it is: no
property is decoded on the way (as a PUBLISH carries them). One DELIVER carries the messages of a
loop turn for one consumer (`batonmq.engine.linkedconsumers`).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import ClassVar, Final

from pamqp.common import FieldTable

from batonmq.cluster.peerlink import MalformedRecord, record_kind
from batonmq.cluster.recordfields import Fields, names, ref, str8, table, text8
from batonmq.model.topology import ConnectionRef

CONSUME: Final = record_kind(19, "consume")
CONSUMED: Final = record_kind(20, "consumed")
DELIVER: Final = record_kind(21, "deliver")
CREDIT: Final = record_kind(22, "credit")
SETTLE: Final = record_kind(23, "settle")
CANCEL: Final = record_kind(24, "cancel")
CANCELLED: Final = record_kind(25, "cancelled")
GET: Final = record_kind(26, "get")
GOT: Final = record_kind(27, "got")

_CONSUME: Final = struct.Struct("!QBIII")
_NO_ACK: Final = 1
_EXCLUSIVE: Final = 2
_ANSWER: Final = struct.Struct("!QH")
_DELIVER: Final = struct.Struct("!QH")
_DELIVERED: Final = struct.Struct("!QB")
_CREDIT: Final = struct.Struct("!QI")
_SETTLE: Final = struct.Struct("!BH")
_RUN: Final = struct.Struct("!QQ")
_ID: Final = struct.Struct("!Q")
_CANCELLED: Final = struct.Struct("!QB")
_OVER: Final = struct.Struct("!QQ")
_GET: Final = struct.Struct("!QB")
_GOT: Final = struct.Struct("!QHB")
_FOUND: Final = struct.Struct("!QQB")
_LENGTHS: Final = struct.Struct("!II")
#: The most runs of delivery ids one SETTLE carries, and the most messages one DELIVER does.
RUNS_MAX: Final = 0xFFFF
DELIVERIES_MAX: Final = 0xFFFF


class SettleOutcome(enum.IntEnum):
    """How the deliveries a SETTLE names are settled (`batonmq.engine.outcome.Outcome`)."""

    ACK = 0
    REQUEUE = 1
    REJECT = 2


@dataclass(slots=True)
class Content:
    """A message as it crosses: where it was published, its content header and its body."""

    exchange: str
    routing_key: str
    header_payload: bytes
    body: bytes | memoryview

    @property
    def octets(self) -> int:
        """The octets of its content header and body."""
        return len(self.header_payload) + len(self.body)

    def parts(self) -> tuple[bytes, bytes, bytes, bytes | memoryview]:
        header_payload, body = self.header_payload, self.body
        return (
            names((self.exchange, self.routing_key)),
            _LENGTHS.pack(len(header_payload), len(body)),
            header_payload,
            body,
        )

    @classmethod
    def read(cls, fields: Fields) -> Content:
        named = fields.names()
        if len(named) != 2:
            raise MalformedRecord(f"content naming {len(named)} names, not exchange and key")
        exchange, routing_key = named
        header_length, body_length = fields.unpack(_LENGTHS)
        return cls(exchange, routing_key, fields.octets(header_length), fields.octets(body_length))


def _bit(value: int, name: str) -> bool:
    if value > 1:
        raise MalformedRecord(f"{name} {value}")
    return bool(value)


@dataclass(slots=True)
class Consume:
    """Consumer `consumer` of the consuming worker asks to consume queue `queue` of `vhost`,
    taking `credit` deliveries before it says it takes more."""

    KIND: ClassVar[int] = CONSUME

    consumer: int
    no_ack: bool
    exclusive: bool
    credit: int
    prefetch_count: int
    global_prefetch: int
    vhost: str
    queue: str
    tag: str
    requester: ConnectionRef | None
    arguments: FieldTable

    def encode(self) -> bytes:
        flags = (_NO_ACK if self.no_ack else 0) | (_EXCLUSIVE if self.exclusive else 0)
        return b"".join(
            (
                _CONSUME.pack(
                    self.consumer, flags, self.credit, self.prefetch_count, self.global_prefetch
                ),
                str8(self.vhost),
                str8(self.queue),
                str8(self.tag),
                ref(self.requester),
                table(self.arguments),
            )
        )

    @classmethod
    def decode(cls, payload: bytes) -> Consume:
        fields = Fields(payload)
        consumer, flags, credit, prefetch_count, global_prefetch = fields.unpack(_CONSUME)
        if flags & ~(_NO_ACK | _EXCLUSIVE):
            raise MalformedRecord(f"unknown consume flags {flags:#x}")
        vhost, queue, tag = fields.str8(), fields.str8(), fields.str8()
        requester = fields.ref()
        arguments = fields.table()
        fields.end()
        return cls(
            consumer,
            bool(flags & _NO_ACK),
            bool(flags & _EXCLUSIVE),
            credit,
            prefetch_count,
            global_prefetch,
            vhost,
            queue,
            tag,
            requester,
            arguments,
        )


@dataclass(slots=True)
class Consumed:
    """The owner's answer to a CONSUME: reply code 0, the consumer runs; else the AMQP error
    that refuses it (`text` cut to a short string)."""

    KIND: ClassVar[int] = CONSUMED

    consumer: int
    reply_code: int
    text: str

    def encode(self) -> bytes:
        return _ANSWER.pack(self.consumer, self.reply_code) + text8(self.text)

    @classmethod
    def decode(cls, payload: bytes) -> Consumed:
        fields = Fields(payload)
        consumer, reply_code = fields.unpack(_ANSWER)
        text = fields.str8()
        fields.end()
        return cls(consumer, reply_code, text)


@dataclass(slots=True)
class Deliver:
    """Messages for consumer `consumer`: each its delivery id (settled by naming it; 0: settled
    already), whether it is redelivered, and its content."""

    KIND: ClassVar[int] = DELIVER

    consumer: int
    deliveries: list[tuple[int, bool, Content]]

    def encode(self) -> bytes:
        """The payload; ValueError for a count of messages outside 1 to DELIVERIES_MAX."""
        deliveries = self.deliveries
        if not 1 <= len(deliveries) <= DELIVERIES_MAX:
            raise ValueError(
                f"{len(deliveries)} messages: a deliver record carries 1 to {DELIVERIES_MAX}"
            )
        parts: list[bytes | memoryview] = [_DELIVER.pack(self.consumer, len(deliveries))]
        pack = _DELIVERED.pack
        for delivery, redelivered, content in deliveries:
            parts.append(pack(delivery, redelivered))
            parts += content.parts()
        return b"".join(parts)

    @classmethod
    def decode(cls, payload: bytes) -> Deliver:
        fields = Fields(payload)
        consumer, count = fields.unpack(_DELIVER)
        if count == 0:
            raise MalformedRecord("a deliver of no message")
        deliveries = []
        for _ in range(count):
            delivery, redelivered = fields.unpack(_DELIVERED)
            deliveries.append((delivery, _bit(redelivered, "redelivered"), Content.read(fields)))
        fields.end()
        return cls(consumer, deliveries)


@dataclass(slots=True)
class Credit:
    """Consumer `consumer` takes `more` deliveries besides those it was given room for."""

    KIND: ClassVar[int] = CREDIT

    consumer: int
    more: int

    def encode(self) -> bytes:
        return _CREDIT.pack(self.consumer, self.more)

    @classmethod
    def decode(cls, payload: bytes) -> Credit:
        fields = Fields(payload)
        consumer, more = fields.unpack(_CREDIT)
        fields.end()
        return cls(consumer, more)


@dataclass(slots=True)
class Settle:
    """Deliveries of the owner, as runs (first, last) of ids, settled by `outcome`."""

    KIND: ClassVar[int] = SETTLE

    outcome: SettleOutcome
    runs: tuple[tuple[int, int], ...]

    def encode(self) -> bytes:
        """The payload; ValueError for more than RUNS_MAX runs."""
        if len(self.runs) > RUNS_MAX:
            raise ValueError(f"{len(self.runs)} runs: a settle record carries at most {RUNS_MAX}")
        head = _SETTLE.pack(self.outcome, len(self.runs))
        return head + b"".join(_RUN.pack(first, last) for first, last in self.runs)

    @classmethod
    def decode(cls, payload: bytes) -> Settle:
        fields = Fields(payload)
        outcome, count = fields.unpack(_SETTLE)
        try:
            settled = SettleOutcome(outcome)
        except ValueError:
            raise MalformedRecord(f"settle outcome {outcome}") from None
        runs = tuple(fields.unpack(_RUN) for _ in range(count))
        fields.end()
        if any(first > last or first == 0 for first, last in runs):
            raise MalformedRecord(f"settle runs {runs[:4]}")
        return cls(settled, runs)


def runs_of(ids: list[int]) -> tuple[tuple[int, int], ...]:
    """Delivery ids as runs of consecutive ones, in the order given."""
    runs: list[list[int]] = []
    for delivery in ids:
        if runs and runs[-1][1] + 1 == delivery:
            runs[-1][1] = delivery
        else:
            runs.append([delivery, delivery])
    return tuple((first, last) for first, last in runs)


@dataclass(slots=True)
class Cancel:
    """The consuming worker's consumer `consumer` is gone (basic.cancel, a closed channel)."""

    KIND: ClassVar[int] = CANCEL

    consumer: int

    def encode(self) -> bytes:
        return _ID.pack(self.consumer)

    @classmethod
    def decode(cls, payload: bytes) -> Cancel:
        fields = Fields(payload)
        [consumer] = fields.unpack(_ID)
        fields.end()
        return cls(consumer)


@dataclass(frozen=True, slots=True)
class OverThreshold:
    """The slow consumer threshold a consumer's queue went over: its setting, its limit, the
    queue's value (`batonmq.engine.slowconsumers.Breach`)."""

    setting: str
    limit: int
    value: int


@dataclass(slots=True)
class Cancelled:
    """The owner cancelled consumer `consumer`: its queue was deleted; or, with `slow`, the
    consumer was slow, and the consuming worker closes its connection (Qpid's slow consumer
    disconnect, `batonmq.engine.slowconsumers`)."""

    KIND: ClassVar[int] = CANCELLED

    consumer: int
    slow: OverThreshold | None = None

    def encode(self) -> bytes:
        slow = self.slow
        head = _CANCELLED.pack(self.consumer, slow is not None)
        if slow is None:
            return head
        return b"".join((head, str8(slow.setting), _OVER.pack(slow.limit, slow.value)))

    @classmethod
    def decode(cls, payload: bytes) -> Cancelled:
        fields = Fields(payload)
        consumer, slow = fields.unpack(_CANCELLED)
        over = None
        if _bit(slow, "cancelled slow"):
            setting = fields.str8()
            limit, value = fields.unpack(_OVER)
            over = OverThreshold(setting, limit, value)
        fields.end()
        return cls(consumer, over)


@dataclass(slots=True)
class Get:
    """basic.get of queue `queue` of `vhost`, asked by `requester`."""

    KIND: ClassVar[int] = GET

    request: int
    no_ack: bool
    vhost: str
    queue: str
    requester: ConnectionRef | None

    def encode(self) -> bytes:
        head = _GET.pack(self.request, _NO_ACK if self.no_ack else 0)
        return b"".join((head, str8(self.vhost), str8(self.queue), ref(self.requester)))

    @classmethod
    def decode(cls, payload: bytes) -> Get:
        fields = Fields(payload)
        request, flags = fields.unpack(_GET)
        no_ack = _bit(flags, "get flags")
        vhost, queue = fields.str8(), fields.str8()
        requester = fields.ref()
        fields.end()
        return cls(request, no_ack, vhost, queue, requester)


@dataclass(slots=True)
class Found:
    """The message a GET took: settled by naming `delivery` (0: settled already)."""

    delivery: int
    message_count: int
    redelivered: bool
    content: Content


@dataclass(slots=True)
class Got:
    """The owner's answer to GET `request`: a message (`found`), none (get-empty), or the AMQP
    error that refuses it (reply code not 0, `text`)."""

    KIND: ClassVar[int] = GOT

    request: int
    reply_code: int
    text: str
    found: Found | None

    def encode(self) -> bytes:
        found = self.found
        head = _GOT.pack(self.request, self.reply_code, found is not None)
        if self.reply_code:
            return head + text8(self.text)
        if found is None:
            return head
        delivery = _FOUND.pack(found.delivery, found.message_count, found.redelivered)
        return b"".join([head, delivery, *found.content.parts()])

    @classmethod
    def decode(cls, payload: bytes) -> Got:
        fields = Fields(payload)
        request, reply_code, found = fields.unpack(_GOT)
        if _bit(found, "got found") and reply_code:
            raise MalformedRecord("a refused get that found a message")
        if reply_code:
            text = fields.str8()
            fields.end()
            return cls(request, reply_code, text, None)
        if not found:
            fields.end()
            return cls(request, 0, "", None)
        delivery, message_count, redelivered = fields.unpack(_FOUND)
        content = Content.read(fields)
        fields.end()
        return cls(
            request,
            0,
            "",
            Found(delivery, message_count, _bit(redelivered, "redelivered"), content),
        )
