"""Messages as Spark rows, and rows as messages: the schema of the `batonmq` data source.

A row read from a stream (`SCHEMA`, in this order):

- `offset` long: the message's stream offset (the `x-stream-offset` of its delivery);
- `timestamp` timestamp: when the stream appended the message (UTC, to the millisecond), the
  moment a `startingOffsets` timestamp is compared with: its chunk's timestamp, which a
  BatonMQ stream delivers in the `x-batonmq-stream-timestamp` header. Null from a classic
  queue, and from a broker that does not send it (RabbitMQ's streams deliver only
  x-stream-offset). The publisher's `timestamp` property is in `properties`;
- `exchange` string: the exchange it was published to (`""`: the default exchange);
- `routing_key` string: its routing key;
- `headers` map<string,string>: its headers, each value as text (bytes as UTF-8, tables and
  arrays as JSON), without `x-stream-offset` and `x-batonmq-stream-timestamp`, which are the
  `offset` and `timestamp` columns;
- `properties` struct: its other basic properties (`PROPERTY_FIELDS`, `timestamp` among them
  as a timestamp), null where unset;
- `body` binary: its body, unchanged;
- `queue` string: the stream it was read from.

A row written (`df.write`) needs `body` (binary, or a string sent as UTF-8); it may have
`routing_key`, `exchange`, `headers` (map<string,string>) and `properties` (the same struct),
and its other columns are ignored.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from batonmq.queues.streams.deliveryheader import TIMESTAMP_HEADER

#: The basic properties a row carries in its `properties` struct, with their Spark types.
PROPERTY_FIELDS: Final = (
    ("content_type", "string"),
    ("content_encoding", "string"),
    ("delivery_mode", "int"),
    ("priority", "int"),
    ("correlation_id", "string"),
    ("reply_to", "string"),
    ("expiration", "string"),
    ("message_id", "string"),
    ("type", "string"),
    ("user_id", "string"),
    ("app_id", "string"),
    ("timestamp", "timestamp"),
)
SCHEMA: Final = (
    "offset long, timestamp timestamp, exchange string, routing_key string, "
    "headers map<string,string>, properties struct<"
    + ", ".join(f"{name}: {kind}" for name, kind in PROPERTY_FIELDS)
    + ">, body binary, queue string"
)
#: The header that carries a delivery's stream offset (RabbitMQ's streams over AMQP 0-9-1).
OFFSET_HEADER: Final = "x-stream-offset"
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: The headers whose values are columns of their own.
_COLUMN_HEADERS: Final = frozenset((OFFSET_HEADER, TIMESTAMP_HEADER))

Row = tuple[
    int,
    datetime.datetime | None,
    str,
    str,
    dict[str, str | None],
    dict[str, object],
    bytes,
    str,
]


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message as it was delivered from a stream."""

    offset: int
    exchange: str
    routing_key: str
    body: bytes
    headers: Mapping[str, object]
    #: The PROPERTY_FIELDS the message has (others are absent), as pika gives them (the
    #: timestamp in seconds since the epoch).
    properties: Mapping[str, object]
    #: The timestamp property, in seconds since the epoch.
    timestamp: int | None
    #: When the stream appended it, in milliseconds since the epoch (TIMESTAMP_HEADER); None
    #: when the delivery does not say.
    appended: int | None


@dataclass(frozen=True, slots=True)
class Publication:
    """A message to publish, made of a row."""

    exchange: str
    routing_key: str
    body: bytes
    headers: dict[str, str | int] | None
    #: PROPERTY_FIELDS that the row set (not null).
    properties: dict[str, object]


def row_of(delivery: Delivery, queue: str) -> Row:
    """`delivery`'s row of SCHEMA."""
    headers = {
        name: header_text(value)
        for name, value in delivery.headers.items()
        if name not in _COLUMN_HEADERS
    }
    properties = {name: delivery.properties.get(name) for name, _kind in PROPERTY_FIELDS}
    properties["timestamp"] = _moment(delivery.timestamp)
    return (
        delivery.offset,
        _appended_moment(delivery.appended),
        delivery.exchange,
        delivery.routing_key,
        headers,
        properties,
        delivery.body,
        queue,
    )


def _moment(seconds: int | None) -> datetime.datetime | None:
    """An AMQP timestamp (seconds since the epoch) as a Spark timestamp, in UTC."""
    return None if seconds is None else datetime.datetime.fromtimestamp(seconds, datetime.UTC)


def _appended_moment(milliseconds: int | None) -> datetime.datetime | None:
    """A stream's timestamp (milliseconds since the epoch) as a Spark timestamp, in UTC, to
    the millisecond (no rounding through a float)."""
    if milliseconds is None:
        return None
    return _EPOCH + datetime.timedelta(milliseconds=milliseconds)


def header_text(value: object) -> str | None:
    """A header value as the text of a map<string,string>."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        return json.dumps(value, default=_json_text, sort_keys=True)
    return str(value)


def _json_text(value: object) -> str | None:
    return header_text(value)


class RowError(ValueError):
    """A row that cannot be published; the message says why."""


def publication_of(
    row: Mapping[str, object], *, exchange: str, routing_key: str | None
) -> Publication:
    """The message `row` (a row's fields by name) stands for; `exchange` and `routing_key`
    are the options, for a row without its own (or with a null one). RowError."""
    body = row.get("body")
    if isinstance(body, str):
        body = body.encode("utf-8")
    elif isinstance(body, bytearray | memoryview):
        body = bytes(body)
    if not isinstance(body, bytes):
        raise RowError("a row to publish needs a 'body' column of binary or string")
    key = row.get("routing_key")
    if key is None:
        key = routing_key
    if not isinstance(key, str):
        raise RowError("a row without a 'routing_key' needs the 'routingKey' option")
    target = row.get("exchange")
    headers = row.get("headers")
    properties = row.get("properties")
    return Publication(
        exchange=target if isinstance(target, str) else exchange,
        routing_key=key,
        body=body,
        headers=None if not isinstance(headers, Mapping) else dict(headers),
        properties=(
            {}
            if not isinstance(properties, Mapping)
            else {
                name: _property(properties[name])
                for name, _kind in PROPERTY_FIELDS
                if properties.get(name) is not None
            }
        ),
    )


def _property(value: object) -> object:
    """A property of a row as pika sends it: a timestamp in whole seconds since the epoch
    (PySpark gives a timestamp as a naive local time, which `timestamp()` reads as local)."""
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value
