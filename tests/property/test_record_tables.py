"""Field tables cross between the workers of a spread virtual host as the AMQP decoder read them.

Queue, exchange, binding and consume arguments travel in records (cluster/topologyrecords.py,
cluster/consumerecords.py). The tables here are written on the wire first, with every field type
pamqp decodes (AMQP 0-9-1 §4.2.5.5 with RabbitMQ's errata letters, a long string that is not
UTF-8 among them) and each integer width, then decoded by pamqp as a client's method is: what a
record brings back must be that value, of that type, and must give a binding the identity the
declaring worker gave it (routing/bindings.py), or the other worker would route, compare and
unbind by something else.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import decode

from batonmq.cluster.consumerecords import Consume
from batonmq.cluster.topologyrecords import RequestFlags, TopologyChange, TopologyRequest
from batonmq.model.destination import Destination
from batonmq.model.topology import Bound, ConnectionRef, ExchangeDeclared, QueueDeclared
from batonmq.routing.bindings import arguments_key
from tests.unit.store.test_fields import same


def _packed(letter: bytes, layout: str, values: st.SearchStrategy[object]) -> st.SearchStrategy:
    return values.map(lambda value: letter + struct.pack(layout, value))


def _longstr(letter: bytes, octets: bytes) -> bytes:
    return letter + struct.pack(">I", len(octets)) + octets


_key = st.text(st.characters(codec="utf-8"), max_size=20).map(
    lambda key: struct.pack(">B", len(key.encode())) + key.encode()
)

_scalars = st.one_of(
    st.just(b"V"),
    st.booleans().map(lambda value: b"t" + bytes([value])),
    _packed(b"b", ">b", st.integers(-(2**7), 2**7 - 1)),
    _packed(b"B", ">B", st.integers(0, 2**8 - 1)),
    _packed(b"s", ">h", st.integers(-(2**15), 2**15 - 1)),
    _packed(b"u", ">H", st.integers(0, 2**16 - 1)),
    _packed(b"I", ">i", st.integers(-(2**31), 2**31 - 1)),
    _packed(b"i", ">I", st.integers(0, 2**32 - 1)),
    _packed(b"l", ">q", st.integers(-(2**63), 2**63 - 1)),
    # Every bit pattern: NaNs, infinities and -0.0 too.
    st.binary(min_size=4, max_size=4).map(lambda bits: b"f" + bits),
    st.binary(min_size=8, max_size=8).map(lambda bits: b"d" + bits),
    st.tuples(st.integers(0, 255), st.integers(-(2**31), 2**31 - 1)).map(
        lambda decimal: b"D" + struct.pack(">Bi", *decimal)
    ),
    # Any octets: pamqp gives text for UTF-8 and bytes for the rest.
    st.binary(max_size=16).map(lambda octets: _longstr(b"S", octets)),
    st.text(max_size=16).map(lambda text: _longstr(b"S", text.encode())),
    st.binary(max_size=16).map(lambda octets: _longstr(b"x", octets)),
    # Seconds, and above 2**32 - 1 milliseconds (pamqp's reading), up to the year 9999.
    _packed(b"T", ">Q", st.integers(0, 253_402_300_799_999)),
)


def _table_body(entries: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(key + value for key, value in entries)


_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: _longstr(b"A", b"".join(items))),
        st.lists(st.tuples(_key, inner), max_size=4).map(
            lambda entries: _longstr(b"F", _table_body(entries))
        ),
    ),
    max_leaves=12,
)
_wire_tables = st.lists(st.tuples(_key, _values), max_size=6).map(
    lambda entries: _longstr(b"", _table_body(entries))
)


def decoded(wire: bytes) -> dict[str, object]:
    consumed, table = decode.field_table(wire)
    assert consumed == len(wire)
    return table


REF = ConnectionRef(1, 2, 3)


@settings(max_examples=300, deadline=None)
@given(_wire_tables)
def test_a_decoded_table_crosses_in_every_record_that_carries_one(wire: bytes) -> None:
    """AMQP 0-9-1 §4.2.5.5 (field tables) and RabbitMQ clustering (exchanges, queues and
    bindings are the same on every node): queue, exchange and binding arguments, and consume
    arguments, come back from a record as the decoder gave them."""
    table = decoded(wire)
    ops = (
        QueueDeclared("q", True, False, REF, table),
        ExchangeDeclared("x", "headers", True, False, False, table),
        Bound("x", Destination.queue("q"), "", table),
    )
    for op in ops:
        asked = TopologyRequest(1, RequestFlags.NONE, "/", op, REF)
        request = TopologyRequest.decode(asked.encode())
        change = TopologyChange.decode(TopologyChange(1, 1, "/", op).encode())
        for crossed in (request.op, change.op):
            assert same(crossed.arguments, table)  # type: ignore[union-attr]
    consume = Consume(1, False, False, 10, 0, 0, "/", "q", "tag", REF, table)
    assert same(Consume.decode(consume.encode()).arguments, table)


@settings(max_examples=300, deadline=None)
@given(_wire_tables)
def test_a_crossed_binding_has_the_identity_of_the_declared_one(wire: bytes) -> None:
    """RabbitMQ: queue.unbind finds a binding by its arguments; the worker the binding crossed
    to finds it by the same ones."""
    table = decoded(wire)
    bound = Bound("x", Destination.queue("q"), "", table)
    crossed = TopologyChange.decode(TopologyChange(1, 1, "/", bound).encode()).op
    assert isinstance(crossed, Bound)
    assert arguments_key(crossed.arguments) == arguments_key(table)
