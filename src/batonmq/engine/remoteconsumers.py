"""The consuming worker's side of consuming across workers (a spread virtual host): this
worker's consumers, and basic.gets, of queues another worker runs.

A channel here consumes from a `RemoteQueue` as from a local queue: `Channel.deliver`,
`settle`, `recover` and `close` call the queue's `delivered`, `settled`, `rejected`,
`requeue` and `dispatch`, which the `RemoteQueue` turns into records for the queue's owner
(`batonmq.engine.linkedconsumers` is its side). basic.consume sends CONSUME and answers
consume-ok once the owner admitted the consumer (its refusal is the error a local consume
gives); each DELIVER becomes a basic.deliver with this channel's own delivery tag, the
owner's delivery id kept as the entry's `sequence`; acks, nacks, rejects and requeues go
back as SETTLE, gathered per loop turn. The owner hands out only as much as it was given
credit for (CREDIT): the prefetch room of the consumer (RabbitMQ "Consumer Prefetch"), or a
window for no_ack, topped up as the client settles or the channel can take more.

A consumer the owner found slow (`batonmq.engine.slowconsumers`) has its connection closed
here with 506, as a local slow consumer's is.

The link to the owner going down: the owner requeued what it had handed out here, so those
deliveries are forgotten (`Channel.forget`), and the consumers of its queues are cancelled
(basic.cancel where the client has the consumer_cancel_notify capability, RabbitMQ "Consumer
Cancel Notification"; else their channel is closed, 541).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pamqp import commands
from pamqp.common import FieldTable

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.cluster.consumerecords import (
    CANCEL,
    CANCELLED,
    CONSUME,
    CONSUMED,
    CREDIT,
    DELIVER,
    GET,
    GOT,
    RUNS_MAX,
    SETTLE,
    Cancel,
    Cancelled,
    Consume,
    Consumed,
    Content,
    Credit,
    Deliver,
    Get,
    Got,
    Settle,
    SettleOutcome,
    runs_of,
)
from batonmq.cluster.peerlink import MalformedRecord, PeerLink, PeerLinks
from batonmq.engine.consumer import Consumer
from batonmq.engine.linkedconsumers import Served
from batonmq.engine.remotequeue import Outbound, PublishLinks, RemoteQueue
from batonmq.engine.slowconsumers import Breach, disconnect_slow
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.protocol import QueueConsumer

if TYPE_CHECKING:
    from batonmq.engine.broker import Broker
    from batonmq.engine.channel import Channel
    from batonmq.engine.session import Session

#: The credit of a no_ack consumer: so many deliveries are on their way at most, topped up as
#: the channel can take more (the client's socket back-pressure reaches the owner).
NO_ACK_WINDOW: Final = 100
#: The credit of a consumer without a prefetch limit (basic.qos 0).
UNLIMITED_WINDOW: Final = 1000


def _message(content: Content) -> Message:
    return Message(content.exchange, content.routing_key, content.header_payload, content.body)


def _down(peer: int, queue: str) -> ProtocolError:
    # RabbitMQ answers for a classic queue whose node is down: 404 "home node ... of durable
    # queue ... is down or inaccessible".
    return amqp_error(
        ReplyCode.NOT_FOUND,
        f"worker {peer}, which runs queue '{queue}', is down or inaccessible",
    )


def _refused_with(channel: Channel, reply_code: int, text: str) -> None:
    """Refuse the method that waited with the owner's refusal. One with a reply code AMQP does
    not have is the broker's own fault: the channel is closed with 541 INTERNAL_ERROR naming
    it (as RabbitMQ closes a channel whose queue's process failed; the close is logged)."""
    try:
        code = ReplyCode(reply_code)
    except ValueError:
        failed = amqp_error(
            ReplyCode.INTERNAL_ERROR,
            f"the worker running the queue refused with reply code {reply_code}: {text}",
        )
        if not channel.closed:
            channel.session.close_channel(channel.number, failed)
        return
    _refused(channel, amqp_error(code, text))


@dataclass(eq=False, slots=True)
class _Consuming:
    consumer: Consumer
    queue: RemoteQueue
    #: How many more the owner may deliver to it now.
    credit: int


class RemoteConsumers:
    """This worker's consumers and basic.gets of the queues the worker that `outbound`
    publishes to runs; `sessions` are the broker's (whose channels hold the deliveries). What
    it asks goes on the link behind what was published to that worker before (`_send`, and
    `Outbound.send_behind` for a GET)."""

    def __init__(self, sessions: set[Session], outbound: Outbound) -> None:
        self._sessions = sessions
        self._outbound = outbound
        self.peer = outbound.peer
        self.link: PeerLink | None = None
        self._last_id = 0
        self._consuming: dict[int, _Consuming] = {}
        self._ids: dict[QueueConsumer, int] = {}
        #: CONSUMEs and GETs waiting for the owner's answer.
        self._asked_consume: dict[int, Callable[[Consumed | None], None]] = {}
        self._asked_get: dict[int, Callable[[Got | None], None]] = {}
        #: Consumers cancelled here whose deliveries the owner takes back itself, those still
        #: on their way too (`_taken_back_at_owner`), each with the last request id when its
        #: CANCEL went: a DELIVER to one sends nothing back. Forgotten once the owner answers
        #: a later request (the link keeps the order of records each way: every DELIVER to
        #: them came before that answer).
        self._taken_back: dict[int, int] = {}
        #: What goes at the end of this loop turn: settlements, and consumers whose credit
        #: may be topped up.
        self._settling: dict[SettleOutcome, list[int]] = {outcome: [] for outcome in SettleOutcome}
        self._due: set[int] = set()
        self._flushing = False

    def _next_id(self) -> int:
        self._last_id += 1
        return self._last_id

    # Asking --------------------------------------------------------------------------------

    def consume(
        self,
        channel: Channel,
        queue: RemoteQueue,
        tag: str,
        *,
        no_ack: bool,
        exclusive: bool,
        arguments: FieldTable,
        nowait: bool,
    ) -> None:
        """basic.consume of `queue` on `channel`: consume-ok (unless `nowait`) and the consumer
        starts once the owner admitted it; this client's input waits meanwhile."""
        link = self.link
        if link is None:
            raise _down(self.peer, queue.name)
        tag = channel.new_consumer_tag(tag)
        consumer = Consumer(
            tag=tag,
            channel=channel,
            queue=queue,
            no_ack=no_ack,
            exclusive=exclusive,
            prefetch_count=channel.consumer_prefetch,
            arguments=arguments,
        )
        consumer_id = self._next_id()
        credit = self._room(consumer, 0)
        session = channel.session
        record = Consume(
            consumer_id,
            no_ack,
            exclusive,
            credit,
            channel.consumer_prefetch,
            channel.channel_prefetch,
            session.vhost.name,
            queue.name,
            tag,
            session.ref,
            consumer.arguments,
        )
        self._send(link, CONSUME, record.encode())

        def register(release_input: Callable[[], None]) -> None:
            def answered(answer: Consumed | None) -> None:
                try:
                    if answer is None:
                        _refused(channel, _down(self.peer, queue.name))
                    elif answer.reply_code:
                        _refused_with(channel, answer.reply_code, answer.text)
                    elif channel.closed or self.link is None:
                        self._cancel_id(consumer_id, _taken_back_at_owner(queue, no_ack=no_ack))
                    else:
                        self._consuming[consumer_id] = _Consuming(consumer, queue, credit)
                        self._ids[consumer] = consumer_id
                        if not nowait:
                            channel.reply(commands.Basic.ConsumeOk(tag))
                        channel.add_consumer(consumer)
                finally:
                    release_input()

            self._asked_consume[consumer_id] = answered

        session.hold_input_until(register)

    def get(self, channel: Channel, queue: RemoteQueue, *, no_ack: bool) -> None:
        """basic.get of `queue` on `channel`: get-ok or get-empty once the owner answered."""
        link = self.link
        # The publishes' side of the link is told of its loss first: a get that waited for a
        # method behind them (`Outbound.when_answered`) runs again then.
        if link is None or self._outbound.link is None:
            raise _down(self.peer, queue.name)
        request = self._next_id()
        session = channel.session
        get = Get(request, no_ack, session.vhost.name, queue.name, session.ref)
        self._send_settlements(link)  # what the channel requeued before is there to get
        self._outbound.send_behind(GET, get)

        def register(release_input: Callable[[], None]) -> None:
            def answered(answer: Got | None) -> None:
                try:
                    found = None if answer is None else answer.found
                    if answer is None:
                        _refused(channel, _down(self.peer, queue.name))
                    elif answer.reply_code:
                        _refused_with(channel, answer.reply_code, answer.text)
                    elif found is None:
                        if not channel.closed:
                            channel.reply(commands.Basic.GetEmpty())
                    elif channel.closed:
                        self.settle(found.delivery, SettleOutcome.REQUEUE)
                    else:
                        entry = QueueEntry(
                            _message(found.content), found.delivery, found.redelivered
                        )
                        channel.deliver_get(queue, entry, no_ack, found.message_count)
                finally:
                    release_input()

            self._asked_get[request] = answered

        session.hold_input_until(register)

    # The consumers' side -------------------------------------------------------------------

    def cancel(self, consumer: QueueConsumer) -> None:
        """`consumer` is gone (basic.cancel, its channel closed): the owner stops delivering to
        it; what it was given stays the channel's to settle, except where the queue hands a
        consumer's work over (single active consumer): the owner requeues that itself, ahead
        of what the next consumer gets, so the channel's requeue of it (`Channel._hand_over`)
        sends nothing, nor does a delivery to an acked one still on its way (`deliver`)."""
        consumer_id = self._ids.pop(consumer, None)
        if consumer_id is None:
            return
        consuming = self._consuming.pop(consumer_id)
        _handed_over_at_owner(consuming)
        no_ack = consuming.consumer.no_ack
        self._cancel_id(consumer_id, _taken_back_at_owner(consuming.queue, no_ack=no_ack))

    def _cancel_id(self, consumer_id: int, taken_back: bool) -> None:
        """CANCEL consumer `consumer_id`; `taken_back`: the owner takes back what it gave it,
        what is still on its way too."""
        link = self.link
        if link is not None:
            # What the channel settled before goes first: the owner hands a single active
            # consumer's unsettled deliveries over as the CANCEL arrives.
            self._send_settlements(link)
            self._send(link, CANCEL, Cancel(consumer_id).encode())
            if taken_back:
                self._taken_back[consumer_id] = self._last_id

    def settle(self, delivery: int, outcome: SettleOutcome) -> None:
        """Settle the owner's delivery `delivery` (0: settled there already, as a no_ack
        get). A no_ack delivery to a consumer is settled (ACK) as it reaches the client: the
        channel's `hand_out` settles it with the queue."""
        if delivery and self.link is not None:
            self._settling[outcome].append(delivery)
            self._flush_soon()

    def top_up(self, consumer: QueueConsumer) -> None:
        """`consumer` may have room for more: its credit is topped up at the end of the turn."""
        consumer_id = self._ids.get(consumer)
        if consumer_id is not None:
            self._due.add(consumer_id)
            self._flush_soon()

    def _room(self, consumer: Consumer, credit: int) -> int:
        """How much more credit `consumer` takes, with `credit` given already: its prefetch
        room (within the channel's global prefetch), or the no_ack window; none while its
        channel cannot deliver (flow, or the client's socket backed up)."""
        channel = consumer.channel
        if not channel.can_deliver():
            return 0
        if consumer.no_ack:
            return NO_ACK_WINDOW - credit
        limit = consumer.prefetch_count or UNLIMITED_WINDOW
        room = max(0, limit - consumer.unacked - credit)
        left = channel.global_room_left()
        if left is None:
            return room
        # The channel's prefetch (basic.qos global) counts what any of its consumers holds
        # unsettled. The credit its other consumers across hold is not taken off: the channel
        # may then get more than its prefetch, but a consumer of an empty queue holding credit
        # never keeps the others from being served.
        return min(room, max(0, left - credit))

    def _flush_soon(self) -> None:
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Send this turn's settlements, then the credit they make room for."""
        self._flushing = False
        link = self.link
        if link is None:
            return
        self._send_settlements(link)
        due, self._due = self._due, set()
        for consumer_id in due:
            consuming = self._consuming.get(consumer_id)
            if consuming is None:
                continue
            more = self._room(consuming.consumer, consuming.credit)
            if more > 0:
                consuming.credit += more
                link.send(CREDIT, Credit(consumer_id, more).encode())

    def _send_settlements(self, link: PeerLink) -> None:
        """Send the settlements gathered so far, ahead of the record that follows them."""
        for outcome, deliveries in self._settling.items():
            if deliveries:
                self._settling[outcome] = []
                runs = runs_of(deliveries)
                for at in range(0, len(runs), RUNS_MAX):
                    link.send(SETTLE, Settle(outcome, runs[at : at + RUNS_MAX]).encode())

    def _send(self, link: PeerLink, kind: int, payload: bytes) -> None:
        """Send a record that asks the owner something (CONSUME, CANCEL) after the PUBLISH
        being built to it, so that it never overtakes a publish made before it (RabbitMQ keeps
        a channel's methods in order). Settlements and credit, gathered for the end of the
        turn, go ahead of it as they did: an ack the client sent before a publish has made room
        for that message as the owner takes it."""
        self._outbound.finish()
        link.send(kind, payload)

    # Records from the owner ----------------------------------------------------------------

    def consumed(self, answer: Consumed) -> None:
        answered = self._asked_consume.pop(answer.consumer, None)
        if answered is None:
            raise MalformedRecord(f"an answer to consumer {answer.consumer}, not asked for")
        self._answered(answer.consumer)
        answered(answer)

    def got(self, answer: Got) -> None:
        answered = self._asked_get.pop(answer.request, None)
        if answered is None:
            raise MalformedRecord(f"an answer to get {answer.request}, not asked for")
        self._answered(answer.request)
        answered(answer)

    def _answered(self, request: int) -> None:
        """The owner answered `request`, having taken the CANCELs sent before it: no DELIVER
        to those consumers comes any more."""
        taken_back = self._taken_back
        while taken_back:
            consumer_id, last_request = next(iter(taken_back.items()))
            if last_request >= request:
                return
            del taken_back[consumer_id]

    def deliver(self, record: Deliver) -> None:
        consumer_id, consumings = record.consumer, self._consuming
        for delivery, redelivered, content in record.deliveries:
            consuming = consumings.get(consumer_id)
            if consuming is None:
                # Cancelled here while it was on its way: it goes back, unless the owner took
                # it back itself.
                if consumer_id not in self._taken_back:
                    self.settle(delivery, SettleOutcome.REQUEUE)
                continue
            consuming.credit -= 1
            consumer = consuming.consumer
            consumer.deliver(consuming.queue, QueueEntry(_message(content), delivery, redelivered))
            if consumer.no_ack:
                self.top_up(consumer)

    def cancelled(self, record: Cancelled) -> None:
        """The owner cancelled the consumer: its queue was deleted, and the client hears of it
        (basic.cancel); or it was slow, and its connection is closed with 506, as a local slow
        consumer's is (`disconnect_slow`): the close requeues, through its channels, what the
        owner gave them. As `cancel`, the owner requeued itself what a single active consumer
        had unsettled."""
        consuming = self._consuming.pop(record.consumer, None)
        if consuming is None:
            return  # cancelled here meanwhile
        consumer = consuming.consumer
        del self._ids[consumer]
        _handed_over_at_owner(consuming)
        slow = record.slow
        session = consumer.channel.session
        if slow is not None and not session.ended:
            # The close cancels the consumer with its channel (the owner is not told again).
            breach = Breach(slow.setting, slow.limit, slow.value)
            disconnect_slow(session, consuming.queue.name, breach)
            return
        consuming.queue.consumers.remove(consumer)
        consumer.queue_deleted()

    # The link ------------------------------------------------------------------------------

    def attach(self, link: PeerLink) -> None:
        if self.link is not None:
            self.lost()
        self.link = link

    def lost(self) -> None:
        """The link went down or was replaced: what the owner handed out here it requeued
        itself, so it is forgotten; waiting consumes and gets fail; consumers are cancelled."""
        self.link = None
        self._settling = {outcome: [] for outcome in SettleOutcome}
        self._due.clear()
        self._taken_back.clear()
        for session in list(self._sessions):
            for channel in list(session.channels.values()):
                channel.forget(
                    [
                        tag
                        for tag, unsettled in channel.unsettled.items()
                        if isinstance(unsettled.queue, RemoteQueue)
                        and unsettled.queue.owner == self.peer
                    ]
                )
        asked_consume, self._asked_consume = self._asked_consume, {}
        asked_get, self._asked_get = self._asked_get, {}
        for consume_answered in asked_consume.values():
            consume_answered(None)
        for get_answered in asked_get.values():
            get_answered(None)
        consuming, self._consuming = self._consuming, {}
        self._ids.clear()
        for each in consuming.values():
            consumer, queue = each.consumer, each.queue
            queue.consumers.remove(consumer)
            channel = consumer.channel
            session = channel.session
            if channel.closed or session.ended:
                continue
            if session.connection.supports("consumer_cancel_notify"):
                consumer.queue_deleted()
            else:
                channel.consumers.pop(consumer.tag, None)
                # RabbitMQ closes the channel of a consumer whose queue's process failed with
                # 541 INTERNAL_ERROR when it cannot send the client a basic.cancel.
                failed = amqp_error(
                    ReplyCode.INTERNAL_ERROR,
                    f"worker {self.peer}, which runs queue '{queue.name}', went down",
                )
                session.close_channel(channel.number, failed)


def _taken_back_at_owner(queue: RemoteQueue, *, no_ack: bool) -> bool:
    """Whether the owner takes back, as it cancels a consumer of `queue`, what it gave it,
    what is still on its way too: where the queue hands a consumer's work over (single active
    consumer) and the consumer acknowledges. What is on its way to a no_ack one is taken back
    only if the owner is told of the cancel before it cancels the consumer itself: each such
    delivery is sent back (the owner passes over one it took back)."""
    return queue.consumers.hands_over and not no_ack


def _handed_over_at_owner(consuming: _Consuming) -> None:
    """`consuming` is cancelled: where its queue hands a consumer's work over (single active
    consumer), the owner requeues what it had unsettled itself, so the channel's settlement of
    those deliveries sends nothing."""
    if consuming.queue.consumers.hands_over:
        consumer = consuming.consumer
        for unsettled in consumer.channel.unsettled.values():
            if unsettled.consumer is consumer:
                unsettled.entry.sequence = 0  # settled at the owner (see `settle`)


def _refused(channel: Channel, error: ProtocolError) -> None:
    """Refuse the method that waited, as a local queue's refusal would: close the channel, or
    the connection for a hard error."""
    session = channel.session
    if error.closes_connection:
        if not session.ended:
            session.close(error)
    elif not channel.closed:
        session.close_channel(channel.number, error)


class ConsumeLinks:
    """A worker's `RemoteConsumers` for each peer and `Served` on each link, on its
    `PeerLinks`; what the consumers send goes behind what `publishing` publishes."""

    def __init__(self, broker: Broker, links: PeerLinks, publishing: PublishLinks) -> None:
        self._broker = broker
        self._links = links
        self._remote = [
            RemoteConsumers(broker.sessions, publishing.outbound(peer))
            for peer in range(links.count)
        ]
        self._served: dict[int, Served] = {}

    def install(self) -> None:
        links = self._links
        handlers: dict[int, Callable[[PeerLink, bytes], None]] = {
            CONSUME: lambda link, payload: self._serving(link).consume(Consume.decode(payload)),
            CREDIT: self._credit,
            SETTLE: lambda link, payload: self._serving(link).settle(Settle.decode(payload)),
            CANCEL: self._cancel,
            GET: lambda link, payload: self._serving(link).get(Get.decode(payload)),
            CONSUMED: lambda link, payload: self._asking(link, Consumed.decode(payload)),
            GOT: lambda link, payload: self._asking(link, Got.decode(payload)),
            DELIVER: lambda link, payload: self._asking(link, Deliver.decode(payload)),
            CANCELLED: lambda link, payload: self._asking(link, Cancelled.decode(payload)),
        }
        for kind, handler in handlers.items():
            links.handle(kind, handler)
        links.on_up.append(self._up)
        links.on_down.append(self._down)
        links.on_writable.append(self._writable)

    def to(self, peer: int) -> RemoteConsumers:
        """This worker's consumers of the queues worker `peer` runs."""
        return self._remote[peer]

    def served(self, peer: int) -> Served | None:
        """What worker `peer`'s channels consume from this worker's queues, while linked."""
        return self._served.get(peer)

    def _up(self, link: PeerLink) -> None:
        self._remote[link.peer].attach(link)
        served = self._served.pop(link.peer, None)
        if served is not None:
            served.close()
        self._served[link.peer] = Served(self._broker, link)

    def _down(self, link: PeerLink) -> None:
        remote = self._remote[link.peer]
        if remote.link is link:
            remote.lost()
        served = self._served.get(link.peer)
        if served is not None and served.link is link:
            del self._served[link.peer]
            served.close()

    def _writable(self, link: PeerLink) -> None:
        served = self._served.get(link.peer)
        if served is not None and served.link is link and link.writable:
            served.writable()

    def _serving(self, link: PeerLink) -> Served:
        served = self._served.get(link.peer)
        if served is None or served.link is not link:
            raise MalformedRecord("a consume record on a link this worker does not serve")
        return served

    def _credit(self, link: PeerLink, payload: bytes) -> None:
        credit = Credit.decode(payload)
        self._serving(link).credit(credit.consumer, credit.more)

    def _cancel(self, link: PeerLink, payload: bytes) -> None:
        self._serving(link).cancel(Cancel.decode(payload).consumer)

    def _asking(self, link: PeerLink, record: Consumed | Got | Deliver | Cancelled) -> None:
        remote = self._remote[link.peer]
        if remote.link is not link:
            return  # from a link that was replaced: what it answered was failed already
        if isinstance(record, Consumed):
            remote.consumed(record)
        elif isinstance(record, Got):
            remote.got(record)
        elif isinstance(record, Deliver):
            remote.deliver(record)
        else:
            remote.cancelled(record)
