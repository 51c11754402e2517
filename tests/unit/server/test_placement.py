"""The map from virtual host to worker process (`batonmq.server.placement`)."""

from __future__ import annotations

import zlib
from collections import Counter

from batonmq.server.placement import owner_of, queue_owner


def test_the_owner_is_the_crc32_of_the_name_modulo_the_workers() -> None:
    """Documented in the README ("the CRC-32 of its name modulo N"): the same in every worker
    and at every restart, so that every worker hands a connection to the same owner."""
    assert owner_of("/", 2) == zlib.crc32(b"/") % 2
    assert [owner_of(name, 3) for name in ("/", "orders", "billing")] == [
        zlib.crc32(name.encode()) % 3 for name in ("/", "orders", "billing")
    ]
    # Stable values: a change of the function would move stored virtual hosts to other workers.
    assert [owner_of(name, 4) for name in ("/", "a", "b", "c")] == [
        zlib.crc32(b"/") % 4,
        0xE8B7BE43 % 4,
        0x71BEEFF9 % 4,
        0x06B9DF6F % 4,
    ]


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


def test_a_queues_owner_is_the_crc32_of_both_names_modulo_the_workers() -> None:
    """docs/multi-core.md, step 6: each queue of a spread virtual host has one owner worker, a
    stable hash of the virtual host's name, a NUL and the queue's name, as the virtual host's
    own owner is: the same in every worker and at every start, so rows placed per queue are
    found again and move by the same rule when the number of workers changes."""
    assert queue_owner("/", "orders", 3) == zlib.crc32(b"/\0orders") % 3
    # Stable values: a change of the function would move stored queues to other workers.
    assert [queue_owner("/", "orders", workers) for workers in (1, 2, 3, 4, 8)] == [
        0,
        0x1199F3DE % 2,
        0x1199F3DE % 3,
        0x1199F3DE % 4,
        0x1199F3DE % 8,
    ]
    assert [queue_owner(vhost, "q", 8) for vhost in ("a", "b")] == [0x915639AF % 8, 0x931087F6 % 8]
    assert queue_owner("/", "billing", 3) == 0xCA0FCA08 % 3
    # The same queue name in two virtual hosts is two queues, not the virtual host's owner.
    assert (queue_owner("a", "q", 4), queue_owner("b", "q", 4)) == (3, 2)
    assert queue_owner("\udcff", "\udcff", 2) in (0, 1)
