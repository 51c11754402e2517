"""The engine side of one client connection: it feeds the protocol state machine, runs each method
through the dispatch table (whose handlers ask the engine's service API), and turns errors into
channel or connection closes; it holds the client's input while a reply waits. The decisions are
made by their owners: who may open a virtual host (`EngineApi.open_connection`), what holds a
producer back (`ProducerFlow`), what a channel does as it ends (`Channel.close`).

The server layer gives it bytes (`receive_data`) and takes bytes (`flush`); it tells the server
layer when there is something to send (`request_flush`, coalesced to once per loop turn there).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Final, Literal

from pamqp import base, commands
from pamqp.common import FieldTable

from batonmq.amqp.connection import (
    ChannelClosed,
    ChannelFailed,
    ChannelOpened,
    ConnectionEnded,
    ContentReceived,
    Event,
    LoginRequested,
    MethodReceived,
    OpenRequested,
    ServerConnection,
)
from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError, ProtocolError, amqp_error
from batonmq.engine import methods  # noqa: F401 - registers the method handlers
from batonmq.engine.api import EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.change import ChangePending, Waiter
from batonmq.engine.channel import Channel
from batonmq.engine.cleanup import each
from batonmq.engine.consumer import cancel_consumers_of
from batonmq.engine.counters import ConnectionCounters
from batonmq.engine.dispatch import HANDLERS
from batonmq.engine.flowcontrol import ProducerFlow
from batonmq.engine.publish import publish
from batonmq.engine.spreading import Spreading
from batonmq.engine.vhost import VirtualHost
from batonmq.model.message import Message
from batonmq.model.topology import ConnectionRef
from batonmq.queues.protocol import RoutedQueue
from batonmq.security.authn import AuthenticationError, LoginAttempt
from batonmq.security.sasl import PeerCertificate

log = logging.getLogger(__name__)

#: Who ended a connection, for its log line.
ClosedBy = Literal["client", "broker"]
#: Closes that are no error: the normal one, and the broker's at shutdown.
_NORMAL_CLOSE_CODES: Final = frozenset({ReplyCode.REPLY_SUCCESS, ReplyCode.CONNECTION_FORCED})

#: Frame overhead counted per delivery when budgeting output (method + header frames).
_DELIVERY_OVERHEAD: Final = 128


class Session:
    def __init__(
        self,
        broker: Broker,
        peer: tuple[str, int],
        request_flush: Callable[[], None],
        output_budget: int = 4 * 1024 * 1024,
        *,
        mechanisms: tuple[str, ...] | None = None,
        peer_certificate: PeerCertificate | None = None,
        local: tuple[str, int] | None = None,
        hand_off: Callable[[str], bool] | None = None,
        handed_over: bool = False,
    ) -> None:
        """`mechanisms`: the SASL mechanisms of the listener the client came in on (the
        broker's default when None); `peer_certificate`: its verified TLS client certificate;
        `local`: the broker's end of the connection. With several worker processes
        (`batonmq.server.handoff`): `hand_off(vhost)` is asked at connection.open and is true
        when the connection went to the worker that owns that virtual host; `handed_over`, the
        client's input is replayed here from its start by that worker."""
        self.broker = broker
        #: What the method handlers ask to change the broker (the engine's service API).
        self.api = EngineApi(broker)
        self.peer = peer
        #: Stable for the broker's life: the id never reused, the name as RabbitMQ's
        #: ("127.0.0.1:54321 -> 127.0.0.1:5672").
        self.id = broker.next_connection_id()
        #: What names it across workers: the exclusive owner of the queues it declares so.
        self.ref = ConnectionRef(*broker.worker_ref, self.id)
        self.name = f"{peer[0]}:{peer[1]}" + (f" -> {local[0]}:{local[1]}" if local else "")
        self.counters = ConnectionCounters()
        self.peer_certificate = peer_certificate
        settings = broker.connection_settings
        if mechanisms is not None:
            settings = dataclasses.replace(settings, mechanisms=mechanisms)
        self.connection = ServerConnection(settings, handed_over=handed_over)
        self._hand_off = hand_off
        self.channels: dict[int, Channel] = {}
        self.vhost_or_none: VirtualHost | None = None
        #: The virtual host connection.open asked for (logged, granted or not).
        self.requested_vhost: str | None = None
        #: The exclusive queues of this connection, this process's and other workers' alike.
        self.exclusive_queues: set[RoutedQueue] = set()
        self.transport_paused = False
        #: Set by the server layer while the socket holds far more than the budget unsent.
        self.output_backed_up = False
        #: Input is buffered but not processed while the client's output is backed up.
        self.input_held = False
        self.ended = False
        self._close_logged = False
        self._request_flush = request_flush
        self._output_budget = output_budget
        #: Input waits while twice the budget waits here (`may_read`).
        self._input_limit = 2 * output_budget
        self._pending_output = 0
        #: Replies waiting for a store commit; input waits with them, to keep replies in order.
        self._awaiting_store = 0
        #: Producer flow control: while anything holds this client's publishing back, the
        #: input of a client that has published is not read.
        self.flow = ProducerFlow(self.connection, request_flush, self.log_fields)
        self.has_published = False
        #: Publishes run since the input was last resumed: at most `broker.publish_batch` before
        #: the input waits for the next loop turn (the memory state's batch, MQ 3.5 admin guide).
        self._publishes_this_turn = 0
        broker.sessions.add(self)
        #: Whether the client's connection went to another worker at connection.open.
        self.handed_off = False
        # A client whose connection moves between workers is counted once across them: opened
        # where it was accepted, closed where it ended.
        if not handed_over:
            broker.counters.connections_opened += 1

    @property
    def vhost(self) -> VirtualHost:
        assert self.vhost_or_none is not None, "no method reaches a channel before open"
        return self.vhost_or_none

    @property
    def username(self) -> str:
        return self.connection.username or ""

    @property
    def client_properties(self) -> FieldTable:
        return self.connection.client_properties

    @property
    def writable(self) -> bool:
        """Whether deliveries may be queued for this client now (its socket keeps up)."""
        return not self.transport_paused and self._pending_output < self._output_budget

    # Input --------------------------------------------------------------------------------

    @property
    def may_read(self) -> bool:
        """Whether input may be processed now: not while this client's output is badly backed
        up (twice the budget waiting here, or the server layer's mark in the socket). Deliveries
        stop earlier, at the budget; holding input there too would deadlock a client that
        publishes and consumes on one connection with blocking writes."""
        return (
            not self.output_backed_up
            and self._pending_output < self._input_limit
            and not self._awaiting_store
            and not (self.flow.holds and self.has_published)
        )

    def after_durable(self, callback: Callable[[bool], None]) -> None:
        """Run `callback(committed)` once everything recorded so far is in the store, holding
        this client's input until then (at once when nothing is waiting to be written)."""
        journal = self.broker.journal
        if not journal.dirty:
            callback(True)
            return
        self._awaiting_store += 1

        def done(committed: bool) -> None:
            self._awaiting_store -= 1
            if not self.ended:
                callback(committed)
            self._request_flush()  # the server layer goes on with held input after the flush

        journal.when_durable(done)

    def hold_input_until(self, register: Callable[[Callable[[], None]], None]) -> None:
        """Hold this client's input until the callback given to `register` is called (a
        basic.get waiting for entries to be read back from the store)."""
        self._awaiting_store += 1

        def done() -> None:
            self._awaiting_store -= 1
            self._request_flush()  # the server layer goes on with held input after the flush

        register(done)

    def receive_data(self, data: bytes) -> None:
        """Process input until it runs out or the output backs up; in the latter case
        `input_held` is set and the rest waits, buffered, for `resume_input`."""
        self.input_held = False
        self._publishes_this_turn = 0
        self.counters.recv_oct += len(data)
        batch = self.broker.publish_batch
        for event in self.connection.receive_data(data):
            self._handle(event)
            if not self.may_read or self._publishes_this_turn >= batch:
                # Over the batch, `may_read` still holds: the server layer goes on next turn.
                self.input_held = True
                break
        if self.connection.is_closing:
            # The state machine closed the connection on bad input (else this is logged).
            self.log_closed("broker", self.connection.close_code, self.connection.close_text)
            self.teardown()
        self._request_flush()

    def resume_input(self) -> None:
        """Go on with held input, if the output has drained enough."""
        if self.input_held and self.may_read:
            self.receive_data(b"")

    def _handle(self, event: Event) -> None:
        if isinstance(event, ContentReceived):
            self._run(event.channel, event.method, event)
        elif isinstance(event, MethodReceived):
            self._run(event.channel, event.method, None)
        elif isinstance(event, ChannelOpened):
            Channel.open(self, event.channel)
        elif isinstance(event, ChannelClosed | ChannelFailed):
            channel = self.channels.pop(event.channel, None)
            if channel is not None:
                channel.close()
        elif isinstance(event, LoginRequested):
            self._login(event)
        elif isinstance(event, OpenRequested):
            self._open(event.virtual_host)
        elif isinstance(event, ConnectionEnded):
            closed_by: ClosedBy = "client" if event.by_peer else "broker"
            self.log_closed(closed_by, event.reply_code, event.reply_text)
            self.teardown()

    def _login(self, event: LoginRequested) -> None:
        """Check the login off the event loop; the client's next frames wait for the answer."""
        attempt = LoginAttempt(event.mechanism, event.response, self.peer[0], self.peer_certificate)

        def register(done: Callable[[], None]) -> None:
            def decided(outcome: str | AuthenticationError) -> None:
                if not self.ended:
                    if isinstance(outcome, AuthenticationError):
                        self.log_closed(
                            "broker",
                            ReplyCode.ACCESS_REFUSED,
                            f"login refused: {outcome.reason}",
                            user=outcome.username,
                            mechanism=event.mechanism,
                        )
                        self.connection.refuse_login(str(outcome))
                    else:
                        self.connection.accept_login(outcome)
                done()

            self.api.authenticate(attempt, decided)

        self.hold_input_until(register)

    def _open(self, name: str) -> None:
        self.requested_vhost = name
        if self._hand_off is not None and self._hand_off(name):
            # Its owner goes on with the client's input: none is processed here any more.
            self.handed_off = True
            self.hold_input_until(lambda _done: None)
            return

        def register(done: Callable[[], None]) -> None:
            def decided(outcome: VirtualHost | HardError) -> None:
                try:
                    self._decided(name, outcome)
                finally:
                    done()

            self.api.open_connection(self.username, name, self.name, self.id, decided)

        self.hold_input_until(register)

    def _decided(self, name: str, outcome: VirtualHost | HardError) -> None:
        """connection.open let in (`outcome` is the virtual host) or refused."""
        if isinstance(outcome, HardError):
            if not self.ended:
                self.close(outcome)
            return
        if self.ended:  # gone while the first worker answered: it never served
            self.api.connection_ended(self.username, name, self.name, self.id)
            return
        self.vhost_or_none = outcome
        spread = outcome.spread
        if spread is not None and not spread.synced:
            self._open_when_synced(spread, name)
            return
        self._opened(name)

    def _open_when_synced(self, spread: Spreading, name: str) -> None:
        """connection.open of a spread virtual host whose topology this worker has not yet
        had from its home: answered once it has (input waits meanwhile), or refused with 320
        CONNECTION_FORCED when that takes too long (the client reconnects later)."""

        def register(done: Callable[[], None]) -> None:
            def synced(ok: bool) -> None:
                try:
                    if self.ended:
                        return
                    if ok:
                        self._opened(name)
                    else:
                        self.close(
                            HardError(
                                ReplyCode.CONNECTION_FORCED,
                                f"home worker of vhost '{name}' is starting",
                                commands.Connection.Open,
                            )
                        )
                finally:
                    done()

            spread.when_synced(synced)

        self.hold_input_until(register)

    def _opened(self, name: str) -> None:
        self.connection.accept_open(name)
        log.info("connection opened", extra=self.log_fields())
        for alarm, reason in self.broker.alarms.items():
            self.flow.hold(alarm, reason)

    def _run(self, number: int, method: base.Frame, content: ContentReceived | None) -> None:
        try:
            if number == 0:
                self._connection_method(method)
                return
            channel = self.channels[number]
            if content is not None:
                assert isinstance(method, commands.Basic.Publish)
                message = Message(
                    method.exchange, method.routing_key, content.header.payload, content.body
                )
                self.has_published = True
                self._publishes_this_turn += 1
                publish(channel, method, message)
                return
            handler = HANDLERS.get(type(method))
            if handler is None:
                raise amqp_error(ReplyCode.COMMAND_INVALID, f"{method.name} is not a client method")
            try:
                handler(channel, method)
            except ChangePending as pending:
                # It names something that waits for the store: run it again once that is done.
                self._run_after(pending.wait, channel, method)
        except ProtocolError as error:
            error.naming(type(method))
            if error.closes_connection:
                self.close(error)
            else:
                self.close_channel(number, error)
        except Exception:
            # A defect, not the client's fault: say so (541), and end the connection so that
            # everything it held goes back to its queues.
            log.exception("internal error in %s", method.name, extra=self.log_fields())
            self.close(HardError(ReplyCode.INTERNAL_ERROR, "internal error", type(method)))

    def _run_after(self, wait: Waiter, channel: Channel, method: base.Frame) -> None:
        """Hold this client's input until what `wait` registers with is done, then run
        `method` again."""
        self.hold_input_until(lambda done: wait(lambda: self.run_again(channel, method, done)))

    def run_again(self, channel: Channel, method: base.Frame, then: Callable[[], None]) -> None:
        """Run a method that waited (for the store) once more, then call `then`."""
        try:
            if not channel.closed and not self.ended:
                self._run(channel.number, method, None)
        finally:
            then()

    def _connection_method(self, method: base.Frame) -> None:
        if isinstance(method, commands.Connection.UpdateSecret):
            # The new secret would be a new token; guest/guest has none to refresh.
            self.send_method(0, commands.Connection.UpdateSecretOk())
            return
        raise amqp_error(ReplyCode.COMMAND_INVALID, f"{method.name} on channel 0")

    # Output -------------------------------------------------------------------------------

    def request_flush(self) -> None:
        self._request_flush()

    def send_method(self, channel: int, method: base.Frame) -> None:
        self.connection.send_method(channel, method)
        self._request_flush()

    def send_frame(self, frame: bytes) -> None:
        self.connection.send_frame(frame)
        self._request_flush()

    def send_content(self, channel: int, method_frame: bytes, message: Message) -> None:
        self.connection.send_content(channel, method_frame, message.header_payload, message.body)
        self._pending_output += message.body_size + _DELIVERY_OVERHEAD
        self._request_flush()

    def flush(self) -> list[bytes | memoryview]:
        """Everything to write now: pending publisher confirms, then the queued frames."""
        for channel in self.channels.values():
            self._send_confirms(channel)
        was_writable = self.writable
        self._pending_output = 0
        output = self.connection.data_to_send()
        self.counters.send_oct += sum(map(len, output))
        if not was_writable and self.writable:
            self.resume()  # what this queues goes out with the next flush, which it requests
        return output

    def _send_confirms(self, channel: Channel) -> None:
        confirms = channel.confirms
        if confirms is None or not confirms.has_settled:
            return
        for frame in confirms.take_frames():
            method: base.Frame = (
                commands.Basic.Ack(frame.delivery_tag, frame.multiple)
                if frame.ack
                else commands.Basic.Nack(frame.delivery_tag, frame.multiple, False)
            )
            self.connection.send_method(channel.number, method)

    def set_transport_paused(self, paused: bool) -> None:
        self.transport_paused = paused
        if not paused and self.writable:
            self.resume()

    def resume(self) -> None:
        for channel in list(self.channels.values()):
            channel.resume()

    # Closing ------------------------------------------------------------------------------

    def close_channel(self, number: int, error: ProtocolError) -> None:
        # A client can repeat an error once per publish, reopening the channel each time: one
        # line, then a count (hardening).
        line = {
            **self.log_fields(),
            "channel": number,
            "code": int(error.reply_code),
            "reason": error.reply_text,
        }
        self._log_repeatable(logging.INFO, "channel closed by broker", line)
        channel = self.channels.pop(number, None)
        if channel is not None:
            # Publishes routed before the error were taken: confirm them before the close.
            self._send_confirms(channel)
            channel.close()
        self.connection.close_channel(number, error)
        self._request_flush()

    def close(self, error: ProtocolError) -> None:
        """Close the connection with `error` (a hard error, or 320 at shutdown)."""
        self.log_closed("broker", error.reply_code, error.reply_text)
        self.connection.close(error)
        self.teardown()
        self._request_flush()

    def remove_queue(self, queue: RoutedQueue) -> None:
        self.exclusive_queues.discard(queue)
        vhost = self.vhost
        local = vhost.queues.get(queue.name)
        if local is queue:
            vhost.remove_queue(local, on_delete=cancel_consumers_of)
        else:
            vhost.remove_remote(queue, self.ref)

    def teardown(self) -> None:
        """The connection is over, however it ended: close every channel (their unsettled
        deliveries go back to their queues) and delete the queues it owned exclusively."""
        if self.ended:
            return
        self.ended = True
        fields = self.log_fields
        try:
            try:
                each(self.channels.values(), Channel.close, "closing a channel", fields)
            finally:  # a cancellation raised by a channel's close: exclusive queues still go
                self.channels.clear()
                each(
                    self.exclusive_queues, self.remove_queue, "deleting an exclusive queue", fields
                )
        finally:
            self.broker.sessions.discard(self)
            if not self.handed_off:
                self.broker.counters.connections_closed += 1
            if self.vhost_or_none is not None:
                self.api.connection_ended(
                    self.username, self.vhost_or_none.name, self.name, self.id
                )

    def log_closed(
        self, closed_by: ClosedBy, code: int | None, reason: str, **fields: object
    ) -> None:
        """Log the end of this connection, once (hardening: "Every connection the broker closes,
        for any reason ..., is logged once with peer address, user, vhost, code and reason"):
        the first end told is the cause (a close sent or received, a refused login, a timeout,
        a lost socket); what follows it (the close-ok, the socket closing) is the same end.
        `code` is None when no connection.close went either way. A broker's close for an
        error is a warning; the rest (the client's, 200, 320 at shutdown) is information.
        Repeats of one end from one host (a guesser, a client that reconnects in a loop) are
        counted rather than written one by one."""
        if self._close_logged:
            return
        self._close_logged = True
        error = closed_by == "broker" and code not in _NORMAL_CLOSE_CODES
        line = {
            **self.log_fields(),
            "code": None if code is None else int(code),
            "reason": reason,
            "closed_by": closed_by,
            **fields,
        }
        self._log_repeatable(logging.WARNING if error else logging.INFO, "connection closed", line)

    def _log_repeatable(self, level: int, text: str, line: dict[str, object]) -> None:
        """Log a line that a client can make the broker repeat: repeats from one host that
        differ only in the client's port and channel are counted (`CoalescingLog`)."""
        same = tuple(value for name, value in line.items() if name not in ("peer", "channel"))
        self.broker.session_log.log(level, text, line, key=(level, text, self.peer[0], *same))

    def log_fields(self) -> dict[str, object]:
        return {
            "peer": f"{self.peer[0]}:{self.peer[1]}",
            "user": self.connection.username,
            "vhost": self.requested_vhost,
        }
