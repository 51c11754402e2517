"""The records by which a client of one worker consumes from a queue another worker owns
(`batonmq.cluster.consumerecords`): each comes back as it went, through the link's reader cut
at any octet; a payload that is not a record is refused with MalformedRecord, never anything
else."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batonmq.cluster.consumerecords import (
    DELIVERIES_MAX,
    RUNS_MAX,
    Cancel,
    Cancelled,
    Consume,
    Consumed,
    Content,
    Credit,
    Deliver,
    Found,
    Get,
    Got,
    OverThreshold,
    Settle,
    SettleOutcome,
    runs_of,
)
from batonmq.cluster.peerlink import MalformedRecord
from tests.property.test_codec import field_tables
from tests.unit.cluster.test_topologyrecords import NAME_255, names, refs, same_record

u16 = st.integers(1, 0xFFFF)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
contents = st.builds(Content, names, names, st.binary(max_size=40), st.binary(max_size=200))
runs = st.tuples(st.integers(1, 2**64 - 1), st.integers(0, 100)).map(
    lambda drawn: (drawn[0], min(drawn[0] + drawn[1], 2**64 - 1))
)

Record = Consume | Consumed | Deliver | Credit | Settle | Cancel | Cancelled | Get | Got
RECORD_CLASSES: tuple[type[Record], ...] = (
    Consume,
    Consumed,
    Deliver,
    Credit,
    Settle,
    Cancel,
    Cancelled,
    Get,
    Got,
)
records: st.SearchStrategy[Record] = st.one_of(
    st.builds(
        Consume,
        u64,
        st.booleans(),
        st.booleans(),
        u32,
        u32,
        u32,
        names,
        names,
        names,
        refs,
        field_tables,
    ),
    st.builds(Consumed, u64, st.just(0), st.just("")),
    st.builds(Consumed, u64, u16, names),
    st.builds(
        Deliver, u64, st.lists(st.tuples(u64, st.booleans(), contents), min_size=1, max_size=3)
    ),
    st.builds(Credit, u64, u32),
    st.builds(Settle, st.sampled_from(list(SettleOutcome)), st.lists(runs, max_size=5).map(tuple)),
    st.builds(Cancel, u64),
    st.builds(Cancelled, u64, st.none() | st.builds(OverThreshold, names, u64, u64)),
    st.builds(Get, u64, st.booleans(), names, names, refs),
    st.builds(Got, u64, st.just(0), st.just(""), st.none()),
    st.builds(Got, u64, u16, names, st.none()),
    st.builds(
        Got, u64, st.just(0), st.just(""), st.builds(Found, u64, u32, st.booleans(), contents)
    ),
)
DECODERS: dict[int, Callable[[bytes], Record]] = {cls.KIND: cls.decode for cls in RECORD_CLASSES}


@settings(max_examples=200, deadline=None)
@given(records)
def test_a_payload_cut_anywhere_or_with_octets_after_it_is_malformed(record: Record) -> None:
    """A payload is whole when it is decoded: one that ends inside a field, or goes on after
    its last, is not a record."""
    payload = record.encode()
    for cut in range(len(payload)):
        with pytest.raises(MalformedRecord):
            type(record).decode(payload[:cut])
    with pytest.raises(MalformedRecord, match="after a record's end"):
        type(record).decode(payload + b"\x00")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RECORD_CLASSES), st.binary(max_size=80))
def test_any_payload_decodes_or_is_malformed(cls: type[Record], payload: bytes) -> None:
    """What a peer sends is decoded or refused as MalformedRecord (which closes the link),
    never anything else."""
    with contextlib.suppress(MalformedRecord):
        cls.decode(payload)


def test_names_of_255_octets_round_trip_and_a_refusal_text_is_cut() -> None:
    """AMQP 0-9-1 §4.2.5.3: queue and virtual host names, consumer tags, exchange names and
    routing keys are short strings of up to 255 octets; a reply text is cut to one, as AMQP
    cuts it."""
    content = Content(NAME_255, NAME_255, b"h" * 300, b"body")
    sent: list[Record] = [
        Consume(1, False, True, 10, 10, 0, NAME_255, NAME_255, NAME_255, None, {"x-priority": 3}),
        Deliver(1, [(2, True, content), (3, False, content)]),
        Get(3, True, NAME_255, NAME_255, None),
        Got(3, 0, "", Found(4, 5, False, content)),
    ]
    for record in sent:
        assert same_record(type(record).decode(record.encode()), record)
    refused = Consumed.decode(Consumed(1, 403, "x" * 300 + "end").encode())
    assert refused.reply_code == 403 and len(refused.text) <= 255 and refused.text[:3] == "xxx"


def test_a_slow_consumer_s_cancel_carries_the_threshold_its_queue_went_over() -> None:
    """Qpid manual §2.11.2: "On triggering of a specified threshold the offending client will
    be disconnected from the broker with a 506 error code": the owner's CANCELLED tells the
    consuming worker, which holds the client's connection, which threshold, its limit and the
    queue's value, for the 506's text; a plain one (its queue was deleted) carries none."""
    over = OverThreshold("slow_consumer.message_count", 5, 2**64 - 1)
    assert Cancelled.decode(Cancelled(7, over).encode()) == Cancelled(7, over)
    assert Cancelled.decode(Cancelled(7).encode()) == Cancelled(7, None)
    with pytest.raises(MalformedRecord, match="cancelled slow 2"):
        Cancelled.decode(bytes(8) + b"\x02")
    with pytest.raises(MalformedRecord):
        Cancelled.decode(bytes(8) + b"\x01" + bytes(16))  # an empty setting, then too few octets


def test_bad_outcomes_runs_and_flags_are_malformed() -> None:
    with pytest.raises(MalformedRecord, match="settle outcome 7"):
        Settle.decode(b"\x07\x00\x00")
    with pytest.raises(MalformedRecord, match="settle runs"):
        Settle.decode(b"\x00\x00\x01" + (5).to_bytes(8, "big") + (4).to_bytes(8, "big"))
    with pytest.raises(MalformedRecord, match="settle runs"):
        Settle.decode(b"\x00\x00\x01" + bytes(16))  # delivery 0 is never settled by name
    with pytest.raises(MalformedRecord, match="unknown consume flags"):
        Consume.decode(bytes(8) + b"\x04" + bytes(12))
    with pytest.raises(MalformedRecord, match="redelivered 2"):
        Deliver.decode(bytes(8) + b"\x00\x01" + bytes(8) + b"\x02")
    with pytest.raises(MalformedRecord, match="a deliver of no message"):
        Deliver.decode(bytes(10))
    with pytest.raises(MalformedRecord, match="a refused get that found a message"):
        Got.decode(bytes(8) + b"\x01\x94\x01")


def test_runs_gather_consecutive_ids_and_too_many_are_refused() -> None:
    assert runs_of([1, 2, 3, 7, 8, 5]) == ((1, 3), (7, 8), (5, 5))
    assert runs_of([]) == ()
    with pytest.raises(ValueError, match=f"at most {RUNS_MAX}"):
        Settle(SettleOutcome.ACK, ((1, 1),) * (RUNS_MAX + 1)).encode()
    for count in (0, DELIVERIES_MAX + 1):
        with pytest.raises(ValueError, match=f"carries 1 to {DELIVERIES_MAX}"):
            Deliver(1, [(1, False, Content("", "q", b"", b""))] * count).encode()
