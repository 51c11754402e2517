"""The links of a virtual host spread over worker processes (`batonmq.engine.spreading`): the
home worker's sequencer, the replicas, the owner step, and their sync.

Roles per spread virtual host: the home (`owner_of`) decides every change of the topology, in
order, and writes the exchanges and bindings; a queue's owner (`queue_owner`) runs it and
writes its rows; every worker holds the whole topology (a queue it does not run is a
`RemoteQueue`).

A change (`Spread.request`, on the home for its own clients too): the home checks it on its
copy (the authoritative one), has the queue's owner make or delete the queue first when that is
another worker (OWNER_REQUEST), records its own rows and waits for their commit, applies it,
numbers it and sends it (TOPOLOGY_CHANGE) to every worker whose link is up; it answers once
every one of them acknowledged it (a worker whose link drops meanwhile counts as done: it syncs
again when the link is back). So a client that had declare-ok or bind-ok finds the change on
every worker it reaches next (RabbitMQ clustering: topology is replicated to all nodes). One
change per object at a time (its key waits, as a change that waits for the store does); the
others run concurrently and are numbered as they are applied, so replicas apply them in the
home's order, writing nothing.

A passive declare or a redeclare of a queue another worker runs asks that worker for its counts,
and a purge has it purge (OWNER_REQUEST, not through the home). A queue its owner removed by
itself (auto-delete, x-expires, its exclusive connection closed) is forgotten everywhere through
the home (`gone`); so are the exclusive queues of connections of a worker's process that ended,
once a later process of that worker is linked.

A request while the home's link is down waits for it up to `home_wait` seconds, then is refused
541 "home worker N of vhost ... is down"; one in flight when the link drops is refused so at
once: the change may or may not have been made (declaring again is idempotent).

Sync: on every link that comes up the home asks the worker for its copy (SNAPSHOT_ASK), sends it
its whole topology (TOPOLOGY_SNAPSHOT), and then has every worker forget the queues the worker's
copy says it no longer runs (a process that ended took its transient and exclusive queues) and
add those it runs that the home lacks; the worker replaces its exchanges, bindings and remote
queues with the snapshot and keeps the queues it runs.
A home that starts asks every worker for its copy (SNAPSHOT_ASK), takes the latest (home process
start id, then number) plus each worker's own queues once all answered (or `ask_wait` after its
first link up: the copies it has then; or, with no link up, `alone_wait` after its worker
started its links, from its stored rows alone), so that what is not stored (transient exchanges and
bindings) outlives the home's process, then goes on numbering from there; it takes no change,
and checks no request, until then. A worker that makes the virtual host after its link to the
home is up, or misses a change, asks the home for its snapshot (SNAPSHOT_ASK).

The publishes of one tx.commit are one transaction group (`tx_group`): each owner enqueues its
share together, atomic per owner and not across owners (RabbitMQ "Broker Semantics": a
transaction is atomic per queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.cluster.peerlink import MalformedRecord, PeerLink, PeerLinks
from batonmq.cluster.topologyrecords import (
    OWNER_REQUEST,
    SNAPSHOT_ASK,
    TOPOLOGY_ACK,
    TOPOLOGY_ANSWER,
    TOPOLOGY_CHANGE,
    TOPOLOGY_REQUEST,
    TOPOLOGY_SNAPSHOT,
    OwnerAction,
    OwnerRequest,
    RequestFlags,
    SnapshotAsk,
    TopologyAck,
    TopologyAnswer,
    TopologyChange,
    TopologyRequest,
    TopologySnapshot,
)
from batonmq.engine.change import Change, ChangePending, Outcome
from batonmq.engine.consumer import cancel_consumers_of
from batonmq.engine.remoteconsumers import ConsumeLinks
from batonmq.engine.remotequeue import PublishLinks, RemoteQueue
from batonmq.engine.spreading import Declared
from batonmq.engine.topologycopy import bindings_of, replace_topology, topology_ops
from batonmq.engine.vhost import RESERVED_PREFIX, QueueDeletedHook, VirtualHost
from batonmq.model.destination import Destination
from batonmq.model.topology import (
    Bound,
    ConnectionRef,
    ExchangeDeclared,
    ExchangeDeleted,
    QueueDeclared,
    QueueDeleted,
    TopologyOp,
    Unbound,
)
from batonmq.queues.protocol import Queue, RoutedQueue
from batonmq.queues.types import queue_type
from batonmq.server.placement import owner_of, queue_owner
from batonmq.store.base import StoredBinding

if TYPE_CHECKING:
    from batonmq.engine.broker import Broker

log = logging.getLogger(__name__)

#: How long a request waits for the home's link, and a connection for the home's topology.
HOME_WAIT: Final = 30.0
SYNC_TIMEOUT: Final = 30.0
#: How long a home that starts waits for the others' copies, from its first link up.
ASK_WAIT: Final = 5.0
#: How long a home that starts with no link up waits for one before it goes on from its
#: stored rows alone (its peers are down or starting): less than a connection's SYNC_TIMEOUT.
ALONE_WAIT: Final = 15.0
_OK: Final = 200


@dataclass(slots=True)
class _Reply:
    """How a request came out: `outcome` (True: done), and a queue's counts where it runs."""

    outcome: Outcome
    message_count: int = 0
    consumer_count: int = 0


