"""Publishing to a queue that another worker of the broker owns (a spread virtual host).

Every worker knows every queue of a spread virtual host; the one that owns a queue runs it,
and the others know it as a `RemoteQueue`. Routing, confirms and transactions see a
`RemoteQueue` as a queue that writes its messages itself (as a stream does): `publish` hands
the message to the `Outbound` of the owner's link, and `when_written` waits for the owner's
answer, so that a publisher confirm (or a commit-ok) is sent only once the owner has the
message on its queues, written to its store when persistent (RabbitMQ, "Publisher Confirms":
a persistent message routed to a durable queue is confirmed once persisted).

`Outbound` (this worker's side, one per peer): numbers the messages it sends on the link from 1;
each crosses once however many of that peer's queues it was routed to (the same `Message` object
published to several of them in a row), and the messages of a loop turn that share their names
(vhost, exchange, routing key and queues), transaction group and journal batch cross in one
PUBLISH record (up to `RECORD_OCTETS` of them). A record is sent when a message that does not
share them comes, at the end of the loop turn, or before a CONSUME, CANCEL or GET of
`RemoteConsumers` to that owner, so that none overtakes it. A GET waits behind the gate too (a
basic.get after a publish on the same channel finds the message); a CONSUME or CANCEL does not:
a consumer gets a message whenever it reaches the queue, and the gate holds what it holds only
until this worker's write commits. A queue.delete, queue.purge or queue.declare's count waits
until the owner answered every publish before it (`when_answered`). `Inbound` (the owner's side,
one per link): puts each PUBLISH's messages on the queues it names (looked up once a record), as
a publish from a client would be (`message_batch`, held until its write commits), and answers
every number, in order, with QUEUED: ok once each queue took the message and its write (if any)
committed; not ok when a queue refused it (x-overflow reject-publish: RabbitMQ "Queue Length
Limit" nacks) or the write failed. A queue the owner no longer has counts as having taken the
message (it was deleted just after the publish). The answers of a loop turn go as few QUEUED
records as runs of one outcome allow. A link that goes down (or is replaced) answers every
publish still waiting on it with not ok: its publishers get nacks, as with a write that failed.
Such a nack says that the broker cannot vouch for the message, not that no queue has it: the
owner may have read and queued it before the link ended, so a publisher that sends it again may
leave it twice (at least once, as RabbitMQ's confirms promise).

The publishes of one tx.commit are one transaction group (`PublishLinks.tx_group`): their
records carry its id and a TX_END follows the last one to each owner, which holds them until
then and enqueues them together, in one journal batch (atomic per owner, not across owners).

`PublishLinks` wires both to a worker's `PeerLinks`.

A channel here consumes from, and gets from, a `RemoteQueue` as from a queue it runs: what it
asks of the queue goes to the owner through the peer's `RemoteConsumers`
(`batonmq.engine.remoteconsumers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Final

from pamqp.common import FieldTable

from batonmq.amqp.shortstr import fits_short_string
from batonmq.cluster.consumerecords import Get, SettleOutcome
from batonmq.cluster.peerlink import RECORD_OCTETS, MalformedRecord, PeerLink, PeerLinks
from batonmq.cluster.publishrecords import (
    MESSAGES_MAX,
    PUBLISH,
    QUEUED,
    QUEUES_MAX,
    TX_END,
    Publish,
    Queued,
    TxEnd,
)
from batonmq.engine.afterwrite import AfterWrite
from batonmq.engine.publish import held_batch, message_batch
from batonmq.model.message import Message, QueueEntry
from batonmq.model.topology import ConnectionRef, QueueDeclared
from batonmq.queues.arguments import QueueArguments
from batonmq.queues.consumers import ConsumerSet
from batonmq.queues.counters import QueueCounters
from batonmq.queues.protocol import Enqueued, Queue, QueueConsumer

if TYPE_CHECKING:
    from batonmq.engine.broker import Broker
    from batonmq.engine.channel import Channel
    from batonmq.engine.remoteconsumers import RemoteConsumers

#: How many octets of messages an owner's gate holds (waiting for this worker's writes) before
#: its publishers wait too.
GATE_MOST: Final = 4 * 1024 * 1024

#: Told whether what it waited for is done (True) or never will be (False).
Outcome = Callable[[bool], None]


class _Building:
    """One message published now, gathering the queues it goes to."""

    __slots__ = ("batch", "message", "number", "queues", "tx_group", "vhost")

    def __init__(
        self,
        number: int,
        vhost: str,
        message: Message,
        queue: str,
        tx_group: int | None,
        batch: int | None,
    ) -> None:
        self.number = number
        self.tx_group = tx_group
        self.vhost = vhost
        self.message = message
        self.queues = [queue]
        #: The journal batch of this worker that must commit before it crosses.
        self.batch = batch


class Outbound:
    """What this worker publishes to the queues of worker `peer`, over the link with it."""

    def __init__(self, peer: int, after_write: AfterWrite) -> None:
        self.peer = peer
        self._after_write = after_write
        #: The link that is up, if any: the records go there, and the answers come from there.
        self.link: PeerLink | None = None
        #: The number of the next record on the link, and the last one answered.
        self._next = 1
        self._answered = 0
        self._building: _Building | None = None
        #: The record gathering the messages before it, the journal batch they wait for, and
        #: their octets.
        self._record: Publish | None = None
        self._record_batch: int | None = None
        self._record_octets = 0
        self._finishing = False
        #: Who waits for the answer to each number.
        self._waiting: dict[int, list[Outcome]] = {}
        #: Who waits for the link to take more (`when_writable`).
        self._held: list[Callable[[], None]] = []
        #: The transaction group what is published now belongs to, and whether a record of it
        #: was sent (`tx_group`).
        self._tx_group: int | None = None
        self._grouped = False
        #: Records held back, in order, until a journal batch of this worker is over (a
        #: persistent message also routed to a queue here that keeps it), and what follows them:
        #: (batch or None, kind, record).
        self._gated: deque[tuple[int | None, int, Publish | TxEnd | Get]] = deque()
        #: The last batch whose end releases the gate.
        self._gate_batch: int | None = None
        #: The octets of the messages in the gate, and how many it holds before the link
        #: counts as full (its publishers wait, as for the link's own high-water mark).
        self._gated_octets = 0
        self.gate_most = GATE_MOST

    @contextlib.contextmanager
    def tx_group(self, group: int) -> Iterator[None]:
        """What is published inside is transaction group `group`: the owner holds its records
        until the TX_END sent as it ends, then enqueues them together."""
        self._tx_group, self._grouped = group, False
        try:
            yield
        finally:
            self._tx_group = None
            if self._grouped and self.link is not None:
                self.finish()
                self._send(TX_END, TxEnd(group), None)

    def attach(self, link: PeerLink) -> None:
        """`link` is up: what is published from now on goes there, numbered from 1."""
        if self.link is not None:
            self.lost()  # replaced: what the old one carried is not answered
        self.link = link
        self._next, self._answered = 1, 0

    def lost(self) -> None:
        """The link went down or was replaced: every publish waiting for an answer is told
        not ok, and what waited for it to be writable goes on (to be nacked)."""
        self.link = None
        self._building = self._record = None
        self._gated.clear()  # numbered for the link that is gone; their waiters are told below
        self._gated_octets = 0
        waiting, self._waiting = self._waiting, {}
        held, self._held = self._held, []
        for callbacks in waiting.values():
            for outcome in callbacks:
                outcome(False)
        for callback in held:
            callback()

    @property
    def writable(self) -> bool:
        """Whether a publish is taken without going over the link's high-water mark, nor over
        what the gate may hold."""
        link = self.link
        return link is None or (link.writable and self._gated_octets < self.gate_most)

    def when_writable(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the link takes more, or is lost."""
        self._held.append(callback)

    def writable_changed(self) -> None:
        if self.writable:
            held, self._held = self._held, []
            for callback in held:
                callback()

    def publish(
        self, vhost: str, queue: str, message: Message, until_batch: int | None = None
    ) -> int:
        """Send `message` for `queue` of `vhost`; the number to wait for (`when_queued`), 0
        when it will never be queued (there is no link, or a name is too long for a record).
        `until_batch`: the message is also on a queue here that writes it, in that journal
        batch: it crosses once the batch commits, so that the owner never shows a message
        whose publisher is nacked for this worker's failed write ("State follows the store");
        what is published after it to the same owner waits behind it, so order is kept."""
        if self.link is None or not fits_short_string(vhost, message.exchange, message.routing_key):
            return 0  # a name that is no short string (the edges refuse them) cannot cross
        building = self._building
        if building is not None:
            if (
                building.message is message
                and building.vhost == vhost
                and len(building.queues) < QUEUES_MAX
            ):
                building.queues.append(queue)
                return building.number
            self._seal()
        number = self._next
        self._next += 1
        self._building = _Building(number, vhost, message, queue, self._tx_group, until_batch)
        if until_batch is not None and until_batch != self._gate_batch:
            # Registered now: only the batch being gathered is waited for.
            self._gate_batch = until_batch
            self._after_write.call(until_batch, partial(self._batch_over, until_batch))
        self._grouped |= self._tx_group is not None
        if not self._finishing:
            self._finishing = True
            asyncio.get_running_loop().call_soon(self._finish_turn)
        return number

    def _finish_turn(self) -> None:
        self._finishing = False
        self.finish()

    def finish(self) -> None:
        """Send the PUBLISH being gathered now (if any), so that what `RemoteConsumers` sends
        next does not overtake it."""
        self._seal()
        record, self._record = self._record, None
        if record is not None and self.link is not None:
            self._send(PUBLISH, record, self._record_batch)

    def _seal(self) -> None:
        """The message being built has all its queues: it joins the record being gathered if
        it shares its names, transaction group and journal batch (and the record is not full),
        else that record is sent and the message begins the next."""
        building, self._building = self._building, None
        if building is None:
            return
        message, record = building.message, self._record
        queues = tuple(building.queues)
        content = (message.header_payload, message.body)
        octets = len(content[0]) + len(content[1])
        if (
            record is not None
            and record.routing_key == message.routing_key
            and record.queues == queues
            and record.exchange == message.exchange
            and record.vhost == building.vhost
            and record.tx_group == building.tx_group
            and self._record_batch == building.batch
            and self._record_octets < RECORD_OCTETS
            and len(record.messages) < MESSAGES_MAX
        ):
            record.messages.append(content)
            self._record_octets += octets
            return
        self.finish()
        self._record = Publish(
            building.number,
            building.tx_group,
            building.vhost,
            message.exchange,
            message.routing_key,
            queues,
            [content],
        )
        self._record_batch, self._record_octets = building.batch, octets

    def send_behind(self, kind: int, record: Get) -> None:
        """Send `record` behind every message published to the owner before it: the PUBLISH
        being built, and those the gate holds. A basic.get after a publish on the same channel
        finds the message, as on a queue here, which the get waits for while it holds the
        message back for its commit (`VirtualHost.wait_for_held`)."""
        self.finish()
        self._send(kind, record, None)

    def _send(self, kind: int, record: Publish | TxEnd | Get, batch: int | None) -> None:
        assert self.link is not None
        if batch is None and not self._gated:
            self.link.send(kind, record.encode())
        else:
            self._gated.append((batch, kind, record))
            if isinstance(record, Publish):
                self._gated_octets += record.octets

    def _batch_over(self, batch: int, committed: bool) -> None:
        """Journal batch `batch` is over: what waited for it crosses. A message of a failed
        batch crosses naming no queue (its number is kept; its publisher is nacked by the
        failed write), so the owner holds nothing of it."""
        if self._gate_batch == batch:
            self._gate_batch = None
        self.finish()
        gated, link = self._gated, self.link
        while gated and (gated[0][0] is None or gated[0][0] <= batch) and link is not None:
            held, kind, record = gated.popleft()
            if isinstance(record, Publish):
                self._gated_octets -= record.octets
                if not committed and held == batch:
                    record = dataclasses.replace(record, queues=())
            link.send(kind, record.encode())
        self.writable_changed()

    def when_answered(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the owner answered every publish made before now, or the link
        is lost (at once when none waits): what then asks the owner about its queues (a
        queue.delete's or a purge's message count) finds them there, as in RabbitMQ a channel's
        publish reaches a queue before the channel's next method does."""
        self.finish()
        last = self._next - 1
        if self.link is None or self._answered >= last:
            callback()
        else:
            self.when_queued(last, lambda _ok: callback())

    def when_queued(self, number: int, callback: Outcome) -> None:
        """`callback(ok)` once the owner answered publish `number` (one not answered yet), or
        at once with False for number 0 (no link)."""
        if number == 0:
            callback(False)
            return
        assert number > self._answered, "only a publish not answered yet is waited for"
        self._waiting.setdefault(number, []).append(callback)

    def queued(self, answer: Queued) -> None:
        """The owner answered publishes `first` to `last`: they come in order, each once."""
        if answer.first != self._answered + 1 or answer.last >= self._next:
            raise MalformedRecord(
                f"queued {answer.first} to {answer.last} after {self._answered}, "
                f"of {self._next - 1} sent"
            )
        self._answered = answer.last
        waiting = self._waiting
        if not waiting:
            return
        for number in range(answer.first, answer.last + 1):
            for callback in waiting.pop(number, ()):
                callback(answer.ok)


class Inbound:
    """The owner's side of one link: the publishes that come on it go on this worker's queues,
    and are answered in order."""

    def __init__(self, broker: Broker, link: PeerLink) -> None:
        self._broker = broker
        self.link = link
        #: The number the next PUBLISH must have, and the next to answer.
        self._received = self._next_answer = 1
        #: Outcomes known before those of earlier numbers: they wait for them.
        self._early: dict[int, bool] = {}
        #: The runs of answers of this loop turn, each [first, last, ok].
        self._runs: list[list[int]] = []
        #: The publishes of each transaction group whose TX_END has not come yet.
        self._groups: dict[int, list[Publish]] = {}

    def publish(self, record: Publish) -> None:
        if record.number != self._received:
            raise MalformedRecord(f"publish {record.number}, expected {self._received}")
        self._received += len(record.messages)
        if record.tx_group is not None:
            self._groups.setdefault(record.tx_group, []).append(record)
        else:
            self._enqueue(record)

    def tx_end(self, record: TxEnd) -> None:
        """Every publish of a group came: enqueue them in one go (one held journal batch, as
        `commit_transaction` does), so that this worker's queues take all of the group's
        messages or, if the write fails, none (not its transient ones alone)."""
        held = self._groups.pop(record.tx_group, None)
        if held is None:
            raise MalformedRecord(f"the end of transaction group {record.tx_group}, not begun")
        routed = [routed for publish in held for routed in self._routed(publish)]
        batch = held_batch(
            self._broker.journal, [(message, queues) for _n, message, queues in routed]
        )
        for number, message, queues in routed:
            self._put(number, message, queues, batch)

    def _enqueue(self, record: Publish) -> None:
        journal = self._broker.journal
        for number, message, queues in self._routed(record):
            self._put(number, message, queues, message_batch(journal, message, queues))

    def _routed(self, record: Publish) -> list[tuple[int, Message, list[Queue]]]:
        """Each message of `record` with its number and the queues it names that this worker
        has (looked up once for them all)."""
        vhost = self._broker.vhosts.get(record.vhost)
        queues = []
        count = len(record.messages)
        if vhost is not None:
            for name in record.queues:
                queue = vhost.queues.get(name)
                if queue is not None:
                    queue.counters.publish += count
                    queues.append(queue)
        exchange, routing_key = record.exchange, record.routing_key
        return [
            (number, Message(exchange, routing_key, header_payload, body), queues)
            for number, (header_payload, body) in enumerate(record.messages, record.number)
        ]

    def _put(self, number: int, message: Message, queues: list[Queue], batch: int | None) -> None:
        """Put `message` on `queues`, held until journal batch `batch` commits (if any), and
        answer publish `number` then."""
        taken = True
        for queue in queues:
            taken &= queue.publish(message, until_batch=batch) is not Enqueued.REFUSED
        if batch is None:
            self._answer(number, taken)
            return
        # Shown on the queues, and answered, once the write commits; a failed one leaves the
        # message on none of them.
        after_write = self._broker.after_write
        after_write.release(batch, queues)
        after_write.call(batch, lambda committed: self._answer(number, taken and committed))

    def _answer(self, number: int, ok: bool) -> None:
        if number != self._next_answer:
            self._early[number] = ok
            return
        runs = self._runs
        if not runs:
            asyncio.get_running_loop().call_soon(self._send)
        while True:
            if runs and runs[-1][2] == ok:
                runs[-1][1] = number
            else:
                runs.append([number, number, ok])
            number += 1
            if number not in self._early:
                break
            ok = self._early.pop(number)
        self._next_answer = number

    def _send(self) -> None:
        runs, self._runs = self._runs, []
        for first, last, ok in runs:
            self.link.send(QUEUED, Queued(first, last, bool(ok)).encode())


class RemoteQueue:
    """A queue of a spread virtual host that worker `owner` runs, as routing, publishing,
    confirms and transactions see it here. Its messages are written by the owner (hence
    `writes_itself`): what waits for them waits for the owner's answer."""

    def __init__(
        self,
        vhost: str,
        declared: QueueDeclared,
        options: QueueArguments,
        outbound: Outbound,
        consuming: RemoteConsumers,
    ) -> None:
        self._vhost = vhost
        self._declared = declared
        #: What the queue works by (its arguments parsed as its owner parsed them).
        self.options = options
        self._outbound = outbound
        #: The number of the last message published to it, on its owner's link.
        self._last = 0
        #: Counted as it is routed to here; the owner's are the queue's (never listed).
        self.counters = QueueCounters()
        #: x-max-producers is refused in a spread virtual host: nobody is counted.
        self.producers: set[object] = set()
        self.deleted = False
        self._consuming = consuming
        #: This worker's consumers of it (its owner has every worker's, and chooses which one
        #: is active): whether one that goes hands its work over is the queue's.
        self.consumers = ConsumerSet(
            single_active=options.single_active_consumer, max_active=options.max_active_consumers
        )
        #: Its deliveries to channels here not settled yet.
        self.unacked = 0

    @property
    def owner(self) -> int:
        """The worker that runs the queue."""
        return self._outbound.peer

    @property
    def name(self) -> str:
        return self._declared.name

    @property
    def durable(self) -> bool:
        return self._declared.durable

    @property
    def auto_delete(self) -> bool:
        return self._declared.auto_delete

    @property
    def exclusive_owner(self) -> ConnectionRef | None:
        return self._declared.exclusive_owner

    @property
    def exclusive(self) -> bool:
        return self._declared.exclusive_owner is not None

    @property
    def arguments(self) -> FieldTable:
        return self._declared.arguments

    @property
    def persists(self) -> bool:
        """Nothing of it is written here: its owner writes it."""
        return False

    @property
    def writes_itself(self) -> bool:
        return True

    @property
    def overfull(self) -> bool:
        """The owner's link is over its high-water mark: whoever publishes here waits
        (`when_underfull`) until it takes more."""
        return not self._outbound.writable

    def when_underfull(self, callback: Callable[[], None]) -> None:
        self._outbound.when_writable(callback)

    def publish(self, message: Message, *, until_batch: int | None = None) -> Enqueued:
        """Send `message` to the owner; KEPT (whether it took it is `when_written`'s answer).
        With `until_batch` it crosses once that journal batch here commits (`Outbound`)."""
        self._last = self._outbound.publish(self._vhost, self._declared.name, message, until_batch)
        return Enqueued.KEPT

    def when_written(self, callback: Outcome) -> None:
        """`callback(ok)` once the owner answered the last message published here."""
        self._outbound.when_queued(self._last, callback)

    def release_held(self, batch: int, committed: bool) -> None:
        """Nothing is held here (the owner holds what waits for its own writes)."""

    # Consuming (`RemoteConsumers`) --------------------------------------------------------

    def consume(
        self,
        channel: Channel,
        tag: str,
        *,
        no_ack: bool,
        exclusive: bool,
        arguments: FieldTable,
        nowait: bool,
    ) -> None:
        """basic.consume: the owner admits the consumer, then it starts (`add_consumer`)."""
        self._consuming.consume(
            channel,
            self,
            tag,
            no_ack=no_ack,
            exclusive=exclusive,
            arguments=arguments,
            nowait=nowait,
        )

    def get(self, channel: Channel, *, no_ack: bool) -> None:
        """basic.get, answered once the owner took the next message, or found none."""
        self._consuming.get(channel, self, no_ack=no_ack)

    def add_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.add(consumer)

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.remove(consumer)
        self._consuming.cancel(consumer)

    def dispatch(self) -> None:
        """Its consumers here may have room: the owner is given the credit for it."""
        for consumer in self.consumers:
            self._consuming.top_up(consumer)

    def delivered(self, entry: QueueEntry) -> None:
        """The owner counted the delivery as it handed it out."""

    def settled(self, entry: QueueEntry) -> None:
        self._consuming.settle(entry.sequence, SettleOutcome.ACK)

    def rejected(self, entry: QueueEntry) -> None:
        self._consuming.settle(entry.sequence, SettleOutcome.REJECT)

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
        """The owner puts them back; its consumers here have the room they held (a local
        queue's requeue dispatches, so `Channel.settle` does not)."""
        for entry in entries:
            self._consuming.settle(entry.sequence, SettleOutcome.REQUEUE)
        self.dispatch()


class PublishLinks:
    """A worker's `Outbound` to each peer and `Inbound` from each, on its `PeerLinks`."""

    def __init__(self, broker: Broker, links: PeerLinks) -> None:
        self._broker = broker
        self._links = links
        self._outbound = [Outbound(peer, broker.after_write) for peer in range(links.count)]
        self._inbound: dict[int, Inbound] = {}

    def install(self) -> None:
        links = self._links
        links.handle(PUBLISH, self._publish)
        links.handle(QUEUED, self._queued)
        links.handle(TX_END, self._tx_end)
        links.on_up.append(self._up)
        links.on_down.append(self._down)
        links.on_writable.append(self._writable)

    def outbound(self, peer: int) -> Outbound:
        """What this worker publishes to the queues of worker `peer` goes through this."""
        return self._outbound[peer]

    def _up(self, link: PeerLink) -> None:
        self._outbound[link.peer].attach(link)
        self._inbound[link.peer] = Inbound(self._broker, link)

    def _down(self, link: PeerLink) -> None:
        self._outbound[link.peer].lost()
        self._inbound.pop(link.peer, None)

    def _writable(self, link: PeerLink) -> None:
        outbound = self._outbound[link.peer]
        if outbound.link is link:
            outbound.writable_changed()

    def _publish(self, link: PeerLink, payload: bytes) -> None:
        inbound = self._inbound.get(link.peer)
        if inbound is None or inbound.link is not link:
            raise MalformedRecord("a publish on a link this worker does not take them from")
        inbound.publish(Publish.decode(payload))

    def _tx_end(self, link: PeerLink, payload: bytes) -> None:
        inbound = self._inbound.get(link.peer)
        if inbound is None or inbound.link is not link:
            raise MalformedRecord("a tx end on a link this worker does not take publishes from")
        inbound.tx_end(TxEnd.decode(payload))

    @contextlib.contextmanager
    def tx_group(self, group: int) -> Iterator[None]:
        """What is published inside, to any peer, is transaction group `group`."""
        with contextlib.ExitStack() as stack:
            for outbound in self._outbound:
                stack.enter_context(outbound.tx_group(group))
            yield

    def _queued(self, link: PeerLink, payload: bytes) -> None:
        outbound = self._outbound[link.peer]
        if outbound.link is link:
            outbound.queued(Queued.decode(payload))
