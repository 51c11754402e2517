"""`decode_basic_properties`: the broker's own decoding of a content header's basic properties;
`rewrite_headers`: its editing of the header table at the octet level.

It must give what pamqp gives for every content header pamqp decodes (the broker compares the
values with binding arguments that pamqp decoded), and must also decode the content headers that
clients send and RabbitMQ passes through but pamqp refuses: short strings that are not UTF-8 and
timestamps beyond the year 9999.
"""

from __future__ import annotations

import datetime
import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import encode, header

from batonmq.amqp.constants import BASIC_CLASS_ID, ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.amqp.frames import decode_properties
from batonmq.amqp.properties import decode_basic_properties, rewrite_headers

# Octets written from the spec (4.2.5 field types with RabbitMQ's errata table, 4.2.6.1 content
# header), not with pamqp's encoder, so that types pamqp never writes ('d', 'B', 'x', a long
# string that is not UTF-8) are decoded too.


def long_prefixed(octets: bytes) -> bytes:
    return struct.pack(">I", len(octets)) + octets


def short_prefixed(octets: bytes) -> bytes:
    return bytes((len(octets),)) + octets


def content_header(flags: int, property_list: bytes, body_size: int = 0) -> bytes:
    return struct.pack(">HHQH", BASIC_CLASS_ID, 0, body_size, flags) + property_list


def headers_only(table: bytes) -> bytes:
    """A content header whose only property is `headers` (flag bit 13)."""
    return content_header(1 << 13, table)


_scalar_fields = st.one_of(
    st.booleans().map(lambda flag: b"t" + bytes((flag,))),
    st.integers(-(2**7), 2**7 - 1).map(lambda n: b"b" + struct.pack(">b", n)),
    st.integers(0, 2**8 - 1).map(lambda n: b"B" + struct.pack(">B", n)),
    st.integers(-(2**15), 2**15 - 1).map(lambda n: b"s" + struct.pack(">h", n)),
    st.integers(0, 2**16 - 1).map(lambda n: b"u" + struct.pack(">H", n)),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: b"I" + struct.pack(">i", n)),
    st.integers(0, 2**32 - 1).map(lambda n: b"i" + struct.pack(">I", n)),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: b"l" + struct.pack(">q", n)),
    st.binary(min_size=4, max_size=4).map(lambda octets: b"f" + octets),
    st.binary(min_size=8, max_size=8).map(lambda octets: b"d" + octets),
    st.tuples(st.integers(0, 255), st.integers(-(2**31), 2**31 - 1)).map(
        lambda pair: b"D" + struct.pack(">Bi", *pair)
    ),
    st.binary(max_size=20).map(lambda octets: b"S" + long_prefixed(octets)),
    st.text(max_size=10).map(lambda text: b"S" + long_prefixed(text.encode())),
    st.binary(max_size=20).map(lambda octets: b"x" + long_prefixed(octets)),
    # Up to the year 9999 in seconds, and in milliseconds past 2**32 - 1 (pamqp's rule).
    st.one_of(st.integers(0, 253_402_300_799), st.integers(2**32, 253_402_300_799_000)).map(
        lambda n: b"T" + struct.pack(">Q", n)
    ),
    st.just(b"V"),
)
_names = st.text(max_size=8).map(lambda name: name.encode()).filter(lambda name: len(name) < 256)


def _table(entries: list[tuple[bytes, bytes]]) -> bytes:
    return long_prefixed(b"".join(short_prefixed(name) + value for name, value in entries))


_fields = st.recursive(
    _scalar_fields,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: b"A" + long_prefixed(b"".join(items))),
        st.lists(st.tuples(_names, inner), max_size=4).map(lambda pairs: b"F" + _table(pairs)),
    ),
    max_leaves=12,
)
_tables = st.lists(st.tuples(_names, _fields), max_size=6).map(_table)


