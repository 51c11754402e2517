"""`check_basic_properties`: the edge check of a content header's properties;
`decode_basic_properties` and `rewrite_headers`: what the broker does with a header that passed.

The rule (hardening): "the broker decodes and validates every property at the edge when the
message arrives and closes the *publisher's* connection with the proper code (502 syntax-error /
505 unexpected-frame as the specification says) if it cannot", and (the brief) "the broker must
accept what pika and aio-pika can decode and refuse what they cannot". So the check is compared
with the clients themselves: pika's decoder and aio-pika's (pamqp's, then aio-pika's
`IncomingMessage`).

Octets are written here from the spec (4.2.5 field types with RabbitMQ's errata table, 4.2.6.1
content header), not with a client's encoder, so that they share no one's mistakes.
"""

from __future__ import annotations

import datetime
import struct

import aio_pika
import aiormq.abc
import pika.spec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands, encode, header

from batonmq.amqp.constants import BASIC_CLASS_ID, ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.amqp.properties import (
    LATEST_FIELD_TIMESTAMP,
    LATEST_PROPERTY_TIMESTAMP,
    MAX_NESTING,
    check_basic_properties,
    decode_basic_properties,
    nesting,
    rewrite_headers,
)
from batonmq.queues.expiry import InvalidExpiration, parse_expiration


def long_prefixed(octets: bytes) -> bytes:
    return struct.pack(">I", len(octets)) + octets


def short_prefixed(octets: bytes) -> bytes:
    return bytes((len(octets),)) + octets


def content_header(flags: int, property_list: bytes, body_size: int = 0, weight: int = 0) -> bytes:
    return struct.pack(">HHQH", BASIC_CLASS_ID, weight, body_size, flags) + property_list


def headers_only(table: bytes) -> bytes:
    """A content header whose only property is `headers` (flag bit 13)."""
    return content_header(1 << 13, table)


def table(*entries: tuple[bytes, bytes]) -> bytes:
    return long_prefixed(b"".join(short_prefixed(name) + value for name, value in entries))


def clients_decode(payload: bytes) -> bool:
    """Whether pika and aio-pika both decode this content header payload, as a consumer of each
    would: pika's `BasicProperties.decode`; pamqp's `ContentHeader.unmarshal`, then aio-pika's
    `IncomingMessage` (which makes a `DeliveryMode` of delivery-mode)."""
    try:
        pika.spec.BasicProperties().decode(payload[12:])
        content = header.ContentHeader()
        content.unmarshal(payload)
        delivery = commands.Basic.Deliver(consumer_tag="c", delivery_tag=1, routing_key="q")
        aio_pika.IncomingMessage(
            aiormq.abc.DeliveredMessage(delivery, content, b"", None),  # type: ignore[arg-type]
            no_ack=True,
        )
    except Exception:
        return False
    return True


def check_passes(payload: bytes) -> bool:
    try:
        check_basic_properties(payload)
    except HardError:
        return False
    return True


def publish_takes_expiration(payload: bytes) -> bool:
    """Whether basic.publish takes the expiration of a header that passed the check: a
    non-negative integer, or none (RabbitMQ, and batonmq.engine.publish: any other value is a
    406 at publish, so it never reaches a consumer; aio-pika could not read it)."""
    expiration = decode_basic_properties(payload).expiration
    if expiration is None:
        return True
    try:
        parse_expiration(expiration)
    except InvalidExpiration:
        return False
    return True


def refusal(payload: bytes) -> ReplyCode:
    with pytest.raises(HardError) as caught:
        check_basic_properties(payload)
    assert caught.value.closes_connection
    return caught.value.reply_code


# The check against the clients -----------------------------------------------------------------

