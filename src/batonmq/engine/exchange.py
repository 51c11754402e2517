"""An exchange of a virtual host: its declared attributes and the bindings its type routes by."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from pamqp.common import FieldTable, FieldValue

from batonmq.routing.router import Router

#: RabbitMQ's exchange argument naming the exchange that takes what this one cannot route
#: (https://www.rabbitmq.com/docs/ae).
ALTERNATE_EXCHANGE: Final = "alternate-exchange"


@dataclass(eq=False, slots=True)
class Exchange:
    name: str
    type_name: str
    router: Router
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: FieldTable = field(default_factory=dict)
    #: Where a message goes when none of this exchange's bindings match it; None for nowhere.
    alternate_exchange: str | None = None

    @property
    def is_default(self) -> bool:
        return self.name == ""


def alternate_exchange_name(arguments: FieldTable) -> str | None:
    """The `alternate-exchange` argument's exchange name, None without one. RabbitMQ accepts only
    a long string (its octets name the exchange); anything else raises TypeError naming the
    AMQP type, for the engine's 406."""
    if ALTERNATE_EXCHANGE not in arguments:
        return None
    value = arguments[ALTERNATE_EXCHANGE]
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        # pamqp decodes a long string that is not UTF-8 to bytes; a short string (an exchange
        # name) that is not UTF-8 decodes with surrogate escapes, so the same octets match.
        return value.decode("utf-8", "surrogateescape")
    raise TypeError(_field_type_name(value))


def alternate_exchange_change(received: str | None, current: str | None) -> str | None:
    """RabbitMQ's words for a redeclaration that changes the alternate exchange ("received ...
    but current is ..."), None when it does not change it."""
    if received == current:
        return None
    if received is not None and current is not None:
        return f"received '{received}' but current is '{current}'"
    return f"received {_shown(received)} but current is {_shown(current)}"


def _shown(name: str | None) -> str:
    return "none" if name is None else f"the value '{name}' of type 'longstr'"


def _field_type_name(value: FieldValue) -> str:
    """RabbitMQ's name for the AMQP type of a value that is not a long string. Decoding forgets
    an integer's width: it is named as pika sends it (signedint if it fits, else long)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, bytearray):
        return "binary"
    if isinstance(value, dict):
        return "table"
    return "void" if value is None else "array"
