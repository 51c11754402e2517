"""Codec round trips: every AMQP 0-9-1 method, the basic content properties, and field tables.

The strategies generate only what the wire format can represent: domains with their octet,
short, long and long-long ranges, short strings of at most 255 UTF-8 octets, the deprecated
arguments at the one value the spec allows them, names in the exchange-name / queue-name domains.
Values are compared attribute by attribute, by value and by kind (a bool never comes back as an
int or the reverse), since pamqp may choose a wider integer type than the value came from.
"""

from __future__ import annotations

import datetime
import math
import struct
import warnings
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import base, commands, decode, encode

from batonmq.amqp.constants import FRAME_HEADER, FRAME_METHOD
from batonmq.amqp.errors import HardError
from batonmq.amqp.frames import (
    HeaderFrame,
    decode_frame,
    decode_method,
    decode_properties,
    encode_header_payload,
    encode_method,
)

# Values ------------------------------------------------------------------------------------------

utf8_text = st.text(st.characters(codec="utf-8"))


def short_strings(max_chars: int = 63) -> st.SearchStrategy[str]:
    """At most 63 characters is at most 252 UTF-8 octets: always a valid short string."""
    return st.text(st.characters(codec="utf-8"), max_size=max_chars)


#: amqp0-9-1.xml domains exchange-name / queue-name, as pamqp validates them (at most 127).
names = st.text(
    st.sampled_from("abcXYZ019-_.:@#,/+ "),
    max_size=127,
)

#: Timestamps are whole seconds (spec 4.2.5.4: "64-bit POSIX time_t format with an accuracy of
#: one second"); pamqp reads values above 2**32 - 1 as milliseconds, so stay below that.
timestamps = st.integers(0, 0xFFFFFFFF).map(
    lambda seconds: datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
)

#: Decimal: a scale octet and a 32-bit mantissa; value = mantissa * 10 ** -scale.
decimals = st.builds(
    lambda mantissa, scale: Decimal(mantissa).scaleb(-scale),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 255),
)

field_keys = st.text(st.characters(codec="utf-8"), max_size=32)

scalar_field_values = st.one_of(
    st.booleans(),
    st.integers(-(2**7), 2**7 - 1),  # short-short int
    st.integers(-(2**15), 2**15 - 1),  # short int
    st.integers(-(2**31), 2**31 - 1),  # long int
    st.integers(-(2**63), 2**63 - 1),  # long-long int
    # pamqp encodes every float as a 32-bit float ('f'); doubles are decoded only (see below).
    st.floats(width=32, allow_nan=False),
    decimals,
    utf8_text,  # long string ('S'); pamqp never emits short strings in tables
    st.binary(max_size=64).map(bytearray),  # byte array ('x')
    timestamps,
    st.none(),  # void ('V')
)


def tables_of(scalars: st.SearchStrategy[object]) -> st.SearchStrategy[dict[str, object]]:
    values = st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),  # field array ('A')
            st.dictionaries(field_keys, children, max_size=4),  # nested table ('F')
        ),
        max_leaves=12,
    )
    return st.dictionaries(field_keys, values, max_size=6)


field_tables = tables_of(scalar_field_values)
#: What a content header's headers may hold: no infinite float, which a content header may not
#: carry (amqp/properties.py: pika cannot decode it).
header_tables = tables_of(
    scalar_field_values.filter(lambda value: not isinstance(value, float) or math.isfinite(value))
)