Replied = Callable[[_Reply], None]


def _keys(op: TopologyOp) -> tuple[tuple[str, str], ...]:
    """What `op` changes: other changes of these wait for it."""
    match op:
        case ExchangeDeclared() | ExchangeDeleted():
            return (("exchange", op.name),)
        case QueueDeclared() | QueueDeleted():
            return (("queue", op.name),)
        case Bound() | Unbound():
            return (("exchange", op.source), (op.destination.kind.value, op.destination.name))


class SpreadWorker:
    """One worker's side of every spread virtual host: the records' handlers on its links, and
    a `Spread` for each such virtual host (`broker.spread_factory`)."""

    def __init__(self, broker: Broker, links: PeerLinks, spread: frozenset[str]) -> None:
        self.broker = broker
        self.links = links
        self.spread = spread
        self.publishing = PublishLinks(broker, links)
        self.consuming = ConsumeLinks(broker, links, self.publishing)
        #: Waits (seconds); tests shorten them.
        self.home_wait = HOME_WAIT
        self.sync_timeout = SYNC_TIMEOUT
        self.ask_wait = ASK_WAIT
        self.alone_wait = ALONE_WAIT
        self._spreads: dict[str, Spread] = {}
        self._next_request = 0
        self._last_group = 0
        #: Requests sent and not answered yet, by (peer, request id).
        self._asked: dict[tuple[int, int], tuple[TopologyRequest | OwnerRequest, Replied]] = {}

    def install(self) -> None:
        self.publishing.install()
        self.consuming.install()
        links = self.links
        handlers: dict[int, Callable[[PeerLink, bytes], None]] = {
            TOPOLOGY_REQUEST: self._request,
            TOPOLOGY_ANSWER: self._answer,
            OWNER_REQUEST: self._owner_request,
            TOPOLOGY_CHANGE: self._change,
            TOPOLOGY_ACK: self._ack,
            TOPOLOGY_SNAPSHOT: self._snapshot,
            SNAPSHOT_ASK: self._snapshot_ask,
        }
        for kind, handler in handlers.items():
            links.handle(kind, handler)
        links.on_up.append(self._up)
        links.on_start.append(self._links_started)
        links.on_down.append(self._down)
        # A connection is named across workers by this process's start id on the links.
        self.broker.worker_ref = (links.index, links.start_id)
        self.broker.spread_factory = self._make
        for vhost in self.broker.vhosts.values():  # the default one, made with the broker
            vhost.spread = self._make(vhost)

    def _make(self, vhost: VirtualHost) -> Spread | None:
        if self.links.count < 2 or not ("*" in self.spread or vhost.name in self.spread):
            return None
        made = Spread(self, vhost)
        self._spreads[vhost.name] = made
        made.start()
        return made

    def forget(self, vhost: str, spread: Spread) -> None:
        """Virtual host `vhost` (`spread`'s) is deleted (`Spread.close`)."""
        if self._spreads.get(vhost) is spread:
            del self._spreads[vhost]

    def next_group(self) -> int:
        """A transaction group id not used before by this process."""
        self._last_group += 1
        return self._last_group

    # Requests and answers -----------------------------------------------------------------

    def ask(self, peer: int, record: TopologyRequest | OwnerRequest, replied: Replied) -> None:
        """Send `record` (with a request id of its own) to `peer`; `replied` gets the answer,
        or 541 at once if the link is down or goes down first, or 406 at once if the record
        cannot carry the method's arguments."""
        link = self.links.link(peer)
        if link is None:
            replied(_Reply(_unreachable(peer, record)))
            return
        self._next_request = request_id = (self._next_request + 1) & 0xFFFFFFFF
        record = dataclasses.replace(record, request_id=request_id)
        try:
            payload = record.encode()
        except ValueError as error:  # arguments a record cannot carry (recordfields.table)
            replied(_Reply(amqp_error(ReplyCode.PRECONDITION_FAILED, str(error))))
            return
        link.send(record.KIND, payload)
        self._asked[(peer, request_id)] = (record, replied)

    def _answer(self, link: PeerLink, payload: bytes) -> None:
        answer = TopologyAnswer.decode(payload)
        asked = self._asked.pop((link.peer, answer.request_id), None)
        if asked is None:
            raise MalformedRecord(f"an answer to request {answer.request_id}, not asked")
        replied = asked[1]
        if answer.reply_code == _OK:
            replied(_Reply(True, answer.message_count, answer.consumer_count))
        else:
            replied(_Reply(_refusal(answer.reply_code, answer.text)))

    # A record of a virtual host that is not spread here (not made here yet, or deleted) is
    # answered as if it had nothing: the link goes on.

    def _request(self, link: PeerLink, payload: bytes) -> None:
        record = TopologyRequest.decode(payload)
        spread = self._spreads.get(record.vhost)
        if spread is None:
            _answering(link, record)(_Reply(self._not_here(record.vhost)))
        else:
            spread.serve(link, record)

    def _owner_request(self, link: PeerLink, payload: bytes) -> None:
        record = OwnerRequest.decode(payload)
        spread = self._spreads.get(record.vhost)
        if spread is None:
            _answering(link, record)(_Reply(self._not_here(record.vhost)))
        else:
            spread.serve_owner(link, record)

    def _not_here(self, vhost: str) -> ProtocolError:
        index = self.links.index
        return amqp_error(ReplyCode.INTERNAL_ERROR, f"vhost '{vhost}' is not on worker {index}")

    def _change(self, link: PeerLink, payload: bytes) -> None:
        record = TopologyChange.decode(payload)
        spread = self._spreads.get(record.vhost)
        if spread is None:
            ack = TopologyAck(record.home_start, record.sequence, record.vhost)
            link.send(TOPOLOGY_ACK, ack.encode())
        else:
            spread.replicate(link, record)

    def _ack(self, link: PeerLink, payload: bytes) -> None:
        record = TopologyAck.decode(payload)
        spread = self._spreads.get(record.vhost)
        if spread is not None:
            spread.acked(link.peer, record.sequence)

    def _snapshot(self, link: PeerLink, payload: bytes) -> None:
        record = TopologySnapshot.decode(payload)
        spread = self._spreads.get(record.vhost)
        if spread is not None:
            spread.snapshot(link, record)

    def _snapshot_ask(self, link: PeerLink, payload: bytes) -> None:
        record = SnapshotAsk.decode(payload)
        spread = self._spreads.get(record.vhost)
        if spread is None:
            link.send(TOPOLOGY_SNAPSHOT, TopologySnapshot(0, 0, record.vhost, ()).encode())
        else:
            spread.snapshot_asked(link)

    def _links_started(self) -> None:
        for spread in list(self._spreads.values()):
            spread.links_started()

    def _up(self, link: PeerLink) -> None:
        for spread in list(self._spreads.values()):
            spread.link_up(link)

    def _down(self, link: PeerLink) -> None:
        for key in [key for key in self._asked if key[0] == link.peer]:
            record, replied = self._asked.pop(key)
            replied(_Reply(_unreachable(link.peer, record)))
        for spread in list(self._spreads.values()):
            spread.link_down(link)


