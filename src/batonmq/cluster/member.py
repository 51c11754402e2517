"""An HA cluster member's runtime: the thin part that carries out what the failure detector
decides (MQ 4.1 HA guide, "Failure Detection and Takeover").

At start the member registers in the shared store (where its AMQP listener and heartbeat
service are, its version) and opens its heartbeat service. Every heartbeat interval (or monitor
interval, whichever is shorter) it reads the members from the store, sends heartbeats to those
that are not taken over, and feeds the detector the clock, what it heard and, for suspects, how
long each has been silent in the store by the database's clock. A member the detector fails is
taken over (`batonmq.engine.takeover`): the store's claim decides which survivor wins; a lost
claim puts the member back under watch. Its own lease renewal (`batonmq.store.pglease`) is its
update in the store that the others watch; a member fenced by a takeover exits (server.app).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable

from batonmq import __version__
from batonmq.cluster.agreement import disagreement, shared_settings
from batonmq.cluster.catalogue import CatalogueSync
from batonmq.cluster.detector import (
    Cleared,
    Effect,
    Failed,
    FailureDetector,
    Health,
    Heard,
    Suspected,
)
from batonmq.cluster.heartbeat import HeartbeatService
from batonmq.cluster.states import BrokerState, stored_state
from batonmq.config.schema import Config
from batonmq.engine.broker import Broker
from batonmq.engine.takeover import TakeoverOutcome, take_over
from batonmq.security.tls import mutual_contexts
from batonmq.store.base import StoreError
from batonmq.store.members import Member, SharedStore

log = logging.getLogger(__name__)

_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def advertised(host: str, port: int) -> str:
    """host:port as another member reaches it: a wildcard bind is this machine's name."""
    return f"{socket.gethostname() if host in _WILDCARDS else host}:{port}"


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class ClusterMember:
    def __init__(
        self,
        config: Config,
        broker: Broker,
        store: SharedStore,
        *,
        owns: Callable[[str], bool] | None = None,
        siblings_adopt: Callable[[], Awaitable[None]] | None = None,
        count_clients: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """With several workers, this is worker 0, the member's voice: `owns(vhost)` says
        whether it owns a virtual host (its share of a takeover), `siblings_adopt()` has
        the other workers adopt theirs, and `count_clients()` asks them again whether they
        have clients (a quiesced member's state counts every worker's); its siblings follow
        the catalogue themselves."""
        self.config = config.cluster
        self._owns = owns
        self._siblings_adopt = siblings_adopt
        self._count_clients = count_clients
        self.shared_settings = shared_settings(config)
        self.broker = broker
        self.store = store
        broker.cluster = self
        heartbeat, monitor = self.config.heartbeat, self.config.monitor
        self.detector = FailureDetector(
            heartbeat_interval=heartbeat.interval,
            heartbeat_threshold=heartbeat.threshold,
            monitor_interval=monitor.interval,
            monitor_threshold=monitor.threshold,
        )
        self.heartbeats = HeartbeatService(
            cluster=self.config.clusterid,
            broker=self.config.brokerid,
            interval=heartbeat.interval,
            on_heartbeat=self._heard,
            tls=mutual_contexts(config.listeners.amqps) if heartbeat.tls else None,
        )
        #: Whether it is taking a member over (TAKEOVER_STARTED, Table 19).
        self._taking_over = False
        #: How its last takeover ended (TAKEOVER_COMPLETE or TAKEOVER_FAILED, Table 19), and
        #: when: its state for one monitor interval after.
        self._last_takeover: tuple[BrokerState, float] | None = None
        self._monitor_interval = monitor.interval
        #: The members as last read from the store, by id.
        self.members: dict[str, Member] = {}
        #: This member's state as its record in the store last said it (its claim of the store
        #: wrote "running").
        self._recorded = "running"
        self._period = min(heartbeat.interval, monitor.interval)
        #: Users, virtual hosts and permissions changed on another member come in force here
        #: (a worker's own duties follow them when the broker has several).
        self.catalogue = None if owns is not None else CatalogueSync(broker, store, self._period)
        self._takeovers = asyncio.Lock()
        self._watching: asyncio.Task[None] | None = None

    async def start(self, amqp_address: tuple[str, int]) -> tuple[str, int]:
        """Check that this broker's shared settings agree with the running members' (else a
        ConfigError naming the setting), open the heartbeat service (on heartbeat.hostname,
        else the AMQP listener's address), register, and start watching the other members;
        returns the heartbeat address."""
        settings = self.shared_settings
        listed = await self.store.members()
        refused = disagreement(settings, listed, self.broker_id)
        if refused is not None:
            raise refused
        host = self.config.heartbeat.hostname or amqp_address[0]
        bound = await self.heartbeats.listen(host, self.config.heartbeat.port)
        try:
            await self.store.register(
                advertised(*amqp_address),
                advertised(host, bound[1]),
                __version__,
                json.dumps(settings, sort_keys=True),
            )
        except BaseException:
            await self.heartbeats.close()
            raise
        # Heartbeats go to the members listed as it joined, before the first round: a store
        # that goes away now would otherwise leave them unheard from, and a peer that hears
        # nothing while reading this member's stale time stamp once the store is back takes
        # it over.
        self._carry_out(self._follow(listed, time.monotonic()))
        self._watching = asyncio.get_running_loop().create_task(
            self._watch(), name="cluster members"
        )
        if self.catalogue is not None:
            self.catalogue.start()
        log.info(
            "joined HA cluster",
            extra={"cluster": self.config.clusterid, "heartbeat_port": bound[1]},
        )
        return bound

    async def close(self) -> None:
        if self.catalogue is not None:
            await self.catalogue.close()
        watching, self._watching = self._watching, None
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        await self.heartbeats.close()

    @property
    def broker_id(self) -> str:
        """The member's id (cluster.brokerid), as its peers know it; the store identity it
        writes as is its own, or its worker's (`batonmq.store.members.as_members`)."""
        return self.config.brokerid

    @property
    def state(self) -> BrokerState:
        """TAKEOVER_STARTED while it takes a member over, then TAKEOVER_COMPLETE or
        TAKEOVER_FAILED for one monitor interval; else as the server says (OPERATING,
        QUIESCING, QUIESCE_COMPLETE, SHUTDOWN_STARTED)."""
        if self._taking_over:
            return BrokerState.TAKEOVER_STARTED
        if self._last_takeover is not None:
            outcome, ended = self._last_takeover
            if time.monotonic() - ended < self._monitor_interval:
                return outcome
        control = self.broker.control
        return BrokerState.OPERATING if control is None else control.state

    async def refuse_failover(self) -> None:
        """Mark this member in the store so that no survivor takes it over once it stops, until
        it starts again (`shutdown bkr -nofailover`)."""
        await self.store.refuse_failover()
        log.info("no failover: no member will take this broker over once it stops")

    async def listed_members(self) -> list[Member]:
        """Every member the store records, with the messages each holds (`list bkr`); this
        member's own state is read after it counted its workers' clients."""
        await self._counted()
        return await self.store.members(count_messages=True)

    async def _counted(self) -> None:
        if self._count_clients is not None:
            await self._count_clients()

    def _heard(self, peer: str) -> None:
        self._carry_out(self.detector.heartbeat(peer, time.monotonic()))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            try:
                await self.check()
            except StoreError as error:
                # The store is out of reach: nobody can be judged failed meanwhile, and this
                # broker's own lease decides whether it is.
                self.detector.store_lost()
                log.warning("cluster members not read: %s", error)
            except Exception:
                # A defect: said, and the next round goes ahead (the watch must not stop).
                log.exception("cluster member check failed")

    async def check(self) -> None:
        """One round: record this member's state if it changed (`quiesce bkr`: Example 1 of
        the HA guide lists QUIESCING from any member), read the members, send heartbeats to
        them, judge them."""
        await self._counted()
        state = stored_state(self.state)
        if state != self._recorded:
            await self.store.record_state(state)
            self._recorded = state
        members = await self.store.members()
        now = time.monotonic()
        effects = self._follow(members, now)
        effects += self.detector.tick(now)
        for peer in members:
            if self.detector.health(peer.broker_id) is Health.SUSPECT:
                effects += self.detector.store_reading(peer.broker_id, peer.silent_for, now)
        self._carry_out(effects)
        for effect in effects:
            if isinstance(effect, Failed):
                await self.take_over(effect.peer)

    def _follow(self, members: list[Member], now: float) -> list[Effect]:
        """The members as the store lists them at `now`: the detector knows them, heartbeats
        go to them."""
        self.members = {member.broker_id: member for member in members}
        peers = [
            member
            for member in members
            # A member shut down with no failover is nobody's to take over (the claim in the
            # store refuses it too): it is not watched.
            if member.broker_id != self.broker_id
            and not member.taken_over
            and not member.no_failover
        ]
        self.heartbeats.watch(
            {
                peer.broker_id: parse_address(peer.heartbeat_address)
                for peer in peers
                if peer.heartbeat_address
            }
        )
        return self.detector.members({peer.broker_id: peer.epoch for peer in peers}, now)

    def _carry_out(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Heard):
                log.info(
                    "cluster member heard: its heartbeats are watched",
                    extra={"peer": effect.peer, "epoch": effect.epoch},
                )
            elif isinstance(effect, Suspected):
                log.warning("cluster member suspect: no heartbeat", extra={"peer": effect.peer})
            elif isinstance(effect, Cleared):
                log.info("cluster member heard from again", extra={"peer": effect.peer})
            elif isinstance(effect, Failed):
                log.warning(
                    "cluster member failed: silent in the store for %.1f s",
                    effect.silent_for,
                    extra={"peer": effect.peer},
                )

    async def take_over(self, failed: str, *, force: bool = False) -> TakeoverOutcome:
        """Take broker `failed` over (`takeover bkr -n ID`, with `force`: `-f`)."""
        async with self._takeovers:
            found = {m.broker_id: m for m in await self.store.members()}.get(failed)
            # An unknown broker, or one taken over already: the store's claim refuses it.
            seen = -1 if found is None or found.taken_over else found.epoch
            self._taking_over = True
            ended = BrokerState.TAKEOVER_FAILED
            try:
                outcome = await take_over(
                    self.broker, self.store, failed, seen, force=force, owns=self._owns
                )
                if outcome.taken is not None:
                    ended = BrokerState.TAKEOVER_COMPLETE
                    if self._siblings_adopt is not None:
                        await self._siblings_adopt()
            finally:
                self._taking_over = False
                self._last_takeover = (ended, time.monotonic())
            if outcome.taken is None:
                self.detector.claim_lost(failed, time.monotonic())
            return outcome
