"""The takeover of a failed broker's persistent state in the shared PostgreSQL store of an HA
cluster: brokers as stores of one schema, each with its own broker id.

MQ 4.1 HA guide: "When a broker fails, another broker in the cluster takes over its persistent
data ... so that no persistent message is stranded"; the takeover broker "acquires a lock on the
failed broker's data in the persistent store", so exactly one broker takes it over.
"""

from __future__ import annotations

import asyncio
import struct
import time

import asyncpg
import pytest

from batonmq.store.base import (
    StoredBinding,
    StoredEntry,
    StoredExchange,
    StoredMessage,
    StoredQueue,
    StoreError,
    StoreFenced,
    StoreLocked,
    WriteBatch,
)
from batonmq.store.members import SEQUENCE_GAP
from batonmq.store.takeover import claim_lock_timeout
from tests.integration.store.conftest import CLUSTER_SCHEMA, MakeMember
from tests.members import lease_run_out

SCHEMA = CLUSTER_SCHEMA
#: The lease of a member that is to fail, in seconds. Its sessions' idle-in-transaction timeout
#: is as long (`PostgresStore`): shorter, a loaded machine's pause between two statements of its
#: own writes ends them ("cannot switch to state 11; another operation is in progress").
FAILED_LEASE = 0.2


def _message(message_id: int, body: bytes) -> StoredMessage:
    header = struct.pack(">HHQH", 60, 0, len(body), 0)  # basic class, no properties
    return StoredMessage(message_id, "", "q", header, body)


def _enqueue(
    base: int, queue: str, bodies: list[bytes], *, first_sequence: int = 0, delivered: int = 0
) -> WriteBatch:
    """Queue `queue` with messages of `bodies` (ids from `base`), the first `delivered` of them
    delivered once (an acknowledgement pending)."""
    messages = [_message(base + number, body) for number, body in enumerate(bodies)]
    return WriteBatch(
        queues_put=[StoredQueue("/", queue, False, {})],
        messages_put=messages,
        entries_put=[
            StoredEntry("/", queue, first_sequence + n, m.id, delivery_count=int(n < delivered))
            for n, m in enumerate(messages)
        ],
    )


async def test_a_takeover_merges_a_failed_brokers_queues_after_the_claimants_own(
    make_member: MakeMember,
) -> None:
    """A queue both brokers have (destinations are cluster-wide) gets the failed broker's
    entries after the claimant's, in their order, each marked delivered (redelivered: a pending
    acknowledgement becomes a ready message again); a queue, exchange and binding only the
    failed broker had become the claimant's; its transient entries go."""
    failed = make_member("brokerA", lease_seconds=0.2)
    survivor = make_member("brokerB")
    await failed.open()
    await survivor.open()
    base_a = (await failed.recover()).message_id_base
    base_b = (await survivor.recover()).message_id_base
    await failed.register("hostA:5672", "hostA:7676", "test", "{}")
    await failed.commit(_enqueue(base_a, "shared", [b"a0", b"a1", b"a2"], delivered=2))
    only_a = _enqueue(base_a + 10, "onlyA", [b"x0", b"x1"])
    only_a.exchanges_put = [StoredExchange("/", "ex", "direct", False, False, {})]
    only_a.bindings_put = [StoredBinding("/", "ex", "queue", "onlyA", "k", {})]
    transient = _message(base_a + 20, b"transient")
    only_a.messages_put.append(transient)
    only_a.entries_put.append(StoredEntry("/", "onlyA", 2, transient.id, transient=True))
    await failed.commit(only_a)
    await survivor.commit(_enqueue(base_b, "shared", [b"b0", b"b1"]))
    seen = await lease_run_out(survivor, "brokerA")

    taken = await survivor.take_over(
        "brokerA", seen, next_sequences={("/", "shared"): 2, ("/", "other"): 7}
    )

    assert taken is not None
    assert [q.name for q in taken.queues] == ["onlyA"]  # "shared" the survivor had already
    assert [(e.name, e.type_name) for e in taken.exchanges] == [("ex", "direct")]
    assert [(b.source, b.destination) for b in taken.bindings] == [("ex", "onlyA")]
    assert taken.messages == 5
    assert taken.first_sequences[("/", "shared")] == 2 + SEQUENCE_GAP
    shared = await survivor.read_entries("/", "shared", -1, 100)
    assert [e.message.body for e in shared] == [b"b0", b"b1", b"a0", b"a1", b"a2"]
    assert [e.sequence for e in shared] == [0, 1, *(SEQUENCE_GAP + 2 + n for n in range(3))]
    assert [e.delivery_count for e in shared] == [0, 0, 1, 1, 1]
    only = await survivor.read_entries("/", "onlyA", -1, 100)
    assert [e.message.body for e in only] == [b"x0", b"x1"]
    assert all(e.delivery_count == 1 for e in only)
    recovered = await survivor.recover()
    assert {q.name for q in recovered.queues} == {"shared", "onlyA"}
    assert {(b.vhost, b.queue, b.count) for b in recovered.backlogs} == {
        ("/", "shared", 5),
        ("/", "onlyA", 2),
    }
    members = {m.broker_id: m for m in await survivor.members(count_messages=True)}
    assert members["brokerA"].state == "FAILOVER_COMPLETE"
    assert members["brokerA"].taken_over_by == "brokerB"
    assert members["brokerA"].epoch == seen + 1
    assert members["brokerA"].address == "hostA:5672"
    assert (members["brokerA"].messages, members["brokerB"].messages) == (0, 7)
    assert (await failed.stats()).entries == 0