def _keeping_counts(counts: _Reply, completed: Callable[[Outcome], None]) -> Replied:
    """What keeps a reply's queue counts in `counts`, then completes with its outcome."""

    def replied(reply: _Reply) -> None:
        counts.message_count, counts.consumer_count = reply.message_count, reply.consumer_count
        completed(reply.outcome)

    return replied


def _send_answer(link: PeerLink, request_id: int, queue: str, reply: _Reply) -> None:
    """Answer request `request_id` that came on `link` with `reply`."""
    outcome = reply.outcome
    if outcome is True:
        code, text = _OK, ""
    elif outcome is False:
        code, text = int(ReplyCode.INTERNAL_ERROR), "the store could not write the change"
    else:
        code, text = int(outcome.reply_code), outcome.text
    answer = TopologyAnswer(
        request_id, code, reply.message_count, reply.consumer_count, queue, text
    )
    link.send(TOPOLOGY_ANSWER, answer.encode())


def _refusal(code: int, text: str) -> ProtocolError:
    try:
        reply_code = ReplyCode(code)
    except ValueError:
        reply_code = ReplyCode.INTERNAL_ERROR
    return amqp_error(reply_code, text)


def _down(home: int, vhost: str) -> ProtocolError:
    return amqp_error(ReplyCode.INTERNAL_ERROR, f"home worker {home} of vhost '{vhost}' is down")


def _unreachable(peer: int, record: TopologyRequest | OwnerRequest) -> ProtocolError:
    """541 for a request whose worker's link is down, or went down before it answered."""
    if isinstance(record, TopologyRequest):
        return _down(peer, record.vhost)
    return amqp_error(ReplyCode.INTERNAL_ERROR, f"worker {peer} of vhost '{record.vhost}' is down")


