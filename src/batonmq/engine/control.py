"""What the engine's API may ask of the server running the broker (`imqcmd quiesce bkr`,
`unquiesce bkr`, `shutdown bkr`; MQ 4.1 HA guide, Table 7): the server is the one
implementation (`batonmq.server.control`); the engine never imports it."""

from __future__ import annotations

from typing import Protocol

from batonmq.cluster.states import BrokerState


class ServerControl(Protocol):
    @property
    def state(self) -> BrokerState:
        """OPERATING; QUIESCING while quiesced with clients still connected, QUIESCE_COMPLETE
        once none is; SHUTDOWN_STARTED once a shutdown began."""
        ...

    def quiesce(self) -> None:
        """Refuse new client connections; keep serving the open ones (Table 7: "The broker will
        stop accepting new connections; existing connections will continue to operate")."""
        ...

    def unquiesce(self) -> None:
        """Accept new client connections again ("returning to normal operation")."""
        ...

    def shut_down(self) -> None:
        """Stop the broker as SIGTERM does (clients closed with 320, the store closed)."""
        ...
