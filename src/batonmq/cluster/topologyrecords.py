"""The records by which the workers of one broker keep a spread virtual host's topology the
same everywhere (`batonmq.model.topology`): a change asked of the home worker, its answer, the
owner step, the change sent to every worker and its acknowledgement, and a snapshot of the
whole topology.

Each is a frozen dataclass with its record kind (`KIND`, registered with `record_kind`),
`encode()` (the payload) and `decode(payload)` (MalformedRecord for a payload that is not one).
The layouts, all big-endian, with the fields of `batonmq.cluster.recordfields` (str8, table,
ref):

    op bodies   1 ExchangeDeclared  !B flags (durable 1, auto_delete 2, internal 4); str8 name;
                                    str8 type; table arguments
                2 ExchangeDeleted   str8 name
                3 QueueDeclared     !B flags (durable 1, auto_delete 2, exclusive 4); ref owner;
                                    str8 name; table arguments
                4 QueueDeleted      str8 name
                5 Bound, 6 Unbound  !B destination kind (0 queue, 1 exchange); str8 source;
                                    str8 destination; str8 routing key; table arguments
    2 TOPOLOGY_REQUEST   !IBB request id, flags (RequestFlags), op code; str8 vhost; op body;
                         ref requester
    3 TOPOLOGY_ANSWER    !IHII request id, reply code (200: done), message count, consumer
                         count; str8 queue name; str8 text (of a refusal)
    4 OWNER_REQUEST      !IBB request id, action (OwnerAction), flags (RequestFlags); str8 vhost;
                         op body 3 (action CREATE) or str8 queue name; ref requester
    5 TOPOLOGY_CHANGE    !QQB home start id, sequence, op code; str8 vhost; op body
    6 TOPOLOGY_ACK       !QQ home start id, sequence; str8 vhost
    7 TOPOLOGY_SNAPSHOT  !QQI home start id, sequence, op count; str8 vhost; per op: !BI op code,
                         body length; op body
    8 SNAPSHOT_ASK       str8 vhost (answered with a TOPOLOGY_SNAPSHOT)
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Final

from batonmq.cluster.peerlink import MalformedRecord, record_kind
from batonmq.cluster.recordfields import Fields, ref, str8, table, text8
from batonmq.model.destination import Destination, DestinationKind
from batonmq.model.topology import (
    Bound,
    ConnectionRef,
    ExchangeDeclared,
    ExchangeDeleted,
    QueueDeclared,
    QueueDeleted,
    TopologyOp,
    Unbound,
)

TOPOLOGY_REQUEST: Final = record_kind(2, "topology request")
TOPOLOGY_ANSWER: Final = record_kind(3, "topology answer")
OWNER_REQUEST: Final = record_kind(4, "owner request")
TOPOLOGY_CHANGE: Final = record_kind(5, "topology change")
TOPOLOGY_ACK: Final = record_kind(6, "topology ack")
TOPOLOGY_SNAPSHOT: Final = record_kind(7, "topology snapshot")
SNAPSHOT_ASK: Final = record_kind(8, "snapshot ask")

_FLAGS: Final = struct.Struct("!B")
_DURABLE: Final = 1
_AUTO_DELETE: Final = 2
_INTERNAL: Final = 4  # an exchange's
_EXCLUSIVE: Final = 4  # a queue's
_DESTINATION_KINDS: Final = (DestinationKind.QUEUE, DestinationKind.EXCHANGE)

# Op bodies -----------------------------------------------------------------------------------


def _flags(*bits: tuple[bool, int]) -> bytes:
    return _FLAGS.pack(sum(bit for on, bit in bits if on))


def _read_flags(fields: Fields, known: int) -> int:
    [flags] = fields.unpack(_FLAGS)
    if flags & ~known:
        raise MalformedRecord(f"unknown flags {flags:#x}")
    return int(flags)


def _exchange_declared(op: ExchangeDeclared) -> bytes:
    flags = _flags((op.durable, _DURABLE), (op.auto_delete, _AUTO_DELETE), (op.internal, _INTERNAL))
    return flags + str8(op.name) + str8(op.type_name) + table(op.arguments)


def _read_exchange_declared(fields: Fields) -> ExchangeDeclared:
    flags = _read_flags(fields, _DURABLE | _AUTO_DELETE | _INTERNAL)
    name, type_name = fields.str8(), fields.str8()
    return ExchangeDeclared(
        name,
        type_name,
        durable=bool(flags & _DURABLE),
        auto_delete=bool(flags & _AUTO_DELETE),
        internal=bool(flags & _INTERNAL),
        arguments=fields.table(),
    )


def _queue_declared(op: QueueDeclared) -> bytes:
    exclusive = op.exclusive_owner is not None
    flags = _flags((op.durable, _DURABLE), (op.auto_delete, _AUTO_DELETE), (exclusive, _EXCLUSIVE))
    return flags + ref(op.exclusive_owner) + str8(op.name) + table(op.arguments)


def _read_queue_declared(fields: Fields) -> QueueDeclared:
    flags = _read_flags(fields, _DURABLE | _AUTO_DELETE | _EXCLUSIVE)
    owner = fields.ref()
    if bool(flags & _EXCLUSIVE) != (owner is not None):
        raise MalformedRecord("a queue exclusive without an owner, or owned but not exclusive")
    return QueueDeclared(
        fields.str8(),
        durable=bool(flags & _DURABLE),
        auto_delete=bool(flags & _AUTO_DELETE),
        exclusive_owner=owner,
        arguments=fields.table(),
    )


def _binding(op: Bound | Unbound) -> bytes:
    kind = _DESTINATION_KINDS.index(op.destination.kind)
    return (
        _FLAGS.pack(kind)
        + str8(op.source)
        + str8(op.destination.name)
        + str8(op.routing_key)
        + table(op.arguments)
    )


def _read_binding(cls: type[Bound] | type[Unbound]) -> Callable[[Fields], TopologyOp]:
    def read(fields: Fields) -> TopologyOp:
        [kind] = fields.unpack(_FLAGS)
        if kind >= len(_DESTINATION_KINDS):
            raise MalformedRecord(f"destination kind {kind}")
        source, destination = fields.str8(), fields.str8()
        routing_key = fields.str8()
        return cls(
            source,
            Destination(_DESTINATION_KINDS[kind], destination),
            routing_key,
            fields.table(),
        )

    return read


_CODES: Final[dict[type[TopologyOp], int]] = {
    ExchangeDeclared: 1,
    ExchangeDeleted: 2,
    QueueDeclared: 3,
    QueueDeleted: 4,
    Bound: 5,
    Unbound: 6,
}
_READERS: Final[dict[int, Callable[[Fields], TopologyOp]]] = {
    1: _read_exchange_declared,
    2: lambda fields: ExchangeDeleted(fields.str8()),
    3: _read_queue_declared,
    4: lambda fields: QueueDeleted(fields.str8()),
    5: _read_binding(Bound),
    6: _read_binding(Unbound),
}


def op_code(op: TopologyOp) -> int:
    return _CODES[type(op)]


def op_body(op: TopologyOp) -> bytes:
    """`op` without its code: ValueError when a name is over 255 octets."""
    match op:
        case ExchangeDeclared():
            return _exchange_declared(op)
        case ExchangeDeleted() | QueueDeleted():
            return str8(op.name)
        case QueueDeclared():
            return _queue_declared(op)
        case Bound() | Unbound():
            return _binding(op)


def read_op(code: int, fields: Fields) -> TopologyOp:
    """The op of `code` whose body `fields` holds next."""
    reader = _READERS.get(code)
    if reader is None:
        raise MalformedRecord(f"topology op code {code}")
    return reader(fields)


# Records -------------------------------------------------------------------------------------


class RequestFlags(enum.IntFlag):
    NONE = 0
    #: queue.delete if-unused / exchange.delete if-unused.
    IF_UNUSED = 1
    #: queue.delete if-empty.
    IF_EMPTY = 2
    #: The queue's owner removed it already (auto-delete, x-expires, exclusive owner gone): the
    #: home worker skips the owner step.
    OWNER_DONE = 4


def _read_request_flags(flags: int) -> RequestFlags:
    if flags & ~(RequestFlags.IF_UNUSED | RequestFlags.IF_EMPTY | RequestFlags.OWNER_DONE):
        raise MalformedRecord(f"unknown request flags {flags:#x}")
    return RequestFlags(flags)


_REQUEST: Final = struct.Struct("!IBB")


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A worker asks the home worker of `vhost` to make change `op` (for the client connection
    `requester`, None when no connection asks)."""

    KIND: ClassVar[int] = TOPOLOGY_REQUEST

    request_id: int
    flags: RequestFlags
    vhost: str
    op: TopologyOp
    requester: ConnectionRef | None

    def encode(self) -> bytes:
        head = _REQUEST.pack(self.request_id, self.flags, op_code(self.op))
        return head + str8(self.vhost) + op_body(self.op) + ref(self.requester)

    @classmethod
    def decode(cls, payload: bytes) -> TopologyRequest:
        fields = Fields(payload)
        request_id, flags, code = fields.unpack(_REQUEST)
        vhost = fields.str8()
        record = cls(
            request_id, _read_request_flags(flags), vhost, read_op(code, fields), fields.ref()
        )
        fields.end()
        return record


