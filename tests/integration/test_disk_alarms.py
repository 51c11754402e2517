"""Disk quota-based flow control (Qpid manual §1.5.1.2.2) and the free-disk alarm, with real pika
clients on a real broker process (the Overload requirements, "Keep working under overload").

The free-disk test puts the data directory on a small real tmpfs (as tests/fault/test_disk_full.py
does; the tests run as root, here and in CI)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.brokerproc import RunningBroker, start_broker, wait_until
from tests.tmpfs import small_disk

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)
BODY = os.urandom(16 * 1024)
#: The quota: far above an empty store (SQLite's pages of an empty schema), reached by about 130
#: messages of 16 KiB; released under half of it.
OVERFULL = 2 * 1024 * 1024
UNDERFULL = 1024 * 1024
#: More than this many messages confirmed without a block means the quota did nothing.
MOST_MESSAGES = 2000
#: Checked often, so that the tests run fast; the quota is "best effort" whatever the interval.
CHECK_INTERVAL = "0.1"


def numbered(number: int) -> bytes:
    return number.to_bytes(4, "big") + BODY


def drain(channel: BlockingChannel, queue: str, received: list[int]) -> None:
    """basic.get and ack every message ready in `queue`, noting their numbers."""
    while True:
        method, _properties, body = channel.basic_get(queue)
        if method is None:
            return
        received.append(int.from_bytes(body[:4], "big"))
        channel.basic_ack(method.delivery_tag)


class Publisher(threading.Thread):
    """Publishes numbered persistent messages with confirms until the broker blocks its
    connection, waits to be unblocked, then publishes `after` more. Its own thread: a publish
    that reaches the broker after the block is not read, so its confirm (and basic_publish)
    waits for the release, which the test's consumer brings about. pika runs the blocked
    callback only once that publish has returned: a BlockingConnection dispatches connection
    callbacks in process_data_events, not while basic_publish waits for a confirm."""

    def __init__(self, url: str, queue: str, after: int) -> None:
        super().__init__(daemon=True)
        self.url, self.queue, self.after = url, queue, after
        self.blocked = threading.Event()
        self.unblocked = threading.Event()
        self.blocked_reason = ""
        self.confirmed: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._publish()
        except BaseException as error:
            self.error = error

    def _on_blocked(self, _connection: object, method: pika.frame.Method) -> None:
        self.blocked_reason = method.method.reason
        self.blocked.set()

    def _publish(self) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            connection.add_on_connection_blocked_callback(self._on_blocked)
            connection.add_on_connection_unblocked_callback(lambda *_: self.unblocked.set())
            channel = connection.channel()
            channel.confirm_delivery()
            number = 0
            while not self.blocked.is_set():
                assert number < MOST_MESSAGES, "no connection.blocked came"
                channel.basic_publish("", self.queue, numbered(number), PERSISTENT)
                self.confirmed.append(number)
                number += 1
                connection.process_data_events(time_limit=0)
            deadline = time.monotonic() + 60
            while not self.unblocked.is_set():
                assert time.monotonic() < deadline, "no connection.unblocked came"
                connection.process_data_events(time_limit=0.1)
            for later in range(number, number + self.after):
                channel.basic_publish("", self.queue, numbered(later), PERSISTENT)
                self.confirmed.append(later)
        finally:
            connection.close()


@pytest.fixture
def quota_broker(tmp_path: Path, store_environment: dict[str, str]) -> Iterator[RunningBroker]:
    environment = {
        **store_environment,
        "BATONMQ__DISK__STORE_OVERFULL": str(OVERFULL),
        "BATONMQ__DISK__STORE_UNDERFULL": str(UNDERFULL),
        "BATONMQ__DISK__CHECK_INTERVAL": CHECK_INTERVAL,
        # This test is about the quota: the free-disk alarm stays out of it on any disk.
        "BATONMQ__DISK__FREE_LIMIT": "0",
    }
    with start_broker(tmp_path, environment=environment) as running:
        yield running


def test_an_overfull_store_blocks_producers_until_consumers_drain_it(
    quota_broker: RunningBroker,
) -> None:
    """Qpid manual §1.5.1.2.2: "This functionality blocks all producers on reaching the disk
    overflow limit. When consumers consume the messages, causing disk space usage to falls below
    the underflow limit, the producers are unblocked and continue working as normal." With the
    log lines of §1.5.1.2.2.1 (MST-1008, MST-1009), on each store; and nothing confirmed is lost
    or delivered twice on the way."""
    queue = "quota"
    with pika.BlockingConnection(pika.URLParameters(quota_broker.url)) as setup:
        setup.channel().queue_declare(queue, durable=True)
    publisher = Publisher(quota_broker.url, queue, after=20)
    publisher.start()
    try:
        wait_until(
            lambda: (
                "MST-1008 : Store overfull, flow control will be enforced" in quota_broker.log()
                or not publisher.is_alive()
            ),
            "MST-1008 in the log",
        )
        assert publisher.error is None, publisher.error
        # "blocks all producers": nothing more is confirmed while nobody consumes.
        time.sleep(0.5)
        held_at = len(publisher.confirmed)
        time.sleep(1.5)
        assert len(publisher.confirmed) == held_at
        assert "MST-1009" not in quota_broker.log()
        assert not publisher.unblocked.is_set()
        # Held at the quota, not long before it (SQLite counts its pages: more than the bodies).
        assert held_at * len(BODY) > OVERFULL // 2

        received: list[int] = []
        with pika.BlockingConnection(pika.URLParameters(quota_broker.url)) as consuming:
            channel = consuming.channel()
            deadline = time.monotonic() + 60
            while publisher.is_alive():
                assert time.monotonic() < deadline, "the publisher never finished"
                drain(channel, queue, received)
                consuming.process_data_events(time_limit=0.05)
            drain(channel, queue, received)
    finally:
        publisher.join(60)
    assert publisher.error is None, publisher.error
    assert publisher.blocked_reason.startswith("store overfull: ")
    assert f"over disk.store_overfull ({OVERFULL})" in publisher.blocked_reason
    assert publisher.unblocked.is_set()
    log = quota_broker.log()
    assert "MST-1009 : Store overfull condition cleared" in log
    assert log.index("MST-1008") < log.index("MST-1009")
    # "continue working as normal", and every confirmed message was delivered exactly once (the
    # confirmed numbers are distinct, so a duplicate delivery would make the lists differ).
    assert len(publisher.confirmed) > 20
    assert sorted(received) == sorted(publisher.confirmed)


FREE_LIMIT = 8 * 1024 * 1024


@pytest.fixture
def short_disk_broker(tmp_path: Path) -> Iterator[tuple[RunningBroker, Path]]:
    """A broker whose data directory is on a 16 MiB disk that a filler file leaves about 4 MiB
    free, under FREE_LIMIT (its log stays on the ordinary disk, under tmp_path); and the
    filler."""
    with small_disk(tmp_path / "data", "16m") as disk:
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (12 * 1024 * 1024))
        assert shutil.disk_usage(disk).free < FREE_LIMIT
        broker = start_broker(
            tmp_path,
            environment={
                "BATONMQ__PERSIST__STORE": "sqlite",
                "BATONMQ__DISK__FREE_LIMIT": str(FREE_LIMIT),
                "BATONMQ__DISK__CHECK_INTERVAL": CHECK_INTERVAL,
            },
        )
        try:
            assert broker.data_dir == disk
            yield broker, filler
        finally:
            broker.stop()


class CallbacksFirstPublisher:
    """A publishing connection (pika's SelectConnection, its I/O loop on a thread of its own)
    that adds its blocked and unblocked callbacks as the connection opens. A BlockingConnection
    adds them only after its constructor has handled every frame that came with
    connection.open-ok, and so misses a connection.blocked the broker sends at once."""

    def __init__(self, url: str) -> None:
        self.reasons: list[str] = []
        self.unblocked = threading.Event()
        self.ready = threading.Event()
        self.closed = threading.Event()
        self.channel: pika.channel.Channel | None = None
        self.connection = pika.SelectConnection(
            pika.URLParameters(url),
            on_open_callback=self._opened,
            on_open_error_callback=lambda *_: self.closed.set(),
            on_close_callback=self._closed,
        )
        self._loop = threading.Thread(target=self.connection.ioloop.start, daemon=True)
        self._loop.start()
        assert self.ready.wait(10), "the publishing connection did not open"

    def _opened(self, connection: pika.SelectConnection) -> None:
        connection.add_on_connection_blocked_callback(
            lambda _connection, method: self.reasons.append(method.method.reason)
        )
        connection.add_on_connection_unblocked_callback(lambda *_: self.unblocked.set())
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel: pika.channel.Channel) -> None:
        self.channel = channel
        self.ready.set()

    def _closed(self, *_: object) -> None:
        self.closed.set()
        self.connection.ioloop.stop()

    def publish(self, body: bytes) -> None:
        channel = self.channel
        assert channel is not None
        self.connection.ioloop.add_callback_threadsafe(
            lambda: channel.basic_publish("", "held", body, PERSISTENT)
        )

    def close(self) -> None:
        if not self.closed.is_set():
            self.connection.ioloop.add_callback_threadsafe(self.connection.close)
        self._loop.join(10)
        self.connection.ioloop.close()  # its wake-up socket pair


def test_a_disk_short_of_free_space_blocks_producers_until_space_is_freed(
    short_disk_broker: tuple[RunningBroker, Path],
) -> None:
    """The free-disk alarm (RabbitMQ's disk_free_limit; the Overload requirements: "a free-disk
    alarm"): with less than disk.free_limit bytes free on the data directory's disk, every producer
    is blocked from the moment it connects; its first publish goes through and nothing after it is
    read. When an operator frees space, producers are released and what they sent is delivered."""
    broker, filler = short_disk_broker
    wait_until(lambda: "free disk space alarm set: " in broker.log(), "the alarm in the log")
    assert f"below disk.free_limit {FREE_LIMIT}" in broker.log()

    with pika.BlockingConnection(pika.URLParameters(broker.url)) as consuming:
        reader = consuming.channel()
        reader.queue_declare("held", durable=True)
        got: list[bytes] = []

        def received(count: int) -> bool:
            """Whether `count` messages have arrived in all (taking those ready)."""
            while len(got) < count:
                method, _properties, body = reader.basic_get("held", auto_ack=True)
                if method is None:
                    return False
                got.append(body)
            return True

        publisher = CallbacksFirstPublisher(broker.url)
        try:
            wait_until(lambda: bool(publisher.reasons), "connection.blocked", timeout=10)
            assert publisher.reasons[0].startswith("low on free disk space: ")
            assert f"below disk.free_limit ({FREE_LIMIT})" in publisher.reasons[0]

            # The first publish is read (it is what shows the client is a publisher) ...
            publisher.publish(b"first")
            wait_until(lambda: received(1), "the first message")
            # ... and nothing after it, while the disk is short of space.
            publisher.publish(b"second")
            time.sleep(1.0)
            assert not received(2)
            assert not publisher.unblocked.is_set()

            filler.unlink()
            wait_until(publisher.unblocked.is_set, "connection.unblocked", timeout=10)
            wait_until(lambda: received(2), "the second message")
            assert got == [b"first", b"second"]
        finally:
            publisher.close()

        # Working as normal again: a confirmed publish goes straight through.
        reader.confirm_delivery()
        reader.basic_publish("", "held", b"third", PERSISTENT)
        assert received(3)
        assert got[2:] == [b"third"]
    assert "free disk space alarm cleared" in broker.log()
