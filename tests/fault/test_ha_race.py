"""Two survivors racing to take over the same failed member, as two OS processes (tests/claimant.py:
each a member's real PostgreSQL store running the real claim, without the rest of a broker), 50
times against one real PostgreSQL.

The HA issue: "Two survivors racing to take over the same broker: exactly one wins, every time,
over 50 runs." MQ 4.1 HA guide: the takeover broker "acquires a lock on the failed broker's data
in the persistent store", so that no two brokers take over the same data; the failed broker, if
it comes back, can write nothing more.
"""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from batonmq.store.base import StoredEntry, StoredMessage, StoredQueue, StoreFenced, WriteBatch
from batonmq.store.postgres import PostgresStore
from tests.members import lease_run_out

pytestmark = pytest.mark.integration

SCHEMA = "batonmq_c_race"
RUNS = 50
#: Seconds between telling both claimants when to claim and that moment: enough for both lines
#: to be read on a loaded machine.
LEAD = 0.1
#: The failed member's lease, in seconds. Its sessions' idle-in-transaction timeout is as long
#: (`PostgresStore`): shorter, a loaded machine's pause between two statements of its own
#: writes ends them.
FAILED_LEASE = 0.2
REPOSITORY = Path(__file__).resolve().parents[2]


class Claimant:
    def __init__(self, dsn: str, broker_id: str) -> None:
        self.broker_id = broker_id
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.claimant", dsn, SCHEMA, broker_id],
            cwd=REPOSITORY,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._line() == "ready"

    def claim(self, failed: str, seen: int, at: float) -> None:
        self.process.stdin.write(f"claim {failed} {seen} {at}\n")
        self.process.stdin.flush()

    def outcome(self) -> dict[str, object]:
        answer = json.loads(self._line())
        assert isinstance(answer, dict)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            assert self.process.wait(10) == 0
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()

    def _line(self) -> str:
        line = self.process.stdout.readline()
        assert line, f"claimant {self.broker_id} exited with {self.process.wait()}"
        return line.strip()


@pytest.fixture
def claimants(postgres_dsn: str) -> Iterator[tuple[Claimant, Claimant]]:
    started: list[Claimant] = []
    try:
        for broker_id in ("survivorB", "survivorC"):
            started.append(Claimant(postgres_dsn, broker_id))
        yield started[0], started[1]
    finally:
        for claimant in started:
            claimant.close()


def _enqueue(base: int, queue: str, count: int) -> WriteBatch:
    header = struct.pack(">HHQH", 60, 0, 1, 0)  # basic class, a body of 1 byte, no properties
    messages = [StoredMessage(base + n, "", queue, header, b"m") for n in range(count)]
    return WriteBatch(
        queues_put=[StoredQueue("/", queue, False, {})],
        messages_put=messages,
        entries_put=[StoredEntry("/", queue, n, m.id) for n, m in enumerate(messages)],
    )


@pytest.mark.timeout(120)
async def test_two_survivor_processes_racing_for_a_failed_member_exactly_one_wins_every_time(
    postgres_dsn: str, claimants: tuple[Claimant, Claimant]
) -> None:
    """Each run: a member holding three messages stops renewing its lease; both claimants are
    told to claim it at the same instant. Exactly one wins; its store now holds the three
    messages; the failed member's next write is fenced. The two claims must have run at the
    same time in most runs, or the test proved nothing about a race."""
    wins = {claimant.broker_id: 0 for claimant in claimants}
    overlapped = 0
    started = time.monotonic()
    for run in range(RUNS):
        failed_id, queue = f"failed{run}", f"q{run}"
        failed = PostgresStore(
            postgres_dsn,
            broker_id=failed_id,
            schema=SCHEMA,
            lease_seconds=FAILED_LEASE,
            renew_every=3600,
        )
        await failed.open()
        try:
            base = (await failed.recover()).message_id_base
            await failed.commit(_enqueue(base, queue, 3))
            seen = await lease_run_out(failed, failed_id)
            at = time.monotonic() + LEAD
            for claimant in claimants:
                claimant.claim(failed_id, seen, at)
            outcomes = await asyncio.gather(
                *(asyncio.to_thread(claimant.outcome) for claimant in claimants)
            )

            winners = [c.broker_id for c, o in zip(claimants, outcomes, strict=True) if o["won"]]
            assert len(winners) == 1, f"run {run}: {outcomes}"
            wins[winners[0]] += 1
            first, second = outcomes
            if first["started"] < second["ended"] and second["started"] < first["ended"]:
                overlapped += 1
            assert await _owners(postgres_dsn, queue) == [(winners[0], 3)]
            with pytest.raises(StoreFenced):
                await failed.commit(_enqueue(base + 3, queue, 1))
        finally:
            await failed.close()
    took = time.monotonic() - started
    print(f"{RUNS} runs in {took:.1f} s: wins {wins}, {overlapped} claims overlapped")
    assert sum(wins.values()) == RUNS
    assert overlapped >= RUNS // 2, f"only {overlapped} of {RUNS} claims ran at the same time"


async def _owners(dsn: str, queue: str) -> list[tuple[str, int]]:
    """Who holds the queue's entries in the store, and how many."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            f"SELECT broker_id, count(*) FROM {SCHEMA}.entries WHERE queue = $1 GROUP BY broker_id",
            queue,
        )
    finally:
        await connection.close()
    return [(row[0], row[1]) for row in rows]
