"""`Authenticator`: logins checked against the users' stored credentials, the guest rule, EXTERNAL
with a client certificate, and the slowing down and lockout of repeated failures (the Security
requirements: "A failed login gets connection.close 403, is logged with the source address, and
repeated failures from one address are slowed down (configurable lockout window)")."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

import pytest

from batonmq.security.authn import AuthenticationError, Authenticator, LoginAttempt
from batonmq.security.failurecount import Admission, LocalCount
from batonmq.security.passwords import Credential, CredentialKind
from tests.manualtimers import ManualTimers

ALICE = Credential.from_password("wonderland")
REMOTE = "192.0.2.7"
CERTIFICATE = {"subject": ((("commonName", "alice"),),)}


def plain(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()


class Harness:
    def __init__(self, **settings: object) -> None:
        self.timers = ManualTimers()
        self.checks = 0
        self.upgrades: list[tuple[str, Credential]] = []
        self.authenticator = Authenticator(
            users={
                "alice": ALICE,
                "bob": Credential.from_password("builder"),
                "guest": Credential.from_password("guest"),
            },
            timers=self.timers,
            offload=self._offload,
            **settings,  # type: ignore[arg-type]
        )
        self.authenticator.on_upgrade = lambda name, cred: self.upgrades.append((name, cred))

    def _offload(self, work: Callable[[], object], done: Callable[[object], None]) -> None:
        self.checks += 1
        done(work())

    def login(
        self,
        username: str = "alice",
        password: str = "wonderland",
        host: str = REMOTE,
        mechanism: str = "PLAIN",
        certificate: dict[str, object] | None = None,
    ) -> list[str | AuthenticationError]:
        outcomes: list[str | AuthenticationError] = []
        response = plain(username, password) if mechanism == "PLAIN" else b""
        self.authenticator.authenticate(
            LoginAttempt(mechanism, response, host, certificate), outcomes.append
        )
        return outcomes

    def answered(
        self, outcomes: list[str | AuthenticationError]
    ) -> list[str | AuthenticationError]:
        """The outcome once the throttle's delay after earlier failures has passed."""
        self.timers.advance(10_000)
        return outcomes


def refused(outcomes: list[str | AuthenticationError]) -> str:
    [outcome] = outcomes
    assert isinstance(outcome, AuthenticationError)
    return str(outcome)


def test_the_right_password_logs_in_and_a_wrong_one_or_an_unknown_user_is_refused_alike():
    harness = Harness()
    assert harness.login() == ["alice"]
    wrong_password = refused(harness.login(password="looking-glass"))
    unknown_user = refused(Harness().login(username="mallory"))
    assert (
        wrong_password
        == unknown_user
        == (
            "Login was refused using authentication mechanism PLAIN. "
            "For details see the broker logfile."
        )
    )


def test_guest_logs_in_from_loopback_only_unless_allowed():
    """RabbitMQ: "guest" can only connect from localhost by default (loopback_users)."""
    assert Harness().login("guest", "guest", host="127.0.0.1") == ["guest"]
    assert "only connect via localhost" in refused(Harness().login("guest", "guest"))
    assert Harness(guest_loopback_only=False).login("guest", "guest") == ["guest"]


def test_a_password_checked_once_is_not_hashed_again():
    """A client that reconnects costs one scrypt, not one per connection."""
    harness = Harness()
    assert harness.login() == ["alice"]
    assert harness.login() == ["alice"]
    assert harness.checks == 1
    refused(harness.login(password="other"))
    assert harness.checks == 2
    harness.authenticator.replace_users({"alice": Credential.from_password("changed")})
    refused(harness.answered(harness.login()))
    assert harness.answered(harness.login(password="changed")) == ["alice"]


def test_failures_slow_the_pair_down_then_lock_out_that_user_from_that_address_only(
    caplog: pytest.LogCaptureFixture,
):
    """Hardening, defect 7: "Count failures per user and address, slow down the failing pair
    (growing delay) rather than refuse others, never refuse correct credentials because someone
    else failed, and log each lockout once with user, peer and duration. Keep the protection
    against password guessing"."""
    harness = Harness(max_failures=3, failure_window=60.0, lockout=300.0)
    refused(harness.login(password="bad"))
    slowed = harness.login()
    assert slowed == []  # not answered yet
    harness.timers.advance(250)
    assert slowed == ["alice"], "and the success forgets the failure"

    refused(harness.login(password="bad"))
    second = harness.login(password="bad")
    harness.timers.advance(250)
    refused(second)
    third = harness.login(password="bad")
    harness.timers.advance(500)
    refused(third)

    locked = refused(harness.login())  # the right password, but locked out: at once
    assert "too many failed logins for user 'alice' from 192.0.2.7: locked out for" in locked
    assert harness.login("bob", "builder") == ["bob"], "another user, same address: at once"
    assert harness.login(host="198.51.100.1") == ["alice"], "the same user from elsewhere"
    [lockout] = [record for record in caplog.records if "locked out" in record.getMessage()]
    assert lockout.getMessage() == "login locked out after 3 failed logins"
    assert (lockout.user, lockout.peer, lockout.duration) == ("alice", REMOTE, 300.0)
    harness.timers.advance(300_000)
    assert harness.login() == ["alice"]