#: Well-formed field values: a type octet and the octets its type takes (spec 4.2.5.5), with any
#: value in them (NaN, infinities, timestamps far in the future), and the two type octets one
#: client knows and the other not: 'U' (pika: a signed short) and 0 (pamqp: void).
_scalars = st.one_of(
    st.sampled_from(b"tbB").flatmap(
        lambda t: st.binary(min_size=1, max_size=1).map(bytes([t]).__add__)
    ),
    st.sampled_from(b"suU").flatmap(
        lambda t: st.binary(min_size=2, max_size=2).map(bytes([t]).__add__)
    ),
    st.sampled_from(b"Iif").flatmap(
        lambda t: st.binary(min_size=4, max_size=4).map(bytes([t]).__add__)
    ),
    st.sampled_from(b"lLdT").flatmap(
        lambda t: st.binary(min_size=8, max_size=8).map(bytes([t]).__add__)
    ),
    st.one_of(
        st.integers(0, LATEST_FIELD_TIMESTAMP + 2).map(lambda n: b"T" + struct.pack(">Q", n)),
        st.floats(width=64).map(lambda x: b"d" + struct.pack(">d", x)),
        st.floats(width=32).map(lambda x: b"f" + struct.pack(">f", x)),
    ),
    st.binary(min_size=5, max_size=5).map(b"D".__add__),
    st.binary(max_size=12).map(lambda octets: b"S" + long_prefixed(octets)),
    st.binary(max_size=12).map(lambda octets: b"x" + long_prefixed(octets)),
    st.sampled_from([b"V", b"\x00"]),
)
#: Field names: UTF-8 or not.
_names = st.one_of(st.text(max_size=6).map(str.encode), st.binary(max_size=6))


def _table_of(entries: list[tuple[bytes, bytes]]) -> bytes:
    return table(*entries)


_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: b"A" + long_prefixed(b"".join(items))),
        st.lists(st.tuples(_names, inner), max_size=3).map(lambda pairs: b"F" + _table_of(pairs)),
    ),
    max_leaves=8,
)
_tables = st.lists(st.tuples(_names, _values), max_size=4).map(_table_of)
_short_strings = st.one_of(st.text(max_size=8).map(str.encode), st.binary(max_size=8)).map(
    short_prefixed
)
#: Each property's well-formed octets with any value in them. An expiration is digits: any
#: other is refused at publish with 406 (engine/publish.py), before any consumer sees it.
_PROPERTY_VALUES = {
    "content_type": _short_strings,
    "content_encoding": _short_strings,
    "headers": _tables,
    "delivery_mode": st.binary(min_size=1, max_size=1),
    "priority": st.binary(min_size=1, max_size=1),
    "correlation_id": _short_strings,
    "reply_to": _short_strings,
    "expiration": st.integers(0, 10**9).map(lambda n: short_prefixed(str(n).encode())),
    "message_id": _short_strings,
    "timestamp": st.one_of(
        st.integers(0, 2**64 - 1), st.integers(0, LATEST_PROPERTY_TIMESTAMP + 2)
    ).map(lambda n: struct.pack(">Q", n)),
    "message_type": _short_strings,
    "user_id": _short_strings,
    "app_id": _short_strings,
    "cluster_id": _short_strings,
}
_ORDER = list(_PROPERTY_VALUES)


def with_properties(present: dict[str, bytes]) -> bytes:
    flags = sum(1 << (15 - _ORDER.index(name)) for name in present)
    return content_header(flags, b"".join(present[name] for name in _ORDER if name in present))


@settings(max_examples=600, deadline=None)
@given(present=st.fixed_dictionaries({}, optional=_PROPERTY_VALUES))
def test_a_well_formed_header_passes_exactly_when_pika_and_aio_pika_decode_it(present):
    """The brief: "the broker must accept what pika and aio-pika can decode and refuse what they
    cannot". Any set of the fourteen properties, each well-formed (spec 4.2.6.1) with any value
    in it, and headers of every field type with any value, nested: the check passes if and only
    if pika and aio-pika both decode the header."""
    payload = with_properties(present)
    assert check_passes(payload) == clients_decode(payload)


