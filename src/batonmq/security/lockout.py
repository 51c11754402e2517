"""Slowing down password guessing from one source address. Pure: the clock is injected and the
broker does the waiting and refusing (BatonMQ style §5).

The rules, per source address (the broker passes the peer's IP address):

1. A failed login is remembered for `window_seconds`.
2. While failures are remembered, a login attempt from the address waits `delay_for` seconds
   before it is answered: `first_delay_seconds` after one failure, doubling with each further
   one, at most `max_delay_seconds` (0.25 s, 0.5 s, 1 s, 2 s with the defaults), like a PAM fail
   delay. The wait comes before the password is checked, whatever the outcome, so the timing of
   the answer does not give the outcome away early.
3. The `max_failures`-th remembered failure locks the address out for `lockout_seconds` from that
   failure (fail2ban's maxretry, findtime and bantime). While locked out, `locked_out_for` is
   positive and the broker refuses at once, without checking the password: a correct password
   does not unlock, or the lockout would not stop guessing; and no delay, so refused attempts
   hold no broker resources. Failures recorded meanwhile change nothing. When the lockout ends
   the address starts afresh.
4. A successful login ends the delay (the client has its password right) but not the count
   toward a lockout: otherwise a guesser holding any one valid account could log in with it
   between guesses at another and never be locked out.
5. Memory is bounded. An address is forgotten once it has no remembered failure and no lockout,
   and at most `max_tracked_addresses` are tracked: a new address first drops forgotten ones,
   then, if still full, the address whose last failure is oldest (even if locked out; one
   guesser with that many addresses is beyond a per-address throttle anyway).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

# 2**60 times any sensible first delay is past any sensible cap; the bound keeps the float finite.
_MAX_DOUBLINGS = 60


@dataclass(slots=True)
class _AddressRecord:
    #: When remembered failures happened, oldest first; fewer than max_failures of them.
    failure_times: deque[float] = field(default_factory=deque)
    #: How many of the latest failures came after the last successful login (rule 4).
    failures_since_success: int = 0
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
        max_tracked_addresses: int = 10_000,
    ) -> None:
        if max_failures < 1 or max_tracked_addresses < 1:
            raise ValueError("max_failures and max_tracked_addresses must be at least 1")
        if window_seconds <= 0 or lockout_seconds <= 0:
            raise ValueError("window_seconds and lockout_seconds must be positive")
        if first_delay_seconds < 0 or max_delay_seconds < first_delay_seconds:
            raise ValueError("delays must satisfy 0 <= first_delay_seconds <= max_delay_seconds")
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self.lockout_seconds = lockout_seconds
        self.first_delay_seconds = first_delay_seconds
        self.max_delay_seconds = max_delay_seconds
        self.max_tracked_addresses = max_tracked_addresses
        self._clock = clock
        # Ordered by last failure, oldest first: the front is what expires or is evicted first.
        self._records: OrderedDict[str, _AddressRecord] = OrderedDict()

    @property
    def tracked_addresses(self) -> int:
        return len(self._records)

    def locked_out_for(self, address: str) -> float:
        """Seconds left of the address's lockout; 0.0 when it is not locked out (rule 3)."""
        record = self._records.get(address)
        if record is None:
            return 0.0
        return max(0.0, record.locked_until - self._clock())

    def delay_for(self, address: str) -> float:
        """Seconds to wait before answering a login attempt from the address (rule 2); 0.0 for
        an address without remembered failures since its last success, or locked out."""
        record = self._records.get(address)
        now = self._clock()
        if record is None or record.locked_until > now:
            return 0.0
        remembered = sum(1 for time in record.failure_times if now - time < self.window_seconds)
        failures = min(record.failures_since_success, remembered)
        if failures == 0:
            return 0.0
        doublings = min(failures - 1, _MAX_DOUBLINGS)
        return min(self.max_delay_seconds, self.first_delay_seconds * 2.0**doublings)

    def record_failure(self, address: str) -> None:
        now = self._clock()
        record = self._records.get(address)
        if record is None:
            self._make_room(now)
            record = self._records[address] = _AddressRecord()
        elif record.locked_until > now:
            return
        while record.failure_times and now - record.failure_times[0] >= self.window_seconds:
            record.failure_times.popleft()
        record.failure_times.append(now)
        record.failures_since_success += 1
        self._records.move_to_end(address)
        if len(record.failure_times) >= self.max_failures:
            record.locked_until = now + self.lockout_seconds
            record.failure_times.clear()
            record.failures_since_success = 0

    def record_success(self, address: str) -> None:
        record = self._records.get(address)
        if record is not None:
            record.failures_since_success = 0

    def _forgettable(self, record: _AddressRecord, now: float) -> bool:
        return record.locked_until <= now and (
            not record.failure_times or now - record.failure_times[-1] >= self.window_seconds
        )

    def _make_room(self, now: float) -> None:
        while self._records and self._forgettable(next(iter(self._records.values())), now):
            self._records.popitem(last=False)
        if len(self._records) >= self.max_tracked_addresses:
            self._records.popitem(last=False)
