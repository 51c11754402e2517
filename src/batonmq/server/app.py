"""Run a broker: open its store and recover, listen, and shut down cleanly on a signal.

SIGTERM and SIGINT stop accepting connections, close every client connection with 320
CONNECTION_FORCED (spec: "the server ... is being shut down"), wait for them to go (at most
`server.shutdown_timeout`), commit what the journal holds, close the store, and exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from batonmq.config import Config
from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.engine.recovery import restore
from batonmq.server.protocol import AMQPProtocol
from batonmq.store.base import StoreError
from batonmq.store.configured import configured_store

log = logging.getLogger(__name__)


class BrokerServer:
    """The broker and its AMQP listener."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.broker = Broker(
            BrokerSettings(
                name=config.broker_name,
                default_vhost=config.default_vhost,
                frame_max=config.amqp.frame_max,
                channel_max=config.amqp.channel_max,
                heartbeat=config.amqp.heartbeat,
                max_message_size=config.amqp.max_message_size,
                guest_loopback_only=config.auth.guest_loopback_only,
                page_window=config.persist.page_window,
            ),
            configured_store(config),
        )
        self.protocols: set[AMQPProtocol] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def _protocol_factory(self) -> AMQPProtocol:
        server_config = self.config.server
        protocol = AMQPProtocol(
            self.broker,
            server_config.write_buffer_high,
            server_config.write_buffer_low,
            self.protocols.discard,
        )
        self.protocols.add(protocol)
        return protocol

    async def recover(self) -> None:
        """Open the store and bring back what it holds (StoreError if it cannot be used)."""
        store = self.broker.store
        assert store is not None
        started = time.monotonic()
        await store.open()
        try:
            recovery = await store.recover()
        except BaseException:
            await store.close()
            raise
        recovered = restore(self.broker, recovery)
        self.broker.journal.start()
        log.info(
            "recovered %d messages in %.3f s",
            recovered.messages,
            time.monotonic() - started,
            extra={
                "queues": recovered.queues,
                "store": store.kind,
                "location": store.location,
                "sync": self.config.persist.sync,
                "exchanges": recovered.exchanges,
                "bindings": recovered.bindings,
                "discarded_transient": recovery.discarded_entries,
            },
        )

    async def start(self) -> list[tuple[str, int]]:
        """Recover, then listen; returns the bound addresses (the real port when the configured
        one is 0)."""
        await self.recover()
        listener = self.config.listeners.amqp
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol_factory, listener.bind, listener.port, reuse_address=True
        )
        self._sweeper = asyncio.create_task(self._sweep_expired())
        addresses = [sock.getsockname()[:2] for sock in self._server.sockets]
        for host, port in addresses:
            log.info("listening", extra={"listener": "amqp", "addr": host, "port": port})
        return addresses

    async def _sweep_expired(self) -> None:
        """Every `message.expiration_interval`, remove expired messages from anywhere in their
        queues (the ones at a queue's head go at once without this)."""
        while True:
            await asyncio.sleep(self.config.message.expiration_interval)
            expired = self.broker.expire_messages()
            if expired:
                log.info("expired %d messages", expired)

    async def shutdown(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        forced = HardError(ReplyCode.CONNECTION_FORCED, "broker shutdown")
        for protocol in list(self.protocols):
            if protocol.session is not None:
                protocol.session.close(forced)
        waiting = [asyncio.ensure_future(protocol.lost.wait()) for protocol in self.protocols]
        if waiting:
            _done, pending = await asyncio.wait(
                waiting, timeout=self.config.server.shutdown_timeout
            )
            for future in pending:
                future.cancel()
            for protocol in list(self.protocols):
                if protocol.transport is not None:
                    protocol.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
        await self.close_store()

    async def close_store(self) -> None:
        """Commit what the journal holds and close the store."""
        await self.broker.journal.stop()
        if self.broker.store is not None:
            await self.broker.store.close()


async def serve(config: Config, started: Callable[[BrokerServer], None] | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    server = BrokerServer(config)
    try:
        await server.start()
    except BaseException:
        await server.close_store()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("broker started", extra={"broker": config.broker_name})
    if started is not None:
        started(server)
    await stop.wait()
    log.info("shutting down", extra={"connections": len(server.protocols)})
    await server.shutdown()
    log.info("shutdown complete")


def run(config: Config) -> int:
    """The `batonmq` command's body: 0 after a clean shutdown, 1 if it cannot start."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config))
    except StoreError as error:
        log.error("cannot open the store: %s", error)
        return 1
    except OSError as error:
        listener = config.listeners.amqp
        log.error("cannot listen on %s:%s: %s", listener.bind, listener.port, error.strerror)
        return 1
    return 0