@settings(max_examples=300, deadline=None)
@given(present=st.fixed_dictionaries({}, optional=_PROPERTY_VALUES), data=st.data())
def test_a_damaged_header_that_passes_is_decoded_by_pika_and_aio_pika(present, data):
    """Hardening: "no message the broker holds can make a consumer ... fail". Headers with
    octets changed or cut (which the clients, reading slices leniently, sometimes decode into
    something else): whatever passes the check, both clients decode."""
    damaged = bytearray(with_properties(present))
    for _ in range(data.draw(st.integers(1, 3))):
        damaged[data.draw(st.integers(12, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    payload = bytes(damaged[: data.draw(st.integers(14, len(damaged)))])
    if check_passes(payload) and publish_takes_expiration(payload):
        assert clients_decode(payload)


# What is refused, and with which code -----------------------------------------------------------

_SPEC_4_2_6 = ReplyCode.UNEXPECTED_FRAME
_SYNTAX = ReplyCode.SYNTAX_ERROR


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        pytest.param(content_header(0, b"", weight=1), _SPEC_4_2_6, id="weight-not-zero"),
        pytest.param(content_header(0, b"")[:13], _SPEC_4_2_6, id="flags-cut"),
        pytest.param(content_header(1, b"\x00"), _SPEC_4_2_6, id="continuation-word-cut"),
        pytest.param(content_header(1 << 15, b"\x05abc"), _SPEC_4_2_6, id="short-string-past-end"),
        pytest.param(content_header(1 << 6, b"\x00" * 7), _SPEC_4_2_6, id="timestamp-past-end"),
        pytest.param(
            headers_only(b"\x00\x00\x00\x09" + b"\x01at\x01"), _SPEC_4_2_6, id="table-past-end"
        ),
        pytest.param(content_header(1 << 12, b"\x02\x00"), _SPEC_4_2_6, id="octet-after-the-last"),
        pytest.param(content_header(0, b"\x00"), _SPEC_4_2_6, id="octet-without-a-property"),
    ],
)
def test_a_badly_formatted_header_is_505(payload, code):
    """Spec 4.2.6: "A peer that receives an incomplete or badly-formatted content MUST raise a
    connection exception with reply code 505 (unexpected frame)": a content header whose weight
    is not zero (spec 4.2.6.1: "The weight field is unused and must be zero"; RabbitMQ refuses
    it the same way), whose flags or properties run past its end, or with octets left after the
    properties its flags name."""
    assert refusal(payload) is code


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(headers_only(table((b"u", b"Z\x00\x01"))), id="unknown-field-type"),
        pytest.param(headers_only(table((b"u", b"U\x00\x01"))), id="U-only-pika-reads"),
        pytest.param(headers_only(table((b"u", b"\x00"))), id="zero-only-pamqp-reads"),
        pytest.param(
            content_header(1 << 7, short_prefixed(b"\xc3\x28")), id="short-string-not-utf8"
        ),
        pytest.param(headers_only(table((b"caf\xe9", b"t\x01"))), id="field-name-not-utf8"),
        pytest.param(headers_only(table((b"d", b"d" + struct.pack(">d", float("nan"))))), id="nan"),
        pytest.param(
            headers_only(table((b"f", b"f" + struct.pack(">f", float("-inf"))))), id="inf"
        ),
        pytest.param(
            headers_only(table((b"at", b"T" + struct.pack(">Q", LATEST_FIELD_TIMESTAMP + 1)))),
            id="timestamp-field-after-9999",
        ),
        pytest.param(
            content_header(1 << 6, struct.pack(">Q", LATEST_PROPERTY_TIMESTAMP + 1)),
            id="timestamp-property-after-9999",
        ),
        pytest.param(content_header(1 << 12, b"\x03"), id="delivery-mode-3"),
    ],
)
def test_a_value_no_client_can_decode_is_502(payload):
    """502 SYNTAX_ERROR: "The sender sent a frame that contained illegal values for one or more
    fields". Field types outside RabbitMQ's errata table (t b B s u I i l L f d D S x A T F V),
    short strings that are not UTF-8 (spec 4.2.5.3: "Short strings can carry up to 255 octets
    of UTF-8 data"), NaN and infinities (pika turns floats into ints), timestamps pika or pamqp
    cannot make a `datetime` of, delivery-mode 3 (spec: "Non-persistent (1) or persistent (2)";
    aio-pika fails on it). None of them decodes in both clients."""
    assert refusal(payload) is ReplyCode.SYNTAX_ERROR
    assert not clients_decode(payload)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(headers_only(long_prefixed(b"\x01a")), id="name-without-value"),
        pytest.param(headers_only(long_prefixed(b"\x01aI\x00")), id="value-past-its-table"),
        pytest.param(headers_only(long_prefixed(b"\x05ab")), id="name-past-its-table"),
        pytest.param(
            headers_only(table((b"a", b"A" + long_prefixed(b"I\x00")))), id="value-past-its-array"
        ),
        pytest.param(
            headers_only(table((b"a", b"S\x00\x00\x00\x09ab"))), id="long-string-past-its-table"
        ),
    ],
)
def test_a_table_whose_entries_overrun_it_is_502(payload):
    """Spec 4.2.5.5: a field table is "a long length, then (field name, field value) pairs" that
    fill it: an entry that runs past its table or array is an illegal value of the headers
    property, 502 SYNTAX_ERROR, though the property itself fits the header."""
    assert refusal(payload) is ReplyCode.SYNTAX_ERROR


def nested(depth: int) -> bytes:
    """A headers table with tables nested to `depth` levels (the headers table is level 1)."""
    value = b"V"
    for _ in range(depth - 1):
        value = b"F" + table((b"n", value))
    return headers_only(table((b"n", value)))


