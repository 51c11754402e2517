"""The topic exchange: binding keys are word patterns, `*` one word and `#` zero or more.

AMQP 0-9-1 section 3.1.3.3 and RabbitMQ: "messages are routed to one or many queues based on
matching between a message routing key and the pattern that was used to bind a queue". The
matching lives in topic_trie.py and the bindings' identities in bindings.py; this module keeps
the two in step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.bindings import BindingTable
from batonmq.routing.topic_trie import TopicTrie


class TopicExchange:
    """Bindings in a trie; arguments are part of a binding's identity only."""

    type_name: ClassVar[str] = "topic"
    needs_headers: ClassVar[bool] = False

    def __init__(self) -> None:
        self._bindings = BindingTable()
        self._trie = TopicTrie()

    @property
    def trie(self) -> TopicTrie:
        return self._trie

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        if not self._bindings.add(destination, routing_key, arguments):
            return False
        self._trie.add(routing_key, destination)
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        if not self._bindings.remove(destination, routing_key, arguments):
            return False
        self._trie.remove(routing_key, destination)
        return True

    def unbind_destination(self, destination: Destination) -> int:
        removed = self._bindings.remove_destination(destination)
        for routing_key, _ in removed:
            self._trie.remove(routing_key, destination)
        return len(removed)

    def route(self, routing_key: str, headers: FieldTable | None) -> set[Destination]:
        return self._trie.match(routing_key)

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        return iter(self._bindings)

    def __len__(self) -> int:
        return len(self._bindings)
