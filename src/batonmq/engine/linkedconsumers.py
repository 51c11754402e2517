"""The owner's side of consuming across workers (a spread virtual host): the consumers that
channels of another worker hold on this worker's queues, and the deliveries they have not
settled yet.

A client of worker X cannot tell that queue q runs on worker Y (RabbitMQ: a consumer is served
wherever its queue's process is). X's channel asks for a consumer with CONSUME; Y admits it by
the rules a local consumer meets (`check_admission`: exclusive consumers, single active
consumer, the consumer limits, x-priority and x-selector), the exclusive queue's connection
included (`VirtualHost.routed_queue`), and puts a `LinkedConsumer` on the real queue. Its room
is the credit X gives (CREDIT): the prefetch room of X's consumer, or a window for no_ack. Each
entry it takes is handed out as a local channel hands one out (`hand_out`; for a no_ack
consumer, once X says it reached the client) and crosses in a DELIVER that names it by a
delivery id of this link (one DELIVER carries a loop turn's entries for one consumer, up to
`RECORD_OCTETS`; they are sent before any other record of this link, so that none overtakes
them); a SETTLE settles them as a local channel's ack, nack or reject does (`settle_entries`). A
consumer X cancels goes (its unsettled entries stay X's to settle, as RabbitMQ keeps a cancelled
consumer's unacked deliveries until ack or channel close); one whose queue is deleted is told
(CANCELLED), and so is a slow one, whose connection X closes (`batonmq.engine.slowconsumers`),
requeueing what it holds. A basic.get (GET) is answered with GOT. The link going down (or
replaced by one to X's next process) requeues every entry X has not settled, marked redelivered
(AMQP 0-9-1 basic.deliver redelivered; the "at least once" of RabbitMQ's consumer
acknowledgements), except what was on its way to a no_ack consumer (automatic acknowledgement is
at most once), and removes X's consumers.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING, Final

from pamqp.common import FieldTable

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.cluster.consumerecords import (
    CANCELLED,
    CONSUMED,
    DELIVER,
    DELIVERIES_MAX,
    GOT,
    Cancelled,
    Consume,
    Consumed,
    Content,
    Deliver,
    Found,
    Get,
    Got,
    OverThreshold,
    Settle,
    SettleOutcome,
)
from batonmq.cluster.peerlink import RECORD_OCTETS, MalformedRecord, PeerLink
from batonmq.engine.cleanup import each
from batonmq.engine.consumer import cancel_consumers_of, check_admission
from batonmq.engine.handout import hand_out, settle_entries
from batonmq.engine.outcome import Outcome
from batonmq.model.message import Message, QueueEntry
from batonmq.model.topology import ConnectionRef
from batonmq.queues.protocol import Queue
from batonmq.selectors import Selector

if TYPE_CHECKING:
    from batonmq.engine.broker import Broker
    from batonmq.engine.vhost import VirtualHost

log = logging.getLogger(__name__)

OUTCOMES: Final = {
    SettleOutcome.ACK: Outcome.ACK,
    SettleOutcome.REQUEUE: Outcome.REQUEUE,
    SettleOutcome.REJECT: Outcome.REJECT,
}


def content_of(message: Message) -> Content:
    return Content(message.exchange, message.routing_key, message.header_payload, message.body)


class LinkedConsumer:
    """A consumer of one of this worker's queues that a channel of another worker holds (a
    `QueueConsumer`)."""

    __slots__ = (
        "_served",
        "arguments",
        "credit",
        "exclusive",
        "id",
        "no_ack",
        "priority",
        "queue",
        "selector",
        "tag",
        "vhost",
    )

    def __init__(
        self,
        served: Served,
        record: Consume,
        vhost: VirtualHost,
        queue: Queue,
        priority: int,
        selector: Selector | None,
    ) -> None:
        self._served = served
        self.id = record.consumer
        self.tag = record.tag
        self.no_ack = record.no_ack
        self.exclusive = record.exclusive
        self.arguments: FieldTable = record.arguments
        self.priority = priority
        self.selector = selector
        self.vhost = vhost
        self.queue = queue
        #: How many more entries the other worker takes now.
        self.credit = record.credit

    def has_room(self) -> bool:
        return (
            self.credit > 0 and self._served.link.writable and self.queue not in self.vhost.paused
        )

    def deliver(self, queue: Queue, entry: QueueEntry) -> None:
        self.credit -= 1
        self._served.deliver(self, queue, entry)

    def queue_deleted(self) -> None:
        """Its queue is going: the other worker's channel hears of it (CANCELLED)."""
        self._served.cancelled(self, queue_gone=True)

    def cancel(self, slow: OverThreshold) -> None:
        """Cancel it here, a slow consumer (`slow`): the other worker closes its connection,
        told with CANCELLED. What it was given stays that worker's to settle (its connection's
        close requeues it), except where the queue hands a consumer's work over (`remove`)."""
        self._served.cancelled(self, slow=slow)
        self._served.remove(self)


