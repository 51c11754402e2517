"""The asyncio glue of one client connection: bytes from the socket go to the session, bytes from
the session go to the socket. No protocol logic lives here (BatonMQ architecture, server/).

- Writes are coalesced: whatever the engine queues during one loop turn goes out in one call:
  one buffer, or with a large body among it `writelines` of its pieces, which uvloop sends with
  one writev, so that large bodies are not copied (joining them cost a large-message replay a
  tenth of its time; small pieces cost more written one by one than joined).
- Backpressure: while the socket's send buffer is over the high-water mark (until it drains
  below the low-water mark), no deliveries are queued for this client. If its unsent output
  still grows past three marks (replies it asked for and does not read), its input is
  neither processed nor read until the buffer drains: the session holds what it has and the
  socket stops being read. So no client can make the broker buffer without bound.
- Heartbeats (spec 4.2.7): sent when nothing else was sent for half the negotiated interval; a
  client silent for two intervals is disconnected.
- One timer per connection, set for the earliest of its deadlines only (the handshake timeout,
  the close-ok timeout, the heartbeat to send, the client's silence): an idle connection costs
  one wake-up per half heartbeat interval, and none at all with heartbeats off.
- With several worker processes: what the client sent until connection.open is kept, and at
  connection.open for a virtual host another worker owns, the socket and those bytes go to that
  worker (`batonmq.server.handoff`), which replays them into a session of its own. A TLS
  client's socket stays, and this worker relays its plaintext to the owner
  (`batonmq.server.relay`).
- TLS (the amqps listener): `accept_tls` runs the handshake and hands the encrypted transport to
  an AMQPProtocol; a client that fails it is logged with its address and gets no session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import ssl
from collections.abc import Callable, Iterator
from typing import Final, cast

from batonmq.amqp.connection import State
from batonmq.engine.broker import Broker
from batonmq.engine.session import Session
from batonmq.server.handoff import Origin, hand_over
from batonmq.server.placement import WorkerSeat
from batonmq.server.relay import Relay

log = logging.getLogger(__name__)

#: A client that has not finished the handshake (connection.open-ok) by then is disconnected
#: (RabbitMQ: 10 s).
HANDSHAKE_TIMEOUT: Final = 10.0
#: How long to wait for connection.close-ok after the broker closed a connection.
CLOSE_TIMEOUT: Final = 3.0
#: Deliveries alone fill a socket's buffer to at most the high-water mark plus one output budget
#: (the same size); beyond three marks, replies the client asked for and does not read are to
#: blame, and its input is held.
HOLD_INPUT_FACTOR: Final = 3
#: A timer runs up to its loop clock's resolution early (uvloop's: a millisecond): a deadline
#: that near counts as reached, or the timer would be set again for it, and again.
TIMER_SLACK: Final = 0.001
_TUNED: Final = frozenset({State.AWAITING_OPEN, State.OPENING, State.OPEN, State.CLOSING})
#: Past the handshake: it ends at connection.open-ok (or at a connection.close, whose own
#: timeout then runs), not at tune-ok.
_OPENED: Final = frozenset({State.OPEN, State.CLOSING})


def _address(address: object) -> tuple[str, int] | None:
    """(host, port) of a socket address; None for one that has none (a Unix socket)."""
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None


class AMQPProtocol(asyncio.Protocol):
    def __init__(
        self,
        broker: Broker,
        write_buffer_high: int,
        write_buffer_low: int,
        on_lost: Callable[[AMQPProtocol], None],
        listener: tuple[str, tuple[str, ...] | None] = ("amqp", None),
        seat: WorkerSeat | None = None,
        handed: tuple[Origin, bytes] | None = None,
        relayed: Callable[[Relay], None] | None = None,
    ) -> None:
        """`listener`: the name and SASL mechanisms of the listener this connection came in on.
        `seat`: this worker's, when the broker runs several (the connection may be handed to
        another at connection.open, and `relayed` is given each TLS connection relayed to its
        owner); `handed`: where the client came from and the bytes another worker read from it
        before it handed the connection here (`batonmq.server.handoff`)."""
        self.broker = broker
        self._seat = seat
        self._listener, mechanisms = listener
        self._origin: Origin | None = handed[0] if handed is not None else None
        self._replay: bytes | None = handed[1] if handed is not None else None
        self._relayed = relayed
        #: The relay this TLS connection went to (`_relay`).
        self.relay: Relay | None = None
        #: What the client sent until connection.open, for a hand-off (None: not kept).
        self._received: bytearray | None = bytearray() if seat is not None else None
        #: Whether the connection went to another worker, which serves it from then on.
        self.handed_off = False
        self._mechanisms = mechanisms
        self._high, self._low = write_buffer_high, write_buffer_low
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self._flush_scheduled = False
        self._connected_at = self._last_received = self._last_sent = self._loop.time()
        self._closing_since: float | None = None
        #: The connection's state at the last flush, until connection.open-ok (then None): the
        #: handshake's deadlines change with it (`_flush` sets the timer again).
        self._handshake_state: State | None = State.AWAITING_HEADER
        self._reading_paused = False
        self._input_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self.lost = asyncio.Event()

    # asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=self._high, low=self._low)
        origin = self._origin or self._origin_of(transport)
        peer = origin.peer
        self.session = Session(
            self.broker,
            peer,
            self._request_flush,
            output_budget=self._high,
            mechanisms=self._mechanisms,
            peer_certificate=origin.peer_certificate,
            local=origin.local,
            hand_off=self._hand_off if self._seat is not None else None,
            handed_over=self._replay is not None,
        )
        log.debug("connection accepted", extra={"peer": f"{peer[0]}:{peer[1]}"})
        self._schedule_tick()
        if self._replay is not None:
            replay, self._replay = self._replay, None
            self.data_received(replay)

    def _origin_of(self, transport: asyncio.Transport) -> Origin:
        peer = _address(transport.get_extra_info("peername")) or ("unknown", 0)
        return Origin(
            self._listener,
            peer,
            _address(transport.get_extra_info("sockname")),
            # On a TLS transport the handshake is over by now (accept_tls), so this is the
            # verified client certificate (None or {} when there is none, or it was not asked
            # for). None on plain TCP.
            transport.get_extra_info("peercert"),
        )

    def data_received(self, data: bytes) -> None:
        if self.relay is not None:  # read in the same turn as connection.open: the owner's
            self.relay.forward(self.relay.owner, data)
            return
        assert self.session is not None
        self._last_received = self._loop.time()
        if self._received is not None:
            self._received += data
        with self._guard():
            self.session.receive_data(data)
            self._flush()

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost does the cleanup

    def pause_writing(self) -> None:
        assert self.session is not None
        with self._guard():
            self.session.set_transport_paused(True)

    def resume_writing(self) -> None:
        assert self.session is not None
        with self._guard():
            self.session.output_backed_up = False
            self.session.set_transport_paused(False)
        self._schedule_input()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            if self.handed_off and self.session is not None:
                self.session.teardown()  # the client's connection goes on in its owner
            elif self.session is not None:
                session = self.session
                # Logged unless the end was already (a close either way, a timeout).
                session.log_closed(
                    "client",
                    None,
                    f"connection lost: {exc}" if exc else "the client closed the socket",
                )
                session.teardown()
        finally:
            # Shutdown waits for every connection to be lost: whatever teardown raised.
            self.lost.set()
            self._on_lost(self)

    def _hand_off(self, vhost: str) -> bool:
        """At connection.open: hand the connection to the worker that owns `vhost`, unless this
        one serves it (owns it, or `vhost` is spread: every worker serves it, and a connection
        stays where it was accepted) (`batonmq.server.handoff`); whether it left."""
        seat, transport, received = self._seat, self.transport, self._received
        assert seat is not None and transport is not None and received is not None
        self._received = None
        if seat.serves(vhost):
            return False
        self.handed_off = True
        origin = self._origin_of(transport)
        tls = transport.get_extra_info("sslcontext") is not None
        if transport.get_write_buffer_size():
            why: str | None = "replies to the client not sent yet"
        elif tls:
            near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with far:
                why = hand_over(far.fileno(), origin, bytes(received), seat.outbox(vhost))
            if why is None:
                near.setblocking(False)
                self._relay(transport, near)
                return True
            near.close()
        else:
            sock = transport.get_extra_info("socket")
            why = hand_over(sock.fileno(), origin, bytes(received), seat.outbox(vhost))
        if why is not None:
            # The client finds its connection closed, and may connect again.
            assert self.session is not None
            log.warning(
                "connection not handed to its worker; closed",
                extra={**self.session.log_fields(), "reason": why},
            )
        transport.abort()
        return True

    def _relay(self, transport: asyncio.Transport, near: socket.socket) -> None:
        """Keep the client's TLS connection here and relay it to its owner over `near`: this
        protocol lets go of the transport, and ends as a handed-off connection does."""
        self.relay = relay = Relay(transport, near)
        self.transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._relayed is not None:
            self._relayed(relay)
        # After the session's own processing of this input has returned.
        self._loop.call_soon(self.connection_lost, None)

    # Output -------------------------------------------------------------------------------

    def _request_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport, session = self.transport, self.session
        if transport is None or session is None or transport.is_closing():
            return
        with self._guard():
            chunks = session.flush()
            if len(chunks) == 1:
                transport.write(chunks[0])
            elif chunks:
                transport.writelines(chunks)
            if chunks:
                self._last_sent = self._loop.time()
                if transport.get_write_buffer_size() > HOLD_INPUT_FACTOR * self._high:
                    session.output_backed_up = True
            if session.input_held and not self._reading_paused:
                transport.pause_reading()
                self._reading_paused = True
            connection = session.connection
            if connection.should_close_transport:
                transport.close()
                # A peer that reads nothing would hold the socket open forever.
                self._loop.call_later(CLOSE_TIMEOUT, transport.abort)
            elif connection.state is State.CLOSING and self._closing_since is None:
                self._closing_since = self._loop.time()
                self._schedule_tick()  # the close-ok timeout may be due before the timer
            if self._handshake_state is not None and connection.state is not self._handshake_state:
                # The deadlines move with the handshake: our heartbeat starts at tune-ok and
                # may be due before the handshake timeout, which ends at open-ok.
                opened = connection.state in _OPENED
                self._handshake_state = None if opened else connection.state
                self._schedule_tick()
        if (session.input_held and session.may_read) or (
            # The input was held for a store commit, which has ended: read the socket again.
            self._reading_paused and not session.input_held
        ):
            self._schedule_input()

    def _schedule_input(self) -> None:
        if not self._input_scheduled:
            self._input_scheduled = True
            self._loop.call_soon(self._resume_input)

    def _resume_input(self) -> None:
        """The output has drained: go on with held input, then read the socket again."""
        self._input_scheduled = False
        transport, session = self.transport, self.session
        if transport is None or session is None or transport.is_closing():
            return
        with self._guard():
            session.resume_input()
            self._flush()
            if self._reading_paused and not session.input_held:
                transport.resume_reading()
                self._reading_paused = False
                # The socket was not read meanwhile, so the client's heartbeats could not be.
                self._last_received = self._loop.time()

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """A defect in the broker ends this connection (and so requeues what it held), not the
        broker: the exception is logged and the socket aborted."""
        try:
            yield
        except Exception:
            peer = self.session.peer if self.session is not None else ("unknown", 0)
            log.exception(
                "internal error; aborting connection", extra={"peer": f"{peer[0]}:{peer[1]}"}
            )
            if self.session is not None:
                self.session.log_closed("broker", None, "internal error")
            if self.transport is not None:
                self.transport.abort()

    # Timers -------------------------------------------------------------------------------

    def _deadlines(self) -> tuple[float, float, float, float]:
        """The loop times at which `_check_timers` has something to do (inf: nothing): the
        handshake timeout, the close-ok timeout, the client's silence reaching two heartbeat
        intervals (not while its socket is not read), our heartbeat (half an interval after we
        last sent anything)."""
        assert self.session is not None
        connection = self.session.connection
        tuned = connection.state in _TUNED
        opened = connection.state in _OPENED
        handshake = math.inf if opened else self._connected_at + HANDSHAKE_TIMEOUT
        close = math.inf if self._closing_since is None else self._closing_since + CLOSE_TIMEOUT
        heartbeat = connection.heartbeat if tuned else 0
        silence = math.inf
        if heartbeat and not self._reading_paused:
            silence = self._last_received + 2 * heartbeat
        ours = self._last_sent + heartbeat / 2 if heartbeat else math.inf
        return handshake, close, silence, ours

    def _schedule_tick(self) -> None:
        """Wake at the earliest deadline, or never. Input and output only move the heartbeat
        deadlines later, so the timer is not touched for them: it may wake early, finds nothing
        due and sets itself again. `_flush` resets it when a deadline may come earlier."""
        if self._timer is not None:
            self._timer.cancel()
        due = min(self._deadlines())
        self._timer = None if due == math.inf else self._loop.call_at(due, self._tick)

    def _tick(self) -> None:
        with self._guard():
            self._check_timers()

    def _check_timers(self) -> None:
        transport, session = self.transport, self.session
        assert transport is not None and session is not None
        if transport.is_closing():
            return
        now = self._loop.time() + TIMER_SLACK
        handshake, close, silence, ours = self._deadlines()
        if now >= handshake:
            self._abort("handshake timed out")
            return
        if now >= close:
            self._abort("no connection.close-ok")
            return
        if now >= silence:
            heartbeat = session.connection.heartbeat
            self._abort(f"missed heartbeats from client, timeout: {heartbeat}s")
            return
        if now >= ours:
            session.connection.send_heartbeat()
            self._flush()
        self._schedule_tick()

    def _abort(self, reason: str) -> None:
        """Close the socket with no connection.close (spec 4.2.7 for missed heartbeats)."""
        assert self.transport is not None and self.session is not None
        self.session.log_closed("broker", None, reason)
        self.transport.abort()


async def accept_tls(
    client: socket.socket,
    context: ssl.SSLContext,
    amqp_protocol: Callable[[], AMQPProtocol],
) -> AMQPProtocol | None:
    """Run the TLS handshake on an accepted socket, then hand the encrypted connection to an
    AMQPProtocol (from `amqp_protocol`); returns it, or None if the handshake did not succeed.

    `loop.connect_accepted_socket` does the handshake, and raises what ended it. That is why the
    amqps listener accepts its sockets itself: `create_server(ssl=...)` drops a failed handshake
    silently (asyncio and uvloop log it in debug mode only), so a refused client certificate or
    a plain AMQP header sent to the TLS port could not be logged. Here it is logged, with the
    client's address. The AMQPProtocol's `connection_made` comes only after a completed
    handshake (in asyncio and in uvloop alike), so the client certificate is there to read; a
    client whose handshake failed never gets a session. The handshake is bounded by
    HANDSHAKE_TIMEOUT.
    """
    try:
        address = client.getpeername()
        peer = f"{address[0]}:{address[1]}"
    except OSError:  # already gone
        client.close()
        return None
    loop = asyncio.get_running_loop()
    protocol = amqp_protocol()
    try:
        # The socket belongs to the transport from here on, which closes it in every outcome.
        await loop.connect_accepted_socket(
            lambda: protocol, client, ssl=context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
        )
    except ssl.SSLError as error:
        # A client certificate the CA did not sign, TLS older than 1.2, no common cipher, or
        # plain AMQP sent to the TLS port.
        log.warning(
            "TLS handshake refused: %s",
            error,
            extra={"peer": peer, "reason": error.reason or type(error).__name__},
        )
        return None
    except OSError as error:
        # Reset by the client, or too slow (ConnectionAbortedError).
        log.info(
            "TLS handshake not completed: %s",
            str(error) or type(error).__name__,
            extra={"peer": peer},
        )
        return None
    if protocol.transport is None:
        # Both event loops end the handshake without an error when the client closes the
        # connection cleanly in the middle of it (port scanners, health checks).
        log.info(
            "TLS handshake not completed: the client closed the connection", extra={"peer": peer}
        )
        return None
    return protocol
