"""The server's side of `quiesce bkr`, `unquiesce bkr` and `shutdown bkr` (MQ 4.1 HA guide,
Table 7), as the engine's API asks for them (`batonmq.engine.control.ServerControl`).

Quiescing refuses new clients at the listeners (`batonmq.server.listeners`) and serves the open
connections to their end: QUIESCING while any is open, QUIESCE_COMPLETE once none is (Example 1
shows both). A shutdown, asked for here or by SIGTERM/SIGINT, sets `stop`, which `serve` waits
for; from then on the broker is SHUTDOWN_STARTED.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sized

from batonmq.cluster.states import BrokerState
from batonmq.server.listeners import Listening

log = logging.getLogger(__name__)


class Administration:
    def __init__(self, listening: Listening, clients: Sized) -> None:
        self._listening = listening
        #: The client connections being served.
        self._clients = clients
        #: Set when the broker is to stop.
        self.stop = asyncio.Event()

    @property
    def state(self) -> BrokerState:
        if self.stop.is_set():
            return BrokerState.SHUTDOWN_STARTED
        if not self._listening.quiesced:
            return BrokerState.OPERATING
        return BrokerState.QUIESCING if len(self._clients) else BrokerState.QUIESCE_COMPLETE

    def quiesce(self) -> None:
        if not self._listening.quiesced:
            self._listening.quiesced = True
            log.info("quiesced: new connections refused", extra={"open": len(self._clients)})

    def unquiesce(self) -> None:
        if self._listening.quiesced:
            self._listening.quiesced = False
            log.info("unquiesced: new connections accepted")

    def shut_down(self) -> None:
        self.stop.set()
