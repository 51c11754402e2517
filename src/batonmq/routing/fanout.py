"""The fanout exchange: a message goes to every bound destination, whatever its routing key.

AMQP 0-9-1 section 3.1.3.2: "The fanout exchange type routes messages to all bound queues and
exchanges, regardless of the routing key"; the binding key and arguments only identify a binding.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.bindings import BindingTable


class FanoutExchange:
    """Bindings grouped by destination; routing returns every destination."""

    type_name: ClassVar[str] = "fanout"
    needs_headers: ClassVar[bool] = False

    def __init__(self) -> None:
        self._bindings = BindingTable()

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        return self._bindings.add(destination, routing_key, arguments)

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        return self._bindings.remove(destination, routing_key, arguments)

    def unbind_destination(self, destination: Destination) -> int:
        return len(self._bindings.remove_destination(destination))

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        return set(self._bindings.destinations())

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        return iter(self._bindings)

    def __len__(self) -> int:
        return len(self._bindings)
