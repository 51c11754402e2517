"""The fanout exchange: a message goes to every bound destination, whatever its routing key.

AMQP 0-9-1 section 3.1.3.2: "The fanout exchange type routes messages to all bound queues and
exchanges, regardless of the routing key"; the binding key and arguments only identify a binding.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.headers import ArgumentsKey, arguments_key

_BindingId = tuple[str, ArgumentsKey]


class FanoutExchange:
    """Bindings grouped by destination; routing returns every destination."""

    type_name: ClassVar[str] = "fanout"
    needs_headers: ClassVar[bool] = False

    def __init__(self) -> None:
        self._by_destination: dict[Destination, dict[_BindingId, FieldTable]] = {}
        self._count = 0

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        bindings = self._by_destination.setdefault(destination, {})
        binding_id = (routing_key, arguments_key(arguments))
        if binding_id in bindings:
            return False
        bindings[binding_id] = dict(arguments)
        self._count += 1
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        bindings = self._by_destination.get(destination)
        if bindings is None or bindings.pop((routing_key, arguments_key(arguments)), None) is None:
            return False
        if not bindings:
            del self._by_destination[destination]
        self._count -= 1
        return True

    def unbind_destination(self, destination: Destination) -> int:
        removed = len(self._by_destination.pop(destination, {}))
        self._count -= removed
        return removed

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        return set(self._by_destination)

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        for destination, bindings in self._by_destination.items():
            for (routing_key, _), arguments in bindings.items():
                yield destination, routing_key, arguments

    def __len__(self) -> int:
        return self._count
