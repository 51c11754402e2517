"""The records that carry a publish to the worker that owns its queues, and its answer
(`batonmq.cluster.publishrecords`): each comes back as it went, through the link's reader cut
at any octet, with bodies from none to a mebibyte; a payload that is not a record is refused
with MalformedRecord, never anything else."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batonmq.cluster import recordfields
from batonmq.cluster.peerlink import MalformedRecord, header
from batonmq.cluster.publishrecords import MESSAGES_MAX, QUEUES_MAX, Publish, Queued, TxEnd
from tests.property.test_codec import short_strings
from tests.recordstream import read_back, stream_of
from tests.unit.cluster.test_topologyrecords import NAME_255

names = short_strings()
u64 = st.integers(0, 2**64 - 1)

publishes = st.builds(
    Publish,
    u64,
    st.none() | u64,
    names,
    names,
    names,
    st.lists(names, max_size=5).map(tuple),
    st.lists(st.tuples(st.binary(max_size=80), st.binary(max_size=300)), min_size=1, max_size=4),
)
Record = Publish | Queued | TxEnd
records: st.SearchStrategy[Record] = st.one_of(
    publishes,
    st.tuples(u64, u64, st.booleans()).map(
        lambda drawn: Queued(min(drawn[:2]), max(drawn[:2]), drawn[2])
    ),
    st.builds(TxEnd, u64),
)
DECODERS: dict[int, Callable[[bytes], Record]] = {
    cls.KIND: cls.decode for cls in (Publish, Queued, TxEnd)
}


@pytest.mark.parametrize("size", [0, 1 << 20])
def test_a_body_of_no_octet_and_one_of_a_mebibyte_cross_whole(size: int) -> None:
    """A message body may be empty (AMQP 0-9-1 §4.2.6.2: a content body of size 0 has no body
    frame) or large; the record holds it whole, read in socket-sized pieces or cut anywhere."""
    body = bytes(range(256)) * (size // 256)
    sent: list[Record] = [
        Publish(1, None, "/", "amq.fanout", "key", ("a", "b"), [(b"\x00\x3c" + bytes(12), body)]),
        Publish(2, 9, "/", "", "q", ("q",), [(b"", body), (b"h", b""), (b"", body)]),
    ]
    stream = stream_of(sent)
    assert (
        read_back([stream[at : at + 65536] for at in range(0, len(stream), 65536)], DECODERS)
        == sent
    )
    first = len(header(0, 0)) + len(sent[0].encode())
    for cut in (
        1,
        20,
        first - size - 1,
        first - size // 2,
        first - 1,
        first,
        first + 5,
        len(stream) - 1,
    ):
        assert read_back([stream[:cut], stream[cut:]], DECODERS) == sent


def test_names_of_255_octets_round_trip() -> None:
    """AMQP 0-9-1 §4.2.5.3: exchange, queue and virtual host names and routing keys are short
    strings of up to 255 octets."""
    sent = Publish(3, 4, NAME_255, NAME_255, NAME_255, (NAME_255,) * 3, [(b"h" * 300, b"body")])
    assert Publish.decode(sent.encode()) == sent


def test_a_name_of_256_octets_too_many_queues_or_messages_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 255"):
        Publish(1, None, "/", "", NAME_255 + "x", ("q",), [(b"", b"")]).encode()
    with pytest.raises(ValueError, match=f"at most {QUEUES_MAX}"):
        Publish(1, None, "/", "", "", ("q",) * (QUEUES_MAX + 1), [(b"", b"")]).encode()
    for count in (0, MESSAGES_MAX + 1):
        with pytest.raises(ValueError, match=f"carries 1 to {MESSAGES_MAX}"):
            Publish(1, None, "/", "", "q", ("q",), [(b"", b"")] * count).encode()


def test_a_publish_of_no_message_is_malformed() -> None:
    """A PUBLISH numbers the messages it carries: one of none would number nothing."""
    payload = Publish(1, None, "/", "", "q", ("q",), [(b"", b"")]).encode()
    with pytest.raises(MalformedRecord, match="no message"):
        Publish.decode(payload[:8] + b"\x00\x00" + payload[10:])


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
@given(st.sampled_from([Publish, Queued, TxEnd]), st.binary(max_size=80))
def test_any_payload_decodes_or_is_malformed(cls: type[Record], payload: bytes) -> None:
    """What a peer sends is decoded or refused as MalformedRecord (which closes the link),
    never anything else."""
    with contextlib.suppress(MalformedRecord):
        cls.decode(payload)


def test_a_queued_range_that_runs_backwards_is_malformed() -> None:
    with pytest.raises(MalformedRecord, match="queued 5 to 4"):
        Queued.decode(bytes(7) + b"\x05" + bytes(7) + b"\x04\x01")


def test_the_names_of_a_message_routed_to_many_queues_are_not_remembered() -> None:
    """The names a message crosses with are remembered, since the same ones come again; a
    message routed to many queues of one owner (a topic exchange with a key per message and a
    binding per queue) is not, or each new key would keep its every queue name in memory."""
    caches = (recordfields._remembered_names, recordfields._read_remembered_names)
    for cache in caches:
        cache.cache_clear()
    queues = tuple(f"orders.{number:03}" + "x" * 200 for number in range(100))
    for key in range(50):
        record = Publish(key + 1, None, "/", "amq.topic", f"order.{key}", queues, [(b"", b"")])
        assert Publish.decode(record.encode()) == record
    assert [cache.cache_info().currsize for cache in caches] == [0, 0]
    small = Publish(1, None, "/", "", "q", ("q",), [(b"", b"")])
    assert Publish.decode(small.encode()) == small
    assert [cache.cache_info().currsize for cache in caches] == [1, 1]