def same(left: object, right: object) -> bool:
    """Equal by value and by kind: bool, int, float, Decimal, str, bytes, datetime, None, and
    tables and arrays of them."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict):
        return (
            isinstance(right, dict)
            and left.keys() == right.keys()
            and all(same(left[key], right[key]) for key in left)
        )
    if isinstance(left, list):
        return (
            isinstance(right, list)
            and len(left) == len(right)
            and all(same(a, b) for a, b in zip(left, right, strict=True))
        )
    if isinstance(left, bytes | bytearray):
        return isinstance(right, bytes | bytearray) and bytes(left) == bytes(right)
    for kind in (int, float, Decimal, str, datetime.datetime):
        if isinstance(left, kind):
            return isinstance(right, kind) and left == right
    return left is None and right is None


# Methods -----------------------------------------------------------------------------------------

#: Deprecated arguments, at the one value the spec (and pamqp's validation) allows.
FIXED_ARGUMENTS = {
    "ticket": 0,
    "capabilities": "",
    "insist": False,
    "known_hosts": "",
    "out_of_band": "0",
    "channel_id": "0",
    "cluster_id": "",
}
NAME_ARGUMENTS = {"exchange", "queue", "source", "destination"}

DOMAIN_STRATEGIES: dict[str, st.SearchStrategy[object]] = {
    "bit": st.booleans(),
    "octet": st.integers(0, 2**8 - 1),
    "short": st.integers(0, 2**16 - 1),
    "long": st.integers(0, 2**32 - 1),
    # The wire's long-long is unsigned; pamqp's codec is signed both ways, so 0 .. 2**63 - 1.
    "longlong": st.integers(0, 2**63 - 1),
    "shortstr": short_strings(),
    "longstr": utf8_text,
    "table": field_tables,
}


def argument_strategy(method_class: type[base.Frame], attribute: str) -> st.SearchStrategy[object]:
    if attribute in FIXED_ARGUMENTS:
        return st.just(FIXED_ARGUMENTS[attribute])
    if attribute in NAME_ARGUMENTS:
        return names
    if attribute == "virtual_host":
        return short_strings(63)
    return DOMAIN_STRATEGIES[method_class.amqp_type(attribute)]


def build(method_class: type[base.Frame], arguments: dict[str, object]) -> base.Frame:
    with warnings.catch_warnings():
        # basic.recover-async is deprecated; building the expected value is not under test.
        warnings.simplefilter("ignore", DeprecationWarning)
        method = method_class()
    for attribute, value in arguments.items():
        setattr(method, attribute, value)
    return method


METHOD_CLASSES = sorted(commands.INDEX_MAPPING.values(), key=lambda cls: cls.index)


def test_the_round_trip_covers_all_64_methods_with_rabbitmqs_extensions():
    """amqp0-9-1.xml has 57 methods; RabbitMQ's extended XML adds confirm.select(-ok),
    exchange.bind(-ok), exchange.unbind(-ok) and basic.nack: 64, all in pamqp's INDEX_MAPPING."""
    names = {cls.name for cls in METHOD_CLASSES}
    assert len(names) == 64
    assert {"Confirm.Select", "Exchange.Bind", "Exchange.UnbindOk", "Basic.Nack"} <= names
    assert all(index == cls.index for index, cls in commands.INDEX_MAPPING.items())


@pytest.mark.parametrize("method_class", METHOD_CLASSES, ids=lambda cls: cls.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), channel=st.integers(0, 2**16 - 1))
def test_every_method_round_trips(method_class, data, channel):
    """Spec 4.2.5 / amqp0-9-1.xml: each method's arguments in the domains the XML gives them
    encode (`encode_method`) and decode (`decode_method`) to the same values."""
    arguments = data.draw(
        st.fixed_dictionaries(
            {
                attribute: argument_strategy(method_class, attribute)
                for attribute in method_class.__slots__
            }
        )
    )
    method = build(method_class, arguments)
    encoded = encode_method(channel, method)
    assert encoded[0] == FRAME_METHOD
    assert struct.unpack_from(">HI", encoded, 1) == (channel, len(encoded) - 8)
    decoded = decode_method(encoded[7:-1])
    assert type(decoded) is method_class
    for attribute, value in arguments.items():
        assert same(getattr(decoded, attribute), value), (attribute, value)


# Content header properties -----------------------------------------------------------------------

all_properties = st.fixed_dictionaries(
    {
        "content_type": short_strings().filter(bool),
        "content_encoding": short_strings().filter(bool),
        "headers": header_tables,
        "delivery_mode": st.sampled_from([1, 2]),
        "priority": st.integers(0, 255),
        "correlation_id": short_strings().filter(bool),
        "reply_to": short_strings().filter(bool),
        "expiration": short_strings().filter(bool),
        "message_id": short_strings().filter(bool),
        "timestamp": timestamps,
        "message_type": short_strings().filter(bool),
        "user_id": short_strings().filter(bool),
        "app_id": short_strings().filter(bool),
    }
)


@settings(max_examples=200, deadline=None)
@given(values=all_properties, body_size=st.integers(0, 2**64 - 1))
def test_a_content_header_with_every_basic_property_round_trips(values, body_size):
    """Spec 4.2.6.1 and the basic class properties: all 14 properties in one content header.
    cluster-id is the 14th; pamqp refuses any value but "" for it ("cluster_id must be empty")
    and an empty short string is sent as "absent", so the 13 settable properties are set to
    non-empty values and cluster-id to "", which decodes as not present."""
    properties = commands.Basic.Properties(cluster_id="", **values)
    payload = encode_header_payload(properties, body_size)
    decoded_frame = decode_frame(FRAME_HEADER, 5, payload)
    assert decoded_frame == HeaderFrame(5, 60, body_size, payload)
    # Property flags (spec 4.2.6.1): bits 15..3 for the 13 set, bit 2 (cluster-id) clear.
    assert payload[12:14] == b"\xff\xf8"
    decoded = decode_properties(payload)
    for attribute, value in values.items():
        assert same(getattr(decoded, attribute), value), (attribute, value)
    assert decoded.cluster_id == ""


