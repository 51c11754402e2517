"""The map from virtual host to worker process (`batonmq.server.placement`)."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from batonmq.config import load_config
from batonmq.server.placement import WorkerSeat, owner_of, queue_owner, store_placement


def _digest(name: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big")


def test_the_owner_is_a_stable_hash_of_the_name_modulo_the_workers() -> None:
    """Documented in the README (the first eight octets of the BLAKE2b digest of its name,
    modulo N): the same in every worker and at every restart, so that every worker hands a
    connection to the same owner."""
    assert owner_of("/", 2) == _digest(b"/") % 2
    assert [owner_of(name, 3) for name in ("/", "orders", "billing")] == [
        _digest(name.encode()) % 3 for name in ("/", "orders", "billing")
    ]
    # Stable values: a change of the function moves stored virtual hosts to other workers.
    assert [owner_of(name, 4) for name in ("/", "a", "b", "c")] == [
        0xBF3828289C471D90 % 4,
        0x40F89E395B66422F % 4,
        0x8472C2E34D854F75 % 4,
        0x373F6364CD072C1B % 4,
    ]


def test_names_that_differ_in_one_character_are_not_tied_to_one_worker() -> None:
    """Names numbered in their last character ("orders.q0", "orders.q1") fall to either
    worker of two independently, about half the time the same one. With CRC-32, a linear
    code, they fell to the same worker of two every time, whatever the prefix: a virtual
    host's numbered queues all ran on one core."""
    same = [owner_of(f"p{n}.q0", 2) == owner_of(f"p{n}.q1", 2) for n in range(1000)]
    assert 400 < sum(same) < 600
    same = [queue_owner("/", f"p{n}.q0", 4) == queue_owner("/", f"p{n}.q2", 4) for n in range(1000)]
    assert 150 < sum(same) < 350


def test_one_worker_owns_everything() -> None:
    assert {owner_of(f"vhost{n}", 1) for n in range(100)} == {0}


def test_names_spread_over_the_workers() -> None:
    counts = Counter(owner_of(f"tenant-{n}", 4) for n in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert min(counts.values()) > 900


def test_any_name_has_an_owner() -> None:
    """A virtual host name is whatever connection.open carried, lone surrogates included (a
    short string that was not UTF-8): it still has an owner, which refuses it as a broker of
    one process would."""
    assert owner_of("\udcff", 2) in (0, 1)
    assert owner_of("", 2) in (0, 1)


def test_a_queues_owner_is_the_hash_of_both_names_modulo_the_workers() -> None:
    """docs/multi-core.md, step 6: each queue of a spread virtual host has one owner worker, a
    stable hash of the virtual host's name, a NUL and the queue's name, as the virtual host's
    own owner is: the same in every worker and at every start, so rows placed per queue are
    found again and move by the same rule when the number of workers changes."""
    assert queue_owner("/", "orders", 3) == _digest(b"/\0orders") % 3
    assert [queue_owner("/", "orders", workers) for workers in (1, 2, 3, 4, 8)] == [
        _digest(b"/\0orders") % workers for workers in (1, 2, 3, 4, 8)
    ]
    # The same queue name in two virtual hosts is two queues, not the virtual host's owner.
    assert [queue_owner(vhost, "q", 8) for vhost in ("a", "b")] == [
        _digest(b"a\0q") % 8,
        _digest(b"b\0q") % 8,
    ]
    assert queue_owner("\udcff", "\udcff", 2) in (0, 1)


def _seat(index: int, spread: frozenset[str] = frozenset(), count: int = 2) -> WorkerSeat:
    return WorkerSeat(index, count, {}, [], -1, [], "run", spread=spread)


def test_every_worker_serves_a_spread_virtual_host() -> None:
    """docs/multi-core.md, step 6: a virtual host named in `broker.spread_vhosts` is served by
    every worker (its queues each have an owner), so a connection to it stays in the worker
    that accepted it; any other is served by its owner alone."""
    home = owner_of("/", 2)
    other = 1 - home
    assert [_seat(worker).serves("/") for worker in (home, other)] == [True, False]
    spread = frozenset({"/"})
    assert [_seat(worker, spread).serves("/") for worker in (home, other)] == [True, True]
    assert [_seat(worker, frozenset({"*"})).serves("orders") for worker in (0, 1)] == [True, True]
    # The home still owns it (it keeps the topology's rows); the other worker does not.
    assert [_seat(worker, spread).owns("/") for worker in (home, other)] == [True, False]


def test_one_worker_spreads_nothing() -> None:
    """README, "Worker processes": `spread_vhosts` has no effect with one worker."""
    assert not _seat(0, frozenset({"*"}), count=1).spreads("/")


def test_the_store_placement_names_the_spread_virtual_hosts(tmp_path: Path) -> None:
    """Each queue's rows of a spread virtual host are its owner's (the store's placement reads
    `broker.spread_vhosts`); a virtual host not spread keeps every row with its owner."""
    config = load_config(
        environ={"HOME": str(tmp_path)},
        overrides={"broker.workers": 2, "broker.spread_vhosts": ["/"], "broker.name": "b"},
    )
    placement = store_placement(config)
    assert placement.spread == frozenset({"/"})
    assert placement.queue_owner_id("/", "orders") == f"bw{queue_owner('/', 'orders', 2)}"
    assert placement.queue_owner_id("other", "orders") == f"bw{owner_of('other', 2)}"
