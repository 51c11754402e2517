"""How long a topic exchange takes to route one message, as the number of bindings grows.

Binds N queues to one topic exchange with patterns of the shapes applications use (literal keys,
`*` and `#` at the start, middle and end), then routes a fixed, seeded mix of routing keys and
reports, per message, the best of several timed runs, the trie states the walk visited, and the
destinations matched. A trie's work depends on the routing key and the wildcards along its path,
not on N: the states per message stay the same from 1k to 100k bindings. What time still grows
comes from memory, not work: the same dictionary lookups in larger tries miss the CPU caches.

    python benchmarks/topic_routing.py [--sizes 1000 10000 100000] [--messages 20000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from batonmq.model.destination import Destination
from batonmq.routing.topic import TopicExchange
from batonmq.routing.topic_trie import TrieNode

DOMAINS = ("orders", "stock", "users", "audit")
REGIONS = ("eu", "us", "ap")
EVENTS = ("created", "updated", "deleted")


def binding_key(index: int, rng: random.Random) -> str:
    """One of five realistic shapes, keyed by the entity id `index`."""
    domain, region, event = rng.choice(DOMAINS), rng.choice(REGIONS), rng.choice(EVENTS)
    shapes = (
        f"{domain}.{region}.{index}.{event}",
        f"{domain}.*.{index}.*",
        f"{domain}.{region}.{index}.#",
        f"#.{index}.{event}",
        f"*.{region}.{index}.#",
    )
    return shapes[index % len(shapes)]


def routing_key(size: int, rng: random.Random) -> str:
    """An event about an entity; ids up to twice the binding count, so half have no bindings."""
    return ".".join(
        (rng.choice(DOMAINS), rng.choice(REGIONS), str(rng.randrange(2 * size)), rng.choice(EVENTS))
    )


def build(size: int) -> TopicExchange:
    rng = random.Random(size)
    exchange = TopicExchange()
    for index in range(size):
        exchange.bind(Destination.queue(f"q{index}"), binding_key(index, rng), {})
    # A few catch-all bindings, as monitoring and auditing add.
    exchange.bind(Destination.queue("all-orders"), "orders.#", {})
    exchange.bind(Destination.queue("all-deletes"), "#.deleted", {})
    return exchange


def measure(size: int, messages: int, repeat: int) -> dict[str, float]:
    exchange = build(size)
    rng = random.Random(1)
    keys = [routing_key(size, rng) for _ in range(messages)]
    route = exchange.route
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for key in keys:
            route(key, None)
        best = min(best, time.perf_counter() - started)
    visited: list[TrieNode] = []
    matched = sum(len(exchange.trie.match(key, visited.append)) for key in keys)
    return {
        "bindings": len(exchange),
        "nodes": exchange.trie.node_count(),
        "microseconds": best / messages * 1e6,
        "visits": len(visited) / messages,
        "matched": matched / messages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    arguments = parser.parse_args()
    print(
        f"Python {sys.version.split()[0]}; {arguments.messages} routing keys, best of "
        f"{arguments.repeat} runs"
    )
    header = ("bindings", "trie nodes", "µs/message", "messages/s", "states/message", "matched")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(column) + 2) for column in header) + "|")
    for size in arguments.sizes:
        row = measure(size, arguments.messages, arguments.repeat)
        print(
            f"| {row['bindings']:,.0f} | {row['nodes']:,.0f} | {row['microseconds']:.2f} | "
            f"{1e6 / row['microseconds']:,.0f} | {row['visits']:.1f} | {row['matched']:.2f} |"
        )


if __name__ == "__main__":
    main()
