"""Messages in the HTTP API, both ways: as RabbitMQ's management API writes them (the answer to
POST /api/queues/{vhost}/{name}/get; the browse of a queue) and reads them (the body of POST
/api/exchanges/{vhost}/{name}/publish). Pure functions; no HTTP here.

RabbitMQ's rabbit_mgmt_format: `properties` names the AMQP basic properties as the spec does
(`type` for pamqp's message_type), leaving out those not set, headers as a JSON object; a
timestamp is seconds since the epoch. The payload is text when `encoding` is "auto" and it is
UTF-8, else base64 (`payload_encoding` says which); `truncate` cuts it to that many bytes
(`payload_bytes` is the whole size).
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping
from typing import Final

from pamqp import commands

from batonmq.engine.snapshots import BrowsedInfo, GotMessage, MessageInfo
from batonmq.management.listing import Item, Json
from batonmq.management.render import field_table, json_value

#: The basic properties by RabbitMQ's JSON names, and pamqp's attribute for each.
PROPERTY_NAMES: Final = {
    "content_type": "content_type",
    "content_encoding": "content_encoding",
    "headers": "headers",
    "delivery_mode": "delivery_mode",
    "priority": "priority",
    "correlation_id": "correlation_id",
    "reply_to": "reply_to",
    "expiration": "expiration",
    "message_id": "message_id",
    "timestamp": "timestamp",
    "type": "message_type",
    "user_id": "user_id",
    "app_id": "app_id",
    "cluster_id": "cluster_id",
}
_INTEGER_PROPERTIES: Final = frozenset({"delivery_mode", "priority", "timestamp"})
ENCODINGS: Final = ("auto", "base64")


class InvalidMessage(ValueError):
    """A publish body that does not make a message; the text says why (a 400)."""


def properties(value: commands.Basic.Properties) -> dict[str, Json]:
    """RabbitMQ's `properties` object: the properties that are set."""
    rendered: dict[str, Json] = {}
    for name, attribute in PROPERTY_NAMES.items():
        item = getattr(value, attribute)
        if item is None or (name == "cluster_id" and not item):
            continue
        rendered[name] = json_value(item)
    return rendered


def payload(body: bytes, encoding: str, truncate: int | None) -> Item:
    """`payload_bytes`, `payload` and `payload_encoding` of a message's body."""
    shown = body if truncate is None else body[:truncate]
    if encoding == "auto":
        try:
            text: Json = shown.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return {"payload_bytes": len(body), "payload": text, "payload_encoding": "string"}
    return {
        "payload_bytes": len(body),
        "payload": base64.b64encode(shown).decode("ascii"),
        "payload_encoding": "base64",
    }


def _message(info: MessageInfo, encoding: str, truncate: int | None) -> Item:
    return {
        "redelivered": info.redelivered,
        "exchange": info.exchange,
        "routing_key": info.routing_key,
        "properties": properties(info.properties),
        **payload(info.body, encoding, truncate),
    }


def got(taken: GotMessage, encoding: str, truncate: int | None) -> Item:
    """One message of /get's answer, with RabbitMQ's fields."""
    return {
        "message_count": taken.message_count,
        **_message(taken.message, encoding, truncate),
    }


def browsed(seen: BrowsedInfo, encoding: str, truncate: int | None) -> Item:
    """One message of a browse: /get's fields (less message_count), its position and id."""
    return {
        "position": seen.position,
        "message_id": seen.message.message_id,
        **_message(seen.message, encoding, truncate),
    }


def to_properties(value: Mapping[str, Json]) -> commands.Basic.Properties:
    """RabbitMQ's to_basic_properties: `properties` of a publish as AMQP basic properties
    (delivery_mode, priority and timestamp integers, headers an object, the rest strings;
    unknown names are ignored, as RabbitMQ ignores them)."""
    fields: dict[str, object] = {}
    for name, attribute in PROPERTY_NAMES.items():
        item = value.get(name)
        if item is None:
            continue
        if name == "headers":
            if not isinstance(item, dict):
                raise InvalidMessage("properties.headers must be a JSON object")
            try:
                fields[attribute] = field_table(item)
            except ValueError as error:
                raise InvalidMessage(f"properties.headers: {error}") from None
        elif name in _INTEGER_PROPERTIES:
            if isinstance(item, bool) or not isinstance(item, int):
                raise InvalidMessage(f"properties.{name} must be an integer")
            fields[attribute] = (
                datetime.datetime.fromtimestamp(item, datetime.UTC) if name == "timestamp" else item
            )
        elif not isinstance(item, str):
            raise InvalidMessage(f"properties.{name} must be a string")
        else:
            fields[attribute] = item
    try:
        built = commands.Basic.Properties(**fields)  # type: ignore[arg-type]
        built.marshal()  # pamqp's checks of each value (a delivery mode of 1 or 2, ...)
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidMessage(f"invalid properties: {error}") from None
    return built


def body_of(text: str, payload_encoding: str) -> bytes:
    """RabbitMQ's payload decode: "string" is the UTF-8 of the text, "base64" its decoding."""
    if payload_encoding == "string":
        return text.encode("utf-8")
    if payload_encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error:
            raise InvalidMessage("payload is not valid base64") from None
    raise InvalidMessage(f"unsupported payload_encoding '{payload_encoding}'")
