"""The map from virtual host to worker process (`batonmq.server.placement`)."""

from __future__ import annotations

import zlib
from collections import Counter

from batonmq.server.placement import owner_of


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