def same(left: object, right: object) -> bool:
    """Equal values of equal types, NaN equal to NaN, -0.0 unequal to 0.0."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float) and isinstance(right, float):
        return struct.pack(">d", left) == struct.pack(">d", right)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same, left, right))
    return left == right


def pamqp_properties(payload: bytes):
    content = header.ContentHeader()
    content.unmarshal(payload)
    return content.properties


@settings(max_examples=300, deadline=None)
@given(table=_tables)
def test_headers_of_every_field_type_decode_as_pamqp_decodes_them(table):
    """Spec 4.2.5.5 field tables, every type of RabbitMQ's errata table (t b B s u I i l f d D S
    x T F A V), nested: the same values of the same Python types as pamqp's decoder."""
    payload = headers_only(table)
    assert same(decode_basic_properties(payload).headers, pamqp_properties(payload).headers)


short_strings = st.text(min_size=1, max_size=20).map(str.encode).filter(lambda s: len(s) < 256)
_PROPERTY_VALUES = {
    "content_type": short_strings.map(short_prefixed),
    "content_encoding": short_strings.map(short_prefixed),
    "headers": _tables,
    "delivery_mode": st.integers(0, 255).map(lambda n: bytes((n,))),
    "priority": st.integers(0, 255).map(lambda n: bytes((n,))),
    "correlation_id": short_strings.map(short_prefixed),
    "reply_to": short_strings.map(short_prefixed),
    "expiration": short_strings.map(short_prefixed),
    "message_id": short_strings.map(short_prefixed),
    "timestamp": st.integers(0, 253_402_300_799).map(lambda n: struct.pack(">Q", n)),
    "message_type": short_strings.map(short_prefixed),
    "user_id": short_strings.map(short_prefixed),
    "app_id": short_strings.map(short_prefixed),
    "cluster_id": short_strings.map(short_prefixed),
}
_ORDER = list(_PROPERTY_VALUES)
_FIXED_WIDTH = {"headers", "delivery_mode", "priority", "timestamp"}


@settings(max_examples=300, deadline=None)
@given(
    present=st.fixed_dictionaries({}, optional=_PROPERTY_VALUES),
    body_size=st.integers(0, 2**64 - 1),
)
def test_any_set_of_the_fourteen_properties_decodes_as_pamqp_decodes_it(present, body_size):
    """Spec 4.2.6.1: a flag bit per property present (bit 15 for content-type down to bit 2 for
    cluster-id), then the present properties in order. Any subset decodes as pamqp decodes it,
    including a cluster-id and a delivery-mode pamqp itself would not send."""
    flags = sum(1 << (15 - _ORDER.index(name)) for name in present)
    payload = content_header(
        flags, b"".join(present[name] for name in _ORDER if name in present), body_size
    )
    mine, theirs = decode_basic_properties(payload), pamqp_properties(payload)
    for name in _ORDER:
        assert same(getattr(mine, name), getattr(theirs, name)), name


@pytest.mark.parametrize("name", [name for name in _ORDER if name not in _FIXED_WIDTH])
def test_a_short_string_property_that_is_not_utf8_keeps_its_octets(name):
    """Spec 4.2.5.3 says short strings carry UTF-8; RabbitMQ passes any octets through and pika
    sends a bytes property as it is. The broker must still decode such a header (a headers
    exchange, the user-id check): the octets come back through surrogate escapes."""
    octets = b"\xff\xfe not utf-8 \x80"
    flags = 1 << (15 - _ORDER.index(name))
    properties = decode_basic_properties(content_header(flags, short_prefixed(octets)))
    assert getattr(properties, name).encode("utf-8", "surrogateescape") == octets


