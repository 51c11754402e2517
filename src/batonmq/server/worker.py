"""What a worker process of a broker with several (`broker.workers` above 1,
`batonmq.server.supervisor`) does beside serving as a broker of one process does:

- it serves the connections its siblings hand to it at connection.open (`batonmq.server.handoff`),
  replaying what they read;
- it holds a link with each sibling (`batonmq.cluster.peerlink`), whose ends come through the
  same inbox, which carries the topology and the messages of the virtual hosts spread over the
  workers (`batonmq.engine.spread`);
- it keeps its copy of the catalogue (users, virtual hosts, permissions) in line with the store
  the workers share (the HA members' propagation, `batonmq.cluster.catalogue`);
- it answers its siblings over the link between workers (`batonmq.server.siblings`), and asks
  them, for the management API (`batonmq.management.workers`);
- it counts failed logins, connections and repeated log lines with its siblings, in the first
  worker (`batonmq.server.brokerwide`);
- it tells its siblings how many clients it serves (the first worker's state of a quiesced
  broker counts them all, `batonmq.server.control`) and whether it is quiesced: a worker the
  supervisor started again asks them that before its listeners open, and starts quiesced when
  one of them is (the quiesce lives in the running workers; the store's record of the
  member's state is written by the first worker a period later, and is stale after a
  restart of the whole broker), and takes their log level, which the management API may have
  changed since the broker started (`PUT /api/broker/log-level` sets it in every worker).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from batonmq.cluster.catalogue import CatalogueSync
from batonmq.cluster.peerlink import PeerLinks
from batonmq.config import Config
from batonmq.engine.api import EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.spread import SpreadWorker
from batonmq.log import ROOT_LOGGER
from batonmq.management.workers import Workers
from batonmq.server.brokerwide import QUESTIONS, BrokerWide
from batonmq.server.handoff import Inbox, Origin
from batonmq.server.placement import WorkerSeat
from batonmq.server.protocol import AMQPProtocol
from batonmq.server.siblings import SiblingFailed, SiblingLink, SiblingUnavailable
from batonmq.store.members import CatalogueSource

log = logging.getLogger(__name__)

#: Seconds a worker waits for a sibling's count of its clients, or whether it is quiesced.
ASK_TIMEOUT: Final = 5.0


@dataclass(frozen=True, slots=True)
class _ClientsOpen:
    """How many client connections the worker serves."""


@dataclass(frozen=True, slots=True)
class _Quiesced:
    """Whether the worker refuses new clients (`quiesce bkr`)."""


@dataclass(frozen=True, slots=True)
class _LogLevel:
    """The worker's log level now (the name `log.level` takes)."""


