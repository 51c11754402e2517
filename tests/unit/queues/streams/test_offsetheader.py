"""The header a stream delivers with: the publisher's, x-stream-offset set to the message's
offset ("each delivery carries the x-stream-offset header", as RabbitMQ's streams), built from a
template per distinct header; it must be exactly what rewriting each header would give."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.amqp.properties import decode_basic_properties, rewrite_headers
from batonmq.queues.streams.offsetheader import with_offset
from batonmq.queues.streams.offsets import OFFSET_ARGUMENT

names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8)
properties = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | st.just("application/json"),
    headers=st.none()
    | st.dictionaries(
        names | st.just(OFFSET_ARGUMENT), st.integers(-(2**31), 2**31 - 1) | names, max_size=4
    ),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
    correlation_id=st.none() | names,
)
offsets = st.integers(0, 2**63 - 1)


@given(properties=properties, first=offsets, second=offsets)
def test_the_templated_header_is_the_rewritten_header(
    properties: commands.Basic.Properties, first: int, second: int
) -> None:
    header = encode_header_payload(properties, 10)
    for offset in (first, second):  # the second comes from the template the first made
        delivered = with_offset(header, offset)
        assert delivered == rewrite_headers(header, {}, long_fields={OFFSET_ARGUMENT: offset})
        assert (decode_basic_properties(delivered).headers or {})[OFFSET_ARGUMENT] == offset
