"""A stream of an HA cluster's member is taken over with its other persistent state: real broker
processes sharing one PostgreSQL store, a SIGKILL, and a survivor that serves the killed
member's stream to pika consumers at the offsets its publishers were confirmed at.

The HA issue: the winner "takes over its destinations, persistent messages, ... and serves them
to clients that reconnect to it"; before streams were kept in the store, "stream segments stay
on the failed broker's disk". The stream-queues issue: "a stream survives SIGKILL with every
confirmed message at its offset".
"""

from __future__ import annotations

import re

import pika
import pytest

from tests.brokerproc import confirming_channel, wait_until
from tests.fault.conftest import StartMember
from tests.members import wait_heard

pytestmark = pytest.mark.integration

STREAM = "events"
_COMPLETE = re.compile(r"takeover complete")


def test_a_survivor_serves_a_killed_member_s_stream_at_its_offsets(
    start_member: StartMember,
) -> None:
    """A publishes 300 confirmed messages to a stream of small segments (several segments,
    and one named producer's repeats that the stream keeps once), and is killed; B takes it
    over; a consumer of B from "first" gets every confirmed message at its offset, B's new
    messages follow them, and the producer's ids were taken over too."""
    a, b = start_member("A"), start_member("B")
    headers = {"x-batonmq-producer": "p", "x-batonmq-sequence": 0}
    with confirming_channel(a) as channel:
        channel.queue_declare(
            STREAM,
            durable=True,
            arguments={"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 4000},
        )
        for number in range(300):
            channel.basic_publish("", STREAM, f"m{number}".encode(), mandatory=True)
        for _ in range(2):  # the same publishing id twice: stored once
            channel.basic_publish(
                "", STREAM, b"once", pika.BasicProperties(headers=headers), mandatory=True
            )
    wait_heard({"A": a, "B": b})  # every member has heard the others before the kill
    a.kill()
    wait_until(lambda: bool(_COMPLETE.search(b.last_log())), "B took A over", timeout=30)

    with confirming_channel(b) as channel:
        # The producer's id came over with the segments: its repeat is confirmed, not stored.
        channel.basic_publish(
            "", STREAM, b"once", pika.BasicProperties(headers=headers), mandatory=True
        )
        channel.basic_publish("", STREAM, b"after", mandatory=True)
        received = _consume_from_first(channel, 302)

    assert received == [
        *((number, f"m{number}".encode()) for number in range(300)),
        (300, b"once"),
        (301, b"after"),
    ]


def test_a_survivor_with_a_stream_of_the_same_name_serves_the_killed_member_s_after_its_own(
    start_member: StartMember,
) -> None:
    """A and B both have stream "s"; B holds 40 messages of its own, A 300 confirmed ones
    (every third with x-stream-filter-value "red") and is killed. The HA issue: the winner
    "takes over its destinations, persistent messages ...": a consumer of B from "first" gets
    B's own messages, then A's 300, each once, at increasing offsets; a consumer filtering on
    "red" (RabbitMQ's x-stream-filter) gets exactly A's red ones in the merged range; B's log
    says where A's range went."""
    a, b = start_member("A"), start_member("B")
    arguments = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 4000}
    for member, prefix, count in ((b, "b", 40), (a, "a", 300)):
        with confirming_channel(member) as channel:
            channel.queue_declare("s", durable=True, arguments=arguments)
            for number in range(count):
                red = prefix == "a" and number % 3 == 0
                properties = pika.BasicProperties(
                    headers={"x-stream-filter-value": "red" if red else "blue"}
                )
                channel.basic_publish(
                    "", "s", f"{prefix}{number}".encode(), properties, mandatory=True
                )
    wait_heard({"A": a, "B": b})  # every member has heard the others before the kill
    a.kill()
    wait_until(lambda: bool(_COMPLETE.search(b.last_log())), "B took A over", timeout=30)

    assert re.search(r"stream merged on takeover: offsets 0-299 now 40-339", b.log())
    with confirming_channel(b) as channel:
        channel.basic_publish("", "s", b"after", mandatory=True)
        received = _consume_from_first(channel, 341, "s")
        red = _consume_from_first(channel, 101, "s", {"x-stream-filter": "red"})

    assert received == [
        *((number, f"b{number}".encode()) for number in range(40)),
        *((40 + number, f"a{number}".encode()) for number in range(300)),
        (340, b"after"),
    ]
    assert red == [(40 + number, f"a{number}".encode()) for number in range(0, 300, 3)]


def _consume_from_first(
    channel: pika.adapters.blocking_connection.BlockingChannel,
    count: int,
    stream: str = STREAM,
    arguments: dict[str, object] | None = None,
) -> list[tuple[int, bytes]]:
    channel.basic_qos(prefetch_count=100)
    received: list[tuple[int, bytes]] = []
    for method, properties, body in channel.consume(
        stream, arguments={"x-stream-offset": "first", **(arguments or {})}, inactivity_timeout=5.0
    ):
        if method is None:
            break
        received.append((properties.headers["x-stream-offset"], body))
        channel.basic_ack(method.delivery_tag)
        if len(received) >= count:
            break
    channel.cancel()
    return received
