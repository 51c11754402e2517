"""A stand-in broker that measures the load generator's own ceiling.

It completes the AMQP handshake minimally (decoding with pamqp), answers the few control methods
the load generator sends (channel.open, basic.qos, basic.consume, connection.close), and then:

- `discard`: throws away everything a publisher writes without parsing it. Its rate is what the
  publisher can write, with no broker in the way.
- `replay`: after basic.consume, writes pre-built basic.deliver + content header + body frames
  (stamped with the send time, like a publisher's) as fast as the socket takes them, and throws
  away the acks. Its rate is what the consumer can scan and ack.

The connection.close frame the load generator sends is recognised at the end of a read (it is
the last thing a client writes), so nothing else needs parsing after the handshake.

    python -m benchmarks.loadgen.sink --port 5999 --mode discard|replay [--body-size 128]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from typing import cast

from pamqp import commands, frame, header
from pamqp.base import Frame

from benchmarks.loadgen.client import CHANNEL, CLOSE_FRAME, FRAME_MAX
from benchmarks.loadgen.frames import (
    FRAME_BODY,
    PROTOCOL_HEADER,
    PublishBatch,
    PublishTemplate,
    encode_frame,
)

DELIVER_BATCH_BYTES = 65536


def deliver_template(body_size: int) -> PublishTemplate:
    """A basic.deliver with its content, as a template whose body opens with the send time."""
    method = frame.marshal(
        commands.Basic.Deliver(consumer_tag="bench", delivery_tag=1, routing_key="sink"), CHANNEL
    )
    content_header = frame.marshal(
        header.ContentHeader(0, body_size, commands.Basic.Properties(delivery_mode=1)), CHANNEL
    )
    body_frame = encode_frame(FRAME_BODY, CHANNEL, bytes(body_size))
    return PublishTemplate(method + content_header + body_frame[:7], body_frame[15:])


class SinkProtocol(asyncio.Protocol):
    def __init__(self, mode: str, body_size: int) -> None:
        self.mode = mode
        self.body_size = body_size
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.handshaking = True
        self.header_seen = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._replay: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.handshaking:
            if data.endswith(CLOSE_FRAME):
                self._close()
            return
        self.buffer += data
        if not self.header_seen:
            if len(self.buffer) < len(PROTOCOL_HEADER):
                return
            self.buffer = self.buffer[len(PROTOCOL_HEADER) :]
            self.header_seen = True
            self._send(
                commands.Connection.Start(
                    server_properties={"product": "batonmq-bench-sink"},
                    mechanisms="PLAIN",
                    locales="en_US",
                ),
                0,
            )
        while self.handshaking and self.buffer:
            try:
                consumed, channel, method = frame.unmarshal(self.buffer)
            except Exception:  # pamqp: "Not all data received"
                return
            self.buffer = self.buffer[consumed:]
            if isinstance(method, Frame):
                self._answer(method, channel)

    def _answer(self, method: Frame, channel: int) -> None:
        if isinstance(method, commands.Connection.StartOk):
            self._send(commands.Connection.Tune(2047, FRAME_MAX, 0), 0)
        elif isinstance(method, commands.Connection.Open):
            self._send(commands.Connection.OpenOk(), 0)
        elif isinstance(method, commands.Channel.Open):
            self._send(commands.Channel.OpenOk(), channel)
            if self.mode == "discard":
                self.handshaking = False
        elif isinstance(method, commands.Basic.Qos):
            self._send(commands.Basic.QosOk(), channel)
        elif isinstance(method, commands.Basic.Consume):
            self._send(commands.Basic.ConsumeOk(consumer_tag=method.consumer_tag), channel)
            self.handshaking = False
            self._replay = asyncio.ensure_future(self._deliver())
        elif isinstance(method, commands.Connection.Close):
            self._close()

    def _send(self, method: Frame, channel: int) -> None:
        assert self.transport is not None
        self.transport.write(frame.marshal(method, channel))

    def _close(self) -> None:
        assert self.transport is not None
        self.handshaking = False
        if self._replay is not None:
            self._replay.cancel()
        self.transport.write(frame.marshal(commands.Connection.CloseOk(), 0))
        self.transport.close()

    async def _deliver(self) -> None:
        template = deliver_template(self.body_size)
        message_size = len(template.prefix) + 8 + len(template.suffix)
        count = max(1, DELIVER_BATCH_BYTES // message_size)
        render = PublishBatch([template]).render
        transport = self.transport
        assert transport is not None
        while not transport.is_closing():
            await self._writable.wait()
            transport.write(render(count, time.monotonic_ns()))
            await asyncio.sleep(0)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._writable.set()
        if self._replay is not None:
            self._replay.cancel()


async def serve(port: int, mode: str, body_size: int) -> None:
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[None] = loop.create_future()

    def stopping() -> None:
        if not stop.done():
            stop.set_result(None)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping)
    server = await loop.create_server(
        lambda: SinkProtocol(mode, body_size), "127.0.0.1", port, reuse_address=True
    )
    async with server:
        await stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("discard", "replay"), required=True)
    parser.add_argument("--body-size", type=int, default=128)
    arguments = parser.parse_args()
    run: Callable[..., object]
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(arguments.port, arguments.mode, arguments.body_size))


if __name__ == "__main__":
    main()
