"""What the workers of one broker (`broker.workers` above 1) count together, in the first
worker (index 0), so that a client meets one broker whichever worker the kernel hands it to:

- the failed logins (`LoginThrottle`): hardening asks that repeated failures of a user from an
  address be delayed, then locked out "for 300 s", and that each lockout be logged once. Counted
  per worker, a user would be locked out after `max_failures` failures on one worker, not on
  the broker, and a guesser would get `max_failures` tries per worker;
- the repeated lines of the session log (`CoalescingLog`): hardening asks that "per-connection
  lines under attack are coalesced", one line then a count, which per worker would be one line
  and one count per worker;
- the open connections, when `limits.max_connections_per_user` or `_per_vhost` is set
  (`ConnectionCount`; the Overload requirements' "connections per user and per virtual host",
  RabbitMQ's user and vhost `max-connections`, which are the broker's): counted per worker, a
  spread virtual host, which every worker serves, and a user whose virtual hosts live on
  different workers would get the limit once per worker.

The other workers ask the first over the link between workers (`batonmq.server.siblings`). Why
there, and not in the store or the supervisor: a login that did not fail writes nothing (a
store write per login, or per failure, would put the store's latency and load on every
handshake, and a guesser could make the broker write); the supervisor has no event loop of its
own to answer on, nor a link to the workers but their inboxes; the first worker has both, and is
the one every other worker can already ask. A login costs one question to the first worker
(whether the attempt waits or is refused), and one more only after a failure, or after a
success that forgets failures. With a connection limit set, a connection.open costs one
question, and its end one more; with none, nothing is asked. The counts are in memory, as with
one process: they start afresh when the first worker starts again. The first worker keeps each
worker's connections apart: when the supervisor says a worker ended, its connections leave the
count; when it says the first serves again, each other worker gives it the connections it
holds, and does so too when the first answers again after a time it did not.

When the first worker does not answer in time (down, restarting, too busy), a worker counts in
itself until it answers again, and says so once each way: a lockout and a connection limit
then hold per worker, as they did before, rather than no login or connection being answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, TypeVar

from batonmq.engine.broker import Broker
from batonmq.engine.connectioncount import ConnectionCount, LocalAdmission, Pair
from batonmq.logrepeat import Occurrence
from batonmq.security.failurecount import Admission, LocalCount
from batonmq.server.siblings import SiblingFailed, SiblingLink, SiblingUnavailable

log = logging.getLogger(__name__)

#: The worker that counts for the broker.
COUNTER: Final = 0
#: Seconds a worker waits for the first worker's answer before it counts in itself.
TIMEOUT: Final = 5.0

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class AdmitLogin:
    user: str
    address: str


@dataclass(frozen=True, slots=True)
class LoginFailed:
    user: str
    address: str


@dataclass(frozen=True, slots=True)
class LoginSucceeded:
    user: str
    address: str


@dataclass(frozen=True, slots=True)
class _Connection:
    """A connection of `user` to `vhost` on `worker`."""

    worker: int
    user: str
    vhost: str


@dataclass(frozen=True, slots=True)
class AdmitConnection(_Connection):
    """connection.open of the connection: counted for its worker when let in."""


@dataclass(frozen=True, slots=True)
class ConnectionVerdict:
    """The answer to `AdmitConnection`: None, let in; else the refusal naming the limit."""

    refusal: str | None


@dataclass(frozen=True, slots=True)
class ConnectionEnded(_Connection):
    """The connection, let in, is over."""


@dataclass(frozen=True, slots=True)
class ConnectionsHeld:
    """The connections `worker` holds: they replace what the first counted for it."""

    worker: int
    held: Counter[Pair]


#: What a worker asks the first about.
Question = (
    AdmitLogin
    | LoginFailed
    | LoginSucceeded
    | Occurrence
    | AdmitConnection
    | ConnectionEnded
    | ConnectionsHeld
)
QUESTIONS: Final = (
    AdmitLogin,
    LoginFailed,
    LoginSucceeded,
    Occurrence,
    AdmitConnection,
    ConnectionEnded,
    ConnectionsHeld,
)


class BrokerWide:
    """This worker's part: in the first worker, the answers (`answer`); in the others, the
    failure count, session log and connection admission that ask it (`install`)."""

    def __init__(self, link: SiblingLink, broker: Broker) -> None:
        self._link = link
        self._broker = broker
        self._authenticator = broker.authenticator
        self._here = broker.authenticator.counted_here
        self._session_log = broker.session_log
        self._connections = broker.connections
        self._asking: set[asyncio.Task[None]] = set()
        #: The first worker did not answer the last question: counting here meanwhile.
        self._apart = False
        #: In a worker other than the first: its connection admission, which asks the first.
        self._admission: _AskedAdmission | None = None

    def install(self) -> None:
        """In a worker other than the first: count in the first from now on. In every worker:
        follow what the supervisor says of the siblings."""
        self._link.when_told = self._told
        index = self._link.index
        if index != COUNTER:
            self._authenticator.failures = _AskedCount(self, self._here)
            self._session_log.elsewhere = self._log_there
            self._admission = _AskedAdmission(self, self._connections, index)
            self._broker.admission = self._admission

    async def close(self) -> None:
        """Count here from now on (the first worker may be stopping too), once what was asked
        is answered or given up on."""
        self._link.when_told = None
        self._authenticator.failures = self._here
        self._session_log.elsewhere = None
        self._broker.admission = LocalAdmission(self._connections, self._link.index)
        if self._asking:
            await asyncio.wait(list(self._asking))

    def answer(self, question: Question) -> object:
        """In the first worker: a sibling's question, answered from this worker's counts."""
        if isinstance(question, AdmitLogin):
            return self._here.admission(question.user, question.address)
        if isinstance(question, LoginFailed):
            return self._here.throttle.record_failure(question.user, question.address)
        if isinstance(question, LoginSucceeded):
            self._here.succeeded(question.user, question.address)
        elif isinstance(question, Occurrence):
            self._session_log.count(question)
        elif isinstance(question, AdmitConnection):
            refusal = self._connections.admit(question.worker, question.user, question.vhost)
            return ConnectionVerdict(refusal)
        elif isinstance(question, ConnectionEnded):
            self._connections.ended(question.worker, question.user, question.vhost)
        else:
            self._connections.replace(question.worker, question.held)
        return None

    def _told(self, worker: int, up: bool) -> None:
        """The supervisor says `worker` ended (`up` False) or serves again."""
        if self._link.index == COUNTER:
            if not up:
                self._connections.worker_ended(worker)
        elif worker == COUNTER and up:
            self._give_connections()

    def _give_connections(self) -> None:
        """Tell the first worker the connections this one holds (its count of them may have
        started afresh, or missed some while this worker counted apart)."""
        if self._connections.limited and self._admission is not None:
            self._admission.give()

    def give(self, held: Counter[Pair]) -> None:
        self.ask(ConnectionsHeld(self._link.index, held), _ignore, _nothing, type(None))

    def ask(
        self,
        question: Question,
        answered: Callable[[_T], None],
        otherwise: Callable[[], _T],
        expected: type[_T],
    ) -> None:
        """Ask the first worker `question` and call `answered` with its answer (of type
        `expected`), or, when it does not answer, with `otherwise()`, counted here."""
        task = asyncio.get_running_loop().create_task(
            self._ask(question, answered, otherwise, expected)
        )
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)

    async def _ask(
        self,
        question: Question,
        answered: Callable[[_T], None],
        otherwise: Callable[[], _T],
        expected: type[_T],
    ) -> None:
        try:
            answer = await self._link.request(COUNTER, question, TIMEOUT)
        except (SiblingUnavailable, SiblingFailed) as error:
            if not self._apart:
                self._apart = True
                log.warning(
                    "counting failed logins, connections and repeated lines in this worker "
                    "until the first answers",
                    extra={"reason": str(error)},
                )
            answered(otherwise())
            return
        back = self._apart
        if back:
            self._apart = False
            log.info(
                "counting failed logins, connections and repeated lines in the first worker again"
            )
        assert isinstance(answer, expected)
        answered(answer)
        if back and not isinstance(question, ConnectionsHeld):
            # After `answered`: a connection this answer let in is among those held.
            self._give_connections()

    def _log_there(self, occurrence: Occurrence) -> None:
        # The line names this worker, whose connection it is, not the first that writes it.
        there = replace(occurrence, fields={**occurrence.fields, "worker": self._link.index})
        self.ask(there, _ignore, lambda: self._session_log.count(occurrence), type(None))


def _ignore(_answer: None) -> None:
    pass


def _nothing() -> None:
    pass


class _AskedCount:
    """The failure count of a worker other than the first: the first's (`FailureCount`)."""

    def __init__(self, broker_wide: BrokerWide, here: LocalCount) -> None:
        self._broker_wide = broker_wide
        #: This worker's count, for when the first does not answer.
        self._here = here

    def admit(self, user: str, address: str, then: Callable[[Admission], None]) -> None:
        self._broker_wide.ask(
            AdmitLogin(user, address),
            then,
            lambda: self._here.admission(user, address),
            Admission,
        )

    def failed(self, user: str, address: str, then: Callable[[bool], None]) -> None:
        self._broker_wide.ask(
            LoginFailed(user, address),
            then,
            lambda: self._here.throttle.record_failure(user, address),
            bool,
        )

    def succeeded(self, user: str, address: str) -> None:
        self._broker_wide.ask(
            LoginSucceeded(user, address),
            _ignore,
            lambda: self._here.succeeded(user, address),
            type(None),
        )


