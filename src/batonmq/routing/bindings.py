"""The bindings of one exchange, grouped by destination: the bookkeeping every exchange type shares.

A binding is identified, as in RabbitMQ, by (destination, routing key, arguments): binding the same
key again changes nothing, the same key with other arguments is a second binding. Field tables are
dicts, so unhashable; `arguments_key` is the hashable form a binding's identity uses. An exchange
type keeps a `BindingTable` for identity and counting, and beside it only its own routing index.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable, Iterator, KeysView
from decimal import Decimal

from pamqp.common import FieldTable, FieldValue

from batonmq.model.destination import Destination

#: A field table in a canonical, hashable form: equal for the same AMQP table whatever the key
#: order, and distinct for different wire types (a binding's identity includes its arguments'
#: types, as in RabbitMQ).
ArgumentsKey = frozenset[tuple[str, Hashable]]
#: A binding's identity among the bindings to one destination: (routing key, arguments).
BindingId = tuple[str, ArgumentsKey]


def arguments_key(arguments: FieldTable) -> ArgumentsKey:
    """The identity of a binding's arguments (field tables are dicts, so unhashable)."""
    return frozenset((name, _identity_form(value)) for name, value in arguments.items())


def binding_id(routing_key: str, arguments: FieldTable) -> BindingId:
    return routing_key, arguments_key(arguments)


def _identity_form(value: FieldValue) -> Hashable:
    # bool before int: bool is a subclass of int in Python, not in AMQP.
    if value is None:
        return ("void",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value.hex())  # hex() makes NaN equal to itself, so a NaN binding unbinds
    if isinstance(value, Decimal):
        return ("decimal", value.as_tuple())  # 1.0 and 1.00 are different wire values
    if isinstance(value, str):
        return ("longstr", value.encode())
    if isinstance(value, bytes):
        return ("longstr", value)
    if isinstance(value, bytearray):
        return ("bytearray", bytes(value))
    if isinstance(value, datetime.datetime):
        return ("timestamp", value)
    if isinstance(value, dict):
        return ("table", arguments_key(value))
    return ("array", tuple(_identity_form(item) for item in value))


class BindingTable:
    """Every binding of one exchange, by destination, each with a copy of its arguments."""

    def __init__(self) -> None:
        self._by_destination: dict[Destination, dict[BindingId, FieldTable]] = {}
        self._count = 0

    def add(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        """Add a binding; False if an identical one already existed."""
        bindings = self._by_destination.setdefault(destination, {})
        identity = binding_id(routing_key, arguments)
        if identity in bindings:
            return False
        bindings[identity] = dict(arguments)  # the caller's table may change after binding
        self._count += 1
        return True

    def remove(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        """Remove one binding; False if there was no such binding."""
        bindings = self._by_destination.get(destination)
        if bindings is None or bindings.pop(binding_id(routing_key, arguments), None) is None:
            return False
        if not bindings:
            del self._by_destination[destination]
        self._count -= 1
        return True

    def remove_destination(self, destination: Destination) -> list[tuple[str, FieldTable]]:
        """Remove every binding to `destination`; returns them as (routing key, arguments)."""
        bindings = self._by_destination.pop(destination, {})
        self._count -= len(bindings)
        return [(routing_key, arguments) for (routing_key, _), arguments in bindings.items()]

    def destinations(self) -> KeysView[Destination]:
        """The destinations with at least one binding."""
        return self._by_destination.keys()

    def __iter__(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        """Every binding, as (destination, routing key, arguments), by destination."""
        for destination, bindings in self._by_destination.items():
            for (routing_key, _), arguments in bindings.items():
                yield destination, routing_key, arguments

    def __len__(self) -> int:
        return self._count
