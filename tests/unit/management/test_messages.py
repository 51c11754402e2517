"""Messages as RabbitMQ's management API writes and reads them (rabbit_mgmt_format's
basic_properties and to_basic_properties; rabbit_mgmt_wm_queue_get's payload_part and
maybe_truncate; rabbit_mgmt_wm_exchange_publish's decode)."""

from __future__ import annotations

import base64
import datetime

import pytest
from pamqp import commands

from batonmq.engine.snapshots import BrowsedInfo, GotMessage, MessageInfo
from batonmq.management import messages

INFO = MessageInfo(
    7,
    "amq.direct",
    "key",
    True,
    commands.Basic.Properties(
        content_type="text/plain",
        headers={"k": b"v", "n": 1},
        delivery_mode=2,
        message_type="order",
        timestamp=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    ),
    b"hello",
)


def test_properties_are_named_as_rabbitmq_names_them_and_unset_ones_left_out():
    assert messages.properties(INFO.properties) == {
        "content_type": "text/plain",
        "headers": {"k": "v", "n": 1},
        "delivery_mode": 2,
        "timestamp": 1767225600,
        "type": "order",
    }


def test_auto_encoding_gives_utf8_as_a_string_and_anything_else_in_base64():
    """rabbit_mgmt_wm_queue_get: auto is a string when the payload is UTF-8, else base64."""
    assert messages.payload(b"caf\xc3\xa9", "auto", None) == {
        "payload_bytes": 5,
        "payload": "café",
        "payload_encoding": "string",
    }
    assert messages.payload(b"\xff", "auto", None)["payload"] == "/w=="
    assert messages.payload(b"text", "base64", None)["payload_encoding"] == "base64"


def test_truncate_cuts_the_payload_but_not_payload_bytes():
    assert messages.payload(b"abcdef", "auto", 2) == {
        "payload_bytes": 6,
        "payload": "ab",
        "payload_encoding": "string",
    }


def test_a_got_message_has_rabbitmqs_fields_and_a_browsed_one_its_position_and_id():
    got = messages.got(GotMessage(INFO, 3), "auto", None)
    assert set(got) == {
        "payload_bytes",
        "redelivered",
        "exchange",
        "routing_key",
        "message_count",
        "properties",
        "payload",
        "payload_encoding",
    }
    assert (got["message_count"], got["exchange"], got["redelivered"]) == (3, "amq.direct", True)
    browsed = messages.browsed(BrowsedInfo(4, INFO), "auto", None)
    assert (browsed["position"], browsed["message_id"], browsed["payload"]) == (4, 7, "hello")
    assert "message_count" not in browsed


def test_publish_properties_are_read_as_rabbitmq_reads_them():
    properties = messages.to_properties(
        {"delivery_mode": 2, "headers": {"a": 1}, "type": "t", "timestamp": 10, "unknown": "x"}
    )
    assert (properties.delivery_mode, properties.headers, properties.message_type) == (
        2,
        {"a": 1},
        "t",
    )
    assert properties.timestamp == datetime.datetime(1970, 1, 1, 0, 0, 10, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    "given",
    [
        {"delivery_mode": "2"},
        {"priority": True},
        {"headers": []},
        {"content_type": 5},
        {"delivery_mode": 7},
    ],
)
def test_publish_properties_of_the_wrong_type_are_refused(given):
    with pytest.raises(messages.InvalidMessage):
        messages.to_properties(given)


def test_publish_payloads_are_strings_or_base64():
    assert messages.body_of("héllo", "string") == "héllo".encode()
    assert messages.body_of(base64.b64encode(b"\x00\x01").decode(), "base64") == b"\x00\x01"
    with pytest.raises(messages.InvalidMessage):
        messages.body_of("not base64!", "base64")
    with pytest.raises(messages.InvalidMessage):
        messages.body_of("x", "rot13")