async def test_a_live_broker_is_not_taken_over_unless_forced(make_member: MakeMember) -> None:
    """The claim holds only once the failed broker's lease ran out on the database's clock
    ("the store's clock decides"); `takeover bkr -f` forces it, and fences the broker."""
    live = make_member("brokerA")
    survivor = make_member("brokerB")
    await live.open()
    await survivor.open()
    base = (await live.recover()).message_id_base
    await live.commit(_enqueue(base, "q", [b"m"]))
    epoch = {m.broker_id: m for m in await survivor.members()}["brokerA"].epoch

    assert await survivor.take_over("brokerA", epoch, next_sequences={}) is None
    await live.commit(_enqueue(base + 1, "q", [b"n"], first_sequence=1))  # not fenced

    forced = await survivor.take_over("brokerA", epoch, force=True, next_sequences={})
    assert forced is not None and forced.messages == 2
    with pytest.raises(StoreFenced):
        await live.commit(_enqueue(base + 2, "q", [b"o"], first_sequence=2))


async def test_a_claim_waiting_on_a_lock_gives_up_within_its_bound_and_keeps_the_lease(
    make_member: MakeMember, postgres_dsn: str
) -> None:
    """A statement of the failed broker still running holds the share lock of its epoch check
    on its record, which the claim must update. The claim waits for it no longer than
    `claim_lock_timeout`, so that the claimant's own lease renewal, held up meanwhile, lands
    before its lease runs out (MQ 4.1 HA guide: a broker is failed once it "fails to update its
    state within the number of monitor intervals specified by imq.cluster.monitor.threshold");
    given up, the claim moved nothing, and once the lock is gone the next claim succeeds."""
    failed = make_member("brokerA", lease_seconds=FAILED_LEASE)
    survivor = make_member("brokerB", lease_seconds=2.0, renew_every=0.5)
    bound = claim_lock_timeout(2.0, 0.5)
    assert bound == 0.75
    await failed.open()
    await survivor.open()
    base = (await failed.recover()).message_id_base
    await failed.commit(_enqueue(base, "q", [b"m0", b"m1"]))
    seen = await lease_run_out(survivor, "brokerA")
    holder = await asyncpg.connect(postgres_dsn)
    watcher = await asyncpg.connect(postgres_dsn)
    lease_live = f'SELECT lease_expires > now() FROM "{SCHEMA}".brokers WHERE broker_id = $1'
    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute(
            f'SELECT 1 FROM "{SCHEMA}".brokers WHERE broker_id = $1 FOR SHARE', "brokerA"
        )
        started = time.monotonic()
        for _ in range(3):  # each claim holds the renewal up for as long as it waits
            with pytest.raises(StoreError, match=r"waited 0\.75 s for a lock"):
                await survivor.take_over("brokerA", seen, next_sequences={})
            assert await watcher.fetchval(lease_live, "brokerB")
        assert time.monotonic() - started < 3 * (bound + 0.5)
        await asyncio.sleep(0.6)  # a renewal due while a claim waited has landed by now
        assert await watcher.fetchval(lease_live, "brokerB")
        assert {m.broker_id: m.state for m in await survivor.members()}["brokerA"] == "running"
        await holding.rollback()

        taken = await survivor.take_over("brokerA", seen, next_sequences={})
    finally:
        await holder.close()
        await watcher.close()

    assert taken is not None and taken.messages == 2
    entries = await survivor.read_entries("/", "q", -1, 10)
    assert [e.message.body for e in entries] == [b"m0", b"m1"]


