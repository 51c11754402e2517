"""The topic exchange: binding keys are word patterns, `*` one word and `#` zero or more.

AMQP 0-9-1 section 3.1.3.3 and RabbitMQ: "messages are routed to one or many queues based on
matching between a message routing key and the pattern that was used to bind a queue". The
matching lives in topic_trie.py; this module keeps the bindings' identities.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.headers import ArgumentsKey, arguments_key
from batonmq.routing.topic_trie import TopicTrie

_BindingId = tuple[str, ArgumentsKey]


class TopicExchange:
    """Bindings in a trie; arguments are part of a binding's identity only."""

    type_name: ClassVar[str] = "topic"
    needs_headers: ClassVar[bool] = False

    def __init__(self) -> None:
        self._by_destination: dict[Destination, dict[_BindingId, FieldTable]] = {}
        self._trie = TopicTrie()
        self._count = 0

    @property
    def trie(self) -> TopicTrie:
        return self._trie

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        bindings = self._by_destination.setdefault(destination, {})
        binding_id = (routing_key, arguments_key(arguments))
        if binding_id in bindings:
            return False
        bindings[binding_id] = dict(arguments)
        self._trie.add(routing_key, destination)
        self._count += 1
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        bindings = self._by_destination.get(destination)
        if bindings is None or bindings.pop((routing_key, arguments_key(arguments)), None) is None:
            return False
        if not bindings:
            del self._by_destination[destination]
        self._trie.remove(routing_key, destination)
        self._count -= 1
        return True

    def unbind_destination(self, destination: Destination) -> int:
        bindings = self._by_destination.pop(destination, {})
        for routing_key, _ in bindings:
            self._trie.remove(routing_key, destination)
        self._count -= len(bindings)
        return len(bindings)

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        return self._trie.match(routing_key)

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        for destination, bindings in self._by_destination.items():
            for (routing_key, _), arguments in bindings.items():
                yield destination, routing_key, arguments

    def __len__(self) -> int:
        return self._count
