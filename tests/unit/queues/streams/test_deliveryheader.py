"""The header a stream delivers with: the publisher's, x-stream-offset set to the message's
offset ("each delivery carries the x-stream-offset header", as RabbitMQ's streams) and
x-batonmq-stream-timestamp to when the stream appended it, built from a template per distinct
header; it must be exactly what rewriting each header would give."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.amqp.properties import decode_basic_properties
from batonmq.queues.streams.deliveryheader import TIMESTAMP_HEADER, delivery_header, rewritten
from batonmq.queues.streams.offsets import OFFSET_ARGUMENT

names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8)
properties = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | st.just("application/json"),
    headers=st.none()
    | st.dictionaries(
        names | st.sampled_from([OFFSET_ARGUMENT, TIMESTAMP_HEADER]),
        st.integers(-(2**31), 2**31 - 1) | names,
        max_size=4,
    ),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
    correlation_id=st.none() | names,
    timestamp=st.none()
    | st.datetimes(datetime.datetime(1970, 1, 2), datetime.datetime(2100, 1, 1)),
)
longs = st.integers(0, 2**63 - 1)


@given(properties=properties, first=st.tuples(longs, longs), second=st.tuples(longs, longs))
def test_the_templated_header_is_the_rewritten_header(
    properties: commands.Basic.Properties, first: tuple[int, int], second: tuple[int, int]
) -> None:
    """Whatever the publisher's headers hold, either field among them (a publisher's own
    x-batonmq-stream-timestamp is replaced, in place) and in either order; the publisher's
    timestamp property stays as published."""
    header = encode_header_payload(properties, 10)
    for offset, timestamp in (first, second):  # the second comes from the template the first made
        delivered = delivery_header(header, offset, timestamp)
        assert delivered == rewritten(header, offset, timestamp)
        decoded = decode_basic_properties(delivered)
        assert (decoded.headers or {})[OFFSET_ARGUMENT] == offset
        assert (decoded.headers or {})[TIMESTAMP_HEADER] == timestamp
        assert decoded.timestamp == decode_basic_properties(header).timestamp
