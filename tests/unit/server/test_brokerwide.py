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

from batonmq.engine.broker import Broker, BrokerSettings
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
    broker: Broker
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

    async def admit(self, user: str = "guest", vhost: str = "/") -> str | None:
        """connection.open's admission against the connection limits: None or the refusal."""
        decided: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.broker.admission.admit(user, vhost, decided.set_result)
        return await asyncio.wait_for(decided, 10)


def make_worker(index: int, inboxes: Inboxes, logger: logging.Logger, **limits: int) -> Worker:
    """Worker `index` of a broker with `limits` (BrokerSettings' connection limits)."""
    broker = Broker(BrokerSettings(**limits))
    broker.authenticator = authenticator = Authenticator(
        users=dict(USERS), max_failures=2, lockout=300.0
    )
    broker.session_log = session_log = CoalescingLog(logger)

    async def serve(question: object) -> object:
        """As a worker serves its siblings (`server/worker.py`): the broker-wide questions;
        nothing else is asked here."""
        return broker_wide.answer(question) if isinstance(question, QUESTIONS) else None

    link = SiblingLink(index, inboxes, serve)
    broker_wide = BrokerWide(link, broker)
    return Worker(broker, authenticator, session_log, link, broker_wide)


@pytest.fixture
def inboxes() -> Iterator[Inboxes]:
    made = inbox_pairs(2)
    yield made
    for ends in made:
        for end in ends:
            end.close()


def started(worker: Worker) -> Worker:
    worker.link.start()
    worker.broker_wide.install()
    return worker


async def stopped(worker: Worker) -> None:
    await worker.broker_wide.close()
    await worker.link.stop()


@pytest.fixture
async def workers(inboxes: Inboxes) -> AsyncIterator[list[Worker]]:
    made = [
        started(make_worker(index, inboxes, logging.getLogger(f"test.w{index}")))
        for index in (0, 1)
    ]
    yield made
    for worker in made:
        await stopped(worker)


@pytest.fixture
async def limited(inboxes: Inboxes) -> AsyncIterator[list[Worker]]:
    """Two workers of a broker whose virtual hosts take 2 connections each."""
    made = [
        started(
            make_worker(
                index, inboxes, logging.getLogger(f"test.w{index}"), max_connections_per_vhost=2
            )
        )
        for index in (0, 1)
    ]
    yield made
    for worker in made:
        await stopped(worker)


def vhost_limit(user: str) -> str:
    return (
        f"access to vhost '/' refused for user '{user}': connection limit (2) is reached "
        "(limits.max_connections_per_vhost)"
    )


async def told(inboxes: Inboxes, worker: int, *, up: bool) -> None:
    """The supervisor's word that `worker` ended or serves again, read by the others."""
    tell_siblings(inboxes, worker, up=up)
    await asyncio.sleep(0.05)


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


async def test_connections_on_either_worker_count_against_one_limit(
    limited: list[Worker],
) -> None:
    """The Overload requirements: "connections per user and per virtual host ... each refusal
    names the limit"; RabbitMQ's vhost max-connections holds for the broker, whichever worker
    serves each connection, with RabbitMQ's text."""
    first, second = limited
    assert await second.admit("alice") is None
    assert await first.admit("alice") is None

    assert await second.admit("bob") == vhost_limit("bob")
    assert await first.admit("bob") == vhost_limit("bob")

    second.broker.admission.ended("alice", "/")
    assert await second.admit("bob") is None, "the slot a connection's end made"
    assert first.broker.connections.by_vhost == {"/": 2}


async def test_the_connections_of_a_worker_that_ended_leave_the_first_workers_count(
    limited: list[Worker], inboxes: Inboxes
) -> None:
    """The open connections are limited: those of a worker that died ended with it."""
    first, second = limited
    assert await second.admit() is None
    assert await second.admit() is None
    assert await first.admit() == vhost_limit("guest")

    await told(inboxes, 1, up=False)

    assert await first.admit() is None
    assert await first.admit() is None


async def test_a_first_worker_started_again_is_given_the_connections_the_others_hold(
    limited: list[Worker], inboxes: Inboxes, caplog: pytest.LogCaptureFixture
) -> None:
    """The first worker's count starts afresh when it starts again: each other worker gives it
    the connections it holds when it serves again, so the limit still holds for the broker.
    Meanwhile the others count in themselves, and say so once each way."""
    caplog.set_level(logging.INFO)
    first, second = limited
    assert await second.admit() is None
    await stopped(first)
    await told(inboxes, 0, up=False)
    assert await second.admit() is None, "counted in the second worker meanwhile"
    assert await second.admit() == vhost_limit("guest")

    again = started(
        make_worker(0, inboxes, logging.getLogger("test.w0"), max_connections_per_vhost=2)
    )
    try:
        await told(inboxes, 0, up=True)
        assert await again.admit() == vhost_limit("guest")
        second.broker.admission.ended("guest", "/")
        assert await second.admit() is None, "asked after the end was told"
        assert await again.admit() == vhost_limit("guest")
    finally:
        await stopped(again)
    lines = [r.getMessage() for r in caplog.records if "connections" in r.getMessage()]
    assert [line.endswith("until the first answers") for line in lines] == [True, False]


async def test_a_connection_let_in_as_the_connections_are_given_stays_counted(
    limited: list[Worker], inboxes: Inboxes
) -> None:
    """The limit holds for the broker: a connection the first worker lets in while another
    worker gives it the connections it holds (the first serves again) stays in its count, so
    the list is given only once no admission waits for the first's answer."""
    first, second = limited
    assert await second.admit() is None
    await stopped(first)
    await told(inboxes, 0, up=False)
    again = started(
        make_worker(0, inboxes, logging.getLogger("test.w0"), max_connections_per_vhost=2)
    )
    try:
        second.link.down.discard(0)  # the first serves again: it is asked again ...
        admitted = asyncio.get_running_loop().create_task(second.admit())
        await asyncio.sleep(0)
        second.broker_wide._told(0, True)  # ... and given the connections, its answer due
        assert await admitted is None
        async with asyncio.timeout(5):
            while again.broker.connections.by_vhost["/"] != 2:  # the list, once it is read
                await asyncio.sleep(0.01)
        assert await again.admit() == vhost_limit("guest")
    finally:
        await stopped(again)


async def test_without_limits_the_first_worker_is_not_asked(inboxes: Inboxes) -> None:
    """Both connection limits are 0 by default: connection.open asks nothing of the first
    worker (here, down), and nothing is said of counting apart."""
    second = started(make_worker(1, inboxes, logging.getLogger("test.w1")))
    try:
        await told(inboxes, 0, up=False)
        assert [await second.admit() for _ in range(3)] == [None, None, None]
        assert second.broker_wide._apart is False
    finally:
        await stopped(second)
