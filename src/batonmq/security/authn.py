"""Who may log in: the users the broker knows (kept in its store, managed with `batonctl user`),
checked against the SASL response of connection.start-ok.

- PLAIN and AMQPLAIN carry a username and password, checked against the user's stored credential
  (salted scrypt, or a legacy MD5 imported from a Qpid password file, upgraded to scrypt at the
  first successful login).
- EXTERNAL logs in as the TLS client certificate's subject CN (Qpid manual §2.3), who must be a
  known user; the password plays no part.
- The user `guest` may log in from loopback addresses only, as RabbitMQ's `loopback_users`
  (`auth.guest_loopback_only`); `batonctl user delete guest` disables it.
- Repeated failures of one user from one address are slowed down and then locked out for a
  while, that user from that address only; spraying user names from one address is slowed down
  (`LoginThrottle`, whose docstring has the rules). Each lockout is logged once. The failures
  are counted where `failures` keeps them: here, or for every worker of the broker in its first
  (`batonmq.security.failurecount`).

Checking a password is deliberately slow (about 40 ms of scrypt), so it runs off the event loop
(`offload`). A password checked once is remembered as a keyed digest (HMAC with a key that lives
only in this process), so a client that reconnects often costs one scrypt, not one per
connection; RabbitMQ's auth-backend cache does the same. A changed credential forgets it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from batonmq.security.failurecount import Admission, FailureCount, LocalCount
from batonmq.security.lockout import LoginThrottle
from batonmq.security.passwords import Credential, verify_unknown_user
from batonmq.security.sasl import (
    PeerCertificate,
    SaslError,
    decode_response,
    external_username,
)
from batonmq.timers import LoopTimers, Timers

log = logging.getLogger(__name__)

GUEST = "guest"


class AuthenticationError(Exception):
    """Login refused. `str(error)` goes to the client in connection.close 403 (RabbitMQ's words
    where RabbitMQ has them); `reason` says why, for the broker's log; `username` is the user the
    client named ("" when its response named none)."""

    def __init__(self, reply_text: str, reason: str, username: str) -> None:
        super().__init__(reply_text)
        self.reason = reason
        self.username = username


@dataclass(frozen=True, slots=True)
class LoginAttempt:
    mechanism: str
    response: bytes
    #: The client's address: the guest rule and the throttle go by it.
    peer_host: str
    #: The verified TLS client certificate (`getpeercert()`), for EXTERNAL.
    peer_certificate: PeerCertificate | None = None


#: The login's outcome: the username, or why it was refused.
Decided = Callable[[str | AuthenticationError], None]
#: Run the blocking check off the event loop, then hand its result to the callback on the loop.
Offload = Callable[[Callable[[], "_Checked"], Callable[["_Checked"], None]], None]


@dataclass(frozen=True, slots=True)
class _Checked:
    ok: bool
    #: The scrypt credential that replaces a weak or outdated one, after a good password.
    upgraded: Credential | None = None


def run_inline(work: Callable[[], _Checked], done: Callable[[_Checked], None]) -> None:
    """Offload for tests and tools: no event loop to keep free."""
    done(work())


@cache
def default_guest() -> Credential:
    """guest/guest, for a broker without a store (the store has its own guest user)."""
    return Credential.from_password(GUEST)


def is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _refused(mechanism: str, reason: str, username: str) -> AuthenticationError:
    # The same words to the client for a wrong user and a wrong password; the log has `reason`.
    return AuthenticationError(
        f"Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile.",
        reason,
        username,
    )


@dataclass(frozen=True, slots=True)
class _Claim:
    """Who a login attempt says it is: its username (the certificate's CN for EXTERNAL) and
    password (None for EXTERNAL), or why its response says nothing readable (username "")."""

    username: str
    password: str | None = None
    malformed: str | None = None


def _claim(attempt: LoginAttempt) -> _Claim:
    try:
        if attempt.mechanism == "EXTERNAL":
            return _Claim(external_username(attempt.response, attempt.peer_certificate))
        credentials = decode_response(attempt.mechanism, attempt.response)
    except SaslError as error:
        return _Claim("", malformed=str(error))
    return _Claim(credentials.username, credentials.password)


@dataclass(eq=False)
class Authenticator:
    users: dict[str, Credential] = field(default_factory=lambda: {GUEST: default_guest()})
    guest_loopback_only: bool = True
    timers: Timers = field(default_factory=LoopTimers)
    max_failures: int = 5
    failure_window: float = 60.0
    lockout: float = 300.0
    offload: Offload = run_inline
    #: Told of a credential upgraded at login, to write it to the store.
    on_upgrade: Callable[[str, Credential], None] | None = None
    #: The failed logins counted in this process...
    counted_here: LocalCount = field(init=False)
    #: ...and where they are counted (`counted_here` unless a broker of several workers
    #: counts them in one of them).
    failures: FailureCount = field(init=False)
    _key: bytes = field(init=False, default_factory=lambda: secrets.token_bytes(32))
    #: username -> (credential, keyed digest of the password last checked good against it)
    _checked: dict[str, tuple[Credential, bytes]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.counted_here = LocalCount(
            LoginThrottle(
                self.max_failures,
                self.failure_window,
                self.lockout,
                clock=lambda: self.timers.now_ms() / 1000,
            )
        )
        self.failures = self.counted_here

    def replace_users(self, users: dict[str, Credential]) -> None:
        self.users = users
        self._checked.clear()

    def set_user(self, name: str, credential: Credential) -> None:
        """Add `name`, or give it a new credential: its next login is checked against it."""
        self.users[name] = credential
        self._checked.pop(name, None)

    def remove_user(self, name: str) -> None:
        self.users.pop(name, None)
        self._checked.pop(name, None)

    def authenticate(self, attempt: LoginAttempt, decided: Decided) -> None:
        """Check `attempt` and call `decided` with the username or the refusal: at once, after
        the throttle's delay for its user and address, or when the password check comes back."""
        claim = _claim(attempt)
        self.failures.admit(
            claim.username,
            attempt.peer_host,
            lambda admission: self._admitted(attempt, claim, admission, decided),
        )

    def _admitted(
        self, attempt: LoginAttempt, claim: _Claim, admission: Admission, decided: Decided
    ) -> None:
        username, host = claim.username, attempt.peer_host
        locked_for = math.ceil(admission.locked_for)
        if locked_for:
            decided(
                AuthenticationError(
                    f"too many failed logins for user '{username}' from {host}: locked out "
                    f"for another {locked_for} s",
                    f"locked out after {self.max_failures} failed logins",
                    username,
                )
            )
            return
        delay = admission.delay
        if delay:
            log.debug("login delayed", extra={"user": username, "peer": host, "seconds": delay})
            self.timers.call_later(
                round(delay * 1000), lambda: self._check(attempt, claim, admission, decided)
            )
        else:
            self._check(attempt, claim, admission, decided)

    def _check(
        self, attempt: LoginAttempt, claim: _Claim, admission: Admission, decided: Decided
    ) -> None:
        username, password = claim.username, claim.password

        def settle(refusal: AuthenticationError | None) -> None:
            self._settle(attempt, username, admission, refusal, decided)

        if claim.malformed is not None:
            settle(AuthenticationError(claim.malformed, claim.malformed, username))
            return
        if password is None:  # EXTERNAL: the TLS handshake has verified the certificate
            unknown = f"certificate CN '{username}' is not a known user"
            settle(
                None if username in self.users else AuthenticationError(unknown, unknown, username)
            )
            return
        credential = self.users.get(username)
        digest = hmac.digest(
            self._key,
            b"\0".join(p.encode("utf-8", "surrogatepass") for p in (username, password)),
            hashlib.sha256,
        )
        if credential is not None and self._checked.get(username) == (credential, digest):
            settle(None)
            return

        def work() -> _Checked:
            try:
                return check()
            except ValueError:  # a credential that cannot be checked admits nobody
                return _Checked(False)

        def check() -> _Checked:
            if credential is None:
                return _Checked(verify_unknown_user(password))
            if not credential.verify(password):
                return _Checked(False)
            if credential.needs_upgrade():
                return _Checked(True, Credential.from_password(password))
            return _Checked(True)

        def checked(result: _Checked) -> None:
            if self.users.get(username) is not credential:
                # A user added, deleted or given a new password meanwhile (by another worker
                # that upgraded its hash at a login, say) is checked against the new state.
                self._check(attempt, claim, admission, decided)
                return
            if credential is None:
                why: str | None = "no such user"
            elif not result.ok:
                why = "wrong password"
            else:
                why = None
                if result.upgraded is not None:
                    self.users[username] = result.upgraded
                    if self.on_upgrade is not None:
                        self.on_upgrade(username, result.upgraded)
                self._checked[username] = (self.users[username], digest)
            settle(None if why is None else _refused(attempt.mechanism, why, username))

        self.offload(work, checked)

    def _settle(
        self,
        attempt: LoginAttempt,
        username: str,
        admission: Admission,
        refusal: AuthenticationError | None,
        decided: Decided,
    ) -> None:
        host = attempt.peer_host
        if refusal is not None:

            def counted(locked_out: bool) -> None:
                if locked_out:
                    # Hardening: "log each lockout once with user, peer and duration".
                    log.warning(
                        "login locked out after %d failed logins",
                        self.max_failures,
                        extra={"user": username, "peer": host, "duration": self.lockout},
                    )
                decided(refusal)

            self.failures.failed(username, host, counted)
        elif username == GUEST and self.guest_loopback_only and not is_loopback(host):
            decided(
                AuthenticationError(
                    "user 'guest' can only connect via localhost (auth.guest_loopback_only)",
                    "guest may log in from loopback addresses only (auth.guest_loopback_only)",
                    username,
                )
            )
        else:
            if admission.failing:
                self.failures.succeeded(username, host)
            decided(username)
