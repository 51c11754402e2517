"""The load generator's hot-path codec, checked against pamqp on frames pamqp builds."""

import random
import struct

import pytest
from benchmarks.histogram import SUB_BUCKET_BITS, LatencyHistogram
from benchmarks.loadgen.frames import (
    STAMP_SIZE,
    FrameError,
    InboundScanner,
    PublishBatch,
    encode_ack,
    publish_template,
)
from pamqp import body, commands, frame, header

FRAME_MAX = 131072


def pamqp_publish(exchange, routing_key, payload, persistent, frame_max=FRAME_MAX):
    properties = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    frames = [
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), 1),
        frame.marshal(header.ContentHeader(0, len(payload), properties), 1),
    ]
    chunk = frame_max - 8
    for start in range(0, len(payload), chunk):
        frames.append(frame.marshal(body.ContentBody(payload[start : start + chunk]), 1))
    return b"".join(frames)


def template_body(size):
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def stamped(payload, stamp):
    return struct.pack(">Q", stamp) + payload[STAMP_SIZE:]


@pytest.mark.parametrize("size", [8, 128, 1024, 65536, 300_000])
@pytest.mark.parametrize("persistent", [False, True])
def test_a_publish_template_is_what_pamqp_marshals(size, persistent):
    template = publish_template(1, "bench.x", "orders.eu.1.created", size, persistent, FRAME_MAX)
    stamp = 0x0102030405060708
    expected = pamqp_publish(
        "bench.x", "orders.eu.1.created", stamped(template_body(size), stamp), persistent
    )
    assert template.message(stamp) == expected


def test_a_body_too_small_for_the_stamp_is_refused():
    with pytest.raises(ValueError, match="too small"):
        publish_template(1, "", "q", STAMP_SIZE - 1, False, FRAME_MAX)


def test_a_batch_is_its_messages_one_after_another():
    templates = [publish_template(1, "x", key, 100, False, FRAME_MAX) for key in ("a", "b", "c")]
    batch = PublishBatch(templates)
    for count in (1, 2, 3, 7):
        rendered = batch.render(count, 42)
        assert rendered == b"".join(templates[i % 3].message(42) for i in range(count))


@pytest.mark.parametrize("multiple", [False, True])
def test_encode_ack_is_what_pamqp_marshals(multiple):
    expected = frame.marshal(commands.Basic.Ack(delivery_tag=123456789, multiple=multiple), 1)
    assert encode_ack(1, 123456789, multiple) == expected


def deliveries(count, size, sent_at, frame_max=FRAME_MAX):
    """pamqp-built basic.deliver messages with tags 1..count, each body stamped sent_at[i]."""
    frames = []
    for index in range(count):
        payload = stamped(template_body(size), sent_at[index])
        frames.append(
            frame.marshal(commands.Basic.Deliver(f"ctag{index}", index + 1, False, "", "q"), 1)
        )
        frames.append(frame.marshal(header.ContentHeader(0, len(payload)), 1))
        chunk = frame_max - 8
        for start in range(0, len(payload), chunk):
            frames.append(frame.marshal(body.ContentBody(payload[start : start + chunk]), 1))
    return b"".join(frames)


def recorded(histogram):
    """The values a histogram counted, in order: exact below 2**SUB_BUCKET_BITS, where each
    value has a bucket of its own (the tests keep their latencies there)."""
    assert all(index < 2**SUB_BUCKET_BITS for index in histogram.to_sparse())
    return [index for index, count in sorted(histogram.to_sparse().items()) for _ in range(count)]


def feed_in_pieces(scanner, data, now, rng):
    offset = 0
    while offset < len(data):
        size = rng.choice((1, 2, 7, 13, 100, 4096))
        scanner.feed(data[offset : offset + size], now)
        offset += size


@pytest.mark.parametrize("size", [8, 128, 200_000])
def test_the_scanner_counts_deliveries_and_reads_their_stamps_however_the_bytes_arrive(size):
    rng = random.Random(size)
    sent_at = [index * 10 for index in range(20)]
    data = deliveries(20, size, sent_at, frame_max=4096 if size > 1000 else FRAME_MAX)
    latencies = LatencyHistogram()
    scanner = InboundScanner(latencies)
    scanner.recording = True
    feed_in_pieces(scanner, data, 250, rng)
    assert scanner.deliveries == 20
    assert scanner.last_delivery_tag == 20
    assert recorded(latencies) == sorted(250 - sent for sent in sent_at)
    assert scanner.others == []


