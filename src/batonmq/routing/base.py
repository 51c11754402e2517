"""The exchange-type extension point: a small protocol and a registry (BatonMQ style §4).

An exchange type owns the bindings of one exchange and answers one question: given a routing key
(and, for types that need them, the message's headers), which destinations match? It knows nothing
of channels, connections or queues beyond their `Destination` names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar, Protocol

from pamqp.common import FieldTable

from batonmq.model.destination import Destination


class BindingArgumentError(ValueError):
    """A binding's arguments are not valid for the exchange type (the engine answers 406)."""


class ExchangeType(Protocol):
    """The bindings of one exchange and its matching rule."""

    #: The AMQP type name, as given in exchange.declare ("direct", "topic", ...).
    type_name: ClassVar[str]
    #: True when `route` needs the message headers; router.py decodes properties only then.
    needs_headers: ClassVar[bool]

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        """Add a binding; returns False if an identical binding already existed (idempotent).

        Raises BindingArgumentError for arguments the type cannot accept.
        """
        ...

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        """Remove one binding; returns False if there was no such binding."""
        ...

    def unbind_destination(self, destination: Destination) -> int:
        """Remove every binding to `destination` (it is being deleted); returns how many."""
        ...

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        """The destinations a message with this routing key (and headers) goes to: a new set,
        which the caller may change."""
        ...

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        """Every binding, as (destination, routing key, arguments)."""
        ...

    def __len__(self) -> int:
        """The number of bindings."""
        ...


ExchangeTypeFactory = Callable[[], ExchangeType]

_REGISTRY: dict[str, ExchangeTypeFactory] = {}


def register(type_name: str, factory: ExchangeTypeFactory) -> None:
    _REGISTRY[type_name] = factory


def exchange_type(type_name: str) -> ExchangeTypeFactory | None:
    """The factory for `type_name`, or None if no such exchange type is known (the engine: 503)."""
    return _REGISTRY.get(type_name)


def known_types() -> list[str]:
    return sorted(_REGISTRY)
