"""Heartbeats between members over real loopback sockets.

MQ 4.1 HA guide: "Brokers within an HA cluster periodically inform each other that they are
still in operation by exchanging heartbeat packets"; imq.cluster.heartbeat.interval "defines
the interval, in seconds, at which heartbeat packets are transmitted"."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from batonmq.cluster.detector import FailureDetector, Suspected
from batonmq.cluster.heartbeat import (
    LINE_MAX,
    HeartbeatService,
    hello_line,
)
from tests.ports import free_port

pytestmark = pytest.mark.integration

INTERVAL = 0.05


def service(broker: str, heard: list[str], cluster: str = "prod") -> HeartbeatService:
    return HeartbeatService(
        cluster=cluster, broker=broker, interval=INTERVAL, on_heartbeat=heard.append
    )


async def until(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_members_hear_each_other_every_interval() -> None:
    heard_by_a: list[str] = []
    heard_by_b: list[str] = []
    a, b = service("A", heard_by_a), service("B", heard_by_b)
    try:
        address_a = await a.listen("127.0.0.1", 0)
        address_b = await b.listen("127.0.0.1", 0)
        a.watch({"A": address_a, "B": address_b})  # itself is left out
        b.watch({"A": address_a, "B": address_b})

        await until(lambda: len(heard_by_a) >= 5 and len(heard_by_b) >= 5)
    finally:
        await a.close()
        await b.close()

    assert set(heard_by_a) == {"B"}
    assert set(heard_by_b) == {"A"}


async def test_a_member_that_stops_is_suspected_by_the_detector() -> None:
    """Heartbeats feed the failure detector: when one member stops sending, the other suspects
    it after the heartbeat threshold."""
    detector = FailureDetector(
        heartbeat_interval=INTERVAL, heartbeat_threshold=3, monitor_interval=1, monitor_threshold=2
    )
    detector.members({"A": 1}, now=time.monotonic())
    b = HeartbeatService(
        cluster="prod",
        broker="B",
        interval=INTERVAL,
        on_heartbeat=lambda broker: detector.heartbeat(broker, time.monotonic()),
    )
    a = service("A", [])
    try:
        address_b = await b.listen("127.0.0.1", 0)
        a.watch({"B": address_b})
        await asyncio.sleep(INTERVAL * 10)
        assert detector.tick(time.monotonic()) == []

        await a.close()
        effects: list[object] = []
        await until(lambda: bool(effects.extend(detector.tick(time.monotonic())) or effects))
    finally:
        await b.close()

    assert effects == [Suspected("A")]


async def test_another_clusters_broker_is_not_heard(caplog: pytest.LogCaptureFixture) -> None:
    heard: list[str] = []
    member = service("B", heard)
    stranger = service("X", [], cluster="other")
    try:
        address = await member.listen("127.0.0.1", 0)
        with caplog.at_level(logging.WARNING):
            stranger.watch({"B": address})
            await until(lambda: "heartbeat connection refused" in caplog.text)
            await asyncio.sleep(INTERVAL * 3)
    finally:
        await stranger.close()
        await member.close()

    assert heard == []
    reasons = [getattr(record, "reason", "") for record in caplog.records]
    assert "broker 'X' is of cluster 'other', not 'prod'" in reasons


async def test_junk_and_overlong_lines_end_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    heard: list[str] = []
    member = service("B", heard)
    try:
        host, port = await member.listen("127.0.0.1", 0)
        with caplog.at_level(logging.WARNING):
            for junk in (b"GET / HTTP/1.1\r\n", hello_line("prod", "A") + b"x" * (LINE_MAX * 2)):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(junk)
                assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the member
                writer.close()
    finally:
        await member.close()

    assert heard == []
    assert caplog.text.count("heartbeat connection refused") == 2


async def test_a_sender_keeps_trying_until_the_member_listens() -> None:
    heard: list[str] = []
    late = service("B", heard)
    port = free_port()
    early = service("A", [])
    try:
        early.watch({"B": ("127.0.0.1", port)})
        await asyncio.sleep(INTERVAL * 4)  # nobody listens yet
        await late.listen("127.0.0.1", port)
        await until(lambda: len(heard) >= 2)
    finally:
        await early.close()
        await late.close()


async def test_close_ends_a_sender_whatever_it_was_doing() -> None:
    """A member that leaves, or a test that ends, closes its heartbeat service: its senders must
    end, also one cancelled in the very turn its connection completes. (Python 3.11's
    asyncio.wait_for returns such a connection and drops the cancellation: the sender then went
    on beating and `close` never returned.) Closed at each point of the first turns of a
    sender's connecting, many times over."""
    member = service("B", [])
    try:
        address = await member.listen("127.0.0.1", 0)
        for attempt in range(140):
            sender = service("A", [])
            sender.watch({"B": address})
            for _ in range(attempt % 7):
                await asyncio.sleep(0)
            try:
                await asyncio.wait_for(sender.close(), 2)
            except TimeoutError:
                pytest.fail(f"close of a sender did not return (attempt {attempt})")
    finally:
        await member.close()