async def test_two_survivors_racing_for_a_failed_broker_exactly_one_wins_every_time(
    make_member: MakeMember,
) -> None:
    """Issue rule: "Two survivors racing to take over the same broker: exactly one wins, every
    time, over 50 runs"; the failed broker, fenced, can write nothing more, and every message
    it held is in the winner's store."""
    first, second = make_member("brokerB"), make_member("brokerC")
    await first.open()
    await second.open()
    winners = {"brokerB": 0, "brokerC": 0}
    for run in range(50):
        failed = make_member(f"failed{run}", lease_seconds=FAILED_LEASE)
        await failed.open()
        base = (await failed.recover()).message_id_base
        await failed.commit(_enqueue(base, f"q{run}", [b"m0", b"m1", b"m2"]))
        seen = await lease_run_out(first, f"failed{run}")

        results = await asyncio.gather(
            first.take_over(f"failed{run}", seen, next_sequences={}),
            second.take_over(f"failed{run}", seen, next_sequences={}),
        )

        won = [store for store, taken in zip((first, second), results, strict=True) if taken]
        assert len(won) == 1, f"run {run}: {results}"
        winners[won[0].broker_id] += 1
        entries = await won[0].read_entries("/", f"q{run}", -1, 10)
        assert [e.message.body for e in entries] == [b"m0", b"m1", b"m2"]
        with pytest.raises(StoreFenced):
            await failed.commit(_enqueue(base + 3, f"q{run}", [b"late"], first_sequence=3))
        await failed.close()
    assert sum(winners.values()) == 50


async def test_a_taken_over_broker_restarts_as_a_fresh_member_owning_nothing(
    make_member: MakeMember,
) -> None:
    """Issue rule: a fenced broker, "restarted, it rejoins as a fresh member with a new epoch
    and an empty set of owned records"."""
    failed = make_member("brokerA", lease_seconds=FAILED_LEASE)
    survivor = make_member("brokerB")
    await failed.open()
    await survivor.open()
    base = (await failed.recover()).message_id_base
    await failed.commit(_enqueue(base, "q", [b"m"]))
    seen = await lease_run_out(survivor, "brokerA")
    assert await survivor.take_over("brokerA", seen, next_sequences={}) is not None
    await failed.close()

    again = make_member("brokerA")
    await again.open()
    recovered = await again.recover()

    assert (recovered.queues, recovered.backlogs, recovered.unclean_stop) == ([], [], False)
    member = {m.broker_id: m for m in await survivor.members()}["brokerA"]
    assert (member.state, member.epoch, member.lease_live) == ("running", seen + 2, True)


async def test_a_member_stopped_with_no_failover_is_claimed_only_by_force_until_it_restarts(
    make_member: MakeMember,
) -> None:
    """MQ 4.1 HA guide, Table 7: "The new -nofailover option indicates that no other broker is
    to take over the persistent data of the one being shut down." Its record says so; the claim
    in the store refuses it, once its lease has run out too, unless forced (`takeover bkr -f`);
    started again, it is an ordinary member."""
    stopping = make_member("brokerA", lease_seconds=0.2)
    survivor = make_member("brokerB")
    await stopping.open()
    await survivor.open()
    await stopping.recover()
    await survivor.recover()
    await stopping.refuse_failover()
    await stopping.close()
    seen = await lease_run_out(survivor, "brokerA")
    found = {m.broker_id: m for m in await survivor.members()}["brokerA"]
    assert (found.state, found.no_failover) == ("stopped", True)

    assert await survivor.take_over("brokerA", seen, next_sequences={}) is None
    assert await survivor.take_over("brokerA", seen, force=True, next_sequences={}) is not None

    restarted = make_member("brokerA", lease_seconds=0.2)
    await restarted.open()
    await restarted.recover()
    await restarted.close()
    seen = await lease_run_out(survivor, "brokerA")
    assert not {m.broker_id: m for m in await survivor.members()}["brokerA"].no_failover
    assert await survivor.take_over("brokerA", seen, next_sequences={}) is not None


async def test_a_member_that_recorded_it_is_quiescing_still_holds_its_store(
    make_member: MakeMember,
) -> None:
    """A member records QUIESCING (`quiesce bkr`) for the others to list; its record still
    says it runs: a second broker with its id is refused its store while its lease runs, and
    once it has been taken over it can record nothing more."""
    quiescing = make_member("brokerA")
    await quiescing.open()

    await quiescing.record_state("QUIESCING")

    assert {m.broker_id: m.state for m in await quiescing.members()}["brokerA"] == "QUIESCING"
    with pytest.raises(StoreLocked):
        await make_member("brokerA").open()
    survivor = make_member("brokerB")
    await survivor.open()
    epoch = {m.broker_id: m.epoch for m in await survivor.members()}["brokerA"]
    assert await survivor.take_over("brokerA", epoch, force=True, next_sequences={})
    with pytest.raises(StoreFenced):
        await quiescing.record_state("QUIESCE_COMPLETE")
