"""Where a broker counts failed logins (`LoginThrottle`, whose docstring has the rules): in
this process (`LocalCount`), or, in a broker of several workers, in its first worker for all of
them (`batonmq.server.brokerwide`), so that the delays and the lockout are the broker's: a client
is locked out after `max_failures` failures wherever they happened, and refused, then let in
again after the lockout, whichever worker it reaches.

The count answers through callbacks, because a count kept in another process answers later:
`admit` before a password is checked (refused at once when locked out, else after a delay),
then `failed` or `succeeded` with the outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from batonmq.security.lockout import LoginThrottle


@dataclass(frozen=True, slots=True)
class Admission:
    """What the count says of a login attempt before its password is checked."""

    #: Seconds left of its pair's lockout (0.0: not locked out): refused at once.
    locked_for: float = 0.0
    #: Seconds to wait before the password is checked.
    delay: float = 0.0
    #: Its pair has remembered failures, which a success forgets (rule 5). A login whose pair
    #: has none has nothing to tell after a success.
    failing: bool = False


class FailureCount(Protocol):
    def admit(self, user: str, address: str, then: Callable[[Admission], None]) -> None:
        """Call `then` with the attempt's admission."""

    def failed(self, user: str, address: str, then: Callable[[bool], None]) -> None:
        """A login failed: call `then` with whether this failure locked its pair out (the
        caller logs each lockout once)."""

    def succeeded(self, user: str, address: str) -> None:
        """A login succeeded whose admission was `failing`."""


class LocalCount:
    """The count kept in this process: each call answers at once."""

    def __init__(self, throttle: LoginThrottle) -> None:
        self.throttle = throttle

    def admission(self, user: str, address: str) -> Admission:
        throttle = self.throttle
        return Admission(
            throttle.locked_out_for(user, address),
            throttle.delay_for(user, address),
            throttle.remembers(user, address),
        )

    def admit(self, user: str, address: str, then: Callable[[Admission], None]) -> None:
        then(self.admission(user, address))

    def failed(self, user: str, address: str, then: Callable[[bool], None]) -> None:
        then(self.throttle.record_failure(user, address))

    def succeeded(self, user: str, address: str) -> None:
        self.throttle.record_success(user, address)
