"""Runs of deliveries of one shape: counted at once, exactly as the frame walker counts them.

The AMQP 0-9-1 rule the scanner relies on (section 4.2.3): a frame is type (1 octet), channel
(2), payload size (4), the payload and the end octet 0xCE; a delivered message is its
basic.deliver method frame, then its content header frame, then its body frames.
"""

import random
import struct
from collections import Counter

import pytest
from benchmarks.histogram import LatencyHistogram
from benchmarks.loadgen import shape
from benchmarks.loadgen.frames import STAMP_SIZE, FrameError, InboundScanner
from pamqp import body, commands, frame, header

HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"
#: The scanner's clock when the tests feed it; bodies carry send times below it, so that every
#: latency is below 2**SUB_BUCKET_BITS, where the histogram counts each value exactly.
NOW = 250


def sent_at(tag):
    return tag % 200


def delivery(tag, routing_key="q0", size=1024, frame_max=131072, redelivered=False):
    frames = [
        frame.marshal(commands.Basic.Deliver("bench", tag, redelivered, "", routing_key), 1),
        frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), 1),
    ]
    payload = struct.pack(">Q", sent_at(tag)) + bytes(tag % 251 for _ in range(size - 8))
    chunk = frame_max - 8
    frames += [
        frame.marshal(body.ContentBody(payload[start : start + chunk]), 1)
        for start in range(0, size, chunk)
    ]
    return b"".join(frames)


def mixed_stream(rng):
    """Runs of identical shapes, broken by other shapes, heartbeats and other methods; and the
    methods the scanner must hand back."""
    pieces, others, tag = [], [], 0
    for _ in range(40):
        kind = rng.choice(("run", "run", "run", "key", "frames", "heartbeat", "method"))
        if kind == "heartbeat":
            pieces.append(HEARTBEAT)
        elif kind == "method":
            raw = frame.marshal(commands.Basic.Cancel(f"c{len(others)}"), 1)
            pieces.append(raw)
            others.append(raw)
        else:
            for _ in range(rng.randrange(1, 60)):
                tag += 1
                if kind == "run":
                    pieces.append(delivery(tag, redelivered=rng.random() < 0.1))
                elif kind == "key":
                    pieces.append(delivery(tag, routing_key="queue-with-a-longer-name"))
                else:
                    pieces.append(delivery(tag, size=3000, frame_max=1024))
    return b"".join(pieces), tag, others


@pytest.mark.parametrize("seed", range(12))
def test_runs_count_and_time_every_delivery_however_the_bytes_arrive(seed):
    """Fed in pieces of every size, from one octet to more than a read holds, the scanner
    counts every delivery once, ends at the last delivery tag, hands back the other methods
    and records each message's latency once, whether it walked the message or counted it in a
    run."""
    rng = random.Random(seed)
    data, last_tag, others = mixed_stream(rng)
    latencies = LatencyHistogram()
    scanner = InboundScanner(latencies)
    scanner.recording = True
    offset = 0
    while offset < len(data):
        size = rng.choice((1, 9, 100, 1100, 4096, 65536, 262144))
        scanner.feed(data[offset : offset + size], NOW)
        offset += size
    assert scanner.deliveries == last_tag
    assert scanner.last_delivery_tag == last_tag
    assert [raw for _, raw in scanner.others] == others
    expected = Counter(NOW - sent_at(tag) for tag in range(1, last_tag + 1))
    assert latencies.to_sparse() == dict(expected)


@pytest.mark.parametrize("frame_max", [131072, 1024])
def test_a_learned_shape_counts_a_run_up_to_the_first_message_that_differs(frame_max):
    """Every frame header, end octet and the method id of basic.deliver is checked in every
    message of a run: a change at any of those places ends the run before that message, while
    the delivery tag, the redelivered flag and the body may differ."""
    messages = [delivery(tag, size=3000, frame_max=frame_max) for tag in range(1, 9)]
    learned = shape.learn(messages[0], 0, len(messages[0]), STAMP_SIZE)
    varied = [*messages[:3], delivery(4, size=3000, frame_max=frame_max, redelivered=True)]
    run = b"".join(varied + messages[4:]) + messages[0][:50]
    assert learned.run(run, 0, len(run)) == 8
    assert learned.delivery_tag(run, 7 * learned.stride) == 8
    assert learned.stamps(run, 0, 8).tolist() == [sent_at(tag) for tag in range(1, 9)]
    for at, _ in learned.fixed:
        broken = bytearray(run)
        broken[5 * learned.stride + at] ^= 0xFF
        assert learned.run(bytes(broken), 0, len(broken)) == 5, at


def test_a_frame_without_its_end_octet_is_found_inside_what_would_have_been_a_run():
    """The run ends before the broken message and the walker reaches the broken frame, as
    without runs: the tenth basic.deliver is counted before its body frame is found without its
    end octet."""
    data = bytearray(b"".join(delivery(tag) for tag in range(1, 20)))
    stride = len(delivery(1))
    data[10 * stride - 1] = 0
    scanner = InboundScanner()
    with pytest.raises(FrameError):
        scanner.feed(bytes(data), 0)
    assert scanner.deliveries == 10
