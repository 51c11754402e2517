"""Slowing down password guessing, without locking out anyone who did not fail. Pure: the clock
is injected and the broker does the waiting and refusing (BatonMQ style §5).

Failures are counted per pair of user name and source address (the broker passes the peer's IP
address), so that on a shared host or behind NAT one mistyped password, or one guesser, denies
nothing to the other users there (hardening: "never refuse correct credentials because someone
else failed"). The rules:

1. A failed login is remembered for `window_seconds`, for its pair.
2. While a pair has remembered failures, its next login attempt waits `delay_for` seconds before
   it is answered: `first_delay_seconds` after one failure, doubling with each further one, at
   most `max_delay_seconds` (0.25 s, 0.5 s, 1 s, 2 s with the defaults), like a PAM fail delay.
   The wait comes before the password is checked, whatever the outcome, so the timing of the
   answer does not give the outcome away early.
3. The `max_failures`-th remembered failure of a pair locks that pair out for `lockout_seconds`
   (fail2ban's maxretry, findtime and bantime, per user): that user from that address is
   refused at once, without checking the password, whatever it is (a correct password does not
   unlock, or the lockout would not stop guessing; no delay, so refused attempts hold nothing).
   `record_failure` says when a failure starts a lockout, for the broker to log it once. The
   same user from another address, and other users from the same address, are not affected.
   When the lockout ends the pair starts afresh.
4. A guesser who sprays many user names from one address (one or two guesses each, under rule
   3's count) is slowed down, never refused: once more than `max_failures` distinct users have
   remembered failures from an address, every attempt from it waits (rule 2's wait and
   doubling, counted in distinct failing users beyond `max_failures`). An address with
   `max_failures` or fewer failing users (a user who mistyped, a client library's tests of a
   wrong password) delays no other user, and no correct password is ever refused for a pair
   that has not failed.
5. A successful login forgets its pair's failures (whoever logged in knows that password, so
   guessing it is over) but not the address's count of rule 4: a guesser holding one valid
   account cannot reset its spraying by logging in with it.
6. Memory is bounded. A pair is forgotten once it has no remembered failure and no lockout. At
   most `max_users_per_address` failing users are kept per address (one more evicts that
   address's own oldest that is not locked out, so that a sprayer can neither push out other
   addresses' records nor end a lockout; rule 4's delay is at its cap long before), and at
   most `max_tracked_pairs` in all: a new pair first drops
   forgotten ones, then, if still full, the pair whose last failure is oldest (even if locked
   out; a guesser with that many addresses is beyond a per-address throttle anyway).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

# 2**60 times any sensible first delay is past any sensible cap; the bound keeps the float finite.
_MAX_DOUBLINGS = 60

#: (user name, source address)
Pair = tuple[str, str]


@dataclass(slots=True)
class _PairRecord:
    #: When remembered failures happened, oldest first; fewer than max_failures of them.
    failure_times: deque[float] = field(default_factory=deque)
    last_failure: float = -math.inf
    locked_until: float = -math.inf


class LoginThrottle:
    def __init__(
        self,
        max_failures: int,
        window_seconds: float,
        lockout_seconds: float,
        clock: Callable[[], float],
        *,
        first_delay_seconds: float = 0.25,
        max_delay_seconds: float = 8.0,
        max_users_per_address: int = 64,
        max_tracked_pairs: int = 10_000,
    ) -> None:
        if min(max_failures, max_users_per_address, max_tracked_pairs) < 1:
            raise ValueError(
                "max_failures, max_users_per_address and max_tracked_pairs must be at least 1"
            )
        if window_seconds <= 0 or lockout_seconds <= 0:
            raise ValueError("window_seconds and lockout_seconds must be positive")
        if first_delay_seconds < 0 or max_delay_seconds < first_delay_seconds:
            raise ValueError("delays must satisfy 0 <= first_delay_seconds <= max_delay_seconds")
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self.lockout_seconds = lockout_seconds
        self.first_delay_seconds = first_delay_seconds
        self.max_delay_seconds = max_delay_seconds
        self.max_users_per_address = max_users_per_address
        self.max_tracked_pairs = max_tracked_pairs
        self._clock = clock
        # Ordered by last failure, oldest first: the front is what expires or is evicted first.
        self._pairs: OrderedDict[Pair, _PairRecord] = OrderedDict()
        #: address -> its users with a pair record, by last failure, oldest first (rules 4, 6).
        self._failing_users: dict[str, OrderedDict[str, None]] = {}

    @property
    def tracked_pairs(self) -> int:
        return len(self._pairs)

    def locked_out_for(self, user: str, address: str) -> float:
        """Seconds left of the pair's lockout; 0.0 when it is not locked out (rule 3)."""
        record = self._pairs.get((user, address))
        if record is None:
            return 0.0
        return max(0.0, record.locked_until - self._clock())

    def delay_for(self, user: str, address: str) -> float:
        """Seconds to wait before answering a login attempt of `user` from `address`: the
        longer of its pair's delay (rule 2) and its address's (rule 4); 0.0 for a locked-out
        pair (refused at once, rule 3)."""
        now = self._clock()
        record = self._pairs.get((user, address))
        failures = 0
        if record is not None:
            if record.locked_until > now:
                return 0.0
            failures = sum(1 for time in record.failure_times if now - time < self.window_seconds)
        spraying = self._failing_user_count(address, now) - self.max_failures
        return self._delay(max(failures, spraying))

    def remembers(self, user: str, address: str) -> bool:
        """Whether the pair has remembered failures: what a success forgets (rule 5)."""
        record = self._pairs.get((user, address))
        return record is not None and bool(record.failure_times)

    def record_failure(self, user: str, address: str) -> bool:
        """A login of `user` from `address` failed; returns whether this failure locked the
        pair out (rule 3), so that the caller logs each lockout once."""
        now = self._clock()
        pair = (user, address)
        record = self._pairs.get(pair)
        if record is None:
            self._make_room(address, now)
            record = self._pairs[pair] = _PairRecord()
        elif record.locked_until > now:
            return False
        while record.failure_times and now - record.failure_times[0] >= self.window_seconds:
            record.failure_times.popleft()
        record.failure_times.append(now)
        record.last_failure = now
        self._pairs.move_to_end(pair)
        users = self._failing_users.setdefault(address, OrderedDict())
        users[user] = None
        users.move_to_end(user)
        if len(record.failure_times) < self.max_failures:
            return False
        record.locked_until = now + self.lockout_seconds
        record.failure_times.clear()
        return True

    def record_success(self, user: str, address: str) -> None:
        """Rule 5: the pair's failures are forgotten; the address's users count keeps them."""
        record = self._pairs.get((user, address))
        if record is not None:
            record.failure_times.clear()

    def _delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        doublings = min(failures - 1, _MAX_DOUBLINGS)
        return min(self.max_delay_seconds, self.first_delay_seconds * 2.0**doublings)

    def _failing_user_count(self, address: str, now: float) -> int:
        users = self._failing_users.get(address)
        if not users:
            return 0
        return sum(
            1
            for user in users
            if now - self._pairs[(user, address)].last_failure < self.window_seconds
        )

    def _forgettable(self, record: _PairRecord, now: float) -> bool:
        return record.locked_until <= now and now - record.last_failure >= self.window_seconds

    def _forget(self, pair: Pair) -> None:
        del self._pairs[pair]
        user, address = pair
        users = self._failing_users[address]
        del users[user]
        if not users:
            del self._failing_users[address]

    def _make_room(self, address: str, now: float) -> None:
        while self._pairs:
            pair, record = next(iter(self._pairs.items()))
            if not self._forgettable(record, now):
                break
            self._forget(pair)
        users = self._failing_users.get(address)
        if users is not None and len(users) >= self.max_users_per_address:
            # Its oldest user that is not locked out, so that spraying ends no lockout.
            pairs = [(user, address) for user in users]
            unlocked = (pair for pair in pairs if self._pairs[pair].locked_until <= now)
            self._forget(next(unlocked, pairs[0]))
        if len(self._pairs) >= self.max_tracked_pairs:
            self._forget(next(iter(self._pairs)))
