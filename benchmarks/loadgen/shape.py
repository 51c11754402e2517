"""Runs of deliveries that all have one shape, counted without a Python step per message.

A consumer of the benchmark receives message after message of the same layout: a basic.deliver
frame (same consumer tag, exchange and routing key), a content header (same properties and body
size) and the same body frames. Only the bytes inside the frames differ (delivery tag,
redelivered flag, body). So once the scanner has walked one such message, a run of `count` more
can be checked at once: every frame header (type, channel, size), every end octet and the
class and method of basic.deliver sit at the same place in each message, `stride` bytes apart,
and one strided slice per place checks that place in every message of the run. The messages
that pass those checks parse frame for frame as the walker would parse them; at the first
difference (a heartbeat, a confirm, another routing key) the run ends and the scanner walks.
The send times that open the bodies are read for the whole run as one array.

This is what keeps the load generator's cost per message small enough that a broker using more
than one core on a 2-core machine is not starved by its clients.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

_FRAME_HEADER = struct.Struct(">BHI")
_UINT64 = struct.Struct(">Q")
#: Type (1), channel (2) and size (4) of a frame: what a frame header fixes.
_HEADER_SIZE = 7
#: The class and method ids that open a method frame's payload.
_METHOD_ID_SIZE = 4
_FRAME_BODY = 3


@dataclass(frozen=True, slots=True)
class DeliveryShape:
    """The layout of one delivered message, as `learn` read it."""

    stride: int
    #: Offset of the delivery tag (a longlong) from the message's start.
    tag_at: int
    #: Offset of the send time that opens the body (frames.STAMP_SIZE bytes); -1: none.
    stamp_at: int
    #: (offset from the message's start, the byte every message has there).
    fixed: tuple[tuple[int, bytes], ...]

    def run(self, data: bytes, offset: int, end: int) -> int:
        """How many whole messages of this shape follow one another from `offset`, up to
        `end` or to the first message that differs."""
        stride = self.stride
        count = (end - offset) // stride
        for at, value in self.fixed:
            if count == 0:
                break
            column = data[offset + at : offset + count * stride : stride]
            count -= len(column.lstrip(value))
        return count

    def delivery_tag(self, data: bytes, message_at: int) -> int:
        return int(_UINT64.unpack_from(data, message_at + self.tag_at)[0])

    def stamps(self, data: bytes, offset: int, count: int) -> npt.NDArray[np.int64]:
        """The send times of the `count` messages from `offset` (a run), in order."""
        rows = np.frombuffer(data, np.uint8, count * self.stride, offset)
        columns = rows.reshape(count, self.stride)[:, self.stamp_at : self.stamp_at + 8]
        return np.ascontiguousarray(columns).view(">u8")[:, 0].astype(np.int64)


def learn(data: bytes, start: int, stop: int, stamp_size: int) -> DeliveryShape:
    """The shape of the message at `data[start:stop]`: a basic.deliver frame, then its content
    header and body frames, which the caller has walked and checked. A first body frame of at
    least `stamp_size` bytes opens with the send time."""
    fixed: list[tuple[int, bytes]] = []
    stamp_at = -1
    at = start
    while at < stop:
        frame_type, _, size = _FRAME_HEADER.unpack_from(data, at)
        header = _HEADER_SIZE + (_METHOD_ID_SIZE if at == start else 0)
        fixed.extend(
            (at - start + index, data[at + index : at + index + 1]) for index in range(header)
        )
        frame_end = at + _HEADER_SIZE + size
        fixed.append((frame_end - start, data[frame_end : frame_end + 1]))
        if frame_type == _FRAME_BODY and stamp_at < 0 and size >= stamp_size:
            stamp_at = at - start + _HEADER_SIZE
        at = frame_end + 1
    # basic.deliver: class and method, consumer-tag (shortstr), then the delivery tag.
    tag_at = _HEADER_SIZE + _METHOD_ID_SIZE + 1 + data[start + 11]
    return DeliveryShape(stop - start, tag_at, stamp_at, tuple(fixed))
