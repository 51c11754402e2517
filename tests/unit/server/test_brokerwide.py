"""What the workers of one broker count together in the first (`batonmq.server.brokerwide`):
failed logins and the session log's repeats, over real sibling links on Unix socket pairs made
as the supervisor makes them."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from batonmq.logrepeat import CoalescingLog
from batonmq.security.authn import AuthenticationError, Authenticator, LoginAttempt
from batonmq.security.passwords import Credential
from batonmq.server.brokerwide import QUESTIONS, BrokerWide
from batonmq.server.placement import inbox_pairs
from batonmq.server.siblings import SiblingLink, tell_siblings

Inboxes = list[tuple[socket.socket, socket.socket]]
USERS = {"alice": Credential.from_password("wonderland"), "bob": Credential.from_password("b")}
HOST = "192.0.2.7"


@dataclass
class Worker:
    authenticator: Authenticator
    session_log: CoalescingLog
    link: SiblingLink
    broker_wide: BrokerWide

    async def login(self, user: str, password: str) -> str | AuthenticationError:
        decided: asyncio.Future[str | AuthenticationError] = (
            asyncio.get_running_loop().create_future()
        )
        response = b"\0" + user.encode() + b"\0" + password.encode()
        self.authenticator.authenticate(LoginAttempt("PLAIN", response, HOST), decided.set_result)
        return await asyncio.wait_for(decided, 10)


def make_worker(index: int, inboxes: Inboxes, logger: logging.Logger) -> Worker:
    authenticator = Authenticator(users=dict(USERS), max_failures=2, lockout=300.0)
    session_log = CoalescingLog(logger)

    async def serve(question: object) -> object:
        """As a worker serves its siblings (`server/worker.py`): the broker-wide questions;
        nothing else is asked here."""
        return broker_wide.answer(question) if isinstance(question, QUESTIONS) else None

    link = SiblingLink(index, inboxes, serve)
    broker_wide = BrokerWide(link, authenticator, session_log)
    return Worker(authenticator, session_log, link, broker_wide)


@pytest.fixture
def inboxes() -> Iterator[Inboxes]:
    made = inbox_pairs(2)
    yield made
    for ends in made:
        for end in ends:
            end.close()


@pytest.fixture
async def workers(inboxes: Inboxes) -> AsyncIterator[list[Worker]]:
    made = [make_worker(index, inboxes, logging.getLogger(f"test.w{index}")) for index in (0, 1)]
    for worker in made:
        worker.link.start()
        worker.broker_wide.install()
    yield made
    for worker in made:
        await worker.broker_wide.close()
        await worker.link.stop()


def refusal(outcome: str | AuthenticationError) -> str:
    assert isinstance(outcome, AuthenticationError), outcome
    return str(outcome)


async def test_failures_on_either_worker_lock_the_pair_out_on_both(
    workers: list[Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """Hardening, defect 7: "Count failures per user and address, ... log each lockout once with
    user, peer and duration": the broker's count, whichever worker each attempt reached."""
    first, second = workers
    refusal(await second.login("alice", "bad"))
    refusal(await first.login("alice", "bad"))  # the second failure: max_failures
    for worker in (second, first):
        locked = refusal(await worker.login("alice", "wonderland"))
        assert "too many failed logins for user 'alice' from 192.0.2.7" in locked
    assert await second.login("bob", "b") == "bob", "another user from the address: let in"
    lockouts = [r for r in caplog.records if r.getMessage().startswith("login locked out")]
    assert len(lockouts) == 1


async def test_a_success_on_one_worker_forgets_failures_counted_for_the_other(
    workers: list[Worker],
) -> None:
    """LoginThrottle rule 5: "A successful login forgets its pair's failures"."""
    first, second = workers
    refusal(await second.login("alice", "bad"))
    assert await first.login("alice", "wonderland") == "alice"
    refusal(await second.login("alice", "bad"))
    assert await second.login("alice", "wonderland") == "alice", "one failure since: no lockout"


async def test_without_the_first_worker_a_worker_counts_in_itself_and_says_so(
    inboxes: Inboxes, caplog: pytest.LogCaptureFixture
) -> None:
    """The first worker is down (the supervisor said so): logins are still answered, and the
    worker counts its own failures meanwhile."""
    second = make_worker(1, inboxes, logging.getLogger("test.w1"))
    second.link.start()
    second.broker_wide.install()
    try:
        tell_siblings(inboxes, 0, up=False)
        await asyncio.sleep(0.05)  # the supervisor's word is read
        refusal(await second.login("alice", "bad"))
        refusal(await second.login("alice", "bad"))
        assert "too many failed logins" in refusal(await second.login("alice", "wonderland"))
        apart = [r for r in caplog.records if "until the first answers" in r.getMessage()]
        assert len(apart) == 1, "said once, not at every login"
    finally:
        await second.broker_wide.close()
        await second.link.stop()


async def test_a_line_repeated_on_both_workers_is_written_once_then_counted(
    workers: list[Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """Hardening: "per-connection lines under attack are coalesced": one line, then a count,
    for the broker, not one of each per worker."""
    caplog.set_level(logging.INFO)
    first, second = workers
    for worker in (second, first, second, first):
        worker.session_log.log(logging.WARNING, "connection closed", {"user": "x"}, key="k")
    await second.broker_wide.close()  # what it handed over has been counted
    first.session_log.flush()
    second.session_log.flush()
    lines = [r.getMessage() for r in caplog.records if "connection closed" in r.getMessage()]
    assert lines[0] == "connection closed"
    assert lines[1].startswith("connection closed (x3 in the last ")
    assert len(lines) == 2
    assert {r.name for r in caplog.records if "connection closed" in r.getMessage()} == {"test.w0"}
