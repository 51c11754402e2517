"""A trie of topic binding keys, matched against routing keys word by word.

A key is a list of words separated by dots; RabbitMQ splits "" into no words at all and keeps
every other empty word ("a..b" is "a", "", "b"; ".a" is "", "a"). In a binding key `*` stands for
exactly one word and `#` for zero or more words.

Matching walks states (node, number of routing words consumed). Each state is visited at most once,
so a run of `#` ("#.#", "a.#.#.b") costs at most (trie nodes on the walked paths) x (routing words
+ 1) states, never an exponential number of paths, and the cost never depends on bindings that
share no prefix with the routing key. Removing the last destination of a key prunes the nodes
that no longer lead anywhere, so bind/unbind churn leaves no garbage behind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from batonmq.model.destination import Destination

STAR: Final = "*"
HASH: Final = "#"


def split_words(key: str) -> list[str]:
    """The words of a routing or binding key, as RabbitMQ splits them ("" has none)."""
    return key.split(".") if key else []


@dataclass(slots=True)
class TrieNode:
    """One word position. Equality is structural: two tries holding the same keys are equal."""

    children: dict[str, TrieNode] = field(default_factory=dict)
    #: destination -> how many bindings of this exact key lead to it (they differ in arguments)
    destinations: dict[Destination, int] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not self.children and not self.destinations


@dataclass(slots=True)
class TopicTrie:
    root: TrieNode = field(default_factory=TrieNode)

    def add(self, binding_key: str, destination: Destination) -> None:
        """Count one more binding of `binding_key` to `destination`."""
        node = self.root
        for word in split_words(binding_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = TrieNode()
            node = child
        node.destinations[destination] = node.destinations.get(destination, 0) + 1

    def remove(self, binding_key: str, destination: Destination) -> bool:
        """Count one binding fewer; False if there was none. Prunes the nodes left empty."""
        path: list[tuple[TrieNode, str]] = []
        node = self.root
        for word in split_words(binding_key):
            child = node.children.get(word)
            if child is None:
                return False
            path.append((node, word))
            node = child
        count = node.destinations.get(destination)
        if count is None:
            return False
        if count > 1:
            node.destinations[destination] = count - 1
            return True
        del node.destinations[destination]
        for parent, word in reversed(path):
            if not parent.children[word].is_empty():
                break
            del parent.children[word]
        return True

    def match(
        self, routing_key: str, on_visit: Callable[[TrieNode], None] | None = None
    ) -> set[Destination]:
        """The destinations whose binding keys match `routing_key`, each once.

        `on_visit` is called for every (node, position) state the walk expands; tests use it to
        count the work done.
        """
        words = split_words(routing_key)
        end = len(words)
        matched: set[Destination] = set()
        seen: set[tuple[int, int]] = set()
        # (node, words consumed, whether the node was reached by `#` and may absorb more words)
        pending: list[tuple[TrieNode, int, bool]] = [(self.root, 0, False)]
        while pending:
            node, position, absorbs = pending.pop()
            state = (id(node), position)
            if state in seen:
                continue
            seen.add(state)
            if on_visit is not None:
                on_visit(node)
            children = node.children
            if position == end:
                matched.update(node.destinations)
            else:
                if absorbs:
                    pending.append((node, position + 1, True))
                literal = children.get(words[position])
                if literal is not None:
                    # A routing word "#" reaches the `#` child: as if `#` absorbed that one word.
                    pending.append((literal, position + 1, words[position] == HASH))
                star = children.get(STAR)
                if star is not None:
                    pending.append((star, position + 1, False))
            hash_child = children.get(HASH)
            if hash_child is not None:
                pending.append((hash_child, position, True))
        return matched

    def is_empty(self) -> bool:
        return self.root.is_empty()

    def node_count(self) -> int:
        """How many nodes the trie holds, the root included."""
        count = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count
