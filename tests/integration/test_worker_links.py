"""The links between the workers of a broker with `[broker] workers` above 1
(`batonmq.cluster.peerlink`), seen in the log of a real broker on SQLite: each pair of workers
holds one link, which a worker's restart makes again; /api/nodes lists each worker's."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batonmq.server.placement import owner_of
from tests.brokerproc import RunningBroker, connect, start_broker, wait_until, worker_pids
from tests.httpapi import call


def _link_events(log: str) -> list[tuple[int, int, str]]:
    """(worker, peer, "up" or "down") of every peer link line, in order."""
    events = []
    for line in log.splitlines():
        found = re.search(r'msg="peer link (up|down)"', line)
        if found is None:
            continue
        worker = re.search(r"\bworker=(\d+)", line)
        peer = re.search(r"\bpeer=(\d+)", line)
        assert worker is not None and peer is not None, line
        events.append((int(worker.group(1)), int(peer.group(1)), found.group(1)))
    return events


def _states(events: list[tuple[int, int, str]]) -> dict[tuple[int, int], list[str]]:
    by_pair: dict[tuple[int, int], list[str]] = {}
    for worker, peer, state in events:
        by_pair.setdefault((worker, peer), []).append(state)
    return by_pair


def _every_link_up(log: str, count: int, again: int | None = None) -> bool:
    """Whether every worker saw its link with every other up; twice where one is `again`."""
    states = _states(_link_events(log))
    return all(
        states.get((worker, peer), []).count("up") >= (2 if again in (worker, peer) else 1)
        for worker in range(count)
        for peer in range(count)
        if peer != worker
    )


def _start(workdir: Path, count: int) -> RunningBroker:
    environment = {"BATONMQ__PERSIST__STORE": "sqlite", "BATONMQ__BROKER__WORKERS": str(count)}
    broker = start_broker(workdir, environment=environment)
    wait_until(lambda: 'msg="broker started"' in broker.log(), "every worker to serve")
    return broker


@pytest.fixture(params=[2, 3])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RunningBroker, int]]:
    count: int = request.param
    started = _start(tmp_path, count)
    try:
        yield started, count
    finally:
        started.stop()


def test_every_pair_of_workers_holds_one_link_once_the_broker_serves(
    broker: tuple[RunningBroker, int],
) -> None:
    """Each worker sees one link with each other worker up (BMQ-1042 in both), none twice
    and none down."""
    running, count = broker
    wait_until(lambda: _every_link_up(running.log(), count), "every link up")
    states = _states(_link_events(running.log()))
    assert states == {
        (worker, peer): ["up"] for worker in range(count) for peer in range(count) if peer != worker
    }


def test_a_killed_worker_links_again_with_every_other_and_their_clients_go_on(
    broker: tuple[RunningBroker, int],
) -> None:
    """SIGKILL of a worker (README, "Worker processes": the others and their clients go on):
    every other worker sees its link with it down (BMQ-1043), the restarted worker's links
    come up again with each of them, one per pair, and a client of another worker keeps its
    connection throughout."""
    running, count = broker
    wait_until(lambda: _every_link_up(running.log(), count), "every link up")
    victim = (owner_of("/", count) + 1) % count
    before = worker_pids(running.log())
    with connect(running) as survivor:  # served by the owner of "/", not the victim
        channel = survivor.channel()
        channel.queue_declare("alive")
        os.kill(before[victim], signal.SIGKILL)
        wait_until(
            lambda: worker_pids(running.log()).get(victim) not in (None, before[victim]),
            "the killed worker to start again",
        )
        wait_until(lambda: _every_link_up(running.log(), count, victim), "every link up again")
        channel.basic_publish("", "alive", b"still here")
        survivor.process_data_events(0.2)
        _method, _properties, body = channel.basic_get("alive", auto_ack=True)
        assert body == b"still here"

    states = _states(_link_events(running.log()))
    others = [worker for worker in range(count) if worker != victim]
    for worker in others:
        # Down when the victim died, up with its new process; its links with the others stay.
        assert states[(worker, victim)] == ["up", "down", "up"]
        for peer in others:
            if peer != worker:
                assert states[(worker, peer)] == ["up"]
    for peer in others:
        # The victim's lines: its first process's link, then its new process's (that the
        # first's end was not seen going down is its death).
        assert states[(victim, peer)] == ["up", "up"]


def _cluster_links(running: RunningBroker) -> list[list[dict[str, Any]]]:
    """Each worker's `cluster_links`, as /api/nodes lists them."""
    status, nodes = call(running, "GET", "/api/nodes")
    assert status == 200 and isinstance(nodes, list)
    [node] = nodes
    return [worker["cluster_links"] for worker in node["workers"]]


def _links_up(running: RunningBroker) -> bool:
    """Whether every worker lists one link, with the other, that went both ways (HELLO)."""
    listed = _cluster_links(running)
    return all(
        [link["name"] for link in links] == [1 - worker]
        and all(
            link["stats"]["send_bytes"] > 0 and link["stats"]["recv_bytes"] > 0 for link in links
        )
        for worker, links in enumerate(listed)
    )


def test_the_api_lists_each_workers_link_with_the_other_and_again_after_a_restart(
    tmp_path: Path,
) -> None:
    """RabbitMQ's management API lists a node's links with the others under `cluster_links`,
    each with its peer's `name` and the octets sent and received (`stats.send_bytes`,
    `stats.recv_bytes`): here each worker's links with its siblings, in /api/nodes. After a
    SIGKILL of worker 1 (README, "Worker processes": the supervisor starts it again) the new
    process's link is listed on both sides."""
    environment = {"BATONMQ__PERSIST__STORE": "sqlite", "BATONMQ__BROKER__WORKERS": "2"}
    with start_broker(tmp_path, http=True, environment=environment) as running:
        wait_until(lambda: 'msg="broker started"' in running.log(), "every worker to serve")
        wait_until(lambda: _every_link_up(running.log(), 2), "every link up")
        wait_until(lambda: _links_up(running), "both links listed")
        for links in _cluster_links(running):
            [link] = links
            stats = link["stats"]
            assert stats["send_records"] >= 1 and stats["recv_records"] >= 1
            assert link["writable"] is True
        before = worker_pids(running.log())
        os.kill(before[1], signal.SIGKILL)
        wait_until(
            lambda: worker_pids(running.log()).get(1) not in (None, before[1]),
            "worker 1 to start again",
        )
        wait_until(lambda: _every_link_up(running.log(), 2, 1), "every link up again")
        wait_until(lambda: _links_up(running), "both links listed again")