def test_a_field_name_that_is_not_utf8_keeps_its_octets():
    """Field names are short strings (spec 4.2.5.5); pika sends a bytes name as it is."""
    table = _table([(b"caf\xe9", b"t\x01"), (b"ok", b"V")])
    headers = decode_basic_properties(headers_only(table)).headers
    assert headers is not None
    assert [name.encode("utf-8", "surrogateescape") for name in headers] == [b"caf\xe9", b"ok"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)),
        (2**32 - 1, datetime.datetime(2106, 2, 7, 6, 28, 15, tzinfo=datetime.UTC)),
        # pamqp's rule: above 2**32 - 1 a timestamp is taken for milliseconds.
        (1_700_000_000_123, datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, datetime.UTC)),
        (253_402_300_800_000, 253_402_300_800_000),  # the year 10000: the integer itself
        (2**63, 2**63),
        (2**64 - 1, 2**64 - 1),
    ],
)
def test_every_64_bit_timestamp_decodes(raw, expected):
    """Spec 4.2.5.4: "Time stamps are held in the 64-bit POSIX time_t format": every 64-bit
    value is one. Those `datetime` cannot hold (after the year 9999) decode to the integer, in
    the timestamp property and in a header alike."""
    octets = struct.pack(">Q", raw)
    as_property = decode_basic_properties(content_header(1 << 6, octets)).timestamp
    as_header = decode_basic_properties(headers_only(_table([(b"at", b"T" + octets)]))).headers
    assert same(as_property, expected)
    assert same(as_header, {"at": expected})


def test_the_values_pamqp_refuses_are_why_this_decoder_exists():
    """The two content headers above that pamqp cannot decode (so that a headers exchange, or a
    publish with a user-id, would have closed the publisher's connection with 502)."""
    not_utf8 = content_header(1 << 7, short_prefixed(b"\xff"))
    far_future = content_header(1 << 6, struct.pack(">Q", 2**64 - 1))
    for payload in (not_utf8, far_future):
        with pytest.raises(ValueError):  # noqa: PT011 - pamqp raises several ValueErrors
            pamqp_properties(payload)
        decode_properties(payload)


def test_float_specials_keep_their_bits():
    """Spec 4.2.5.5: 'd' is an IEEE-754 double and 'f' a float: -0.0, infinities and NaN with a
    payload keep their bits (a float's as Python widens it)."""
    doubles = [-0.0, math.inf, -math.inf, 5e-324, 0.1, 1 / 3]
    entries = [(f"d{i}".encode(), b"d" + struct.pack(">d", v)) for i, v in enumerate(doubles)]
    entries.append((b"d-nan", b"d" + bytes.fromhex("7ff8000000c0ffee")))
    entries.append((b"f-nan", b"f" + bytes.fromhex("7fc12345")))
    entries.append((b"f-negative-zero", b"f" + struct.pack(">f", -0.0)))
    headers = decode_basic_properties(headers_only(_table(entries))).headers
    assert headers is not None
    bits = {name: struct.pack(">d", value) for name, value in headers.items()}  # type: ignore[arg-type]
    assert bits == {
        **{f"d{i}": struct.pack(">d", v) for i, v in enumerate(doubles)},
        "d-nan": bytes.fromhex("7ff8000000c0ffee"),
        "f-nan": struct.pack(">d", struct.unpack(">f", bytes.fromhex("7fc12345"))[0]),
        "f-negative-zero": struct.pack(">d", -0.0),
    }


def test_a_continuation_flags_word_is_skipped():
    """Spec 4.2.6.1: "If the last bit (0) is set, this indicates that a further property flags
    field follows"; the basic class has no property there, so that field is read past."""
    payload = struct.pack(">HHQHH", BASIC_CLASS_ID, 0, 0, (1 << 9) | 1, 0) + short_prefixed(b"r")
    assert decode_basic_properties(payload).reply_to == "r"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(headers_only(_table([(b"u", b"U\x00\x01")])), id="unknown-field-type"),
        pytest.param(headers_only(long_prefixed(b"\x01a") + b"t\x01"), id="value-past-table"),
        pytest.param(headers_only(long_prefixed(b"\x01at")), id="table-cut-in-a-value"),
        pytest.param(headers_only(b"A" + long_prefixed(b"I\x00")), id="array-cut-in-a-value"),
        pytest.param(content_header(1 << 15, b"\x05abc"), id="short-string-cut"),
        pytest.param(content_header(1 << 6, b"\x00" * 7), id="timestamp-cut"),
        pytest.param(struct.pack(">HHQ", BASIC_CLASS_ID, 0, 0) + b"\x00", id="flags-cut"),
    ],
)
def test_malformed_properties_are_a_syntax_error(payload):
    """Spec 4.2.5.5 / 4.2.6.1 violated: 502 SYNTAX_ERROR ("a frame that contained illegal values
    for one or more fields"), never another exception."""
    with pytest.raises(HardError) as caught:
        decode_properties(payload)
    assert caught.value.reply_code is ReplyCode.SYNTAX_ERROR


