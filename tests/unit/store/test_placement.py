"""Which of a broker's store identities owns a virtual host, or a queue of a spread one, and the
moves of stream directories when the number of workers changes (`batonmq.store.placement`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from batonmq.store.placement import (
    Moved,
    Placement,
    place_streams,
    planned_moves,
    streams_root,
    worker_id,
    worker_index,
)

OWNERS = {"a": 0, "b/x": 1}
#: Each queue's owner in a spread virtual host: the number its name ends with.
QUEUE_OWNERS = {"q0": 0, "q1": 1, "q2": 2, "s2": 2}


def layout(data_dir: Path, workers: int) -> Placement:
    return Placement("b1", workers, OWNERS.__getitem__, data_dir)


def test_a_workers_identity_is_the_brokers_name_and_its_index() -> None:
    """README, "Worker processes": `batonmqw0`, `batonmqw1`, ...; the one process keeps the
    broker's name (no migration of stores made before workers)."""
    assert worker_id("b1", 12) == "b1w12"
    assert [worker_index("b1", name) for name in ("b1w0", "b1w12", "b1", "b1wx", "b2w0")] == [
        0,
        12,
        None,
        None,
        None,
    ]
    one, two = layout(Path("/d"), 1), layout(Path("/d"), 2)
    assert (one.owner_id("a"), one.owner_id("b/x")) == ("b1", "b1")
    assert (two.owner_id("a"), two.owner_id("b/x")) == ("b1w0", "b1w1")
    assert [two.is_ours(name) for name in ("b1", "b1w3", "other", "other w1")] == [
        True,
        True,
        False,
        False,
    ]


def spread(data_dir: Path, workers: int, vhosts: frozenset[str]) -> Placement:
    return Placement(
        "b1",
        workers,
        OWNERS.__getitem__,
        data_dir,
        spread=vhosts,
        queue_owner=lambda _vhost, queue: QUEUE_OWNERS[queue] % workers,
    )


def test_a_spread_virtual_hosts_queues_are_their_owners_and_the_rest_its_homes() -> None:
    """docs/multi-core.md, step 6: in a spread virtual host each queue has one owner worker,
    whose identity owns its rows; the others' queues stay with their virtual host's owner, and
    so does everything with one process or no virtual host spread."""
    three = spread(Path("/d"), 3, frozenset({"a"}))
    assert [three.queue_owner_id("a", queue) for queue in ("q0", "q1", "q2")] == [
        "b1w0",
        "b1w1",
        "b1w2",
    ]
    assert (three.owner_id("a"), three.queue_owner_id("b/x", "q2")) == ("b1w0", "b1w1")
    assert (three.is_spread("a"), three.is_spread("b/x")) == (True, False)
    every = spread(Path("/d"), 2, frozenset({"*"}))
    assert [every.queue_owner_id(vhost, "q1") for vhost in ("a", "b/x")] == ["b1w1", "b1w1"]
    assert every.queue_owner_id("b/x", "q2") == "b1w0"
    one = spread(Path("/d"), 1, frozenset({"*"}))
    assert (one.is_spread("a"), one.queue_owner_id("a", "q1")) == (False, "b1")
    assert layout(Path("/d"), 2).queue_owner_id("a", "q1") == "b1w0"
    # Queue names are read only when a virtual host is spread.
    assert (layout(Path("/d"), 2).held, three.held, one.held) == (
        "placed_held",
        "placed_queues_held",
        "placed_held",
    )
    with pytest.raises(ValueError, match="queue owner"):
        Placement("b1", 2, OWNERS.__getitem__, Path("/d"), spread=frozenset({"a"}))


