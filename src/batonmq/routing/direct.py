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
from batonmq.routing.bindings import BindingTable


class DirectExchange:
    """Bindings indexed by routing key. Arguments are part of a binding's identity only."""

    type_name: ClassVar[str] = "direct"
    needs_headers: ClassVar[bool] = False

    def __init__(self) -> None:
        self._bindings = BindingTable()
        #: routing key -> destination -> how many bindings (differing in arguments) join them
        self._by_routing_key: dict[str, dict[Destination, int]] = {}

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        if not self._bindings.add(destination, routing_key, arguments):
            return False
        destinations = self._by_routing_key.setdefault(routing_key, {})
        destinations[destination] = destinations.get(destination, 0) + 1
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        if not self._bindings.remove(destination, routing_key, arguments):
            return False
        self._forget(destination, routing_key)
        return True

    def unbind_destination(self, destination: Destination) -> int:
        removed = self._bindings.remove_destination(destination)
        for routing_key, _ in removed:
            self._forget(destination, routing_key)
        return len(removed)

    def _forget(self, destination: Destination, routing_key: str) -> None:
        destinations = self._by_routing_key[routing_key]
        remaining = destinations[destination] - 1
        if remaining:
            destinations[destination] = remaining
        else:
            del destinations[destination]
            if not destinations:
                del self._by_routing_key[routing_key]

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        return set(self._by_routing_key.get(routing_key, ()))

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        return iter(self._bindings)

    def __len__(self) -> int:
        return len(self._bindings)