# rewrite_headers ---------------------------------------------------------------------------------

_entries = st.lists(st.tuples(_names, _fields), max_size=6, unique_by=lambda entry: entry[0])


def _entry_octets(name: bytes, value: bytes) -> bytes:
    return short_prefixed(name) + value


@settings(max_examples=300, deadline=None)
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
    """BatonMQ architecture: "Content-header bytes are kept as received and forwarded unchanged".
    When the broker sets or removes header fields (x-delivery-count, x-death), every other field and
    property keeps its octets: a double stays a double ('d'), an unsigned octet 'B', a long
    string that is not UTF-8 stays as it was. A field set where its name is replaces it in
    place; a new one is added at the end, encoded as pamqp encodes it."""
    names = [name.decode() for name, _ in entries]
    removed = set(data.draw(st.lists(st.sampled_from(names))) if names else [])
    others = {"message-id": short_prefixed(b"\xff id"), "timestamp": struct.pack(">Q", 2**64 - 1)}
    flags = (1 << 13) | (1 << 7) | (1 << 6)
    payload = content_header(
        flags, _table(entries) + others["message-id"] + others["timestamp"], body_size=77
    )

    rewritten = rewrite_headers(payload, set_fields, remove_fields=removed)

    expected_entries = []
    for (name, value), text in zip(entries, names, strict=True):
        if text in set_fields:
            expected_entries.append(
                _entry_octets(name, encode.encode_table_value(set_fields[text]))
            )
        elif text not in removed:
            expected_entries.append(_entry_octets(name, value))
    expected_entries.extend(
        _entry_octets(name.encode(), encode.encode_table_value(value))
        for name, value in set_fields.items()
        if name not in names
    )
    expected_table = long_prefixed(b"".join(expected_entries))
    assert rewritten == content_header(
        flags, expected_table + others["message-id"] + others["timestamp"], body_size=77
    )


def test_rewrite_headers_adds_the_headers_property_when_there_was_none():
    """Spec 4.2.6.1: setting a field on a message with no headers sets the headers flag (bit 13)
    and puts the table in its place, between content-encoding and delivery-mode."""
    payload = content_header((1 << 15) | (1 << 12), short_prefixed(b"text/plain") + b"\x02")
    rewritten = rewrite_headers(payload, {"x-delivery-count": 1})
    assert rewritten == content_header(
        (1 << 15) | (1 << 13) | (1 << 12),
        short_prefixed(b"text/plain") + _table([(b"x-delivery-count", b"b\x01")]) + b"\x02",
    )


def test_rewrite_headers_removes_whole_properties():
    """Dead-lettering removes the expiration ("in order to prevent it from expiring again"):
    its flag bit and its octets go, the rest stays."""
    payload = content_header(
        (1 << 8) | (1 << 7) | (1 << 2),
        short_prefixed(b"60000") + short_prefixed(b"\xff") + short_prefixed(b"c"),
    )
    rewritten = rewrite_headers(payload, {}, remove_properties={"expiration"})
    assert rewritten == content_header(
        (1 << 7) | (1 << 2), short_prefixed(b"\xff") + short_prefixed(b"c")
    )
    assert decode_basic_properties(rewritten).expiration is None


def test_rewrite_headers_with_nothing_to_do_gives_the_same_octets():
    payload = content_header(1 << 13, _table([(b"d", b"d" + struct.pack(">d", 0.1))]))
    assert rewrite_headers(payload, {}) == payload
    assert rewrite_headers(content_header(0, b""), {}) == content_header(0, b"")
