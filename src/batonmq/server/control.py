"""The server's side of `quiesce bkr`, `unquiesce bkr` and `shutdown bkr` (MQ 4.1 HA guide,
Table 7), as the engine's API asks for them (`batonmq.engine.control.ServerControl`).

Quiescing refuses new clients at the listeners (`batonmq.server.listeners`) and serves the open
connections to their end: QUIESCING while any is open, QUIESCE_COMPLETE once none is (Example 1
shows both). A broker with several workers is quiesced in each; the state its first worker gives
counts every worker's clients, as it last asked its siblings (`count_siblings`): until they have
answered, and while one does not, they may have clients.

A shutdown, asked for here or by SIGTERM/SIGINT, sets `stop`, which `serve` waits for; from then
on the broker is SHUTDOWN_STARTED.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sized

from batonmq.cluster.states import BrokerState
from batonmq.server.listeners import Listening

log = logging.getLogger(__name__)


class Administration:
    def __init__(
        self,
        listening: Listening,
        clients: Sized,
        *,
        stops_broker: bool = False,
        siblings_serve: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """`stops_broker`: this is a worker of a broker with several, whose shutdown stops the
        broker: the supervisor, told as by SIGTERM, stops every worker;
        `siblings_serve()`: whether the other workers may have clients (the first worker of a
        broker with several asks them)."""
        self._listening = listening
        self._stops_broker = stops_broker
        #: The client connections being served.
        self._clients = clients
        self._siblings_serve = siblings_serve
        #: Whether another worker may have a client, as they last answered.
        self._elsewhere = False
        #: Set when the broker is to stop.
        self.stop = asyncio.Event()

    @property
    def state(self) -> BrokerState:
        if self.stop.is_set():
            return BrokerState.SHUTDOWN_STARTED
        if not self._listening.quiesced:
            return BrokerState.OPERATING
        if len(self._clients) or self._elsewhere:
            return BrokerState.QUIESCING
        return BrokerState.QUIESCE_COMPLETE

    async def count_siblings(self) -> None:
        """While quiesced, ask the other workers again whether they have clients."""
        ask = self._siblings_serve
        self._elsewhere = ask is not None and self._listening.quiesced and await ask()

    def quiesce(self) -> None:
        if not self._listening.quiesced:
            self._listening.quiesced = True
            # Until the siblings have said otherwise (`count_siblings`).
            self._elsewhere = self._siblings_serve is not None
            log.info("quiesced: new connections refused", extra={"open": len(self._clients)})

    def unquiesce(self) -> None:
        if self._listening.quiesced:
            self._listening.quiesced = False
            log.info("unquiesced: new connections accepted")

    def shut_down(self) -> None:
        if self._stops_broker:
            # The supervisor passes SIGTERM on to every worker, this one too; stopping here
            # first, this worker could look to it like one that died.
            os.kill(os.getppid(), signal.SIGTERM)
            return
        self.stop.set()
