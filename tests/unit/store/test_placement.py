"""Which of a broker's store identities owns a virtual host, and the moves of stream directories
when the number of workers changes (`batonmq.store.placement`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from batonmq.store.placement import Placement, place_streams, streams_root, worker_id, worker_index

OWNERS = {"a": 0, "b/x": 1}


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