@settings(max_examples=50, deadline=None)
@given(body_size=st.integers(0, 2**64 - 1))
def test_a_content_header_with_no_property_round_trips(body_size):
    """Spec 4.2.6.1: a property flag bit is set only for a property present; with none, one flags
    word of zero and no property list."""
    payload = encode_header_payload(commands.Basic.Properties(), body_size)
    assert payload[12:] == b"\x00\x00"
    decoded = decode_properties(payload)
    assert all(
        getattr(decoded, name) is None for name in decoded.attributes() if name != "cluster_id"
    )
    assert decode_frame(FRAME_HEADER, 1, payload) == HeaderFrame(1, 60, body_size, payload)


# Field tables ------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(table=field_tables)
def test_field_tables_round_trip(table):
    """Spec 4.2.5.5 (field tables) with RabbitMQ's errata types: every type pamqp encodes -
    boolean, short-short/short/long/long-long int, float, decimal, long string, byte array,
    timestamp, nested table, array and void."""
    encoded = encode.field_table(table)
    consumed, decoded = decode.field_table(encoded)
    assert consumed == len(encoded)
    assert same(decoded, table)


@pytest.mark.parametrize(
    ("value", "expected_tag"),
    [
        (True, b"t"),
        (-128, b"b"),
        (-32768, b"s"),
        (65535, b"u"),
        (-(2**31), b"I"),
        (2**32 - 1, b"i"),
        (2**63 - 1, b"l"),
        (1.5, b"f"),
        (Decimal("-3.14"), b"D"),
        ("text", b"S"),
        (bytearray(b"\x00\xff"), b"x"),
        (datetime.datetime(2024, 2, 29, 12, 0, tzinfo=datetime.UTC), b"T"),
        ({"nested": 1}, b"F"),
        ([1, "a"], b"A"),
        (None, b"V"),
    ],
    ids=repr,
)
def test_each_field_type_is_encoded_with_its_tag_and_round_trips(value, expected_tag):
    """Spec 4.2.5.5 with RabbitMQ's errata ("amqp-0-9-1-errata": t b s u I i l f D S T F A V x):
    each value takes the smallest tag that holds it and comes back as the same value."""
    encoded = encode.field_table({"k": value})
    assert encoded[4:7] == b"\x01k" + expected_tag
    _, decoded = decode.field_table(encoded)
    assert same(decoded["k"], value)


@settings(max_examples=200, deadline=None)
@given(value=st.floats(allow_nan=False))
def test_a_double_field_decodes(value):
    """'d' (double) and the other types pamqp reads but never writes (B, L) decode by value."""
    entries = (
        b"\x01dd" + struct.pack(">d", value) + b"\x01BB\xff" + b"\x01LL" + struct.pack(">q", -1)
    )
    _, decoded = decode.field_table(struct.pack(">I", len(entries)) + entries)
    assert same(decoded, {"d": value, "B": 255, "L": -1})


@settings(max_examples=500)
@given(
    method_class=st.sampled_from([commands.Basic.Publish, commands.Basic.Ack]),
    arguments=st.one_of(
        st.binary(max_size=40),
        st.builds(
            lambda exchange, key, bits: (
                b"\x00\x00" + bytes([len(exchange)]) + exchange + bytes([len(key)]) + key + bits
            ),
            st.binary(max_size=10),
            st.binary(max_size=10),
            st.binary(max_size=2),
        ),
    ),
)
def test_the_hot_methods_decode_as_pamqp_decodes_them(method_class, arguments):
    """BatonMQ architecture: "Publish, deliver, ack and the content header may have a specialised
    encoder/decoder ...; keep it tested for byte-equality against pamqp". Whatever the argument
    octets, basic.publish and basic.ack decode to what pamqp's generic decoder makes of them,
    or are refused where it refuses them."""
    payload = struct.pack(">I", method_class.index) + arguments
    expected = object.__new__(method_class)
    try:
        expected.unmarshal(arguments)
    except Exception:
        expected = None
    try:
        decoded = decode_method(payload)
    except HardError:
        decoded = None
    if expected is None:
        assert decoded is None
    else:
        assert decoded is not None
        for name in method_class.__slots__:
            assert same(getattr(decoded, name), getattr(expected, name))
