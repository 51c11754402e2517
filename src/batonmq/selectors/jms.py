"""A message's selector values: its application headers and the JMS header fields, from AMQP
basic properties.

JMS 1.1 (javax.jms.Message): "Message header field references are restricted to
JMSDeliveryMode, JMSPriority, JMSMessageID, JMSTimestamp, JMSCorrelationID, and JMSType.
JMSMessageID, JMSCorrelationID, and JMSType values may be null and if so are treated as a NULL
value." They are read from the properties as Qpid and the RabbitMQ JMS client map them:

    JMSPriority       priority (JMS's default, 4, when absent)
    JMSMessageID      message-id
    JMSTimestamp      timestamp, as milliseconds since the epoch (JMS's unit; AMQP's is seconds)
    JMSCorrelationID  correlation-id
    JMSType           type (pamqp's message_type)
    JMSDeliveryMode   'PERSISTENT' for delivery-mode 2, else 'NON_PERSISTENT'

("When used in a message selector, the JMSDeliveryMode header field is treated as having the
values 'PERSISTENT' and 'NON_PERSISTENT'"; "Date and time values should use the standard long
millisecond value".)

Application headers are the properties: "Property values can be Boolean, byte, short, int, long,
float, double, and String"; a header of another AMQP type (byte array, decimal, timestamp,
table, array, void) is absent, so it is NULL to a selector. A header named like one of the six
fields above is shadowed by the field (JMS reserves the JMS prefix).

Nothing is computed until a selector asks for it: the mapping reads the properties per lookup.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from pamqp import commands

from batonmq.selectors.nodes import Value
from batonmq.selectors.semantics import normalize

#: JMS's default priority ("JMS defines a ten level priority value ... the default is 4").
DEFAULT_PRIORITY: Final = 4
#: basic.properties delivery-mode: "2 = persistent".
_PERSISTENT_MODE: Final = 2
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MILLISECOND: Final = datetime.timedelta(milliseconds=1)


def _priority(properties: commands.Basic.Properties) -> Value:
    priority = properties.priority
    return DEFAULT_PRIORITY if priority is None else priority


def _timestamp(properties: commands.Basic.Properties) -> Value:
    timestamp: object = properties.timestamp
    if isinstance(timestamp, datetime.datetime):
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=datetime.UTC)
        return (timestamp - _EPOCH) // _MILLISECOND
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        return timestamp * 1000
    return None


def _delivery_mode(properties: commands.Basic.Properties) -> Value:
    return "PERSISTENT" if properties.delivery_mode == _PERSISTENT_MODE else "NON_PERSISTENT"


JMS_HEADER_FIELDS: Final[dict[str, Callable[[commands.Basic.Properties], Value]]] = {
    "JMSPriority": _priority,
    "JMSMessageID": lambda properties: properties.message_id,
    "JMSTimestamp": _timestamp,
    "JMSCorrelationID": lambda properties: properties.correlation_id,
    "JMSType": lambda properties: properties.message_type,
    "JMSDeliveryMode": _delivery_mode,
}


class JmsValues(Mapping[str, object]):
    """A read-only view of one message's properties as selector identifiers."""

    __slots__ = ("_properties",)

    def __init__(self, properties: commands.Basic.Properties) -> None:
        self._properties = properties

    def _lookup(self, name: str) -> Value:
        field = JMS_HEADER_FIELDS.get(name)
        if field is not None:
            return field(self._properties)
        headers = self._properties.headers
        if not headers:
            return None
        return normalize(headers.get(name))

    def get(self, key: str, default: object = None) -> object:
        """A selector's lookup: no exception for an absent identifier."""
        value = self._lookup(key)
        return default if value is None else value

    def __getitem__(self, key: str) -> object:
        value = self._lookup(key)
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        for name in JMS_HEADER_FIELDS:
            if self._lookup(name) is not None:
                yield name
        for name, value in (self._properties.headers or {}).items():
            if name not in JMS_HEADER_FIELDS and normalize(value) is not None:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"JmsValues({dict(self)!r})"


def jms_values(properties: commands.Basic.Properties) -> Mapping[str, object]:
    """The values a selector sees for a message with these basic properties."""
    return JmsValues(properties)
