"""The load generator's hot-path codec: pre-encoded publishes, a pre-encoded ack, and a scanner
that finds frame boundaries and reads only what the harness counts.

Publishing: a message's frames (basic.publish, its content header, its body frames) are encoded
once, with pamqp; what changes per message is the send time in the first 8 bytes of the body. A
batch of messages is one `bytes.join` with that stamp as the separator (`PublishBatch`).

Receiving: `InboundScanner.feed` walks frames without decoding them. It counts basic.deliver
frames and keeps the last delivery tag (the consumer acks up to it), reads the send time from the
first body frame of each message (latency), and applies basic.ack/basic.nack confirms. Every other
method frame is handed back raw, to be decoded with pamqp off the hot path.

Latency clock: time.monotonic_ns(), CLOCK_MONOTONIC, which on Linux is one clock for the whole
machine, so a stamp written by a publisher process is comparable with the time a consumer process
reads it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from pamqp import commands, frame, header

from benchmarks.histogram import LatencyHistogram
from benchmarks.loadgen import shape

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
#: Type (1), channel (2), payload size (4), then the payload and FRAME_END.
FRAME_OVERHEAD = 8
#: Bytes of the body that carry the send time (big-endian time.monotonic_ns()).
STAMP_SIZE = 8

_FRAME_HEADER = struct.Struct(">BHI")
_UINT32 = struct.Struct(">I")
_UINT64 = struct.Struct(">Q")
_ACK = struct.Struct(">BHIHHQBB")

#: (class id << 16) | method id of the methods the scanner handles itself.
BASIC_DELIVER = (60 << 16) | 60
BASIC_ACK = (60 << 16) | 80
BASIC_NACK = (60 << 16) | 120


class FrameError(ValueError):
    """The input is not a sequence of AMQP frames (a frame does not end with 0xCE)."""


def encode_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + b"\xce"


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """basic.ack as pamqp would marshal it, without building a pamqp object."""
    return _ACK.pack(FRAME_METHOD, channel, 13, 60, 80, delivery_tag, int(multiple), FRAME_END)


@dataclass(frozen=True, slots=True)
class PublishTemplate:
    """One message, encoded: `prefix + stamp + suffix` is its basic.publish, content header and
    body frames, where `stamp` is the 8-byte send time that opens the body."""

    prefix: bytes
    suffix: bytes

    def message(self, stamp: int) -> bytes:
        return self.prefix + _UINT64.pack(stamp) + self.suffix


def publish_template(
    channel: int,
    exchange: str,
    routing_key: str,
    body_size: int,
    persistent: bool,
    frame_max: int,
) -> PublishTemplate:
    """Encode a publish of a `body_size`-byte body (at least STAMP_SIZE), split into body frames
    of at most `frame_max` bytes each, as the spec requires (section 4.2.3)."""
    if body_size < STAMP_SIZE:
        raise ValueError(f"a body carries an {STAMP_SIZE}-byte send time: {body_size} is too small")
    method = frame.marshal(
        commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel
    )
    properties = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    content_header = frame.marshal(header.ContentHeader(0, body_size, properties), channel)
    chunk = frame_max - FRAME_OVERHEAD
    filler = bytes(range(256)) * (body_size // 256 + 1)
    body = filler[:body_size]
    first = body[:chunk]
    rest = b"".join(
        encode_frame(FRAME_BODY, channel, body[start : start + chunk])
        for start in range(chunk, body_size, chunk)
    )
    prefix = method + content_header + _FRAME_HEADER.pack(FRAME_BODY, channel, len(first))
    return PublishTemplate(prefix, first[STAMP_SIZE:] + b"\xce" + rest)


@dataclass(slots=True)
class PublishBatch:
    """Batches of messages cycling through `templates`: `render(count, stamp)` is `count`
    messages, all stamped `stamp`, in one `bytes.join`."""

    templates: Sequence[PublishTemplate]
    _pieces: dict[int, list[bytes]] = field(default_factory=dict)

    def render(self, count: int, stamp: int) -> bytes:
        pieces = self._pieces.get(count)
        if pieces is None:
            pieces = self._pieces[count] = self._split(count)
        return _UINT64.pack(stamp).join(pieces)

    def _split(self, count: int) -> list[bytes]:
        templates = [self.templates[index % len(self.templates)] for index in range(count)]
        pieces = [templates[0].prefix]
        pieces.extend(before.suffix + after.prefix for before, after in pairwise(templates))
        pieces.append(templates[-1].suffix)
        return pieces


class InboundScanner:
    """Walks the frames a broker sends to one connection (see the module docstring).

    Counters: `deliveries` (basic.deliver frames), `last_delivery_tag`, `confirmed` (publishes
    acknowledged by basic.ack), `nacked`. Latencies (now - stamp, in the unit of the clock passed
    to `feed`) go to `latencies` while `recording` is true. Method frames the scanner does not
    handle are appended to `others` as (channel, raw frame) for the caller to decode.
    """

    __slots__ = (
        "_confirm_watermark",
        "_out_of_order",
        "_pending",
        "_shape",
        "_skip",
        "_stale",
        "_want_stamp",
        "confirmed",
        "deliveries",
        "last_delivery_tag",
        "latencies",
        "nacked",
        "others",
        "recording",
    )

    def __init__(self, latencies: LatencyHistogram | None = None) -> None:
        self.latencies = latencies
        self.recording = False
        self.deliveries = 0
        self.last_delivery_tag = 0
        self.confirmed = 0
        self.nacked = 0
        self.others: list[tuple[int, bytes]] = []
        self._pending = b""
        #: What is still to come of a body frame whose start was read (its end octet last).
        self._skip = 0
        self._want_stamp = False
        self._confirm_watermark = 0
        self._out_of_order: set[int] = set()
        #: The layout of the deliveries so far, once two in a row were walked (see shape.py).
        self._shape: shape.DeliveryShape | None = None
        #: No shape learned, or the last one did not fit the message that followed.
        self._stale = True

    def feed(self, data: bytes, now: int) -> None:
        """Consume `data`; a frame cut off at its end waits for the next call, except a body
        frame, whose rest is skipped as it arrives: keeping it, to join it with the next read,
        copied a large body once per read and cost more than the broker sending it."""
        end = len(data)
        offset = 0
        if self._skip:
            if self._skip > end:
                self._skip -= end
                return
            offset, self._skip = self._skip, 0
            if data[offset - 1] != FRAME_END:
                raise FrameError("a body frame does not end with 0xCE")
        elif self._pending:
            data = self._pending + data
            end = len(data)
        unpack_header = _FRAME_HEADER.unpack_from
        unpack_u32 = _UINT32.unpack_from
        unpack_u64 = _UINT64.unpack_from
        record = self.latencies if self.recording else None
        #: Where the last basic.deliver walked in `data` starts, while only its content followed.
        message_at = -1
        while end - offset >= FRAME_OVERHEAD:
            frame_type, channel, size = unpack_header(data, offset)
            frame_end = offset + 7 + size
            if frame_end >= end:
                if frame_type == FRAME_BODY and end - offset >= 7 + STAMP_SIZE:
                    self._read_stamp(data, offset, now, record)
                    self._skip = frame_end + 1 - end
                    offset = end
                break
            if data[frame_end] != FRAME_END:
                raise FrameError(f"frame at offset {offset} does not end with 0xCE")
            if frame_type == FRAME_BODY:
                self._read_stamp(data, offset, now, record)
            elif frame_type == FRAME_METHOD:
                if unpack_u32(data, offset + 7)[0] == BASIC_DELIVER:
                    run_end = self._delivered(data, offset, end, now, message_at, record)
                    if run_end:
                        offset, message_at = run_end, -1
                        continue
                    message_at = offset
                else:
                    self._method(data, offset, frame_end, channel)
                    message_at = -1
            elif frame_type == FRAME_HEADER:
                # class-id (2), weight (2), body-size (8): a stamp opens any body of 8+ bytes.
                self._want_stamp = unpack_u64(data, offset + 11)[0] >= STAMP_SIZE
            else:
                message_at = -1
            offset = frame_end + 1
        self._pending = data[offset:] if offset < end else b""

    def _delivered(
        self,
        data: bytes,
        offset: int,
        end: int,
        now: int,
        message_at: int,
        record: LatencyHistogram | None,
    ) -> int:
        """The basic.deliver at `offset`: count the run of messages of the learned shape that
        starts there and return where it ends, or count this one alone and return 0. A message
        walked just before (from `message_at`, if not -1) teaches the shape when the last one
        learned did not fit."""
        if message_at >= 0 and self._stale:
            self._shape = shape.learn(data, message_at, offset, STAMP_SIZE)
        learned = self._shape
        run = learned.run(data, offset, end) if learned is not None else 0
        self._stale = run == 0
        if learned is None or run == 0:
            # consumer-tag (shortstr), then the delivery tag (longlong).
            self.last_delivery_tag = _UINT64.unpack_from(data, offset + 12 + data[offset + 11])[0]
            self.deliveries += 1
            return 0
        stop = offset + run * learned.stride
        self.last_delivery_tag = learned.delivery_tag(data, stop - learned.stride)
        self.deliveries += run
        if record is not None and learned.stamp_at >= 0:
            record.record_many(now - learned.stamps(data, offset, run))
        return stop

    def _method(self, data: bytes, offset: int, frame_end: int, channel: int) -> None:
        """A method frame other than basic.deliver: a confirm, or one handed back raw."""
        class_method = _UINT32.unpack_from(data, offset + 7)[0]
        if class_method in (BASIC_ACK, BASIC_NACK):
            tag = _UINT64.unpack_from(data, offset + 11)[0]
            self._confirm(tag, bool(data[offset + 19] & 1), class_method == BASIC_NACK)
        else:
            self.others.append((channel, data[offset : frame_end + 1]))

    def _read_stamp(
        self, data: bytes, offset: int, now: int, record: LatencyHistogram | None
    ) -> None:
        """The body frame at `offset`: the first of a message carries its send time."""
        if self._want_stamp:
            self._want_stamp = False
            if record is not None:
                record.record(now - _UINT64.unpack_from(data, offset + 7)[0])

    def _confirm(self, tag: int, multiple: bool, nack: bool) -> None:
        """Publisher confirms (an ack or a nack: either way the publish is settled)."""
        before = self._confirm_watermark
        if multiple:
            if tag > before:
                settled = tag - before - sum(1 for early in self._out_of_order if early <= tag)
                self._out_of_order = {early for early in self._out_of_order if early > tag}
                self._confirm_watermark = tag
            else:
                settled = 0
        elif tag == before + 1:
            settled = 1
            self._confirm_watermark = tag
        elif tag > before and tag not in self._out_of_order:
            settled = 1
            self._out_of_order.add(tag)
        else:
            settled = 0
        while self._confirm_watermark + 1 in self._out_of_order:
            self._confirm_watermark += 1
            self._out_of_order.discard(self._confirm_watermark)
        if nack:
            self.nacked += settled
        else:
            self.confirmed += settled