_ANSWER: Final = struct.Struct("!IHII")


@dataclass(frozen=True, slots=True)
class TopologyAnswer:
    """The answer to request `request_id` (a TOPOLOGY_REQUEST or an OWNER_REQUEST): reply code
    200 and, for a queue, its name and counts; else the refusal's reply code and text."""

    KIND: ClassVar[int] = TOPOLOGY_ANSWER

    request_id: int
    reply_code: int
    message_count: int
    consumer_count: int
    queue: str
    text: str

    def encode(self) -> bytes:
        head = _ANSWER.pack(
            self.request_id, self.reply_code, self.message_count, self.consumer_count
        )
        return head + str8(self.queue) + text8(self.text)

    @classmethod
    def decode(cls, payload: bytes) -> TopologyAnswer:
        fields = Fields(payload)
        request_id, reply_code, message_count, consumer_count = fields.unpack(_ANSWER)
        queue, text = fields.str8(), fields.str8()
        record = cls(request_id, reply_code, message_count, consumer_count, queue, text)
        fields.end()
        return record


class OwnerAction(enum.IntEnum):
    """What an OWNER_REQUEST asks of the worker that owns a queue."""

    CREATE = 1
    DELETE = 2
    COUNTS = 3
    #: The counts, and the queue was used (a redeclare: x-expires starts again).
    COUNTS_TOUCH = 4
    PURGE = 5