def test_nesting_is_bounded():
    """Both clients decode tables by recursion, so a header nested deep enough crashes them
    (RecursionError); the check allows `MAX_NESTING` levels, which both decode, and no more."""
    assert check_passes(nested(MAX_NESTING))
    assert clients_decode(nested(MAX_NESTING))
    assert refusal(nested(MAX_NESTING + 1)) is ReplyCode.SYNTAX_ERROR


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(content_header(0, b""), id="no-property"),
        pytest.param(content_header(1 << 12, b"\x00"), id="delivery-mode-0"),
        pytest.param(content_header(1 << 15, short_prefixed(b"a\x00b")), id="zero-in-short-string"),
        pytest.param(content_header(2, b""), id="reserved-flag-bit-1"),
        pytest.param(
            struct.pack(">HHQHHH", BASIC_CLASS_ID, 0, 0, (1 << 9) | 1, 0x8001, 0xFFFE)
            + short_prefixed(b"r"),
            id="continuation-words",
        ),
        pytest.param(
            headers_only(table((b"at", b"T" + struct.pack(">Q", LATEST_FIELD_TIMESTAMP)))),
            id="timestamp-field-9999",
        ),
        pytest.param(
            content_header(1 << 6, struct.pack(">Q", LATEST_PROPERTY_TIMESTAMP)),
            id="timestamp-property-9999",
        ),
        pytest.param(
            headers_only(
                table((b"S", b"S" + long_prefixed(b"\xff\xfe")), (b"x", b"x\x00\x00\x00\x00"))
            ),
            id="long-string-not-utf8",
        ),
    ],
)
def test_what_every_client_decodes_passes(payload):
    """Spec 4.2.6.1 and the clients: delivery-mode 0 (both clients read it as non-persistent;
    RabbitMQ takes all but 2 for non-persistent), a zero octet in a short string (which the spec
    forbids but RabbitMQ and both clients pass), flag bits that name no property (bit 1, and
    further flags words: "If the last bit (0) is set, this indicates that a further property
    flags field follows"), the last timestamps each client decodes, long strings of any octets
    (spec 4.2.5.3: "Long strings can contain any data")."""
    assert check_passes(payload)
    assert clients_decode(payload)


def test_a_header_is_judged_the_same_however_often_it_comes():
    """A header that passed is not checked again (a publisher repeats its header), and one that
    failed is refused every time: hardening, "no message the broker holds can make a consumer
    ... fail" however many times it was sent."""
    good, bad = content_header(1 << 12, b"\x01", 128), content_header(1 << 12, b"\x03", 128)
    for _ in range(3):
        assert check_passes(good)
        assert refusal(bad) is ReplyCode.SYNTAX_ERROR


# Decoding and editing what passed ----------------------------------------------------------------


def test_decode_reads_past_continuation_words():
    """Spec 4.2.6.1: further flags words follow while bit 0 is set; the basic class has no
    property in them, so the property list starts after the last."""
    payload = struct.pack(">HHQHH", BASIC_CLASS_ID, 0, 0, (1 << 9) | 1, 0) + short_prefixed(b"r")
    check_basic_properties(payload)
    assert decode_basic_properties(payload).reply_to == "r"


def test_decode_gives_what_pamqp_gives():
    """Behind the edge the broker decodes as pamqp does: the values binding arguments (decoded
    by pamqp) are compared with."""
    payload = content_header(
        (1 << 13) | (1 << 6),
        table((b"when", b"T" + struct.pack(">Q", 1_700_000_000)), (b"n", b"B\xff"))
        + struct.pack(">Q", 1_700_000_000_123),
    )
    check_basic_properties(payload)
    decoded = decode_basic_properties(payload)
    assert decoded.headers == {
        "when": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC),
        "n": 255,
    }
    # pamqp's rule: a timestamp above 2**32 - 1 is taken for milliseconds.
    assert decoded.timestamp == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, datetime.UTC)


_entry_values = st.sampled_from(
    [b"t\x01", b"d" + struct.pack(">d", 0.1), b"B\xff", b"S" + long_prefixed(b"\xff\xfe"), b"V"]
)
_entries = st.lists(
    st.tuples(st.text(max_size=6).map(str.encode), _entry_values),
    max_size=6,
    unique_by=lambda entry: entry[0],
)


