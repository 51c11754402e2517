"""Message.persistent reads delivery-mode from the raw content header without decoding it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands
from pamqp.header import ContentHeader

from batonmq.model.message import Message


def _message(properties: commands.Basic.Properties) -> Message:
    return Message("", "q", ContentHeader(0, 3, properties).marshal(), b"abc")


@given(
    content_type=st.none() | st.text(max_size=20),
    content_encoding=st.none() | st.text(max_size=20),
    headers=st.none() | st.dictionaries(st.text(max_size=10), st.integers(0, 9), max_size=4),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
)
def test_persistent_is_delivery_mode_2(
    content_type, content_encoding, headers, delivery_mode, priority
):
    """basic.properties delivery-mode: "1 = non-persistent, 2 = persistent"."""
    properties = commands.Basic.Properties(
        content_type=content_type,
        content_encoding=content_encoding,
        headers=headers,
        delivery_mode=delivery_mode,
        priority=priority,
    )
    assert _message(properties).persistent is (delivery_mode == 2)
