"""Messages as rows of the `batonmq` data source's schema, and rows as messages to publish."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

import pytest

from batonmq.spark.rows import (
    PROPERTY_FIELDS,
    SCHEMA,
    Delivery,
    Publication,
    RowError,
    header_text,
    publication_of,
    row_of,
)


def delivery(**changes: object) -> Delivery:
    fields: dict[str, object] = {
        "offset": 42,
        "exchange": "amq.topic",
        "routing_key": "sensor.1",
        "body": b"\x00payload",
        "headers": {
            "x-stream-offset": 42,
            "x-batonmq-stream-timestamp": 1_764_115_200_123,
            "source": b"plant-7",
            "count": 3,
        },
        "properties": {"content_type": "application/json", "priority": 5},
        "timestamp": 1_700_000_000,
        "appended": 1_764_115_200_123,
    }
    fields.update(changes)
    return Delivery(**fields)  # type: ignore[arg-type]


def test_the_schema_lists_the_columns_in_the_order_of_a_row():
    top_level = re.sub(r"<[^<>]*>", "", re.sub(r"struct<[^>]*>", "struct", SCHEMA))
    columns = [column.split()[0] for column in top_level.split(", ")]

    assert columns == [
        "offset", "timestamp", "exchange", "routing_key", "headers", "properties", "body", "queue"
    ]  # fmt: skip
    properties = re.search(r"properties struct<([^>]*)>", SCHEMA)
    assert properties is not None
    assert properties.group(1).split(", ") == [
        "content_type: string", "content_encoding: string", "delivery_mode: int", "priority: int",
        "correlation_id: string", "reply_to: string", "expiration: string", "message_id: string",
        "type: string", "user_id: string", "app_id: string", "timestamp: timestamp",
    ]  # fmt: skip


def _columns(ddl: str) -> dict[str, str]:
    """The columns of a DDL schema (`name type, ...`, types nested in <>), name to type."""
    columns: dict[str, str] = {}
    depth, start = 0, 0
    for at, char in enumerate(ddl + ","):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            name, kind = ddl[start:at].strip().split(" ", 1)
            columns[name.rstrip(":")] = kind.strip()
            start = at + 1
    return columns


def test_the_schema_gives_each_column_its_spark_type():
    """The issue's schema: body binary, exchange and routing_key string, headers
    map<string,string>, properties a struct (the publisher's timestamp among them, as a
    timestamp), offset long, timestamp timestamp, queue string."""
    columns = _columns(SCHEMA)

    assert {name: kind for name, kind in columns.items() if name != "properties"} == {
        "offset": "long",
        "timestamp": "timestamp",
        "exchange": "string",
        "routing_key": "string",
        "headers": "map<string,string>",
        "body": "binary",
        "queue": "string",
    }
    struct = columns["properties"]
    assert struct.startswith("struct<") and struct.endswith(">")
    assert _columns(struct[len("struct<") : -1]) == {
        "content_type": "string",
        "content_encoding": "string",
        "delivery_mode": "int",
        "priority": "int",
        "correlation_id": "string",
        "reply_to": "string",
        "expiration": "string",
        "message_id": "string",
        "type": "string",
        "user_id": "string",
        "app_id": "string",
        "timestamp": "timestamp",
    }


def test_a_delivery_becomes_a_row_with_its_offset_and_its_body_unchanged():
    """RabbitMQ's streams over AMQP 0-9-1: "every delivery carries its offset in the
    x-stream-offset header": that is the offset column, not a header. The issue's schema has
    `timestamp` beside `properties.timestamp`: the column is when the stream appended the
    message (x-batonmq-stream-timestamp, milliseconds), not a header either; the property is
    the publisher's."""
    row = row_of(delivery(), "events")

    offset, moment, exchange, routing_key, headers, properties, body, queue = row
    assert (offset, exchange, routing_key, body, queue) == (
        42,
        "amq.topic",
        "sensor.1",
        b"\x00payload",
        "events",
    )
    assert moment == datetime.datetime(2025, 11, 26, 0, 0, 0, 123_000, tzinfo=datetime.UTC)
    assert headers == {"source": "plant-7", "count": "3"}
    assert properties["content_type"] == "application/json"
    assert properties["priority"] == 5
    assert properties["message_id"] is None
    assert properties["timestamp"] == datetime.datetime(
        2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC
    )
    assert list(properties) == [name for name, _kind in PROPERTY_FIELDS]


def test_a_message_without_a_timestamp_property_has_a_null_one():
    row = row_of(delivery(timestamp=None), "events")

    assert row[1] is not None
    assert row[5]["timestamp"] is None


def test_a_delivery_that_does_not_say_when_it_was_appended_has_a_null_timestamp():
    """From a classic queue, or from a broker that sends only x-stream-offset (RabbitMQ)."""
    row = row_of(delivery(appended=None, headers={"x-stream-offset": 42}), "events")

    assert row[1] is None
    assert row[5]["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)


def test_a_rows_timestamp_property_is_published_in_seconds_since_the_epoch():
    """AMQP 0-9-1 basic properties: timestamp is a 64-bit POSIX time (seconds); PySpark hands
    a timestamp column to Python as a naive local datetime."""
    aware = datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)
    for moment in (aware, aware.astimezone().replace(tzinfo=None)):
        publication = publication_of(
            {"body": b"b", "properties": {"timestamp": moment}}, exchange="", routing_key="k"
        )
        assert publication.properties == {"timestamp": 1_700_000_000}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (b"caf\xc3\xa9", "café"),
        (b"\xff", "\ufffd"),
        (True, "true"),
        (7, "7"),
        (Decimal("1.50"), "1.50"),
        (None, None),
        (datetime.datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05"),
        ({"b": 1, "a": [b"x", False]}, '{"a": ["x", false], "b": 1}'),
    ],
)
def test_a_header_value_becomes_text(value, text):
    assert header_text(value) == text


def test_a_row_becomes_a_publication_with_its_own_routing_and_properties():
    row = {
        "body": b"one",
        "routing_key": "k",
        "exchange": "x",
        "headers": {"h": "v"},
        "properties": {"message_id": "m-1", "content_type": None, "priority": 3},
        "offset": 9,
    }

    assert publication_of(row, exchange="", routing_key=None) == Publication(
        exchange="x",
        routing_key="k",
        body=b"one",
        headers={"h": "v"},
        properties={"message_id": "m-1", "priority": 3},
    )


def test_the_options_route_a_row_that_names_no_exchange_or_key_and_a_text_body_is_utf8():
    publication = publication_of(
        {"body": "café", "routing_key": None}, exchange="amq.direct", routing_key="fallback"
    )

    assert (publication.exchange, publication.routing_key, publication.body) == (
        "amq.direct",
        "fallback",
        "café".encode(),
    )
    assert publication.headers is None
    assert publication.properties == {}


def test_an_empty_routing_key_is_a_routing_key():
    """An empty routing key is a valid one (fanout exchanges ignore it): not a missing one."""
    assert (
        publication_of({"body": b"x", "routing_key": ""}, exchange="", routing_key="k").routing_key
        == ""
    )


def test_a_row_without_a_body_or_a_routing_key_cannot_be_published():
    with pytest.raises(RowError, match="'body'"):
        publication_of({"routing_key": "k"}, exchange="", routing_key=None)
    with pytest.raises(RowError, match="'routingKey'"):
        publication_of({"body": b"x"}, exchange="", routing_key=None)
