"""What the workers of one broker (`broker.workers` above 1) count together, in the first
worker (index 0), so that a client meets one broker whichever worker the kernel hands it to:

- the failed logins (`LoginThrottle`): hardening asks that repeated failures of a user from an
  address be delayed, then locked out "for 300 s", and that each lockout be logged once. Counted
  per worker, a user would be locked out after `max_failures` failures on one worker, not on
  the broker, and a guesser would get `max_failures` tries per worker;
- the repeated lines of the session log (`CoalescingLog`): hardening asks that "per-connection
  lines under attack are coalesced", one line then a count, which per worker would be one line
  and one count per worker.

The other workers ask the first over the link between workers (`batonmq.server.siblings`). Why
there, and not in the store or the supervisor: a login that did not fail writes nothing (a
store write per login, or per failure, would put the store's latency and load on every
handshake, and a guesser could make the broker write); the supervisor has no event loop of its
own to answer on, nor a link to the workers but their inboxes; the first worker has both, and is
the one every other worker can already ask. A login costs one question to the first worker
(whether the attempt waits or is refused), and one more only after a failure, or after a
success that forgets failures. The count is in memory, as with one process: it starts afresh
when the first worker starts again.

When the first worker does not answer in time (down, restarting, too busy), a worker counts in
itself until it answers again, and says so once each way: a lockout then holds per worker, as it
did before, rather than no login being answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, TypeVar

from batonmq.logrepeat import CoalescingLog, Occurrence
from batonmq.security.authn import Authenticator
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


#: What a worker asks the first about.
Question = AdmitLogin | LoginFailed | LoginSucceeded | Occurrence
QUESTIONS: Final = (AdmitLogin, LoginFailed, LoginSucceeded, Occurrence)


class BrokerWide:
    """This worker's part: in the first worker, the answers (`answer`); in the others, the
    failure count and session log that ask it (`install`)."""

    def __init__(
        self, link: SiblingLink, authenticator: Authenticator, session_log: CoalescingLog
    ) -> None:
        self._link = link
        self._here = authenticator.counted_here
        self._authenticator = authenticator
        self._session_log = session_log
        self._asking: set[asyncio.Task[None]] = set()
        #: The first worker did not answer the last question: counting here meanwhile.
        self._apart = False

    def install(self) -> None:
        """In a worker other than the first: count in the first from now on."""
        if self._link.index != COUNTER:
            self._authenticator.failures = _AskedCount(self, self._here)
            self._session_log.elsewhere = self._log_there

    async def close(self) -> None:
        """Count here from now on (the first worker may be stopping too), once what was asked
        is answered or given up on."""
        self._authenticator.failures = self._here
        self._session_log.elsewhere = None
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
        else:
            self._session_log.count(question)
        return None

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
                    "counting failed logins and repeated lines in this worker until the "
                    "first answers",
                    extra={"reason": str(error)},
                )
            answered(otherwise())
            return
        if self._apart:
            self._apart = False
            log.info("counting failed logins and repeated lines in the first worker again")
        assert isinstance(answer, expected)
        answered(answer)

    def _log_there(self, occurrence: Occurrence) -> None:
        # The line names this worker, whose connection it is, not the first that writes it.
        there = replace(occurrence, fields={**occurrence.fields, "worker": self._link.index})
        self.ask(there, _ignore, lambda: self._session_log.count(occurrence), type(None))


def _ignore(_answer: None) -> None:
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