_OWNER_REQUEST: Final = struct.Struct("!IBB")


@dataclass(frozen=True, slots=True)
class OwnerRequest:
    """A worker asks the owner of a queue of `vhost` to act on it: CREATE carries the queue's
    declaration, every other action its name."""

    KIND: ClassVar[int] = OWNER_REQUEST

    request_id: int
    action: OwnerAction
    flags: RequestFlags
    vhost: str
    queue: QueueDeclared | str
    requester: ConnectionRef | None

    def encode(self) -> bytes:
        creates = self.action is OwnerAction.CREATE
        if creates != isinstance(self.queue, QueueDeclared):
            raise ValueError("an owner request creates a queue from its declaration, only")
        head = _OWNER_REQUEST.pack(self.request_id, self.action, self.flags)
        queue = self.queue
        body = _queue_declared(queue) if isinstance(queue, QueueDeclared) else str8(queue)
        return head + str8(self.vhost) + body + ref(self.requester)

    @classmethod
    def decode(cls, payload: bytes) -> OwnerRequest:
        fields = Fields(payload)
        request_id, action, flags = fields.unpack(_OWNER_REQUEST)
        try:
            action = OwnerAction(action)
        except ValueError:
            raise MalformedRecord(f"owner action {action}") from None
        vhost = fields.str8()
        queue: QueueDeclared | str
        queue = _read_queue_declared(fields) if action is OwnerAction.CREATE else fields.str8()
        record = cls(
            request_id,
            action,
            _read_request_flags(flags),
            vhost,
            queue,
            fields.ref(),
        )
        fields.end()
        return record