def test_the_scanner_records_no_latency_when_not_recording():
    latencies = LatencyHistogram()
    scanner = InboundScanner(latencies)
    scanner.feed(deliveries(3, 128, [1, 2, 3]), 10)
    assert scanner.deliveries == 3
    assert recorded(latencies) == []


def test_a_body_shorter_than_a_stamp_is_counted_without_a_latency():
    latencies = LatencyHistogram()
    scanner = InboundScanner(latencies)
    scanner.recording = True
    data = (
        frame.marshal(commands.Basic.Deliver("c", 9, False, "", "q"), 1)
        + frame.marshal(header.ContentHeader(0, 3), 1)
        + frame.marshal(body.ContentBody(b"abc"), 1)
    )
    scanner.feed(data, 100)
    assert (scanner.deliveries, scanner.last_delivery_tag, recorded(latencies)) == (1, 9, [])


def test_other_methods_come_back_raw_and_pamqp_reads_them():
    methods = [
        (0, commands.Connection.Start(mechanisms="PLAIN", locales="en_US")),
        (1, commands.Basic.ConsumeOk("bench")),
        (1, commands.Channel.Close(404, "NOT_FOUND - no queue", 50, 10)),
    ]
    data = b"".join(frame.marshal(method, channel) for channel, method in methods)
    data += frame.marshal(commands.Basic.Deliver("c", 1, False, "", "q"), 1)
    scanner = InboundScanner()
    feed_in_pieces(scanner, data, 0, random.Random(3))
    assert scanner.deliveries == 1
    assert [channel for channel, _ in scanner.others] == [0, 1, 1]
    for (_, raw), (channel, method) in zip(scanner.others, methods, strict=True):
        consumed, decoded_channel, decoded = frame.unmarshal(raw)
        assert consumed == len(raw)
        assert decoded_channel == channel
        assert type(decoded) is type(method)
        assert dict(decoded) == dict(method)


def test_heartbeats_are_skipped():
    scanner = InboundScanner()
    scanner.feed(b"\x08\x00\x00\x00\x00\x00\x00\xce", 0)
    assert (scanner.deliveries, scanner.others) == (0, [])


def test_a_frame_without_its_end_octet_is_an_error():
    data = bytearray(frame.marshal(commands.Basic.QosOk(), 1))
    data[-1] = 0
    with pytest.raises(FrameError):
        InboundScanner().feed(bytes(data), 0)


def confirms(*acks):
    return b"".join(
        frame.marshal((commands.Basic.Nack if nack else commands.Basic.Ack)(tag, multiple), 1)
        for tag, multiple, nack in acks
    )


def test_confirms_with_multiple_settle_everything_up_to_their_tag():
    scanner = InboundScanner()
    scanner.feed(confirms((1, False, False), (5, True, False), (5, True, False)), 0)
    assert (scanner.confirmed, scanner.nacked) == (5, 0)
    scanner.feed(confirms((9, True, True), (10, False, False)), 0)
    assert (scanner.confirmed, scanner.nacked) == (6, 4)


def test_single_confirms_out_of_order_are_each_counted_once():
    scanner = InboundScanner()
    scanner.feed(confirms((3, False, False), (2, False, False), (3, False, False)), 0)
    assert scanner.confirmed == 2
    scanner.feed(confirms((1, False, False)), 0)
    assert scanner.confirmed == 3
    scanner.feed(confirms((6, False, True), (7, True, False)), 0)
    assert (scanner.confirmed, scanner.nacked) == (6, 1)


def test_a_large_body_frame_cut_by_reads_is_skipped_not_kept():
    """Keeping a cut body frame, to join it with the next read, copied a 64 KiB body once per
    read: the consumer, not the broker, limited the stream replay benchmark."""
    data = deliveries(2, 100_000, [5, 6])
    latencies = LatencyHistogram()
    scanner = InboundScanner(latencies)
    scanner.recording = True
    cut = data.index(b"\x03\x00\x01") + 50_000  # halfway into the first body frame

    scanner.feed(data[:cut], 10)

    assert scanner._pending == b""
    assert recorded(latencies) == [5]
    scanner.feed(data[cut:], 10)
    assert (scanner.deliveries, recorded(latencies)) == (2, [4, 5])


def test_a_skipped_body_frame_without_its_end_octet_is_an_error():
    data = bytearray(deliveries(1, 100_000, [5]))
    data[-1] = 0
    scanner = InboundScanner()
    scanner.feed(bytes(data[:-10]), 0)
    with pytest.raises(FrameError):
        scanner.feed(bytes(data[-10:]), 0)
