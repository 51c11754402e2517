"""Topic matching against a reference matcher, and trie shape after bind/unbind churn.

The reference is the definition, written as plainly as possible: RabbitMQ splits a key on dots
("" into no words), `*` consumes exactly one word, `#` zero or more.
"""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.routing.topic import TopicExchange
from batonmq.routing.topic_trie import TopicTrie

WORDS = ["a", "b", "", "*", "#"]
ROUTING_WORDS = ["a", "b", "c", ""]
DESTINATIONS = [Destination.queue("q1"), Destination.queue("q2"), Destination.exchange("x1")]


def words_of(key: str) -> tuple[str, ...]:
    return tuple(key.split(".")) if key else ()


def reference_match(binding_key: str, routing_key: str) -> bool:
    pattern = words_of(binding_key)
    words = words_of(routing_key)

    @cache
    def match(p: int, w: int) -> bool:
        if p == len(pattern):
            return w == len(words)
        if pattern[p] == "#":
            return any(match(p + 1, k) for k in range(w, len(words) + 1))
        if w == len(words):
            return False
        return (pattern[p] in ("*", words[w])) and match(p + 1, w + 1)

    return match(0, 0)


def keys(alphabet: list[str], max_words: int) -> st.SearchStrategy[str]:
    # A list of zero words is the key "", which RabbitMQ splits into no words; a single empty
    # word also gives "", so both strategies meet there.
    return st.lists(st.sampled_from(alphabet), max_size=max_words).map(".".join)


binding_keys = keys(WORDS, 6)
routing_keys = keys([*ROUTING_WORDS, "*", "#"], 7)


def test_reference_matcher_agrees_with_rabbitmq_examples():
    """The reference itself: RabbitMQ tutorial 5's examples."""
    assert reference_match("*.orange.*", "quick.orange.rabbit")
    assert reference_match("lazy.#", "lazy.orange.male.rabbit")
    assert reference_match("*.*.rabbit", "quick.orange.rabbit")
    assert not reference_match("*.orange.*", "quick.orange.male.rabbit")
    assert not reference_match("*.*.rabbit", "orange")
    assert reference_match("#", "")
    assert not reference_match("*", "")


@settings(max_examples=500)
@given(binding_key=binding_keys, routing_key=routing_keys)
def test_single_binding_matches_like_the_reference(binding_key, routing_key):
    exchange = TopicExchange()
    exchange.bind(DESTINATIONS[0], binding_key, {})
    expected = {DESTINATIONS[0]} if reference_match(binding_key, routing_key) else set()
    assert exchange.route(routing_key, None) == expected


@settings(max_examples=300)
@given(
    bindings=st.lists(st.tuples(st.sampled_from(DESTINATIONS), binding_keys), max_size=12),
    routing_key=routing_keys,
)
def test_many_bindings_route_like_the_reference(bindings, routing_key):
    exchange = TopicExchange()
    for destination, binding_key in bindings:
        exchange.bind(destination, binding_key, {})
    expected = {
        destination
        for destination, binding_key in bindings
        if reference_match(binding_key, routing_key)
    }
    assert exchange.route(routing_key, None) == expected


operations = st.lists(
    st.tuples(
        st.booleans(),  # True: bind, False: unbind
        st.sampled_from(DESTINATIONS),
        binding_keys,
        st.sampled_from([{}, {"x-tag": 1}]),
    ),
    max_size=40,
)


def trie_of(bindings: set[tuple[Destination, str, int]]) -> TopicTrie:
    trie = TopicTrie()
    for destination, binding_key, _ in bindings:
        trie.add(binding_key, destination)
    return trie


def apply(
    exchange: TopicExchange, operations: list[tuple[bool, Destination, str, FieldTable]]
) -> set[tuple[Destination, str, int]]:
    """Run bind/unbind `operations`, checking each answer; returns the bindings left, as the
    reference sees them: (destination, binding key, which arguments)."""
    model: set[tuple[Destination, str, int]] = set()
    for is_bind, destination, binding_key, arguments in operations:
        binding = (destination, binding_key, len(arguments))
        if is_bind:
            assert exchange.bind(destination, binding_key, arguments) is (binding not in model)
            model.add(binding)
        else:
            assert exchange.unbind(destination, binding_key, arguments) is (binding in model)
            model.discard(binding)
    assert len(exchange) == len(model)
    return model


@settings(max_examples=300)
@given(operations=operations, routing_key=routing_keys)
def test_bind_unbind_sequences_route_like_the_reference(operations, routing_key):
    """After any sequence of binds and unbinds (some of the same key with other arguments), a
    message goes to exactly the destinations that a remaining binding's key matches."""
    exchange = TopicExchange()
    model = apply(exchange, operations)
    expected = {
        destination
        for destination, binding_key, _ in model
        if reference_match(binding_key, routing_key)
    }
    assert exchange.route(routing_key, None) == expected


@settings(max_examples=300)
@given(operations=operations)
def test_bind_unbind_churn_leaves_the_trie_of_the_remaining_bindings(operations):
    """Unbind prunes: after any sequence the trie equals one built from what is still bound, and
    after removing everything it is empty."""
    exchange = TopicExchange()
    model = apply(exchange, operations)
    assert exchange.trie == trie_of(model)
    for destination in DESTINATIONS:
        exchange.unbind_destination(destination)
    assert len(exchange) == 0
    assert exchange.trie.is_empty()
    assert exchange.trie.node_count() == 1
