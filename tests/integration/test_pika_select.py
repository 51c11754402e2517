"""pika's asynchronous SelectConnection against a real broker: callbacks all the way down.

Written against RabbitMQ 3.10.8 first (`--amqp-url`); docstrings quote the AMQP 0-9-1 rule or the
RabbitMQ guide each test enforces. Callbacks only record what happened; the assertions run after
the ioloop has stopped, so a failed expectation never leaves the loop half-way.
"""

from __future__ import annotations

from collections.abc import Callable

import pika
from pika.adapters.select_connection import SelectConnection
from pika.channel import Channel
from pika.exceptions import ConnectionClosedByClient
from pika.frame import Method
from pika.spec import Basic, BasicProperties, Confirm, Queue

from tests.brokerproc import RunningBroker

DEADLINE_SECONDS = 10.0


def run_until_closed(broker: RunningBroker, on_open: Callable[[SelectConnection], None]) -> None:
    """Open a SelectConnection, hand it to `on_open`, and run its ioloop until it closes.

    The scenario ends by closing the connection itself; if it has not within the deadline, or if
    the connection closed for any other reason, the test fails.
    """
    outcome: list[BaseException] = []
    timed_out: list[bool] = []

    def on_open_error(connection: SelectConnection, error: BaseException) -> None:
        outcome.append(error)
        connection.ioloop.stop()

    def on_closed(connection: SelectConnection, reason: BaseException) -> None:
        outcome.append(reason)
        connection.ioloop.stop()

    def on_deadline() -> None:
        timed_out.append(True)
        connection.close()

    connection = SelectConnection(
        pika.URLParameters(broker.url),
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=on_closed,
    )
    connection.ioloop.call_later(DEADLINE_SECONDS, on_deadline)
    try:
        connection.ioloop.start()
    finally:
        connection.ioloop.close()  # its wake-up socket pair; left open it is a ResourceWarning
    assert not timed_out, f"the scenario did not finish within {DEADLINE_SECONDS} s"
    [reason] = outcome
    assert isinstance(reason, ConnectionClosedByClient), repr(reason)
    assert reason.reply_code == 200