class WorkerDuties:
    def __init__(
        self,
        config: Config,
        seat: WorkerSeat,
        broker: Broker,
        protocols: set[AMQPProtocol],
        new_protocol: Callable[[Origin, bytes], AMQPProtocol | None],
        quiesced: Callable[[], bool],
    ) -> None:
        """`new_protocol(origin, bytes read)`: the protocol of a connection handed over (None:
        none, for a listener this worker does not have);
        `quiesced()`: whether the broker takes no new connection."""
        self.config = config
        self.seat = seat
        self.broker = broker
        self._protocols = protocols
        self._new_protocol = new_protocol
        self._quiesced = quiesced
        self.inbox = Inbox(seat.inbox, self._adopt)
        self.peer_links = PeerLinks(
            seat.index,
            seat.count,
            [sending for _reading, sending in seat.inboxes],
            started_again=seat.started_again,
        )
        if seat.count > 1 and config.spread_vhosts:
            # Before recovery: every spread virtual host it adds gets its `Spreading`.
            SpreadWorker(broker, self.peer_links, frozenset(config.spread_vhosts)).install()
        #: The catalogue kept in line (from `start` on).
        self.catalogue: CatalogueSync | None = None
        self.workers = Workers(
            EngineApi(broker), seat.index, seat.count, self._catch_up, seat.spreads
        )
        self.link = SiblingLink(
            seat.index, seat.controls, self._serve, started_again=seat.started_again
        )
        self.workers.link = self.link
        self.workers.link_states = self.peer_links.describe
        self.broker_wide = BrokerWide(self.link, broker)
        #: Connections handed to this worker, until their socket is a transport's.
        self._adopting: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        store = self.broker.store
        assert isinstance(store, CatalogueSource)  # either store the workers can share
        cluster = self.config.cluster
        self.catalogue = CatalogueSync(
            self.broker, store, min(cluster.heartbeat.interval, cluster.monitor.interval)
        )
        self.catalogue.start()
        self.inbox.start()
        self.peer_links.start()
        self.broker_wide.install()

    async def siblings_quiesced(self) -> bool:
        """Start answering and asking the siblings; then, in a worker the supervisor started
        again, take their log level, and say whether one of them is quiesced (one that does
        not answer cannot say)."""
        self.link.start()
        if not self.seat.started_again:
            return False
        await self._take_siblings_log_level()
        answers = await self._ask_siblings(_Quiesced())
        if not any(answer is True for answer in answers):
            return False
        log.info("started again quiesced, as the broker is")
        return True

    async def _take_siblings_log_level(self) -> None:
        """Log at the level of the first sibling that answers (none: at the configured)."""
        answers = await self._ask_siblings(_LogLevel())
        level = next((answer for answer in answers if isinstance(answer, str)), None)
        if level is not None:
            EngineApi.set_log_level(level)

    async def siblings_serve(self) -> bool:
        """Whether a sibling may have a client: it has, or it did not answer."""
        answers = await self._ask_siblings(_ClientsOpen())
        return any(not isinstance(answer, int) or answer > 0 for answer in answers)

    async def _ask_siblings(self, question: object) -> list[object]:
        """Every sibling's answer, or the error of one that gave none."""
        asked = [worker for worker in range(self.seat.count) if worker != self.seat.index]
        answers = await asyncio.gather(
            *(self.link.request(worker, question, ASK_TIMEOUT) for worker in asked),
            return_exceptions=True,
        )
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(
                answer, (SiblingUnavailable, SiblingFailed)
            ):
                raise answer
        return answers

    async def _serve(self, question: object) -> object:
        """A sibling's question (the link's `serve`)."""
        if isinstance(question, QUESTIONS):
            return self.broker_wide.answer(question)
        if isinstance(question, _ClientsOpen):
            return len(self._protocols)
        if isinstance(question, _Quiesced):
            return self._quiesced()
        if isinstance(question, _LogLevel):
            level = logging.getLogger(ROOT_LOGGER).getEffectiveLevel()
            return logging.getLevelName(level).lower()
        return await self.workers.serve(question)

    async def _catch_up(self) -> None:
        if self.catalogue is not None:
            await self.catalogue.caught_up()

    async def close(self) -> None:
        """Answer and adopt no more (the listeners close after)."""
        await self.broker_wide.close()
        await self.link.stop()
        if self.catalogue is not None:
            await self.catalogue.close()
        self.inbox.stop()
        self.peer_links.close()
        for adopting in list(self._adopting):
            adopting.cancel()

    def _adopt(self, client: socket.socket, origin: Origin, received: bytes) -> None:
        """Serve a connection another worker handed over at connection.open, replaying what
        it read (`batonmq.server.handoff`), or the end of a link a sibling made."""
        if origin.link_from is not None:
            self.peer_links.adopt(client, origin.link_from)
            return
        protocol = None if self._quiesced() else self._new_protocol(origin, received)
        if protocol is None:
            client.close()
            return
        self._protocols.add(protocol)
        adopting = asyncio.get_running_loop().create_task(self._serve_handed(protocol, client))
        self._adopting.add(adopting)
        adopting.add_done_callback(self._adopting.discard)

    async def _serve_handed(self, protocol: AMQPProtocol, client: socket.socket) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, client)
        except BaseException as error:
            self._protocols.discard(protocol)
            client.close()
            if not isinstance(error, OSError):
                raise
            log.info("handed connection gone: %s", error)