class _AskedAdmission:
    """The connection admission of a worker other than the first: the first's count, when a
    limit is set. This worker keeps the connections it holds in its own count too: to give
    them to the first, and to count them against the limits while the first does not answer."""

    def __init__(self, broker_wide: BrokerWide, here: ConnectionCount, worker: int) -> None:
        self._broker_wide = broker_wide
        self._here = here
        self._worker = worker
        #: Admissions asked of the first and not answered yet, and whether the connections
        #: held here are to be given to the first once none is.
        self._asked = 0
        self._give_when_answered = False

    def give(self) -> None:
        """Give the first worker the connections held here, once no admission asked of it
        waits for its answer: the first may have counted one that this list, made before its
        answer came, would not hold, and the list replaces what the first counted."""
        if self._asked:
            self._give_when_answered = True
        else:
            self._broker_wide.give(self._here.held_by(self._worker))

    def admit(self, user: str, vhost: str, then: Callable[[str | None], None]) -> None:
        here, worker = self._here, self._worker
        if not here.limited:
            here.opened(worker, user, vhost)
            then(None)
            return

        def answered(verdict: ConnectionVerdict) -> None:
            self._asked -= 1
            try:
                if verdict.refusal is None:
                    here.opened(worker, user, vhost)
                then(verdict.refusal)
            finally:
                if not self._asked and self._give_when_answered:
                    self._give_when_answered = False
                    self.give()

        self._asked += 1
        self._broker_wide.ask(
            AdmitConnection(worker, user, vhost),
            answered,
            lambda: ConnectionVerdict(here.refusal(user, vhost)),
            ConnectionVerdict,
        )

    def ended(self, user: str, vhost: str) -> None:
        self._here.ended(self._worker, user, vhost)
        if self._here.limited:
            self._broker_wide.ask(
                ConnectionEnded(self._worker, user, vhost), _ignore, _nothing, type(None)
            )