def test_a_spread_virtual_host_moves_per_queue_and_the_others_whole() -> None:
    """What moves of rows held as (identity, virtual host, queue; None for exchanges and
    bindings): a spread virtual host's queues one by one to their owners and its topology to its
    home; a virtual host not spread in one move, as before."""
    held = [
        ("b1w0", "a", None),
        ("b1w0", "a", "q0"),
        ("b1w0", "a", "q1"),
        ("b1w0", "a", "q2"),
        ("b1w1", "b/x", None),
        ("b1w1", "b/x", "q2"),
        ("b1w2", "b/x", "q0"),
    ]
    assert planned_moves(held, spread(Path("/d"), 3, frozenset({"a"}))) == [
        Moved("a", "b1w0", "b1w1", "q1", spread=True),
        Moved("a", "b1w0", "b1w2", "q2", spread=True),
        Moved("b/x", "b1w2", "b1w1"),
    ]
    assert planned_moves(held, spread(Path("/d"), 1, frozenset({"a"}))) == [
        Moved("a", "b1w0", "b1"),
        Moved("b/x", "b1w1", "b1"),
        Moved("b/x", "b1w2", "b1"),
    ]
    topology, queue = Moved("a", "b1w1", "b1w0", None, True), Moved("a", "b1w0", "b1w1", "q1", True)
    assert [name for name, _ in topology.statements(("queues", "entries"))] == [
        "place_exchanges",
        "place_bindings",
    ]
    assert queue.statements(("queues", "entries")) == [
        ("place_queues_queue", ("b1w1", "b1w0", "a", "q1")),
        ("place_entries_queue", ("b1w1", "b1w0", "a", "q1")),
    ]


def test_a_spread_virtual_hosts_streams_go_to_their_queues_owners(tmp_path: Path) -> None:
    """A stream is a queue: in a spread virtual host its directory is its owner's."""
    for queue in ("q1", "s2"):
        (tmp_path / "worker-0/streams/a" / queue).mkdir(parents=True)

    assert place_streams(spread(tmp_path, 3, frozenset({"a"}))) == [
        tmp_path / "worker-1/streams/a/q1",
        tmp_path / "worker-2/streams/a/s2",
    ]
    assert place_streams(layout(tmp_path, 2)) == [
        tmp_path / "worker-0/streams/a/q1",
        tmp_path / "worker-0/streams/a/s2",
    ]


def test_streams_live_under_their_owners_directory() -> None:
    assert streams_root(Path("/d"), None) == Path("/d/streams")
    assert streams_root(Path("/d"), 1) == Path("/d/worker-1/streams")


def test_stream_directories_follow_their_virtual_host_to_its_owner_and_back(
    tmp_path: Path,
) -> None:
    """From one process to two workers and back: each stream's directory (with its segment
    files) ends under its virtual host's owner, and moving again moves nothing."""
    for vhost, queue in (("a", "s1"), ("b/x", "s2"), ("b/x", "s3")):
        directory = tmp_path / "streams" / quote(vhost, safe="") / queue
        directory.mkdir(parents=True)
        (directory / "0.segment").write_bytes(b"records of " + queue.encode())

    moved = place_streams(layout(tmp_path, 2))

    assert moved == [
        tmp_path / "worker-0/streams/a/s1",
        tmp_path / "worker-1/streams/b%2Fx/s2",
        tmp_path / "worker-1/streams/b%2Fx/s3",
    ]
    assert (tmp_path / "worker-1/streams/b%2Fx/s3/0.segment").read_bytes() == b"records of s3"
    assert not any((tmp_path / "streams").iterdir())
    assert place_streams(layout(tmp_path, 2)) == []

    place_streams(layout(tmp_path, 1))

    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.glob("*/*/*")) == [
        "streams/a/s1",
        "streams/b%2Fx/s2",
        "streams/b%2Fx/s3",
    ]


def test_a_stream_already_at_its_owner_is_kept_and_the_stray_left_alone(tmp_path: Path) -> None:
    """Nothing is overwritten: a stream directory at the owner is the owner's; one of the same
    name elsewhere stays where it is (the owner's start removes what its store does not
    hold)."""
    for root in ("streams", "worker-0/streams"):
        (tmp_path / root / "a" / "s1").mkdir(parents=True)
        (tmp_path / root / "a" / "s1" / "mark").write_text(root)

    assert place_streams(layout(tmp_path, 2)) == []
    assert (tmp_path / "worker-0/streams/a/s1/mark").read_text() == "worker-0/streams"
    assert (tmp_path / "streams/a/s1/mark").read_text() == "streams"
