"""One open AMQP channel on the engine side: its consumers, the deliveries it has not had settled,
its prefetch, flow, publisher confirms and transaction, and the rules that are the channel's
(consumer tags and the consumer limit, qos, confirm or transaction mode, the last declared
queue): the method handlers ask it, and keep no rule of their own.

Delivery tags are per channel, start at 1 and only grow (spec, basic.deliver delivery-tag). An
unsettled delivery is either acked (gone), requeued (back in its queue, redelivered=true) or
discarded; whatever ends the channel requeues every unsettled delivery (BatonMQ style §10). So does
whatever ends a single active consumer, for the consumer that takes over from it.
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pamqp import base
from pamqp.common import FieldTable

from batonmq.amqp import outgoing
from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError, amqp_error
from batonmq.engine.change import Change, ChangePending
from batonmq.engine.cleanup import each
from batonmq.engine.confirms import ConfirmTracker
from batonmq.engine.consumer import (
    ConsumedQueue,
    Consumer,
    admitted,
    cancel_consumers_of,
    consumer_tag,
)
from batonmq.engine.counters import ChannelCounters
from batonmq.engine.events import EventKind
from batonmq.engine.handout import hand_out, requeue_returned, settle_entry
from batonmq.engine.outcome import Outcome
from batonmq.engine.transaction import Transaction
from batonmq.model.message import QueueEntry
from batonmq.queues.protocol import Queue, RoutedQueue
from batonmq.security.permissions import PermitCache

if TYPE_CHECKING:
    from batonmq.engine.session import Session

log = logging.getLogger(__name__)


T = TypeVar("T")
#: What a method replies: a method, an encoded frame, or methods in order.
Reply = base.Frame | bytes | list[base.Frame]


def _write_failed(what: str) -> ProtocolError:
    return amqp_error(
        ReplyCode.PRECONDITION_FAILED,
        f"{what} failed: the store could not write it",
    )


@dataclass(slots=True)
class Unsettled:
    entry: QueueEntry
    queue: ConsumedQueue
    #: None for basic.get deliveries, which do not count against any prefetch.
    consumer: Consumer | None


class Channel:
    def __init__(self, session: Session, number: int) -> None:
        self.session = session
        #: The session's virtual host (channels open only after connection.open chose it).
        self.vhost = session.vhost
        self.number = number
        #: As RabbitMQ names a channel: its connection's name and number.
        self.name = f"{session.name} ({number})"
        self.counters = ChannelCounters()
        self.consumers: dict[str, Consumer] = {}
        self.unsettled: OrderedDict[int, Unsettled] = OrderedDict()
        self._last_delivery_tag = 0
        #: Tags of deliveries requeued when their single active consumer was cancelled: the
        #: client may still settle them, which then settles nothing.
        self._released_tags: set[int] = set()
        #: basic.qos global=false: the prefetch each consumer created from now on gets.
        self.consumer_prefetch = 0
        #: basic.qos global=true: a limit shared by all consumers of the channel; 0 = none.
        self.channel_prefetch = 0
        self._consumer_unsettled = 0
        self.flow_active = True
        self.confirms: ConfirmTracker | None = None
        self.transaction: Transaction | None = None
        #: Spec (queue.bind etc.): an empty queue name means the last queue declared here.
        self.last_queue_name: str | None = None
        #: The queue this channel's queue.delete waits for the reply of, and the basic.cancel
        #: of its consumers of that queue, which follow delete-ok (RabbitMQ: "a client that
        #: sees the cancel first tears down its pending reply"), wherever the queue runs.
        self.cancels_after_delete: dict[str, list[base.Frame]] = {}
        #: Queues with x-max-producers this channel published to: it is one of their producers
        #: until it closes.
        self.producing_to: set[RoutedQueue] = set()
        #: Overfull queues (x-overflow flow-control) holding this channel's publishing back.
        self.held_by: set[RoutedQueue] = set()
        #: The exchanges this channel's user may publish to, and the queues it may get from,
        #: checked once each while the permissions do not change.
        self.write_permits = PermitCache()
        self.read_permits = PermitCache()
        self.closed = False

    @classmethod
    def open(cls, session: Session, number: int) -> Channel:
        """channel.open: the channel, one of the session's channels, counted and told to the
        event feed."""
        channel = session.channels[number] = cls(session, number)
        broker = session.broker
        broker.counters.channels_opened += 1
        broker.events.publish(
            EventKind.CHANNEL_CREATED, channel.name, session.vhost.name, connection=session.id
        )
        return channel

    def reply(self, method: base.Frame) -> None:
        self.session.send_method(self.number, method)

    def _send(self, reply: Reply) -> None:
        if isinstance(reply, bytes):
            self.session.send_frame(reply)
        elif isinstance(reply, list):
            for method in reply:
                self.reply(method)
        else:
            self.reply(reply)

    def reply_when_durable(self, reply: Reply, what: str) -> None:
        """Reply once the changes made so far are committed to the store (a durable declare,
        bind, delete, purge, or tx.commit); input from this client waits meanwhile, so nothing
        it sends next overtakes the reply. A failed write closes the channel: `what` did not
        become durable."""

        def send(committed: bool) -> None:
            if self.closed:
                return
            if not committed:
                self.session.close_channel(self.number, _write_failed(what))
            else:
                self._send(reply)

        self.session.after_durable(send)

    def carry_out(
        self,
        change: Change[T],
        reply: Callable[[T], Reply | None],
        method: type[base.Frame],
    ) -> None:
        """Apply `change` once its store writes are committed (or its `after` said yes), then
        send what `reply` makes of its result (None: no reply, as for nowait). This client's
        input waits meanwhile, so nothing it sends next overtakes the change. A failed write
        applies nothing and closes the channel: `method` did not happen; a refusal closes the
        channel, or the connection, with its error, naming `method`."""
        session = self.session
        what = method.name.lower()  # "queue.declare"
        if not change.waits:
            frame = reply(change.apply())
            if frame is not None:
                self.reply_when_durable(frame, what)
            return

        def register(release_input: Callable[[], None]) -> None:
            def done(result: T) -> None:
                try:
                    frame = reply(result)
                    if frame is not None and not self.closed:
                        self._send(frame)
                finally:
                    release_input()

            def failed(refusal: ProtocolError | None) -> None:
                try:
                    if refusal is not None and refusal.naming(method).closes_connection:
                        if not session.ended:
                            session.close(refusal)
                    elif not self.closed:
                        session.close_channel(self.number, refusal or _write_failed(what))
                finally:
                    release_input()

            session.vhost.carry_out(change, done, failed)

        session.hold_input_until(register)

    # Queues -------------------------------------------------------------------------------

    def queue_name(self, name: str) -> str:
        """Spec (queue.bind and others): "If the queue name is empty, the server uses the last
        queue declared on the channel"; with none declared that is 404 (rule queue-known, as
        RabbitMQ)."""
        if name:
            return name
        if self.last_queue_name is None:
            raise amqp_error(ReplyCode.NOT_FOUND, "no previously declared queue")
        return self.last_queue_name

    def declared(self, queue: RoutedQueue) -> None:
        """queue.declare on this channel found or made `queue`: it is the channel's last queue,
        and an exclusive queue of its connection goes when the connection does (wherever it
        runs)."""
        self.last_queue_name = queue.name
        session = self.session
        if queue.exclusive_owner == session.ref:
            session.exclusive_queues.add(queue)

    def deleting(self, queue: Queue) -> None:
        """queue.delete on this channel deletes `queue`: its connection no longer deletes it
        when it ends, and its consumers are cancelled (`cancel_consumers_of`)."""
        self.session.exclusive_queues.discard(queue)
        cancel_consumers_of(queue)

    # Modes ---------------------------------------------------------------------------------

    def set_qos(self, prefetch_size: int, prefetch_count: int, global_: bool) -> None:
        """basic.qos. RabbitMQ's per_consumer_qos: global=false limits each consumer created
        from now on, global=true the channel's consumers together."""
        if prefetch_size:
            # As RabbitMQ: a byte-size prefetch window is not implemented.
            raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "prefetch_size!=0")
        if global_:
            self.channel_prefetch = prefetch_count
            self.resume()
        else:
            self.consumer_prefetch = prefetch_count

    def set_flow(self, active: bool) -> None:
        """channel.flow from the client: stop or restart deliveries to this channel."""
        self.flow_active = active
        if active:
            self.resume()

    def select_confirms(self) -> None:
        """confirm.select: publisher confirms for the rest of the channel's life."""
        if self.transaction is not None:
            # RabbitMQ: "a channel in transactional mode cannot be put into confirm mode".
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                "transactional channels cannot be put into confirm mode",
            )
        if self.confirms is None:
            self.confirms = ConfirmTracker(self.counters)

    def select_transactions(self) -> None:
        """tx.select: the channel is transactional for the rest of its life."""
        if self.confirms is not None:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED, "channels in confirm mode cannot be transactional"
            )
        if self.transaction is None:
            self.transaction = Transaction()

    def current_transaction(self) -> Transaction:
        """The transaction tx.commit and tx.rollback end (406 on a channel without one)."""
        if self.transaction is None:
            # Spec (tx.commit): "The client MUST NOT use the Commit method on non-transacted
            # channels".
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        return self.transaction

    def settle_publish(self, sequence: int, committed: bool) -> None:
        """A publish that waited for the store is durable (ack) or failed to be written (nack)."""
        if self.confirms is not None and not self.closed:
            self.confirms.settle(sequence, committed)
            self.session.request_flush()

    def settle_publishes(self, publishes: list[tuple[int, bool]], committed: bool) -> None:
        """Publishes (sequence, whether every queue took it) that waited for one write, which
        `committed` or failed: acked if both, else nacked."""
        confirms = self.confirms
        if confirms is not None and not self.closed:
            for sequence, taken in publishes:
                confirms.settle(sequence, committed and taken)
            self.session.request_flush()

    # Delivery -----------------------------------------------------------------------------

    def can_deliver(self) -> bool:
        session = self.session
        return self.flow_active and session.writable and not self.closed and not session.ended

    def global_room(self) -> bool:
        left = self.global_room_left()
        return left is None or left > 0

    def global_room_left(self) -> int | None:
        """How many more deliveries to its consumers the channel's prefetch (basic.qos
        global) lets through; None without one."""
        if not self.channel_prefetch:
            return None
        return self.channel_prefetch - self._consumer_unsettled

    def deliver(self, consumer: Consumer, queue: ConsumedQueue, entry: QueueEntry) -> None:
        tag = self._next_tag()
        message = entry.message
        self.session.send_content(
            self.number,
            outgoing.basic_deliver(
                self.number,
                consumer.tag,
                tag,
                entry.redelivered,
                message.exchange,
                message.routing_key,
            ),
            message,
        )
        counters = self.counters
        counters.deliver += 1
        if entry.redelivered:
            counters.redeliver += 1
        hand_out(queue, entry, no_ack=consumer.no_ack, get=False)
        if not consumer.no_ack:
            self.unsettled[tag] = Unsettled(entry, queue, consumer)
            consumer.unacked += 1
            self._consumer_unsettled += 1

    def get(self, queue: Queue, no_ack: bool) -> bool:
        """basic.get: deliver the next ready message of `queue` to this channel (get-ok), or
        say there is none (False). ChangePending while what this channel published to the
        queue waits for its commit (it is found, in the channel's order), or while its next
        messages are read back from the store (they are answered, in order)."""
        self.session.vhost.wait_for_held(queue)
        entry = queue.get()
        if entry is None and queue.waiting_for_page_in:
            raise ChangePending(queue.when_paged_in)
        if entry is None:
            return False
        self.deliver_get(queue, entry, no_ack, queue.message_count)
        return True

    def deliver_get(
        self, queue: ConsumedQueue, entry: QueueEntry, no_ack: bool, message_count: int
    ) -> None:
        """get-ok with `entry` of `queue`, which has `message_count` ready messages left."""
        tag = self._next_tag()
        message = entry.message
        self.session.send_content(
            self.number,
            outgoing.basic_get_ok(
                self.number,
                tag,
                entry.redelivered,
                message.exchange,
                message.routing_key,
                message_count,
            ),
            message,
        )
        self.counters.get += 1
        if entry.redelivered:
            self.counters.redeliver += 1
        hand_out(queue, entry, no_ack=no_ack, get=True)
        if not no_ack:
            self.unsettled[tag] = Unsettled(entry, queue, None)

    def _next_tag(self) -> int:
        self._last_delivery_tag += 1
        return self._last_delivery_tag

    # Settlement ---------------------------------------------------------------------------

    def check_tags(self, delivery_tag: int, multiple: bool) -> list[int]:
        """The unsettled tags an ack/nack/reject names; 406 for a tag that is not unsettled
        (nor released by a cancelled single active consumer: naming one of those settles
        nothing, and forgets it)."""
        released = self._released_tags
        if multiple and delivery_tag == 0:
            # Spec (basic.ack multiple): tag 0 with multiple means all outstanding deliveries.
            released.clear()
            return list(self.unsettled)
        if delivery_tag not in self.unsettled and delivery_tag not in released:
            # Spec (basic.ack delivery-tag): a tag that is not an unsettled delivery is a channel
            # error; with multiple too (RabbitMQ: 406 "unknown delivery tag").
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
        if multiple:
            if released:
                self._released_tags = {tag for tag in released if tag > delivery_tag}
            # "up to and including" the named tag; tags are kept in increasing order, and the
            # common ack names the last one: all of them, without a test per tag.
            unsettled = self.unsettled
            if not unsettled or delivery_tag >= next(reversed(unsettled)):
                return list(unsettled)
            return list(itertools.takewhile(lambda tag: tag <= delivery_tag, unsettled))
        if delivery_tag in released:
            released.discard(delivery_tag)
            return []
        return [delivery_tag]

    def settle_named(self, delivery_tag: int, multiple: bool, outcome: Outcome) -> None:
        """basic.ack, nack or reject: settle the deliveries they name now, or in a transaction
        once it commits."""
        tags = self.check_tags(delivery_tag, multiple)
        if self.transaction is None:
            self.settle(tags, outcome)
        else:
            self.transaction.hold_settlement(delivery_tag, multiple, tags, outcome)

    def settle(self, tags: Iterable[int], outcome: Outcome) -> None:
        """Settle deliveries: acknowledge, requeue or reject them. Each leaves the channel as
        its queue takes it: if a queue's step raises, the deliveries after it stay unsettled
        here (requeued when the channel closes), not lost."""
        returned: defaultdict[ConsumedQueue, list[QueueEntry]] = defaultdict(list)
        with_room: set[ConsumedQueue] = set()
        take, counters, acks = self.unsettled.pop, self.counters, outcome is Outcome.ACK
        for tag in tags:
            unsettled = take(tag, None)
            if unsettled is None:
                continue  # settled meanwhile (a transaction naming a tag twice)
            consumer = unsettled.consumer
            if consumer is not None:
                consumer.unacked -= 1
                self._consumer_unsettled -= 1
                with_room.add(consumer.queue)
            if acks:
                counters.ack += 1
            settle_entry(unsettled.queue, unsettled.entry, outcome, returned)
        fields = self.log_fields
        if returned:
            requeue_returned(returned, fields)
        each(with_room - returned.keys(), lambda queue: queue.dispatch(), "dispatching", fields)
        if self.channel_prefetch:
            self._dispatch_consumers()

    def forget(self, tags: Iterable[int]) -> None:
        """The deliveries of `tags` are not this channel's to settle any more: the worker that
        runs their queue went down and requeued them itself. The client may still settle them,
        which then settles nothing (as a tag a cancelled single active consumer released)
        rather than closing the channel with 406: RabbitMQ's acknowledgements promise delivery
        "at least once", so a message whose ack could not reach its queue is delivered again,
        and the client that acks it did nothing wrong."""
        for tag in tags:
            unsettled = self.unsettled.pop(tag, None)
            if unsettled is None:
                continue
            unsettled.queue.unacked -= 1
            consumer = unsettled.consumer
            if consumer is not None:
                consumer.unacked -= 1
                self._consumer_unsettled -= 1
            self._released_tags.add(tag)
        if self.channel_prefetch:
            # Their room under a channel-wide prefetch is the other consumers' now.
            self._dispatch_consumers()

    def recover(self, requeue: bool) -> None:
        """basic.recover: requeue everything unsettled, or (requeue=false) deliver it again to
        the consumers that had it (spec: "redelivered to the original recipient")."""
        if requeue:
            self.settle(list(self.unsettled), Outcome.REQUEUE)
            return
        for tag in list(self.unsettled):
            unsettled = self.unsettled[tag]
            consumer = unsettled.consumer
            if consumer is None or self.consumers.get(consumer.tag) is not consumer:
                self.settle([tag], Outcome.REQUEUE)
                continue
            del self.unsettled[tag]
            unsettled.queue.unacked -= 1
            consumer.unacked -= 1
            self._consumer_unsettled -= 1
            unsettled.entry.redelivered = True
            self.deliver(consumer, unsettled.queue, unsettled.entry)

    # Consumers ----------------------------------------------------------------------------

    def new_consumer(
        self, queue: Queue, tag: str, *, no_ack: bool, exclusive: bool, arguments: FieldTable
    ) -> Consumer:
        """basic.consume: a consumer of `queue` on this channel (tag "": one the server makes),
        once the rules admit it: its tag is new here, the channel is under its limit of
        consumers, and the queue admits it (`admitted`). Started by `add_consumer`, once the
        caller has replied."""
        tag = self.new_consumer_tag(tag)
        where = f"queue '{queue.name}' in vhost '{self.session.vhost.name}'"
        return admitted(
            self, queue, tag, no_ack=no_ack, exclusive=exclusive, arguments=arguments, where=where
        )

    def new_consumer_tag(self, tag: str) -> str:
        """The tag of a new consumer on this channel (for "": one the server makes), once the
        rules of the channel admit it: the tag is new here, and the channel is under its limit
        of consumers."""
        tag = tag or consumer_tag()
        if tag in self.consumers:
            # Spec (basic.consume consumer-tag): reusing a tag on the channel is 530 NOT_ALLOWED.
            raise amqp_error(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        session = self.session
        limit = session.broker.settings.max_consumers_per_channel
        if limit and len(self.consumers) >= limit:
            # The Overload requirements: "consumers per channel; each refusal names the limit".
            # RabbitMQ's consumer_max_per_channel: 530 "reached maximum (~B) of consumers per
            # channel".
            raise amqp_error(
                ReplyCode.NOT_ALLOWED,
                f"reached maximum ({limit}) of consumers per channel "
                "(limits.max_consumers_per_channel)",
            )
        return tag

    def add_consumer(self, consumer: Consumer) -> None:
        """Start a consumer `new_consumer` made: it takes what its queue has ready at once."""
        self.consumers[consumer.tag] = consumer
        queue = consumer.queue
        queue.add_consumer(consumer)
        self._consumer_event(EventKind.CONSUMER_CREATED, consumer)
        queue.dispatch()

    def remove_consumer(self, tag: str) -> Consumer | None:
        consumer = self.consumers.pop(tag, None)
        if consumer is not None:
            queue = consumer.queue
            queue.remove_consumer(consumer)
            self._consumer_event(EventKind.CONSUMER_DELETED, consumer)
            if queue.consumers.hands_over:
                self._hand_over(consumer)
            local = self.vhost.queues.get(queue.name)
            if local is queue and queue.auto_delete and not queue.consumers and not queue.deleted:
                # RabbitMQ: an auto-delete queue goes when its last consumer is cancelled (where
                # another worker runs it, that worker sees its consumers go).
                self.session.remove_queue(local)
        return consumer

    def _consumer_event(self, kind: EventKind, consumer: Consumer) -> None:
        session = self.session
        session.broker.events.publish(
            kind, consumer.tag, session.vhost.name, queue=consumer.queue.name, channel=self.name
        )

    def _hand_over(self, consumer: Consumer) -> None:
        """x-single-active-consumer: the next consumer takes over the work of `consumer`, which
        is gone (MQ 3.5 admin guide: "the first backup consumer is made active, and takes over the
        work of the failed consumer"). Its unsettled deliveries go back to their places first, so
        that the new active consumer gets them in their original order, before anything newer; after
        a basic.cancel too, unlike other consumers' deliveries (spec basic.cancel)."""
        tags = [tag for tag, unsettled in self.unsettled.items() if unsettled.consumer is consumer]
        self._released_tags.update(tags)
        self.settle(tags, Outcome.REQUEUE)
        consumer.queue.dispatch()  # what waits goes to the new one now, requeued or not

    def resume(self) -> None:
        """Output can flow again (flow on, or the socket drained): serve this channel's queues."""
        self._dispatch_consumers()

    def _dispatch_consumers(self) -> None:
        for queue in {consumer.queue for consumer in self.consumers.values()}:
            queue.dispatch()

    # Producers ----------------------------------------------------------------------------

    def become_producer_of(self, queue: RoutedQueue) -> None:
        """Count this channel among `queue`'s producers (x-max-producers, MQ 3.5 admin guide
        maxNumProducers: "When this limit is reached, no new producers can be created"); 406
        when it would be one too many."""
        if self in queue.producers:
            return
        limit = queue.options.max_producers
        if limit is not None and len(queue.producers) >= limit:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"queue '{queue.name}' in vhost '{self.session.vhost.name}' has reached its "
                f"limit of {limit} producers (x-max-producers)",
            )
        queue.producers.add(self)
        self.producing_to.add(queue)

    def hold_for(self, queue: RoutedQueue) -> None:
        """`queue` is overfull after this channel published to it: hold the publisher back until
        it is underfull (Qpid manual §1.5.1: "Flow control is enabled on a producer when it sends
        a message to a Queue which is overfull")."""
        if queue in self.held_by:
            return
        self.held_by.add(queue)
        self.session.flow.hold(queue, f"queue '{queue.name}' is overfull")
        log.info("CHN-1005 : Flow Control Enforced (Queue %s)", queue.name, extra=self.log_fields())
        queue.when_underfull(lambda: self._released_by(queue))

    def _released_by(self, queue: RoutedQueue) -> None:
        if queue not in self.held_by:
            return
        self.held_by.discard(queue)
        if not self.closed:
            log.info("CHN-1006 : Flow Control Removed", extra=self.log_fields())
        session = self.session
        if not any(queue in channel.held_by for channel in session.channels.values()):
            session.flow.release(queue)

    def log_fields(self) -> dict[str, object]:
        return {**self.session.log_fields(), "channel": self.number}

    # Ending -------------------------------------------------------------------------------

    def close(self) -> None:
        """The channel is gone, however it ended: cancel its consumers and requeue the rest;
        the broker's totals keep what it counted."""
        if self.closed:
            return
        self.closed = True
        fields = self.log_fields
        try:
            try:
                each(self.consumers, self.remove_consumer, "cancelling a consumer", fields)
            finally:  # a cancellation raised by a consumer's removal: the rest still runs
                for queue in self.producing_to:
                    queue.producers.discard(self)
                each(self.held_by, self._released_by, "releasing a flow-control hold", fields)
                self.transaction = None
        finally:
            try:
                self.settle(list(self.unsettled), Outcome.REQUEUE)
            finally:
                self._closed()

    def _closed(self) -> None:
        session = self.session
        broker = session.broker
        broker.counters.channels_closed += 1
        broker.closed_channels.add(self.counters)
        broker.events.publish(
            EventKind.CHANNEL_CLOSED, self.name, session.vhost.name, connection=session.id
        )