class Spread:
    """One spread virtual host's side of this worker (`Spreading`)."""

    def __init__(self, worker: SpreadWorker, vhost: VirtualHost) -> None:
        self._worker = worker
        self._vhost = vhost
        links = worker.links
        self.workers = links.count
        self.index = links.index
        self.home = owner_of(vhost.name, links.count)
        self.is_home = self.home == self.index
        self.synced = False
        #: The last change applied here: (home process start id, its number).
        self.applied = (0, 0)
        self._when_synced: list[Callable[[bool], None]] = []
        self._when_home_up: list[Callable[[bool], None]] = []
        #: At the home: the changes sent and who has not acknowledged each yet.
        self._unacked: dict[int, tuple[set[int], Callable[[], None]]] = {}
        #: At a home that starts: the copies the others sent, by worker.
        self._copies: dict[int, TopologySnapshot] = {}
        self._asking: asyncio.TimerHandle | None = None
        #: Whether `_asking` is the wait for a first link, not for the copies after it.
        self._alone = False
        #: What a queue.delete asked here gives a queue this worker runs just before it goes
        #: (its channel's cancels, sent after delete-ok), by queue, while the change waits.
        self._on_delete: dict[str, QueueDeletedHook] = {}
        #: At a worker not home: it asked the home for its snapshot, which has not come yet.
        self._asked_home = False

    def start(self) -> None:
        if self.is_home:
            self.applied = (self._worker.links.start_id, 0)
            for peer in range(self.workers):
                link = self._worker.links.link(peer)
                if link is not None:
                    self._ask_copy(link)
            self.links_started()
        else:
            # Made after its link to the home was up: the snapshot sent then was not for it.
            link = self._worker.links.link(self.home)
            if link is not None:
                self._ask_home_snapshot(link)

    # Spreading ---------------------------------------------------------------------------

    def owns(self, queue: str) -> bool:
        return self.owner_of(queue) == self.index

    def owner_of(self, queue: str) -> int:
        return queue_owner(self._vhost.name, queue, self.workers)

    def remote_queue(self, declared: QueueDeclared) -> RoutedQueue:
        owner = self.owner_of(declared.name)
        options = self._vhost.autocreate.arguments_for(declared.name, declared.arguments)
        kind = queue_type(declared.arguments)
        return RemoteQueue(
            self._vhost.name,
            declared,
            kind.parse_arguments(options),
            self._worker.publishing.outbound(owner),
            self._worker.consuming.to(owner),
        )

    def request(
        self,
        op: TopologyOp,
        *,
        owner: ConnectionRef | None,
        if_unused: bool = False,
        if_empty: bool = False,
        on_delete: QueueDeletedHook | None = None,
    ) -> Change[Declared | int | None]:
        flags = RequestFlags.NONE
        if if_unused:
            flags |= RequestFlags.IF_UNUSED
        if if_empty:
            flags |= RequestFlags.IF_EMPTY
        counts = _Reply(True)
        deleting = op.name if isinstance(op, QueueDeleted) and on_delete is not None else None

        def after(completed: Callable[[Outcome], None]) -> None:
            def shown(outcome: Outcome) -> None:
                if deleting is not None:
                    self._on_delete.pop(deleting, None)
                if (
                    outcome is True
                    and isinstance(op, QueueDeclared)
                    and self._vhost.known_queue(op.name) is None
                ):
                    outcome = self._not_in_copy(op.name)
                completed(outcome)

            if deleting is not None and on_delete is not None:
                self._on_delete[deleting] = on_delete
            replied = _keeping_counts(counts, shown)
            if self.is_home:
                ask = functools.partial(self.sequence, op, owner, flags, replied)
            else:
                request = TopologyRequest(0, flags, self._vhost.name, op, owner)
                ask = functools.partial(self._ask_home, request, replied)
            if isinstance(op, QueueDeleted):
                self._after_publishes(op.name, ask)  # its delete-ok counts what went with it
            else:
                ask()

        return Change(lambda: self._result(op, counts), keys=_keys(op), after=after)

    def _not_in_copy(self, queue: str) -> ProtocolError:
        """541 for a declared queue this worker's copy lacks (it missed a change): the home's
        snapshot brings it."""
        link = self._worker.links.link(self.home)
        if not self.is_home and link is not None:
            self._ask_home_snapshot(link)
        return amqp_error(
            ReplyCode.INTERNAL_ERROR,
            f"queue '{queue}' is not in worker {self.index}'s copy of vhost "
            f"'{self._vhost.name}' yet",
        )

    def _result(self, op: TopologyOp, counts: _Reply) -> Declared | int | None:
        vhost = self._vhost
        match op:
            case QueueDeclared():
                queue = vhost.known_queue(op.name)
                assert queue is not None, op.name
                return Declared(op.name, counts.message_count, counts.consumer_count, queue)
            case QueueDeleted():
                return counts.message_count
            case ExchangeDeclared():
                return vhost.exchanges.get(op.name)  # type: ignore[return-value]
            case _:
                return None

    def counts(self, queue: RoutedQueue, *, touch: bool) -> Change[Declared]:
        action = OwnerAction.COUNTS_TOUCH if touch else OwnerAction.COUNTS
        reply = self._owner_change(queue.name, action)
        return Change(
            lambda: Declared(queue.name, reply[0].message_count, reply[0].consumer_count, queue),
            after=reply[1],
        )

    def purge(self, queue: RoutedQueue) -> Change[int]:
        reply = self._owner_change(queue.name, OwnerAction.PURGE)
        return Change(lambda: reply[0].message_count, after=reply[1])

    def _owner_change(
        self, name: str, action: OwnerAction
    ) -> tuple[_Reply, Callable[[Callable[[Outcome], None]], None]]:
        got = _Reply(True)

        def after(completed: Callable[[Outcome], None]) -> None:
            record = OwnerRequest(0, action, RequestFlags.NONE, self._vhost.name, name, None)
            owner = self.owner_of(name)
            self._after_publishes(
                name,
                functools.partial(self._worker.ask, owner, record, _keeping_counts(got, completed)),
            )

        return got, after

    def _after_publishes(self, queue: str, then: Callable[[], None]) -> None:
        """Call `then` once the owner of `queue` has every message this worker published
        before now (a purge empties them too, a count counts them)."""
        owner = self.owner_of(queue)
        if owner == self.index:
            then()
        else:
            self._worker.publishing.outbound(owner).when_answered(then)

    def gone(self, queue: Queue) -> None:
        op = QueueDeleted(queue.name)
        replied = self._told(queue.name)
        if self.is_home:
            self.sequence(op, None, RequestFlags.OWNER_DONE, replied)
        else:
            record = TopologyRequest(0, RequestFlags.OWNER_DONE, self._vhost.name, op, None)
            self._ask_home(record, replied)

    def _told(self, queue: str) -> Replied:
        """What logs that the other workers were not told of a change of `queue` that its owner
        made by itself."""

        def replied(reply: _Reply) -> None:
            if reply.outcome is not True:
                log.warning(
                    "the other workers were not told of a change of a queue: %s",
                    reply.outcome,
                    extra={"vhost": self._vhost.name, "queue": queue},
                )

        return replied

    def when_synced(self, callback: Callable[[bool], None]) -> None:
        if self.synced:
            callback(True)
            return
        self._when_synced.append(callback)
        _expire(self._when_synced, callback, self._worker.sync_timeout)

    def close(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            self._asking = None
        self._worker.forget(self._vhost.name, self)
        for waiting in (self._when_synced, self._when_home_up):
            failed, waiting[:] = list(waiting), []
            for callback in failed:
                callback(False)
        # The changes applied here already: done, as for a worker whose link drops.
        unacked, self._unacked = self._unacked, {}
        for _peers, replied in unacked.values():
            replied()

    def tx_group(self) -> contextlib.AbstractContextManager[None]:
        """The publishes of one tx.commit: each owner enqueues its share in one go."""
        return self._worker.publishing.tx_group(self._worker.next_group())

    # The home's sequencer ----------------------------------------------------------------

    def sequence(
        self, op: TopologyOp, owner: ConnectionRef | None, flags: RequestFlags, replied: Replied
    ) -> None:
        """Carry out checked change `op` at the home (see the module docstring)."""
        if not self.synced:
            self.when_synced(
                lambda ok: (
                    self.sequence(op, owner, flags, replied)
                    if ok
                    else replied(_Reply(_down(self.home, self._vhost.name)))
                )
            )
            return
        if isinstance(op, QueueDeclared | QueueDeleted) and not flags & RequestFlags.OWNER_DONE:
            queue_owner_index = self.owner_of(op.name)
            if queue_owner_index != self.index:
                action = OwnerAction.CREATE if isinstance(op, QueueDeclared) else OwnerAction.DELETE
                queue = op if isinstance(op, QueueDeclared) else op.name
                record = OwnerRequest(0, action, flags, self._vhost.name, queue, owner)

                def owned(reply: _Reply) -> None:
                    if reply.outcome is not True:
                        replied(reply)
                    else:
                        self._write(op, reply, replied)

                self._worker.ask(queue_owner_index, record, owned)
                return
        self._write(op, _Reply(True), replied)

    def _write(self, op: TopologyOp, counts: _Reply, replied: Replied) -> None:
        vhost = self._vhost
        if isinstance(op, QueueDeleted) and not self.owns(op.name):
            # Its owner deleted it already: it goes here too, whatever comes of the rows.
            self._delete_binding_rows(op.name)
            self._apply(op, counts, replied)
            return
        if not vhost.write(op):
            self._apply(op, counts, replied)
            return

        def committed(ok: bool) -> None:
            if ok:
                self._apply(op, counts, replied)
            else:
                replied(_Reply(False))

        vhost.paging.journal.when_durable(committed)

    def _delete_binding_rows(self, queue: str) -> None:
        """Delete the rows of the bindings to `queue` that the home wrote and its owner cannot
        delete with the queue's own (before the queue goes from memory)."""
        vhost = self._vhost
        destination = Destination.queue(queue)
        rows = [
            vhost.stored_binding(bound.source, destination, bound.routing_key, bound.arguments)
            for bound in bindings_of(vhost)
            if bound.destination == destination
            and vhost.write(Unbound(bound.source, destination, bound.routing_key, bound.arguments))
        ]
        if rows:
            self._when_rows_deleted(queue, rows)

    def _when_rows_deleted(self, queue: str, rows: list[StoredBinding]) -> None:
        """Wait for the deletion of binding `rows` (in the journal's batch); a failed write is
        logged and the deletion written again with the next batch, until it commits, so that
        no stored binding of a deleted queue comes back at a restart."""
        vhost = self._vhost

        def committed(ok: bool) -> None:
            if not ok:
                log.warning(
                    "the stored bindings to a queue that went are not deleted yet",
                    extra={"vhost": vhost.name, "queue": queue},
                )
                for row in rows:
                    vhost.paging.journal.delete_binding(row)
                self._when_rows_deleted(queue, rows)

        vhost.paging.journal.when_durable(committed)

    def _apply(self, op: TopologyOp, counts: _Reply, replied: Replied) -> None:
        deleted = self._apply_here(op)
        if isinstance(op, QueueDeleted) and self.owns(op.name) and isinstance(deleted, int):
            # The home ran the queue: its delete-ok counts what went with it here.
            counts = dataclasses.replace(counts, message_count=deleted)
        start, number = self.applied
        self.applied = (start, number + 1)
        change = TopologyChange(start, number + 1, self._vhost.name, op).encode()
        waiting = set()
        for peer in range(self.workers):
            link = self._worker.links.link(peer)
            if link is not None:
                link.send(TOPOLOGY_CHANGE, change)
                waiting.add(peer)
        if not waiting:
            replied(counts)
            return
        self._unacked[number + 1] = (waiting, lambda: replied(counts))

    def _apply_here(self, op: TopologyOp) -> object:
        """Apply `op` to this copy (what `VirtualHost.apply` returns): a queue this worker runs
        was made or deleted already by its owner step."""
        if isinstance(op, QueueDeclared | QueueDeleted) and self.owns(op.name) and not self.is_home:
            return None
        return self._vhost.apply(op, on_delete=self._deleted_hook(op))

    def _deleted_hook(self, op: TopologyOp) -> QueueDeletedHook:
        """What a queue that `op` deletes here is given just before it goes: the hook of a
        queue.delete asked on this worker, else basic.cancel to its consumers."""
        if isinstance(op, QueueDeleted):
            return self._on_delete.get(op.name, cancel_consumers_of)
        return cancel_consumers_of

    def acked(self, peer: int, sequence: int) -> None:
        waiting = self._unacked.get(sequence)
        if waiting is None:
            return
        waiting[0].discard(peer)
        if not waiting[0]:
            del self._unacked[sequence]
            waiting[1]()

    # Requests the home serves ------------------------------------------------------------

    def serve(self, link: PeerLink, record: TopologyRequest) -> None:
        """A worker asks the home for change `record.op`: check it here, then sequence it."""
        vhost = self._vhost
        if not self.is_home:
            raise MalformedRecord(f"a topology request at worker {self.index}, not home")
        answer = _answering(link, record)
        if not self.synced:
            # A home that starts checks on its whole copy, not on its stored rows alone.
            self.when_synced(
                lambda ok: (
                    self.serve(link, record)
                    if ok
                    else answer(_Reply(_down(self.home, self._vhost.name)))
                )
            )
            return
        try:
            checked = self._check(record)
        except ChangePending as pending:
            pending.wait(lambda: self.serve(link, record))
            return
        except ProtocolError as error:
            answer(_Reply(error))
            return
        if checked is None:
            op = record.op
            if isinstance(op, QueueDeclared):
                self._answer_counts(op.name, answer)
            else:
                answer(_Reply(True))
            return
        counts = _Reply(True)

        def after(completed: Callable[[Outcome], None]) -> None:
            replied = _keeping_counts(counts, completed)
            self.sequence(checked, record.requester, record.flags, replied)

        vhost.carry_out(
            Change(lambda: None, keys=_keys(checked), after=after),
            lambda _none: answer(counts),
            lambda error: answer(_Reply(False if error is None else error)),
        )

    def _answer_counts(self, queue: str, answer: Replied) -> None:
        """Answer an equivalent redeclare of `queue` with its counts (queue.declare-ok), which
        its owner has (and restarts its x-expires, as the check did of one this worker runs)."""
        local = self._vhost.queues.get(queue)
        if local is not None:
            answer(_Reply(True, local.message_count, local.consumer_count))
            return
        vhost = self._vhost.name
        record = OwnerRequest(0, OwnerAction.COUNTS_TOUCH, RequestFlags.NONE, vhost, queue, None)
        self._worker.ask(self.owner_of(queue), record, answer)

    def _check(self, record: TopologyRequest) -> TopologyOp | None:
        vhost = self._vhost
        op, owner, flags = record.op, record.requester, record.flags
        match op:
            case ExchangeDeclared():
                checked = vhost.check_exchange_declare(
                    op.name, op.type_name, durable=op.durable, auto_delete=op.auto_delete,
                    internal=op.internal, arguments=op.arguments,
                )  # fmt: skip
                return checked if isinstance(checked, ExchangeDeclared) else None
            case ExchangeDeleted():
                return vhost.check_exchange_delete(
                    op.name, if_unused=bool(flags & RequestFlags.IF_UNUSED)
                )
            case QueueDeclared():
                # A server-named queue's name has the prefix that only the server may give.
                generated = op.name.startswith(RESERVED_PREFIX)
                declared = vhost.check_queue_declare(
                    "" if generated else op.name, generated_name=op.name if generated else None,
                    owner=owner, passive=False, durable=op.durable,
                    exclusive=op.exclusive_owner is not None, auto_delete=op.auto_delete,
                    arguments=op.arguments,
                )  # fmt: skip
                return declared if isinstance(declared, QueueDeclared) else None
            case QueueDeleted():
                queue = vhost.known_queue(op.name)
                if flags & RequestFlags.OWNER_DONE:
                    # The owner removed it already: it is gone whoever asked for it.
                    owner = None if queue is None else queue.exclusive_owner
                return vhost.check_queue_delete(
                    op.name, owner=owner, if_unused=bool(flags & RequestFlags.IF_UNUSED),
                    if_empty=bool(flags & RequestFlags.IF_EMPTY),
                )  # fmt: skip
            case Bound():
                return vhost.check_bind(op.source, op.destination, op.routing_key, op.arguments)
            case Unbound():
                return vhost.check_unbind(op.source, op.destination, op.routing_key, op.arguments)

    def _ask_home(self, record: TopologyRequest, replied: Replied) -> None:
        """Send `record` to the home, waiting up to `home_wait` for its link."""
        if self._worker.links.link(self.home) is not None:
            self._worker.ask(self.home, record, replied)
            return

        def up(ok: bool) -> None:
            if ok:
                self._worker.ask(self.home, record, replied)
            else:
                replied(_Reply(_down(self.home, self._vhost.name)))

        self._when_home_up.append(up)
        _expire(self._when_home_up, up, self._worker.home_wait)

    # The owner step ----------------------------------------------------------------------

    def serve_owner(self, link: PeerLink, record: OwnerRequest) -> None:
        """Another worker asks this one, the queue's owner, to act on the queue."""
        vhost = self._vhost
        queue = record.queue
        name = queue.name if isinstance(queue, QueueDeclared) else queue
        if not self.owns(name):
            raise MalformedRecord(f"an owner request for queue '{name}' at worker {self.index}")
        answer = _answering(link, record)
        action = record.action
        if isinstance(queue, QueueDeclared):
            owner = queue.exclusive_owner
            if owner is not None and self._ended(owner):
                # Nothing would delete it: its connection's end was seen (link up) already.
                ended = f"the connection declaring exclusive queue '{name}' has ended"
                answer(_Reply(amqp_error(ReplyCode.RESOURCE_LOCKED, ended)))
                return
            self._carry_out(queue, vhost.write(queue), answer)
            return
        if action is OwnerAction.DELETE:
            try:
                checked = vhost.check_queue_delete(
                    name, owner=record.requester,
                    if_unused=bool(record.flags & RequestFlags.IF_UNUSED),
                    if_empty=bool(record.flags & RequestFlags.IF_EMPTY), wait=False,
                )  # fmt: skip
            except ChangePending as pending:
                pending.wait(lambda: self.serve_owner(link, record))
                return
            except ProtocolError as error:
                answer(_Reply(error))
                return
            if checked is None:
                answer(_Reply(True))
            else:
                self._carry_out(checked, vhost.write(checked), answer)
            return
        local = vhost.queues.get(name)
        if local is None:
            missing = f"no queue '{name}' in vhost '{vhost.name}'"
            answer(_Reply(amqp_error(ReplyCode.NOT_FOUND, missing)))
            return
        if action is OwnerAction.PURGE:
            count = local.purge()
            vhost.paging.journal.when_durable(
                lambda ok: answer(_Reply(True, count) if ok else _Reply(False))
            )
            return
        if action is OwnerAction.COUNTS_TOUCH:
            local.touched()
        answer(_Reply(True, local.message_count, local.consumer_count))

    def _carry_out(self, op: QueueDeclared | QueueDeleted, written: bool, answer: Replied) -> None:
        vhost = self._vhost

        def done(result: object) -> None:
            answer(_Reply(True, result if isinstance(result, int) else 0))

        vhost.carry_out(
            # No key: the requester (this worker's client, maybe) holds it while it waits.
            Change(lambda: vhost.apply(op, on_delete=self._deleted_hook(op)), written=written),
            done,
            lambda error: answer(_Reply(False if error is None else error)),
        )

    # Replicas ----------------------------------------------------------------------------

    def replicate(self, link: PeerLink, record: TopologyChange) -> None:
        if link.peer != self.home:
            raise MalformedRecord(f"a topology change from worker {link.peer}, not home")
        start, number = self.applied
        if self.synced and (record.home_start, record.sequence) == (start, number + 1):
            self._apply_here(record.op)
            self.applied = (record.home_start, record.sequence)
        elif (record.home_start, record.sequence) > self.applied:
            # A change this copy cannot take (it is not synced, or one is missing): the home's
            # snapshot, which the home sends after this change, brings it.
            self._ask_home_snapshot(link)
        ack = TopologyAck(record.home_start, record.sequence, self._vhost.name)
        link.send(TOPOLOGY_ACK, ack.encode())

    def _ask_home_snapshot(self, link: PeerLink) -> None:
        if not self._asked_home:
            self._asked_home = True
            link.send(SNAPSHOT_ASK, SnapshotAsk(self._vhost.name).encode())

    def snapshot_asked(self, link: PeerLink) -> None:
        """A home that starts asks for this worker's copy; a worker asks the home for its
        topology, which a home that is not synced yet sends to every linked worker once it is
        (`_take_copies`)."""
        if not self.is_home:
            self.send_snapshot(link)
        elif self.synced:
            self._ask_copy(link)

    def send_snapshot(self, link: PeerLink) -> None:
        start, number = self.applied
        snapshot = TopologySnapshot(start, number, self._vhost.name, topology_ops(self._vhost))
        link.send(TOPOLOGY_SNAPSHOT, snapshot.encode())

    def snapshot(self, link: PeerLink, record: TopologySnapshot) -> None:
        if self.is_home:
            if self.synced:
                # Asked on its link up (or come too late for `_take_copies`).
                self.send_snapshot(link)
                for op in self._mismatches(link.peer, record):
                    self.sequence(op, None, RequestFlags.OWNER_DONE, self._told(op.name))
                return
            self._copies[link.peer] = record
            if len(self._copies) == self.workers - 1:
                self._take_copies()
            return
        if link.peer != self.home:
            raise MalformedRecord(f"a topology snapshot from worker {link.peer}, not home")
        self._asked_home = False
        replace_topology(self._vhost, record.ops, self.owns)
        self.applied = (record.home_start, record.sequence)
        if record.home_start == link.peer_start:
            self._set_synced()

    def links_started(self) -> None:
        """A home that has no link up once its worker serves (its peers are down or starting)
        does not wait for one for ever: `alone_wait`, then it goes on from its rows alone."""
        waiting = self._asking is not None or self.synced
        if self.is_home and self._worker.links.started and not waiting:
            loop = asyncio.get_running_loop()
            self._asking = loop.call_later(self._worker.alone_wait, self._take_copies)
            self._alone = True

    def _ask_copy(self, link: PeerLink) -> None:
        """A home that starts asks `link`'s worker for its copy; it waits `ask_wait` for the
        copies from its first link up (before that it is recovering or not linked yet)."""
        link.send(SNAPSHOT_ASK, SnapshotAsk(self._vhost.name).encode())
        if not self.synced and (self._asking is None or self._alone):
            if self._asking is not None:
                self._asking.cancel()
            loop = asyncio.get_running_loop()
            self._asking = loop.call_later(self._worker.ask_wait, self._take_copies)
            self._alone = False

    def _take_copies(self) -> None:
        """A home that starts goes on from the latest copy, and each worker's own queues."""
        if self._asking is not None:
            self._asking.cancel()
            self._asking = None
        if self.synced:
            return
        copies = self._copies
        latest = max(copies.values(), key=lambda c: (c.home_start, c.sequence), default=None)
        number = 0
        if latest is not None and (latest.home_start, latest.sequence) > (0, 0):
            replace_topology(self._vhost, latest.ops, self.owns)
            number = latest.sequence
        for peer, copy in copies.items():
            for op in self._mismatches(peer, copy):
                # Not numbered: the snapshots sent below carry them.
                self._vhost.apply(op)
        copies.clear()
        self.applied = (self._worker.links.start_id, number)
        self._set_synced()
        for peer in range(self.workers):
            link = self._worker.links.link(peer)
            if link is not None:
                self.send_snapshot(link)

    def _mismatches(self, peer: int, copy: TopologySnapshot) -> list[QueueDeclared | QueueDeleted]:
        """What makes this copy's queues run by `peer` those `peer`'s copy says it runs: a
        stand-in of one it does not run (a process that ended took its transient and exclusive
        queues) goes, and one it runs that this copy lacks is added ("made already")."""
        vhost = self._vhost
        runs = {
            op.name: op
            for op in copy.ops
            if isinstance(op, QueueDeclared) and self.owner_of(op.name) == peer
        }
        gone: list[QueueDeclared | QueueDeleted] = [
            QueueDeleted(name)
            for name in vhost.remote
            if self.owner_of(name) == peer and name not in runs
        ]
        made = [op for name, op in runs.items() if vhost.known_queue(name) is None]
        return [*gone, *made]

    def _set_synced(self) -> None:
        self.synced = True
        waiting, self._when_synced[:] = list(self._when_synced), []
        for callback in waiting:
            # One that fails (logged) does not keep the others waiting.
            try:
                callback(True)
            except Exception:
                log.exception("a request waiting for the topology's sync failed")

    # Links -------------------------------------------------------------------------------

    def link_up(self, link: PeerLink) -> None:
        self._drop_exclusive_of_ended(link)
        if self.is_home:
            # Its snapshot follows the worker's copy (`snapshot`), which says what it runs.
            self._ask_copy(link)
        elif link.peer == self.home:
            waiting, self._when_home_up[:] = list(self._when_home_up), []
            for callback in waiting:
                callback(True)

    def _drop_exclusive_of_ended(self, link: PeerLink) -> None:
        """A link up with a new process of worker `link.peer` shows that the earlier ones
        ended, and their client connections with them: the exclusive queues of those
        connections that this worker runs go, as when a connection closes (spec
        queue.declare exclusive: deleted "when that connection closes")."""
        vhost = self._vhost
        for queue in list(vhost.queues.values()):
            owner = queue.exclusive_owner
            if owner is not None and owner.worker == link.peer and self._ended(owner):
                vhost.remove_queue(queue, on_delete=cancel_consumers_of)

    def _ended(self, connection: ConnectionRef) -> bool:
        """Whether `connection`'s process ended: a later process of its worker is this one or
        is linked (start ids grow; a link of an earlier process than the connection's may
        still be about)."""
        links = self._worker.links
        if connection.worker == self.index:
            return connection.start < links.start_id
        link = links.link(connection.worker)
        # A link is up once its peer said HELLO, which gives its start id.
        return link is not None and connection.start < (link.peer_start or 0)

    def link_down(self, link: PeerLink) -> None:
        if self.is_home:
            for sequence in [s for s, (peers, _) in self._unacked.items() if link.peer in peers]:
                self.acked(link.peer, sequence)
            if not self.synced and link.peer in self._copies:
                del self._copies[link.peer]
        elif link.peer == self.home:
            self.synced = False
            self._asked_home = False


def _answering(link: PeerLink, record: TopologyRequest | OwnerRequest) -> Replied:
    """What answers `record`, which came on `link`."""
    if isinstance(record, OwnerRequest):
        queue = record.queue
        name = queue.name if isinstance(queue, QueueDeclared) else queue
    else:
        op = record.op
        name = op.name if isinstance(op, QueueDeclared | QueueDeleted) else ""
    return functools.partial(_send_answer, link, record.request_id, name)


def _expire(
    waiting: list[Callable[[bool], None]], callback: Callable[[bool], None], wait: float
) -> None:
    """`callback(False)` after `wait` seconds unless it left `waiting` (was called) first."""

    def expired() -> None:
        if callback in waiting:
            waiting.remove(callback)
            callback(False)

    asyncio.get_running_loop().call_later(wait, expired)
