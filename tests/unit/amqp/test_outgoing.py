"""The hand-written encoders of server-to-client methods are byte-equal to pamqp's, and they also
encode the names pamqp's client-side validation refuses (any UTF-8 a client declared)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame

from batonmq.amqp.frames import FrameReader, MethodFrame
from batonmq.amqp.outgoing import basic_deliver, basic_get_ok, basic_return, queue_declare_ok

#: Names pamqp's validate() accepts: its exchange-name pattern, at most 127 characters.
pamqp_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@#,/+ ",
    max_size=127,
)
channels = st.integers(1, 65535)
#: pamqp encodes long-long integers as signed, so compare within its range.
longlongs = st.integers(0, 2**63 - 1)
longs = st.integers(0, 2**32 - 1)


@given(channels, pamqp_names, longlongs, st.booleans(), pamqp_names, pamqp_names)
def test_basic_deliver_is_byte_equal_to_pamqp(channel, tag, delivery_tag, redelivered, ex, key):
    """BatonMQ architecture, the hot path: a specialised encoder is kept byte-equal to pamqp."""
    expected = frame.marshal(
        commands.Basic.Deliver(tag, delivery_tag, redelivered, ex, key), channel
    )
    assert basic_deliver(channel, tag, delivery_tag, redelivered, ex, key) == expected


@given(channels, longlongs, st.booleans(), pamqp_names, pamqp_names, longs)
def test_basic_get_ok_is_byte_equal_to_pamqp(channel, delivery_tag, redelivered, ex, key, count):
    expected = frame.marshal(
        commands.Basic.GetOk(delivery_tag, redelivered, ex, key, count), channel
    )
    assert basic_get_ok(channel, delivery_tag, redelivered, ex, key, count) == expected


@given(channels, st.integers(0, 65535), pamqp_names, pamqp_names, pamqp_names)
def test_basic_return_is_byte_equal_to_pamqp(channel, code, text, ex, key):
    expected = frame.marshal(commands.Basic.Return(code, text, ex, key), channel)
    assert basic_return(channel, code, text, ex, key) == expected


@given(channels, pamqp_names, longs, longs)
def test_queue_declare_ok_is_byte_equal_to_pamqp(channel, queue, messages, consumers):
    expected = frame.marshal(commands.Queue.DeclareOk(queue, messages, consumers), channel)
    assert queue_declare_ok(channel, queue, messages, consumers) == expected


@pytest.mark.parametrize("name", ["orders!", "tâches", "x" * 200, "ключ.*"])
def test_names_pamqp_would_refuse_are_encoded_and_decode_back(name):
    """RabbitMQ accepts any UTF-8 name up to 255 octets; a consumer must still receive messages
    published through an exchange so named (pamqp's validate() would refuse to encode them)."""
    reader = FrameReader(1 << 20)
    reader.feed(basic_deliver(3, name, 7, True, name, name) + queue_declare_ok(3, name, 1, 2))
    deliver, declare_ok = reader.next_frame(), reader.next_frame()
    assert isinstance(deliver, MethodFrame)
    assert (deliver.method.consumer_tag, deliver.method.exchange, deliver.method.routing_key) == (
        name,
        name,
        name,
    )
    assert isinstance(declare_ok, MethodFrame)
    assert declare_ok.method.queue == name


def test_a_name_longer_than_a_short_string_is_refused():
    """A short string holds at most 255 octets; nothing longer can have come in as a name."""
    with pytest.raises(ValueError, match="256 octets"):
        queue_declare_ok(1, "é" * 128, 0, 0)