@settings(max_examples=200, deadline=None)
@given(
    entries=_entries,
    set_fields=st.dictionaries(
        st.sampled_from(["x-delivery-count", "x-death", "a", ""]),
        st.one_of(st.integers(0, 2**40), st.text(max_size=5), st.lists(st.booleans())),
        max_size=3,
    ),
    data=st.data(),
)
def test_rewrite_headers_changes_the_fields_named_and_no_other_octet(entries, set_fields, data):
    """BatonMQ architecture: "Content-header bytes are ... kept as received and forwarded
    unchanged". When the broker sets or removes header fields (x-delivery-count, x-death), every
    other field and property keeps its octets: a double stays a double ('d'), an unsigned octet
    'B', a long string that is not UTF-8 stays as it was. A field set where its name is replaces
    it in place; a new one is added at the end, encoded as pamqp encodes it."""
    names = [name.decode() for name, _ in entries]
    removed = set(data.draw(st.lists(st.sampled_from(names))) if names else [])
    others = short_prefixed(b"id") + struct.pack(">Q", LATEST_PROPERTY_TIMESTAMP)
    flags = (1 << 13) | (1 << 7) | (1 << 6)
    payload = content_header(flags, table(*entries) + others, body_size=77)
    check_basic_properties(payload)

    rewritten = rewrite_headers(payload, set_fields, remove_fields=removed)

    expected = []
    for (name, value), text in zip(entries, names, strict=True):
        if text in set_fields:
            expected.append(short_prefixed(name) + encode.encode_table_value(set_fields[text]))
        elif text not in removed:
            expected.append(short_prefixed(name) + value)
    expected.extend(
        short_prefixed(name.encode()) + encode.encode_table_value(value)
        for name, value in set_fields.items()
        if name not in names
    )
    assert rewritten == content_header(
        flags, long_prefixed(b"".join(expected)) + others, body_size=77
    )


def test_rewrite_headers_adds_the_headers_property_when_there_was_none():
    """Spec 4.2.6.1: setting a field on a message with no headers sets the headers flag (bit 13)
    and puts the table in its place, between content-encoding and delivery-mode."""
    payload = content_header((1 << 15) | (1 << 12), short_prefixed(b"text/plain") + b"\x02")
    rewritten = rewrite_headers(payload, {"x-delivery-count": 1})
    assert rewritten == content_header(
        (1 << 15) | (1 << 13) | (1 << 12),
        short_prefixed(b"text/plain") + table((b"x-delivery-count", b"b\x01")) + b"\x02",
    )


def test_rewrite_headers_removes_whole_properties():
    """Dead-lettering removes the expiration ("in order to prevent it from expiring again"):
    its flag bit and its octets go, the rest stays."""
    payload = content_header(
        (1 << 8) | (1 << 7) | (1 << 2),
        short_prefixed(b"60000") + short_prefixed(b"m") + short_prefixed(b"c"),
    )
    rewritten = rewrite_headers(payload, {}, remove_properties={"expiration"})
    assert rewritten == content_header(
        (1 << 7) | (1 << 2), short_prefixed(b"m") + short_prefixed(b"c")
    )
    assert decode_basic_properties(rewritten).expiration is None


def test_rewrite_headers_with_nothing_to_do_gives_the_same_octets():
    payload = content_header(1 << 13, table((b"d", b"d" + struct.pack(">d", 0.1))))
    assert rewrite_headers(payload, {}) == payload
    assert rewrite_headers(content_header(0, b""), {}) == content_header(0, b"")


def test_rewrite_headers_sets_long_fields_as_long_long_ints():
    """RabbitMQ sends a stream delivery's x-stream-offset as a long ('l', a signed 64-bit
    integer) whatever its value, where pamqp would pick the fewest octets ('b' for 1)."""
    payload = content_header(1 << 13, table((b"a", b"b\x01")))
    rewritten = rewrite_headers(payload, {}, long_fields={"x-stream-offset": 1, "a": 2})
    assert rewritten == content_header(
        1 << 13,
        table(
            (b"a", b"l" + struct.pack(">q", 2)), (b"x-stream-offset", b"l" + struct.pack(">q", 1))
        ),
    )
    assert decode_basic_properties(rewritten).headers == {"a": 2, "x-stream-offset": 1}


@given(
    st.recursive(
        st.integers(),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
        ),
        max_leaves=30,
    )
)
def test_nesting_is_the_depth_of_tables_and_arrays(value: object) -> None:
    """`nesting` counts tables and arrays around the deepest value, as a recursive walk does."""

    def depth(item: object) -> int:
        if isinstance(item, dict):
            return 1 + max(map(depth, item.values()), default=0)
        if isinstance(item, list):
            return 1 + max(map(depth, item), default=0)
        return 0

    assert nesting(value) == depth(value)
