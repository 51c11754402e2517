"""The direct exchange: a message goes to the destinations bound with exactly its routing key.

AMQP 0-9-1 section 3.1.3.1: "A message queue is bound to the exchange using a routing key, K. A
publisher sends the exchange a message with the routing key R. The message is passed to the
message queue if K = R." Routing is one dictionary lookup, whatever the number of bindings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.headers import ArgumentsKey, arguments_key

_BindingId = tuple[str, ArgumentsKey]


class DirectExchange:
    """Bindings indexed by routing key. Arguments are part of a binding's identity only."""

    type_name: ClassVar[str] = "direct"
    needs_headers: ClassVar[bool] = False

    def __init__(self) -> None:
        self._by_destination: dict[Destination, dict[_BindingId, FieldTable]] = {}
        #: routing key -> destination -> how many bindings (differing in arguments) join them
        self._by_routing_key: dict[str, dict[Destination, int]] = {}
        self._count = 0

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        bindings = self._by_destination.setdefault(destination, {})
        binding_id = (routing_key, arguments_key(arguments))
        if binding_id in bindings:
            return False
        bindings[binding_id] = dict(arguments)
        destinations = self._by_routing_key.setdefault(routing_key, {})
        destinations[destination] = destinations.get(destination, 0) + 1
        self._count += 1
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        bindings = self._by_destination.get(destination)
        if bindings is None or bindings.pop((routing_key, arguments_key(arguments)), None) is None:
            return False
        if not bindings:
            del self._by_destination[destination]
        self._forget(destination, routing_key)
        return True

    def unbind_destination(self, destination: Destination) -> int:
        bindings = self._by_destination.pop(destination, {})
        for routing_key, _ in bindings:
            self._forget(destination, routing_key)
        return len(bindings)

    def _forget(self, destination: Destination, routing_key: str) -> None:
        destinations = self._by_routing_key[routing_key]
        remaining = destinations[destination] - 1
        if remaining:
            destinations[destination] = remaining
        else:
            del destinations[destination]
            if not destinations:
                del self._by_routing_key[routing_key]
        self._count -= 1

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        return set(self._by_routing_key.get(routing_key, ()))

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        for destination, bindings in self._by_destination.items():
            for (routing_key, _), arguments in bindings.items():
                yield destination, routing_key, arguments

    def __len__(self) -> int:
        return self._count