_CHANGE: Final = struct.Struct("!QQB")


@dataclass(frozen=True, slots=True)
class TopologyChange:
    """The home worker (process `home_start`) made change number `sequence` of `vhost`: every
    worker applies it, in sequence order."""

    KIND: ClassVar[int] = TOPOLOGY_CHANGE

    home_start: int
    sequence: int
    vhost: str
    op: TopologyOp

    def encode(self) -> bytes:
        head = _CHANGE.pack(self.home_start, self.sequence, op_code(self.op))
        return head + str8(self.vhost) + op_body(self.op)

    @classmethod
    def decode(cls, payload: bytes) -> TopologyChange:
        fields = Fields(payload)
        home_start, sequence, code = fields.unpack(_CHANGE)
        vhost = fields.str8()
        record = cls(home_start, sequence, vhost, read_op(code, fields))
        fields.end()
        return record


_ACK: Final = struct.Struct("!QQ")


@dataclass(frozen=True, slots=True)
class TopologyAck:
    """A worker applied change `sequence` of `vhost` from home process `home_start`."""

    KIND: ClassVar[int] = TOPOLOGY_ACK

    home_start: int
    sequence: int
    vhost: str

    def encode(self) -> bytes:
        return _ACK.pack(self.home_start, self.sequence) + str8(self.vhost)

    @classmethod
    def decode(cls, payload: bytes) -> TopologyAck:
        fields = Fields(payload)
        home_start, sequence = fields.unpack(_ACK)
        record = cls(home_start, sequence, fields.str8())
        fields.end()
        return record


_SNAPSHOT: Final = struct.Struct("!QQI")
_SNAPSHOT_OP: Final = struct.Struct("!BI")


@dataclass(frozen=True, slots=True)
class TopologySnapshot:
    """The whole topology of `vhost` as ops, as of change `sequence` of home process
    `home_start`."""

    KIND: ClassVar[int] = TOPOLOGY_SNAPSHOT

    home_start: int
    sequence: int
    vhost: str
    ops: tuple[TopologyOp, ...]

    def encode(self) -> bytes:
        parts = [_SNAPSHOT.pack(self.home_start, self.sequence, len(self.ops)), str8(self.vhost)]
        for op in self.ops:
            body = op_body(op)
            parts += (_SNAPSHOT_OP.pack(op_code(op), len(body)), body)
        return b"".join(parts)

    @classmethod
    def decode(cls, payload: bytes) -> TopologySnapshot:
        fields = Fields(payload)
        home_start, sequence, count = fields.unpack(_SNAPSHOT)
        vhost = fields.str8()
        ops = []
        for _ in range(count):
            code, length = fields.unpack(_SNAPSHOT_OP)
            body = Fields(fields.octets(length))
            ops.append(read_op(code, body))
            body.end()
        fields.end()
        return cls(home_start, sequence, vhost, tuple(ops))


@dataclass(frozen=True, slots=True)
class SnapshotAsk:
    """A home worker that started asks a worker for its snapshot of `vhost`."""

    KIND: ClassVar[int] = SNAPSHOT_ASK

    vhost: str

    def encode(self) -> bytes:
        return str8(self.vhost)

    @classmethod
    def decode(cls, payload: bytes) -> SnapshotAsk:
        fields = Fields(payload)
        record = cls(fields.str8())
        fields.end()
        return record
