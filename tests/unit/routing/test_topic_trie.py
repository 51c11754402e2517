"""The topic trie's cost: it depends on the routing key and the wildcards on its path, never on
the number of bindings (RabbitMQ's topic trie: the reason a topic exchange scales)."""

from __future__ import annotations

from batonmq.model.destination import Destination
from batonmq.routing.topic import TopicExchange
from batonmq.routing.topic_trie import TopicTrie, TrieNode, split_words

Q1 = Destination.queue("q1")


def count_visits(trie: TopicTrie, routing_key: str) -> tuple[int, int]:
    visits: list[TrieNode] = []
    matched = trie.match(routing_key, visits.append)
    return len(visits), len(matched)


def build(binding_count: int) -> TopicExchange:
    """Bindings of realistic shapes: literal, `*` and `#`, most sharing no path with the key."""
    exchange = TopicExchange()
    for index in range(binding_count):
        queue = Destination.queue(f"q{index}")
        match index % 4:
            case 0:
                exchange.bind(queue, f"orders.{index}.created", {})
            case 1:
                exchange.bind(queue, f"*.{index}.#", {})
            case 2:
                exchange.bind(queue, f"#.{index}", {})
            case _:
                exchange.bind(queue, f"stock.{index}.*.nyse", {})
    return exchange


def test_routing_visits_do_not_depend_on_the_number_of_bindings():
    """Routing "orders.8.created" with 100,000 bindings visits as many trie states as with 100."""
    small = build(100)
    large = build(100_000)
    assert len(large) == 100_000
    for routing_key in ("orders.8.created", "x.9.a.b.c", "a.b.c.10", "stock.11.usd.nyse", "none"):
        small_visits, small_matched = count_visits(small.trie, routing_key)
        large_visits, large_matched = count_visits(large.trie, routing_key)
        assert large_visits == small_visits, routing_key
        assert large_matched == small_matched, routing_key
        assert large_visits <= 20, routing_key
    assert large.route("orders.8.created", None) == {Destination.queue("q8")}
    assert large.route("x.9.a.b.c", None) == {Destination.queue("q9")}


class VisitBudgetExceeded(Exception):
    pass


def test_runs_of_hash_do_not_blow_up():
    """Each (node, position) state is expanded once: "#.#.…" costs polynomially, not 2^n.

    A walk that followed every path would make about C(70, 30) visits here; the visitor stops
    it as soon as it exceeds the polynomial bound, so such a walk fails fast instead of hanging.
    """
    trie = TopicTrie()
    trie.add(".".join(["#"] * 30) + ".end", Q1)
    routing_key = ".".join(["w"] * 40)
    budget = trie.node_count() * (len(split_words(routing_key)) + 2)
    visits: list[TrieNode] = []

    def visit(node: TrieNode) -> None:
        visits.append(node)
        if len(visits) > budget:
            raise VisitBudgetExceeded(len(visits))

    assert trie.match(routing_key, visit) == set()
    visits.clear()
    assert trie.match(routing_key + ".end", visit) == {Q1}


def test_remove_prunes_to_an_empty_trie():
    trie = TopicTrie()
    trie.add("a.b.c", Q1)
    trie.add("a.#", Q1)
    trie.add("a.#", Q1)
    assert trie.remove("a.b.c", Q1) is True
    assert trie.remove("a.b.c", Q1) is False
    assert trie.remove("a.#", Q1) is True
    assert not trie.is_empty(), "a.# was added twice"
    assert trie.remove("a.#", Q1) is True
    assert trie.is_empty()
    assert trie.node_count() == 1
    assert trie == TopicTrie()


def test_remove_of_a_prefix_key_that_was_never_added():
    trie = TopicTrie()
    trie.add("a.b", Q1)
    assert trie.remove("a", Q1) is False
    assert trie.remove("a.b", Destination.queue("other")) is False
    assert trie.match("a.b") == {Q1}


def test_split_words_follows_rabbitmq():
    assert split_words("") == []
    assert split_words(".") == ["", ""]
    assert split_words("a..b") == ["a", "", "b"]
    assert split_words("a.") == ["a", ""]