def test_a_refusal_says_why_for_the_log_and_names_the_user():
    """Hardening: "A refused login names the user, the mechanism, the peer and why; it never
    says "see the broker logfile" inside the broker's own log" (the client's 403 text keeps
    RabbitMQ's words)."""
    harness = Harness()
    wrong = harness.login(password="bad")[0]
    unknown = harness.answered(harness.login("nobody", "x"))[0]
    assert isinstance(wrong, AuthenticationError) and isinstance(unknown, AuthenticationError)
    assert (wrong.username, wrong.reason) == ("alice", "wrong password")
    assert (unknown.username, unknown.reason) == ("nobody", "no such user")
    assert "see the broker logfile" in str(wrong) and str(wrong) == str(unknown)


def test_external_logs_in_as_the_certificate_cn_who_must_be_a_user():
    """Qpid manual §2.3 with SASL EXTERNAL: the client certificate names the user."""
    harness = Harness()
    assert harness.login(mechanism="EXTERNAL", certificate=CERTIFICATE) == ["alice"]
    assert harness.checks == 0  # no password involved
    stranger = {"subject": ((("commonName", "mallory"),),)}
    assert "not a known user" in refused(harness.login(mechanism="EXTERNAL", certificate=stranger))
    without = harness.answered(harness.login(mechanism="EXTERNAL", certificate=None))
    assert "needs a verified TLS client certificate" in refused(without)


def test_a_weak_md5_credential_is_upgraded_to_scrypt_at_login():
    """Qpid manual §2.1.1: Base64MD5 password files; MD5 is weak, so the first successful login
    replaces it with scrypt, and the store is told."""
    md5 = base64.b64encode(hashlib.md5(b"wonderland").digest()).decode()
    harness = Harness()
    harness.authenticator.replace_users({"alice": Credential(CredentialKind.LEGACY_MD5, md5)})
    assert harness.login() == ["alice"]
    [(name, upgraded)] = harness.upgrades
    assert (name, upgraded.kind) == ("alice", CredentialKind.SCRYPT)
    assert upgraded.verify("wonderland")
    assert harness.authenticator.users["alice"] is upgraded


@pytest.mark.parametrize(("new_password", "logged_in"), [("wonderland", True), ("changed", False)])
def test_a_user_changed_during_the_check_is_checked_again_against_the_new_credential(
    new_password: str, logged_in: bool
) -> None:
    """Another worker upgrades a weak hash at a login (Qpid manual §2.1.1: MD5 is weak) while
    this one checks the same user: the login is decided by the credential the user has once
    the check ends (the same password in a new hash logs in; a new password refuses the old)."""
    harness = Harness()
    changed = Credential.from_password(new_password)
    pending: list[Callable[[], None]] = []

    def offload(work: Callable[[], object], done: Callable[[object], None]) -> None:
        result = work()
        pending.append(lambda: done(result))

    harness.authenticator.offload = offload
    outcomes = harness.login()
    harness.authenticator.set_user("alice", changed)
    while pending:
        pending.pop(0)()
    if logged_in:
        assert outcomes == ["alice"]
    else:
        assert "Login was refused" in refused(outcomes)


def test_a_malformed_response_is_refused_and_counts_as_a_failure():
    """A response that names no user counts against the pair of no user and its address."""
    harness = Harness(max_failures=1)
    malformed = LoginAttempt("PLAIN", b"no-nul", REMOTE)
    outcomes: list[str | AuthenticationError] = []
    harness.authenticator.authenticate(malformed, outcomes.append)
    assert "PLAIN response" in refused(outcomes)
    assert "PLAIN response" in outcomes[0].reason
    outcomes.clear()
    harness.authenticator.authenticate(malformed, outcomes.append)
    assert "locked out" in refused(outcomes)
    assert harness.login() == ["alice"]


class LaterCount:
    """A failure count that answers when told to, as one kept in another worker does
    (`batonmq.server.brokerwide`); it records what it was told."""

    def __init__(self, here: LocalCount) -> None:
        self.here = here
        self.waiting: list[Callable[[], None]] = []
        self.told: list[str] = []

    def admit(self, user: str, address: str, then: Callable[[Admission], None]) -> None:
        self.told.append("admit")
        self.waiting.append(lambda: then(self.here.admission(user, address)))

    def failed(self, user: str, address: str, then: Callable[[bool], None]) -> None:
        self.told.append("failed")
        self.waiting.append(lambda: then(self.here.throttle.record_failure(user, address)))

    def succeeded(self, user: str, address: str) -> None:
        self.told.append("succeeded")
        self.here.succeeded(user, address)

    def answer(self) -> None:
        """Answer what was asked so far (not what the answers ask)."""
        waiting, self.waiting = self.waiting, []
        for answering in waiting:
            answering()


def test_a_count_that_answers_later_decides_as_one_that_answers_at_once():
    """A count in another worker: the login waits for the admission, and a refusal goes out
    only once its failure is counted, so the next attempt finds it. A login whose pair never
    failed tells the count nothing after it succeeds (no second question on the happy path);
    one that failed before tells it, so its failures are forgotten (LoginThrottle rule 5)."""
    harness = Harness(max_failures=2)
    later = LaterCount(harness.authenticator.counted_here)
    harness.authenticator.failures = later
    outcomes = harness.login()
    assert outcomes == []
    later.answer()
    assert outcomes == ["alice"] and later.told == ["admit"]

    later.told.clear()
    failing = harness.login(password="bad")
    later.answer()  # admitted, checked, then the failure is counted...
    assert failing == [] and later.told == ["admit", "failed"]
    later.answer()  # ...and only then refused
    refused(failing)

    later.told.clear()
    outcomes = harness.login()
    later.answer()
    assert harness.answered(outcomes) == ["alice"]
    assert later.told == ["admit", "succeeded"]
    assert not harness.authenticator.counted_here.throttle.remembers("alice", REMOTE)