class Served:
    """One link's side at the owner: what the peer's channels consume and get from this
    worker's queues, and the entries they hold unsettled, by delivery id."""

    def __init__(self, broker: Broker, link: PeerLink) -> None:
        self._broker = broker
        self.link = link
        self.consumers: dict[int, LinkedConsumer] = {}
        self.unsettled: dict[int, tuple[Queue, QueueEntry]] = {}
        #: The consumer each delivery of `unsettled` went to (none for a basic.get).
        self._delivered_to: dict[int, int] = {}
        #: The deliveries of `unsettled` on their way to a no_ack consumer: the other worker
        #: settles each as it reaches the client (ACK), or sends it back (REQUEUE) if the
        #: consumer was cancelled there meanwhile.
        self._on_their_way: set[int] = set()
        #: Deliveries taken back from a no_ack consumer cancelled on its way to them (`remove`),
        #: whose settlement (REQUEUE) the other worker still sends: passed over.
        self._coming_back: set[int] = set()
        self._last_delivery = 0
        #: The link is gone (`close`): a basic.get that waited is not answered.
        self.closed = False
        #: The DELIVER gathering this loop turn's entries for each consumer.
        self._gathering: dict[int, _Gathering] = {}
        self._turn_ends = False

    def _fields(self) -> dict[str, object]:
        return {"peer": self.link.peer}

    def _queue(self, vhost_name: str, name: str, requester: ConnectionRef | None) -> Queue:
        """Queue `name` of `vhost_name`, run here, that `requester` may use: 404 if there is
        none, 405 if it is another connection's exclusive queue."""
        vhost = self._broker.vhosts.get(vhost_name)
        if vhost is None:
            raise amqp_error(ReplyCode.NOT_FOUND, f"no vhost '{vhost_name}'")
        vhost.routed_queue(name, requester, wait=False)
        queue = vhost.queues.get(name)
        if queue is None:
            raise amqp_error(
                ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{vhost_name}' runs here"
            )
        return queue

    # Consumers -----------------------------------------------------------------------------

    def consume(self, record: Consume) -> None:
        if record.consumer in self.consumers:
            raise MalformedRecord(f"consumer {record.consumer} asked for twice")
        where = f"queue '{record.queue}' in vhost '{record.vhost}'"
        try:
            queue = self._queue(record.vhost, record.queue, record.requester)
            priority, selector = check_admission(
                queue,
                no_ack=record.no_ack,
                exclusive=record.exclusive,
                prefetch_count=record.prefetch_count,
                global_prefetch=record.global_prefetch,
                arguments=record.arguments,
                where=where,
            )
        except ProtocolError as refusal:
            answer = Consumed(record.consumer, int(refusal.reply_code), refusal.text)
            self._send(CONSUMED, answer.encode())
            return
        vhost = self._broker.vhosts[record.vhost]
        consumer = LinkedConsumer(self, record, vhost, queue, priority, selector)
        self.consumers[record.consumer] = consumer
        # Sent before any DELIVER to it: the link keeps the order of its records.
        self._send(CONSUMED, Consumed(record.consumer, 0, "").encode())
        queue.add_consumer(consumer)
        queue.dispatch()

    def credit(self, consumer_id: int, more: int) -> None:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            return  # cancelled meanwhile, by either side
        consumer.credit += more
        consumer.queue.dispatch()

    def cancel(self, consumer_id: int) -> None:
        """The other worker's consumer is gone; the entries it was given stay unsettled until
        that worker settles them, or its link goes, except where the queue hands a consumer's
        work over: they go back first, ahead of anything newer, for the consumer taking over
        (as `Channel._hand_over` does for a local one), those still on their way to a no_ack
        consumer too."""
        consumer = self.consumers.pop(consumer_id, None)
        if consumer is not None:
            self.remove(consumer, reached_are_reported=True)

    def remove(self, consumer: LinkedConsumer, *, reached_are_reported: bool = False) -> None:
        """`consumer`, no longer one of `consumers`, leaves its queue. `reached_are_reported`:
        the other worker cancelled it, having reported first every no_ack delivery that reached
        the client; what is still on its way to it then never will."""
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.consumers.hands_over:
            # What is on its way to a no_ack consumer comes back from the other worker: taken
            # back now, ahead of anything newer, where it cannot reach the client any more.
            returned = self._take_back(consumer.id, reached_are_reported=reached_are_reported)
            settle_entries(returned, Outcome.REQUEUE, self._fields)
        if queue.auto_delete and not queue.consumers and not queue.deleted:
            # RabbitMQ: an auto-delete queue goes when its last consumer is cancelled.
            consumer.vhost.remove_queue(queue, on_delete=cancel_consumers_of)
        else:
            queue.dispatch()

    def _take_back(
        self, consumer_id: int, *, reached_are_reported: bool
    ) -> list[tuple[Queue, QueueEntry]]:
        """The entries handed to consumer `consumer_id` that the other worker counts as taken
        back here (its queue hands a consumer's work over), no longer unsettled here."""
        handed = [
            delivery
            for delivery, given_to in self._delivered_to.items()
            if given_to == consumer_id
            and (reached_are_reported or delivery not in self._on_their_way)
        ]
        taken = [self.unsettled.pop(delivery) for delivery in handed]
        for delivery in handed:
            del self._delivered_to[delivery]
            if delivery in self._on_their_way:
                self._on_their_way.discard(delivery)
                self._coming_back.add(delivery)
        return taken

    def cancelled(
        self,
        consumer: LinkedConsumer,
        *,
        queue_gone: bool = False,
        slow: OverThreshold | None = None,
    ) -> None:
        """`consumer` was cancelled here (its queue was deleted: `queue_gone`, or it was
        `slow`): the other worker's channel is told, and closes the connection of a slow one.
        Where its queue handed work over, that worker counts what it holds as taken back here
        and settles none of it: with the queue gone, it is forgotten (a slow consumer's goes
        back in `remove`)."""
        if self.consumers.pop(consumer.id, None) is consumer:
            self._send(CANCELLED, Cancelled(consumer.id, slow).encode())
        if queue_gone and consumer.queue.consumers.hands_over:
            self._take_back(consumer.id, reached_are_reported=False)

    def writable(self) -> None:
        """The link takes more again: the queues it consumes from go on."""
        for queue in {consumer.queue for consumer in self.consumers.values()}:
            queue.dispatch()

    # Deliveries ----------------------------------------------------------------------------

    def _hand_out(
        self, queue: Queue, entry: QueueEntry, *, no_ack: bool, consumer: int | None
    ) -> int:
        """Hand `entry` out as a local channel does, to `consumer` (None: a basic.get); its
        delivery id (0 for a basic.get with no_ack). One for a no_ack consumer is handed out
        once it reaches the client (`settle`): until then it is unacked here, and comes back
        if the consumer was cancelled on the way (RabbitMQ sends what is on its way before
        cancel-ok; here the consuming worker has answered cancel-ok already)."""
        if no_ack and consumer is None:
            hand_out(queue, entry, no_ack=True, get=True)
            return 0
        if no_ack:
            queue.unacked += 1
        else:
            hand_out(queue, entry, no_ack=False, get=consumer is None)
        self._last_delivery += 1
        if no_ack:
            self._on_their_way.add(self._last_delivery)
        self.unsettled[self._last_delivery] = (queue, entry)
        if consumer is not None:
            self._delivered_to[self._last_delivery] = consumer
        return self._last_delivery

    def deliver(self, consumer: LinkedConsumer, queue: Queue, entry: QueueEntry) -> None:
        redelivered = entry.redelivered
        delivery = self._hand_out(queue, entry, no_ack=consumer.no_ack, consumer=consumer.id)
        content = content_of(entry.message)
        gathering = self._gathering.get(consumer.id)
        if gathering is not None and gathering.full:
            del self._gathering[consumer.id]
            self.link.send(DELIVER, gathering.record.encode())
            gathering = None
        if gathering is None:
            self._gathering[consumer.id] = _Gathering(consumer.id, delivery, redelivered, content)
            if not self._turn_ends:
                self._turn_ends = True
                asyncio.get_running_loop().call_soon(self._turn_over)
            return
        gathering.record.deliveries.append((delivery, redelivered, content))
        gathering.octets += content.octets

    def _turn_over(self) -> None:
        self._turn_ends = False
        self._send_gathered()

    def _send_gathered(self) -> None:
        gathering, self._gathering = self._gathering, {}
        if not self.closed:
            for each in gathering.values():
                self.link.send(DELIVER, each.record.encode())

    def _send(self, kind: int, payload: bytes) -> None:
        """Send a record behind the entries gathered for a consumer."""
        self._send_gathered()
        self.link.send(kind, payload)

    def settle(self, record: Settle) -> None:
        """Settle the deliveries `record` names as a local channel's ack, nack or reject. One
        that is not unsettled here is passed over, and the others settled all the same: the
        other worker may settle a delivery this worker took back meanwhile (a single active
        consumer cancelled here, its work handed over), and that race is no reason to cut
        every consumer on the link."""
        settled: list[tuple[Queue, QueueEntry]] = []
        received: list[tuple[Queue, QueueEntry]] = []
        unknown = 0
        for first, last in record.runs:
            for delivery in range(first, last + 1):
                held = self.unsettled.pop(delivery, None)
                if held is None:
                    if delivery in self._coming_back:
                        self._coming_back.discard(delivery)
                    else:
                        unknown += 1
                    continue
                self._delivered_to.pop(delivery, None)
                on_its_way = delivery in self._on_their_way
                self._on_their_way.discard(delivery)
                if on_its_way and record.outcome is SettleOutcome.ACK:
                    received.append(held)
                else:
                    settled.append(held)
        if unknown:
            log.warning(
                "settlement across of deliveries not unsettled here, passed over: %d",
                unknown,
                extra=self._fields(),
            )
        for queue, entry in received:
            _reached_client(queue, entry)
        settle_entries(settled, OUTCOMES[record.outcome], self._fields)

    def get(self, record: Get) -> None:
        """basic.get of the other worker's channel: GOT with the next ready message, none, or
        the refusal. One still waiting for its commit, or read back from the store, is
        answered once it is there."""
        if self.closed:
            return  # it waited, and the link went meanwhile: nothing is taken for it
        try:
            queue = self._queue(record.vhost, record.queue, record.requester)
        except ProtocolError as refusal:
            got = Got(record.request, int(refusal.reply_code), refusal.text, None)
            self._send(GOT, got.encode())
            return
        again = partial(self.get, record)
        if queue.holds_back:
            queue.when_released(again)
            return
        entry = queue.get()
        if entry is None and queue.waiting_for_page_in:
            queue.when_paged_in(again)
            return
        found = None
        if entry is not None:
            redelivered = entry.redelivered
            delivery = self._hand_out(queue, entry, no_ack=record.no_ack, consumer=None)
            found = Found(delivery, queue.message_count, redelivered, content_of(entry.message))
        self._send(GOT, Got(record.request, 0, "", found).encode())

    # Ending --------------------------------------------------------------------------------

    def close(self) -> None:
        """The link is gone: every entry the other worker holds goes back to its queue, marked
        redelivered, and its consumers go. One on its way to a no_ack consumer is handed out:
        it may have reached the client already, and RabbitMQ's automatic acknowledgement is at
        most once ("messages are considered to be successfully delivered immediately after
        they are sent"), so it does not come again."""
        self.closed = True
        self._gathering.clear()
        consumers, self.consumers = self.consumers, {}
        unsettled, self.unsettled = self.unsettled, {}
        on_their_way, self._on_their_way = self._on_their_way, set()
        self._delivered_to.clear()
        self._coming_back.clear()
        for consumer in consumers.values():
            consumer.queue.remove_consumer(consumer)
        reached = [unsettled.pop(delivery) for delivery in on_their_way]
        each(reached, lambda held: _reached_client(*held), "handing out", self._fields)
        returned = settle_entries(unsettled.values(), Outcome.REQUEUE, self._fields)
        for consumer in consumers.values():
            queue = consumer.queue
            if queue.auto_delete and not queue.consumers and not queue.deleted:
                consumer.vhost.remove_queue(queue, on_delete=cancel_consumers_of)
            elif queue not in returned:
                queue.dispatch()


class _Gathering:
    """The DELIVER of one consumer's entries of a loop turn, and their octets."""

    __slots__ = ("octets", "record")

    def __init__(self, consumer: int, delivery: int, redelivered: bool, content: Content) -> None:
        self.record = Deliver(consumer, [(delivery, redelivered, content)])
        self.octets = content.octets

    @property
    def full(self) -> bool:
        """Whether it holds `RECORD_OCTETS` or more (a message alone may hold more), or as
        many messages as a record carries: the next begins another record."""
        return self.octets >= RECORD_OCTETS or len(self.record.deliveries) == DELIVERIES_MAX


def _reached_client(queue: Queue, entry: QueueEntry) -> None:
    """`entry`, on its way to a no_ack consumer of the other worker, is handed out there: done
    with, as a local no_ack delivery is once sent."""
    queue.unacked -= 1
    hand_out(queue, entry, no_ack=True, get=False)