class ConfirmedRoundTrip:
    """Confirm mode, a server-named queue, a consumer that acks, then `count` publishes.

    Once every message is both confirmed and delivered, the channel is closed (which would requeue
    anything still unacked) and a second channel counts what is left in the queue.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.confirmed: list[int] = []
        self.nacked: list[int] = []
        self.received: list[tuple[bytes, bool]] = []
        self.left_after_acks: list[int] = []
        self.queue = ""
        self.closing = False

    def on_open(self, connection: SelectConnection) -> None:
        self.connection = connection
        connection.channel(on_open_callback=self.on_channel)

    def on_channel(self, channel: Channel) -> None:
        self.channel = channel
        channel.add_on_close_callback(self.on_channel_closed)
        channel.confirm_delivery(self.on_confirm, callback=self.on_confirm_mode)

    def on_confirm_mode(self, _frame: Method[Confirm.SelectOk]) -> None:
        self.channel.queue_declare("", exclusive=True, callback=self.on_declared)

    def on_declared(self, frame: Method[Queue.DeclareOk]) -> None:
        self.queue = frame.method.queue
        self.channel.basic_consume(self.queue, self.on_message, callback=self.on_consuming)

    def on_consuming(self, _frame: Method[Basic.ConsumeOk]) -> None:
        for index in range(self.count):
            self.channel.basic_publish("", self.queue, str(index).encode())

    def on_confirm(self, frame: Method[Basic.Ack] | Method[Basic.Nack]) -> None:
        settled = self.confirmed if isinstance(frame.method, Basic.Ack) else self.nacked
        tag = frame.method.delivery_tag
        if frame.method.multiple:
            already = {*self.confirmed, *self.nacked}
            settled.extend(t for t in range(1, tag + 1) if t not in already)
        else:
            settled.append(tag)
        self.maybe_done()

    def on_message(
        self, channel: Channel, method: Basic.Deliver, _props: BasicProperties, body: bytes
    ) -> None:
        self.received.append((body, method.redelivered))
        channel.basic_ack(method.delivery_tag)
        self.maybe_done()

    def maybe_done(self) -> None:
        settled = len(self.confirmed) + len(self.nacked)
        if not self.closing and len(self.received) == self.count and settled == self.count:
            self.closing = True
            self.channel.close()

    def on_channel_closed(self, _channel: Channel, _reason: BaseException) -> None:
        self.connection.channel(on_open_callback=self.on_probe_channel)

    def on_probe_channel(self, probe: Channel) -> None:
        probe.queue_declare(self.queue, passive=True, callback=self.on_probed)

    def on_probed(self, frame: Method[Queue.DeclareOk]) -> None:
        self.left_after_acks.append(frame.method.message_count)
        self.connection.close()


def test_publish_consume_ack_round_trip_with_confirms(broker: RunningBroker) -> None:
    """Every message published on a confirm channel is confirmed once, delivered once, and acked.

    RabbitMQ, "Publisher Confirms": "Once a channel is in confirm mode, both the broker and the
    client count messages (counting starts at 1 on the first basic.publish) ... The broker may
    also set the multiple field in basic.ack to indicate that all messages up to and including the
    one with the sequence number have been handled." AMQP 0-9-1 basic.ack: "This method
    acknowledges one or more messages delivered via the Deliver or Get-Ok methods."
    """
    scenario = ConfirmedRoundTrip(count=50)
    run_until_closed(broker, scenario.on_open)
    assert sorted(scenario.confirmed) == list(range(1, 51))
    assert scenario.nacked == []
    assert scenario.received == [(str(index).encode(), False) for index in range(50)]
    assert scenario.left_after_acks == [0]


class RequeueOnChannelClose:
    """Publish three messages, consume them without acking, close the channel, consume again."""

    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = bodies
        self.first_round: list[tuple[bytes, bool]] = []
        self.second_round: list[tuple[bytes, bool]] = []
        self.queue = ""

    def on_open(self, connection: SelectConnection) -> None:
        self.connection = connection
        connection.channel(on_open_callback=self.on_first_channel)

    def on_first_channel(self, channel: Channel) -> None:
        channel.add_on_close_callback(self.on_first_channel_closed)
        channel.queue_declare("", exclusive=True, callback=self.on_declared)
        self.first_channel = channel

    def on_declared(self, frame: Method[Queue.DeclareOk]) -> None:
        self.queue = frame.method.queue
        for body in self.bodies:
            self.first_channel.basic_publish("", self.queue, body)
        self.first_channel.basic_consume(self.queue, self.on_first_delivery)

    def on_first_delivery(
        self, channel: Channel, method: Basic.Deliver, _props: BasicProperties, body: bytes
    ) -> None:
        self.first_round.append((body, method.redelivered))
        if len(self.first_round) == len(self.bodies):
            channel.close()  # with all three unacked

    def on_first_channel_closed(self, _channel: Channel, _reason: BaseException) -> None:
        self.connection.channel(on_open_callback=self.on_second_channel)

    def on_second_channel(self, channel: Channel) -> None:
        channel.basic_consume(self.queue, self.on_second_delivery, auto_ack=True)

    def on_second_delivery(
        self, _channel: Channel, method: Basic.Deliver, _props: BasicProperties, body: bytes
    ) -> None:
        self.second_round.append((body, method.redelivered))
        if len(self.second_round) == len(self.bodies):
            self.connection.close()


def test_closing_a_channel_requeues_its_unacked_messages(broker: RunningBroker) -> None:
    """Deliveries left unacked when their channel closes are redelivered, marked redelivered.

    AMQP 0-9-1 basic.consume: "Consumers last as long as the channel they were declared on, or
    until the client cancels them."; basic class rule 10 scenario: "Consume the messages but
    acknowledge only half of them. Disconnect and reconnect, and consume from the queue. Verify
    that the remaining messages are received."; domain redelivered, rule implementation scenario:
    "Consume the message using explicit acknowledgements, but do not acknowledge the message.
    Close the connection, reconnect, and consume from the queue again. The message should arrive
    with the redelivered flag set."
    """
    bodies = [b"1", b"2", b"3"]
    scenario = RequeueOnChannelClose(bodies)
    run_until_closed(broker, scenario.on_open)
    assert scenario.first_round == [(body, False) for body in bodies]
    assert scenario.second_round == [(body, True) for body in bodies]
