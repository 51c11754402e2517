"""JMS header fields and properties from AMQP basic properties."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from pamqp import commands

from batonmq.amqp.frames import decode_properties, encode_header_payload
from batonmq.selectors import JmsValues, jms_values, parse_selector


def over_the_wire(properties: commands.Basic.Properties) -> commands.Basic.Properties:
    """The properties as the broker sees them: encoded by a client, decoded by pamqp."""
    return decode_properties(encode_header_payload(properties, 0))


FULL = commands.Basic.Properties(
    headers={
        "colour": "red",
        "size": 10,
        "weight": 2.5,
        "fragile": True,
        "blob": bytearray(b"\x00\x01"),
        "price": Decimal("1.25"),
        "when": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        "table": {"k": 1},
        "list": [1, 2],
        "nothing": None,
        "JMSPriority": 0,
    },
    delivery_mode=2,
    priority=7,
    correlation_id="corr-1",
    message_id="msg-1",
    timestamp=datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
    message_type="order",
    reply_to="replies",
    user_id="guest",
    app_id="app",
)


def test_header_fields_and_properties():
    """JMS: "Message header field references are restricted to JMSDeliveryMode, JMSPriority,
    JMSMessageID, JMSTimestamp, JMSCorrelationID, and JMSType"; "Property values can be Boolean,
    byte, short, int, long, float, double, and String"."""
    values = jms_values(over_the_wire(FULL))
    assert dict(values) == {
        "JMSPriority": 7,
        "JMSMessageID": "msg-1",
        "JMSTimestamp": 1714979289000,
        "JMSCorrelationID": "corr-1",
        "JMSType": "order",
        "JMSDeliveryMode": "PERSISTENT",
        "colour": "red",
        "size": 10,
        "weight": 2.5,
        "fragile": True,
    }
    assert len(values) == 10
    assert values["colour"] == "red"
    with pytest.raises(KeyError):
        values["blob"]
    assert values.get("blob") is None
    assert values.get("absent", "default") == "default"
    assert "JMSType" in values
    assert "blob" not in values
    assert "JmsValues(" in repr(values)


def test_timestamp_is_epoch_milliseconds():
    """JMSTimestamp is "a normal Java millis time value"; AMQP's timestamp is whole seconds."""
    stamp = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    values = jms_values(commands.Basic.Properties(timestamp=stamp))
    assert values["JMSTimestamp"] == int(stamp.timestamp()) * 1000
    naive = jms_values(commands.Basic.Properties(timestamp=stamp.replace(tzinfo=None)))
    assert naive["JMSTimestamp"] == values["JMSTimestamp"]


def test_defaults_when_properties_are_absent():
    """JMS's default priority is 4; JMSMessageID, JMSCorrelationID and JMSType "may be null and
    if so are treated as a NULL value"; no delivery mode (AMQP: transient) is NON_PERSISTENT."""
    values = jms_values(over_the_wire(commands.Basic.Properties()))
    assert dict(values) == {"JMSPriority": 4, "JMSDeliveryMode": "NON_PERSISTENT"}
    for name in ("JMSMessageID", "JMSCorrelationID", "JMSType", "JMSTimestamp", "colour"):
        assert values.get(name) is None


@pytest.mark.parametrize(("mode", "expected"), [(1, "NON_PERSISTENT"), (2, "PERSISTENT")])
def test_delivery_mode(mode, expected):
    values = jms_values(commands.Basic.Properties(delivery_mode=mode))
    assert values["JMSDeliveryMode"] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("JMSPriority > 4", True),
        ("JMSPriority = 7 AND JMSDeliveryMode = 'PERSISTENT'", True),
        ("JMSMessageID = 'msg-1' AND JMSCorrelationID LIKE 'corr-%'", True),
        ("JMSType IN ('order', 'invoice')", True),
        ("JMSTimestamp >= 1714979289000 AND JMSTimestamp < 1714979290000", True),
        ("colour = 'red' AND size BETWEEN 5 AND 15 AND weight > 2 AND fragile", True),
        ("blob IS NULL AND price IS NULL AND nothing IS NULL AND table IS NULL", True),
        ("JMSRedelivered IS NULL AND JMSXUserID IS NULL", True),
        ("size > 10", False),
    ],
)
def test_selectors_over_a_real_message(text, expected):
    assert parse_selector(text).matches(jms_values(over_the_wire(FULL))) is expected


def test_lookups_are_lazy():
    """Nothing is read from the properties until a selector names it, and then only that."""

    class Watched:
        def __init__(self, properties):
            self.properties = properties
            self.read = []

        def __getattr__(self, name):
            self.read.append(name)
            return getattr(self.properties, name)

    watched = Watched(commands.Basic.Properties(priority=9, headers={"a": 1}))
    values = JmsValues(watched)
    assert watched.read == []
    assert parse_selector("JMSPriority = 9").matches(values)
    assert watched.read == ["priority"]
    assert parse_selector("a = 1").matches(values)
    assert watched.read == ["priority", "headers"]
