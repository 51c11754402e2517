"""The records that keep a spread virtual host's topology the same on every worker
(`batonmq.cluster.topologyrecords`): every op and record comes back as it went, through the
link's reader cut at any octet; names are AMQP short strings; a payload that is not a record
is refused with MalformedRecord, never anything else."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batonmq.cluster.peerlink import MalformedRecord
from batonmq.cluster.recordfields import Fields, str8
from batonmq.cluster.topologyrecords import (
    OwnerAction,
    OwnerRequest,
    RequestFlags,
    SnapshotAsk,
    TopologyAck,
    TopologyAnswer,
    TopologyChange,
    TopologyRequest,
    TopologySnapshot,
    op_body,
)
from batonmq.model.destination import Destination
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
from tests.property.test_codec import field_tables, same, short_strings

names = short_strings()
refs = st.none() | st.builds(
    ConnectionRef, st.integers(0, 0xFFFE), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)
)
destinations = st.builds(Destination.queue, names) | st.builds(Destination.exchange, names)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
request_flags = st.sampled_from(list(RequestFlags))

queue_declared = st.builds(QueueDeclared, names, st.booleans(), st.booleans(), refs, field_tables)
ops: st.SearchStrategy[TopologyOp] = st.one_of(
    st.builds(
        ExchangeDeclared, names, names, st.booleans(), st.booleans(), st.booleans(), field_tables
    ),
    st.builds(ExchangeDeleted, names),
    queue_declared,
    st.builds(QueueDeleted, names),
    st.builds(Bound, names, destinations, names, field_tables),
    st.builds(Unbound, names, destinations, names, field_tables),
)


@st.composite
def owner_requests(draw: st.DrawFn) -> OwnerRequest:
    action = draw(st.sampled_from(list(OwnerAction)))
    queue = draw(queue_declared if action is OwnerAction.CREATE else names)
    return OwnerRequest(draw(u32), action, draw(request_flags), draw(names), queue, draw(refs))


Record = (
    TopologyRequest
    | TopologyAnswer
    | OwnerRequest
    | TopologyChange
    | TopologyAck
    | TopologySnapshot
    | SnapshotAsk
)
records: st.SearchStrategy[Record] = st.one_of(
    st.builds(TopologyRequest, u32, request_flags, names, ops, refs),
    st.builds(TopologyAnswer, u32, st.integers(0, 0xFFFF), u32, u32, names, names),
    owner_requests(),
    st.builds(TopologyChange, u64, u64, names, ops),
    st.builds(TopologyAck, u64, u64, names),
    st.builds(TopologySnapshot, u64, u64, names, st.lists(ops, max_size=5).map(tuple)),
    st.builds(SnapshotAsk, names),
)
RECORD_CLASSES: list[type[Record]] = [
    TopologyRequest,
    TopologyAnswer,
    OwnerRequest,
    TopologyChange,
    TopologyAck,
    TopologySnapshot,
    SnapshotAsk,
]


def same_record(left: object, right: object) -> bool:
    """Equal field by field; field tables by value and kind (`same`), since pamqp may choose
    a wider integer type than a value came from."""
    if dataclasses.is_dataclass(left) and not isinstance(left, type):
        return type(left) is type(right) and all(
            same_record(getattr(left, field.name), getattr(right, field.name))
            for field in dataclasses.fields(left)
        )
    if isinstance(left, tuple):
        return (
            isinstance(right, tuple)
            and len(left) == len(right)
            and all(same_record(a, b) for a, b in zip(left, right, strict=True))
        )
    if isinstance(left, dict):
        return same(left, right)
    return type(left) is type(right) and left == right


DECODERS: dict[int, Callable[[bytes], Record]] = {cls.KIND: cls.decode for cls in RECORD_CLASSES}


@settings(max_examples=200, deadline=None)
@given(records)
def test_a_payload_cut_short_is_malformed(record: Record) -> None:
    """A payload is always whole when it is decoded: a short one is not a record."""
    payload = record.encode()
    for cut in range(len(payload)):
        with pytest.raises(MalformedRecord):
            type(record).decode(payload[:cut])
    with pytest.raises(MalformedRecord, match="after a record's end"):
        type(record).decode(payload + b"\x00")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RECORD_CLASSES), st.binary(max_size=120))
def test_any_payload_decodes_or_is_malformed(cls: type[Record], payload: bytes) -> None:
    """What a peer sends is decoded or refused as MalformedRecord (which closes the link),
    never anything else."""
    with contextlib.suppress(MalformedRecord):
        cls.decode(payload)


NAME_255 = "é" * 127 + "n"  # 255 octets of UTF-8 in 128 characters


def test_names_of_255_octets_round_trip() -> None:
    """AMQP 0-9-1 §4.2.5.3: a short string holds up to 255 octets; names of exchanges, queues
    and virtual hosts, and routing keys, are short strings."""
    assert len(NAME_255.encode()) == 255
    ref = ConnectionRef(3, 2**64 - 1, 2**64 - 1)
    sent: list[Record] = [
        TopologyRequest(
            7,
            RequestFlags.IF_UNUSED | RequestFlags.IF_EMPTY,
            NAME_255,
            Bound(NAME_255, Destination.exchange(NAME_255), NAME_255, {}),
            ref,
        ),
        TopologyChange(1, 2, NAME_255, ExchangeDeclared(NAME_255, NAME_255, True, True, True, {})),
        OwnerRequest(
            8,
            OwnerAction.CREATE,
            RequestFlags.NONE,
            NAME_255,
            QueueDeclared(NAME_255, True, False, ref, {}),
            None,
        ),
        TopologyAnswer(9, 200, 1, 2, NAME_255, NAME_255),
        TopologySnapshot(
            1,
            2,
            NAME_255,
            (QueueDeleted(NAME_255), Unbound(NAME_255, Destination.queue(NAME_255), NAME_255, {})),
        ),
    ]
    for record in sent:
        assert same_record(type(record).decode(record.encode()), record)


EVERY_FIELD_TYPE = {
    "boolean": True,
    "short-short": -128,
    "short": -32768,
    "short unsigned": 65535,
    "long": -(2**31),
    "long unsigned": 2**32 - 1,
    "long-long": 2**63 - 1,
    "float": 1.5,
    "decimal": Decimal("-3.14"),
    "long string": "text",
    "byte array": bytearray(b"\x00\xff"),
    "timestamp": datetime.datetime(2024, 2, 29, 12, 0, tzinfo=datetime.UTC),
    "table": {"nested": {"deeper": 1}},
    "array": [1, "a", [None], {"k": False}],
    "void": None,
}


def test_a_table_with_every_field_type_round_trips() -> None:
    """AMQP 0-9-1 §4.2.5.5 with RabbitMQ's errata types, every one that pamqp encodes
    (t b s u I i l f D S x T F A V): declare and binding arguments cross as they were given."""
    op = ExchangeDeclared("x", "headers", True, False, False, EVERY_FIELD_TYPE)
    change = TopologyChange(1, 1, "/", op)
    assert same_record(TopologyChange.decode(change.encode()), change)
    bound = Bound("x", Destination.queue("q"), "", EVERY_FIELD_TYPE)
    request = TopologyRequest(1, RequestFlags.NONE, "/", bound, None)
    assert same_record(TopologyRequest.decode(request.encode()), request)


def test_a_name_of_256_octets_is_refused() -> None:
    """A short string holds at most 255 octets: a longer name cannot cross, and says so."""
    name = NAME_255 + "x"
    with pytest.raises(ValueError, match="256 octets of UTF-8: a short string holds at most 255"):
        str8(name)
    with pytest.raises(ValueError, match="at most 255"):
        TopologyChange(1, 1, "/", QueueDeleted(name)).encode()
    with pytest.raises(ValueError, match="at most 255"):
        op_body(Bound("x", Destination.queue("q"), name, {}))


def test_an_exclusive_flag_without_an_owner_is_malformed() -> None:
    """The exclusive flag and the owner say the same thing; a record where they differ is not
    one a worker sends."""
    payload = bytearray(
        TopologyChange(1, 1, "/", QueueDeclared("q", False, False, None, {})).encode()
    )
    flags_at = 8 + 8 + 1 + len(str8("/"))
    payload[flags_at] |= 4
    with pytest.raises(MalformedRecord, match="exclusive without an owner"):
        TopologyChange.decode(bytes(payload))


def test_an_owner_request_other_than_create_names_the_queue() -> None:
    with pytest.raises(ValueError, match="only"):
        OwnerRequest(
            1,
            OwnerAction.DELETE,
            RequestFlags.NONE,
            "/",
            QueueDeclared("q", False, False, None, {}),
            None,
        ).encode()


def test_a_refusal_text_longer_than_a_short_string_is_cut_to_fit() -> None:
    """A refusal's text can name a long queue and virtual host; it crosses cut to 255 octets,
    as AMQP cuts a reply text (AMQP 0-9-1 §4.2.5.3: short strings hold at most 255 octets)."""
    answer = TopologyAnswer(7, 406, 0, 0, "q", "inequivalent arg " + "é" * 200)
    decoded = TopologyAnswer.decode(answer.encode())
    assert decoded.reply_code == 406 and decoded.text.startswith("inequivalent arg é")
    assert len(decoded.text.encode()) <= 255


def test_a_table_nested_too_deep_to_decode_is_malformed() -> None:
    """Input that makes the table decoder recurse without end is a malformed record (it
    closes the link), not an exception that reaches the event loop."""
    text = ('{"a":["table",' * 5000 + "{}" + "]}" * 5000).encode()
    with pytest.raises(MalformedRecord, match="does not decode"):
        Fields(len(text).to_bytes(4, "big") + text).table()


def test_a_table_nested_too_deep_to_write_is_refused() -> None:
    """A table the AMQP decoder read but that nests too deep to write cannot cross: encoding says
    so with ValueError (which refuses the method), not with a RecursionError."""
    deep: dict[str, object] = {}
    for _ in range(5000):
        deep = {"a": deep}
    op = QueueDeclared("q", False, False, None, deep)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nested too deep to cross between workers"):
        TopologyRequest(1, RequestFlags.NONE, "/", op, None).encode()
