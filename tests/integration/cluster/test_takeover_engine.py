"""A running broker takes a failed member over and serves what it held: two brokers of one HA
cluster in this process, each on its own PostgreSQL store of the cluster's schema.

MQ 4.1 HA guide: the takeover broker "takes over the failed broker's persistent data" and serves
it to clients that reconnect to it; it notifies mq.broker.takeover.start and .complete (or .fail).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from pamqp import commands

from batonmq.cluster.catalogue import CatalogueSync
from batonmq.cluster.member import ClusterMember
from batonmq.cluster.states import BrokerState
from batonmq.config.cluster import ClusterConfig
from batonmq.config.schema import Config
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker, BrokerSettings
from batonmq.engine.events import Event, EventKind
from batonmq.engine.messages import AckMode
from batonmq.engine.recovery import restore
from batonmq.engine.takeover import adopt, take_over
from batonmq.management.perworker import Ownership, adopt_taken_over
from batonmq.server.placement import owner_of
from batonmq.store.base import StoreFenced, WriteBatch
from batonmq.store.postgres import PostgresStore
from tests.members import lease_run_out

SCHEMA = "batonmq_c_engine"
PERSISTENT = commands.Basic.Properties(delivery_mode=2)
StartBroker = Callable[..., Awaitable[tuple[Broker, PostgresStore]]]


@pytest.fixture
async def start_broker(postgres_dsn: str, tmp_path: Path) -> AsyncIterator[StartBroker]:
    """`start(broker_id, lease_seconds=15.0, page_window=10_000, member_of=None)`: a recovered
    broker on its store in the cluster's schema (a short lease never renewed: a broker that
    stopped updating the store); with `member_of`, as the worker of that member whose store
    identity is `broker_id`."""
    started: list[Broker] = []

    async def start(
        broker_id: str,
        lease_seconds: float = 15.0,
        page_window: int = 10_000,
        member_of: str | None = None,
    ) -> tuple[Broker, PostgresStore]:
        store = PostgresStore(
            postgres_dsn,
            broker_id=broker_id,
            schema=SCHEMA,
            lease_seconds=lease_seconds,
            renew_every=3600.0,
            member_of=member_of,
        )
        settings = BrokerSettings(streams_dir=tmp_path / broker_id, page_window=page_window)
        broker = Broker(settings, store)
        started.append(broker)
        await store.open()
        restore(broker, await store.recover())
        broker.journal.start()
        return broker, store

    try:
        yield start
    finally:
        for broker in started:
            await broker.journal.stop()
            assert broker.store is not None
            await broker.store.close()


def _owner(worker: int) -> Callable[[str], bool]:
    """Whether worker `worker` of two owns a virtual host ("/" is worker 0's, "v2" worker 1's)."""
    return lambda vhost: owner_of(vhost, 2) == worker


async def _publish(api: EngineApi, queue: str, *bodies: bytes) -> None:
    for body in bodies:
        assert await api.publish("guest", "/", "", queue, PERSISTENT, body)


async def test_the_survivor_serves_a_taken_over_queue_after_its_own_messages_redelivered(
    start_broker: StartBroker,
) -> None:
    """A queue both brokers had gets the failed broker's messages after the survivor's own, in
    order, flagged redelivered (AMQP 0-9-1: "this indicates that the message has been previously
    delivered"); a queue only the failed broker had appears with its messages; the event feed
    says takeover.start and takeover.complete, naming the failed broker."""
    failed, _failed_store = await start_broker("brokerA", lease_seconds=0.2)
    survivor, survivor_store = await start_broker("brokerB")
    failed_api, survivor_api = EngineApi(failed), EngineApi(survivor)
    for api in (failed_api, survivor_api):
        await api.declare_queue("guest", "/", "shared")
    await failed_api.declare_queue("guest", "/", "onlyA")
    await _publish(failed_api, "shared", b"a0", b"a1")
    await _publish(failed_api, "onlyA", b"x0")
    await _publish(survivor_api, "shared", b"b0", b"b1")
    seen = await lease_run_out(survivor_store, "brokerA")
    events: list[Event] = []
    survivor.events.subscribe(events.append)

    outcome = await take_over(survivor, survivor_store, "brokerA", seen)
    await _publish(survivor_api, "shared", b"b2")  # after the takeover: after what it took

    assert outcome.taken is not None and outcome.taken.messages == 3
    got = await survivor_api.get_messages("guest", "/", "shared", 10, AckMode.ACK_REQUEUE_FALSE)
    assert [(m.message.body, m.message.redelivered) for m in got] == [
        (b"b0", False),
        (b"b1", False),
        (b"a0", True),
        (b"a1", True),
        (b"b2", False),
    ]
    got = await survivor_api.get_messages("guest", "/", "onlyA", 10, AckMode.ACK_REQUEUE_FALSE)
    assert [(m.message.body, m.message.redelivered) for m in got] == [(b"x0", True)]
    assert [(e.kind, e.name) for e in events if e.kind.value.startswith("takeover.")] == [
        (EventKind.TAKEOVER_START, "brokerA"),
        (EventKind.TAKEOVER_COMPLETE, "brokerA"),
    ]
    assert (await survivor_store.stats()).entries == 0  # acked: gone from the store too


async def test_a_lost_claim_is_a_takeover_fail_event_and_changes_nothing(
    start_broker: StartBroker,
) -> None:
    """A claim of a broker whose lease still runs is refused by the store: takeover.fail."""
    _live, live_store = await start_broker("brokerA")
    survivor, survivor_store = await start_broker("brokerB")
    epoch = {m.broker_id: m for m in await survivor_store.members()}["brokerA"].epoch
    events: list[Event] = []
    survivor.events.subscribe(events.append)

    outcome = await take_over(survivor, survivor_store, "brokerA", epoch)

    assert outcome.taken is None
    assert [(e.kind, e.name) for e in events] == [
        (EventKind.TAKEOVER_START, "brokerA"),
        (EventKind.TAKEOVER_FAIL, "brokerA"),
    ]
    assert {m.broker_id: m.state for m in await live_store.members()}["brokerA"] == "running"


async def test_a_claim_given_up_on_a_lock_is_a_takeover_fail_with_its_reason(
    start_broker: StartBroker, postgres_dsn: str
) -> None:
    """A claim that waited its bound for the failed broker's record (a statement of that
    broker still holds it) is a failed takeover: takeover.fail names the failed broker and the
    reason (the HA guide's mq.broker.takeover.fail), nothing moved; once the lock is gone the
    next attempt takes it over."""
    failed, _failed_store = await start_broker("brokerA", lease_seconds=0.2)
    survivor, survivor_store = await start_broker("brokerB", lease_seconds=2.0)
    await EngineApi(failed).declare_queue("guest", "/", "q")
    await _publish(EngineApi(failed), "q", b"a0")
    seen = await lease_run_out(survivor_store, "brokerA")
    events: list[Event] = []
    survivor.events.subscribe(events.append)
    holder = await asyncpg.connect(postgres_dsn)
    try:
        async with holder.transaction():
            await holder.execute(
                f'SELECT 1 FROM "{SCHEMA}".brokers WHERE broker_id = $1 FOR SHARE', "brokerA"
            )
            given_up = await take_over(survivor, survivor_store, "brokerA", seen)
    finally:
        await holder.close()
    taken = await take_over(survivor, survivor_store, "brokerA", seen)

    assert given_up.taken is None and given_up.error is not None
    assert "waited 0.5 s for a lock on its record" in given_up.error
    fail = [e for e in events if e.kind is EventKind.TAKEOVER_FAIL]
    assert [(e.name, e.details["reason"]) for e in fail] == [("brokerA", given_up.error)]
    assert taken.taken is not None and taken.taken.messages == 1
    assert [(e.kind, e.name) for e in events][-1] == (EventKind.TAKEOVER_COMPLETE, "brokerA")


async def test_the_api_lists_the_members_and_forces_a_takeover_of_a_live_one(
    start_broker: StartBroker,
) -> None:
    """`imqcmd list bkr` (Example 1: id, state, messages in the store, who took it over) and
    `imqcmd takeover bkr -n ID -f`: "force the takeover to occur unconditionally"; without -f a
    broker whose lease still runs is not taken over. The forced one is fenced. The claimant's
    state tells how its takeover went (Table 19: TAKEOVER_FAILED, TAKEOVER_COMPLETE)."""
    live, live_store = await start_broker("brokerA")
    survivor, survivor_store = await start_broker("brokerB")
    ClusterMember(
        Config(cluster=ClusterConfig(ha=True, clusterid="test", brokerid="brokerB")),
        survivor,
        survivor_store,
    )
    api = EngineApi(survivor)
    await EngineApi(live).declare_queue("guest", "/", "q")
    await _publish(EngineApi(live), "q", b"m0", b"m1")

    before = {member.broker_id: member for member in await api.cluster_members()}
    refused = await api.take_over_broker("brokerA")
    after_refused = {member.broker_id: member for member in await api.cluster_members()}
    forced = await api.take_over_broker("brokerA", force=True)
    after = {member.broker_id: member for member in await api.cluster_members()}

    assert (before["brokerA"].state, before["brokerA"].messages) == (BrokerState.OPERATING, 2)
    assert before["brokerB"].local and not before["brokerA"].local
    assert refused.taken is None
    # Table 19: the broker that attempted the takeover, then the one that completed it.
    assert after_refused["brokerB"].state == BrokerState.TAKEOVER_FAILED
    assert after["brokerB"].state == BrokerState.TAKEOVER_COMPLETE
    assert forced.taken is not None and forced.taken.messages == 2
    assert (after["brokerA"].state, after["brokerA"].taken_over_by) == (
        BrokerState.FAILOVER_COMPLETE,
        "brokerB",
    )
    assert (after["brokerA"].messages, after["brokerB"].messages) == (0, 2)
    with pytest.raises(StoreFenced):
        await live_store.commit(WriteBatch(vhosts_put=["/fenced"]))
    with pytest.raises(ApiError):
        await api.take_over_broker("brokerB")
    with pytest.raises(ApiError):
        await EngineApi(live).cluster_members()  # not a member: no ClusterMember runs there


async def test_a_member_whose_lease_ran_out_is_listed_pending_failover(
    start_broker: StartBroker,
) -> None:
    """The issue's FAILOVER_PENDING "as seen from the failed broker's side": a member whose
    lease ran out on the database's clock (it failed) and that no survivor has claimed yet."""
    await start_broker("brokerA", lease_seconds=0.5)
    survivor, survivor_store = await start_broker("brokerB")
    ClusterMember(
        Config(cluster=ClusterConfig(ha=True, clusterid="test", brokerid="brokerB")),
        survivor,
        survivor_store,
    )
    await lease_run_out(survivor_store, "brokerA")

    listed = {member.broker_id: member for member in await EngineApi(survivor).cluster_members()}

    assert listed["brokerA"].state == BrokerState.FAILOVER_PENDING
    assert listed["brokerB"].state == BrokerState.OPERATING


async def test_a_queue_paging_its_backlog_takes_the_failed_brokers_entries_after_it(
    start_broker: StartBroker,
) -> None:
    """A survivor's queue that holds more than its window keeps its backlog in the store (paged);
    the entries taken over join after that backlog and come out after it, in order."""
    failed, _ = await start_broker("brokerA", lease_seconds=0.2)
    survivor, survivor_store = await start_broker("brokerB", page_window=10)
    failed_api, survivor_api = EngineApi(failed), EngineApi(survivor)
    for api in (failed_api, survivor_api):
        await api.declare_queue("guest", "/", "shared")
    theirs = [f"a{n}".encode() for n in range(30)]
    ours = [f"b{n}".encode() for n in range(50)]
    await _publish(failed_api, "shared", *theirs)
    await _publish(survivor_api, "shared", *ours)
    seen = await lease_run_out(survivor_store, "brokerA")

    outcome = await take_over(survivor, survivor_store, "brokerA", seen)
    await _publish(survivor_api, "shared", b"after")

    assert outcome.taken is not None
    bodies = []
    while got := await survivor_api.get_messages(
        "guest", "/", "shared", 7, AckMode.ACK_REQUEUE_FALSE
    ):
        bodies += [m.message.body for m in got]
    assert bodies == [*ours, *theirs, b"after"]
    assert (await survivor_store.stats()).entries == 0


async def test_a_member_with_workers_is_one_member_taken_over_whole(
    start_broker: StartBroker,
) -> None:
    """A broker with two worker processes is one member of the cluster: listed once, with the
    messages of both its workers' store identities, and claimed whole, both identities in one
    claim (MQ 4.1 HA guide: the takeover broker "takes over the failed broker's persistent
    data"). Each identity's entries of a queue follow the survivor's, one identity after the
    other, redelivered."""
    worker0, _ = await start_broker("brokerAw0", lease_seconds=0.2, member_of="brokerA")
    worker1, _ = await start_broker("brokerAw1", lease_seconds=0.2, member_of="brokerA")
    survivor, survivor_store = await start_broker("brokerB")
    api0, api1, survivor_api = EngineApi(worker0), EngineApi(worker1), EngineApi(survivor)
    for api in (api0, api1, survivor_api):
        await api.declare_queue("guest", "/", "shared")
    await api1.declare_queue("guest", "/", "only1")
    await _publish(api0, "shared", b"a0", b"a1")
    await _publish(api1, "shared", b"c0")
    await _publish(api1, "only1", b"x0")
    await _publish(survivor_api, "shared", b"b0")
    listed = {m.broker_id: m for m in await survivor_store.members(count_messages=True)}
    assert sorted(listed) == ["brokerA", "brokerB"]
    assert listed["brokerA"].identities == ("brokerAw0", "brokerAw1")
    assert listed["brokerA"].messages == 4
    seen = await lease_run_out(survivor_store, "brokerA")
    events: list[Event] = []
    survivor.events.subscribe(events.append)

    outcome = await take_over(survivor, survivor_store, "brokerA", seen)

    assert outcome.taken is not None and outcome.taken.messages == 4
    got = await survivor_api.get_messages("guest", "/", "shared", 10, AckMode.ACK_REQUEUE_FALSE)
    assert [(m.message.body, m.message.redelivered) for m in got] == [
        (b"b0", False),
        (b"a0", True),
        (b"a1", True),
        (b"c0", True),
    ]
    got = await survivor_api.get_messages("guest", "/", "only1", 10, AckMode.ACK_REQUEUE_FALSE)
    assert [m.message.body for m in got] == [b"x0"]
    after = {m.broker_id: m for m in await survivor_store.members()}["brokerA"]
    assert (after.state, after.taken_over_by) == ("FAILOVER_COMPLETE", "brokerB")
    assert [(e.kind, e.name) for e in events if e.kind.value.startswith("takeover.")] == [
        (EventKind.TAKEOVER_START, "brokerA"),
        (EventKind.TAKEOVER_COMPLETE, "brokerA"),
    ]


async def test_a_member_with_a_worker_still_renewing_is_not_claimed_at_all(
    start_broker: StartBroker, postgres_dsn: str
) -> None:
    """While any worker of a member renews its lease the member is alive: a claim takes none
    of its identities, not even those of workers that stopped (a broker is taken over whole or
    not at all, so that two survivors never split it)."""
    stopped, stopped_store = await start_broker("brokerAw0", lease_seconds=0.2, member_of="brokerA")
    await start_broker("brokerAw1", member_of="brokerA")
    survivor, survivor_store = await start_broker("brokerB")
    await EngineApi(stopped).declare_queue("guest", "/", "q")
    await _publish(EngineApi(stopped), "q", b"kept")
    connection = await asyncpg.connect(postgres_dsn)
    try:
        while not await connection.fetchval(
            f'SELECT lease_expires < now() FROM "{SCHEMA}".brokers WHERE broker_id = $1',
            "brokerAw0",
        ):
            await asyncio.sleep(0.02)
    finally:
        await connection.close()
    member = {m.broker_id: m for m in await survivor_store.members()}["brokerA"]
    assert member.lease_live

    outcome = await take_over(survivor, survivor_store, "brokerA", member.epoch)

    assert outcome.taken is None
    assert (await stopped_store.stats()).entries == 1
    listed = {m.broker_id: m for m in await survivor_store.members()}
    assert listed["brokerA"].state == "running" and listed["brokerA"].epoch == member.epoch


async def test_a_workers_identity_is_not_taken_over_alone(start_broker: StartBroker) -> None:
    """Naming the store identity of one worker claims nothing: the claim names its member."""
    await start_broker("brokerAw0", lease_seconds=0.2, member_of="brokerA")
    survivor, survivor_store = await start_broker("brokerB")
    await lease_run_out(survivor_store, "brokerA")

    outcome = await take_over(survivor, survivor_store, "brokerAw0", 1)

    assert outcome.taken is None
    assert outcome.error is not None and "taken over whole, as 'brokerA'" in outcome.error


async def test_a_survivor_with_workers_splits_a_failed_member_by_virtual_host(
    start_broker: StartBroker,
) -> None:
    """A survivor with two workers: the worker that claims the failed member takes the state of
    its own virtual hosts, and its sibling adopts the rest, each serving what its virtual hosts
    held (a client of a virtual host reaches the worker that owns it). The failed member's
    record says FAILOVER_STARTED until nothing of it is left to adopt, then FAILOVER_COMPLETE;
    adopting again finds nothing (the rows moved once, in the adopting worker's transaction)."""
    failed, _ = await start_broker("brokerA", lease_seconds=0.2)
    worker0, store0 = await start_broker("brokerBw0", member_of="brokerB")
    worker1, store1 = await start_broker("brokerBw1", member_of="brokerB")
    failed_api = EngineApi(failed)
    await failed_api.add_vhost("v2", creator="guest")
    for vhost in ("/", "v2"):
        await failed_api.declare_queue("guest", vhost, "q")
        assert await failed_api.publish("guest", vhost, "", "q", PERSISTENT, vhost.encode())
    seen = await lease_run_out(store0, "brokerA")

    claimed = await take_over(worker0, store0, "brokerA", seen, owns=_owner(0))
    half = {m.broker_id: m for m in await store0.members()}["brokerA"]
    adopted = await adopt(worker1, store1, _owner(1))
    await CatalogueSync(worker1, store1, 3600.0).reload()  # guest's permissions in v2

    assert claimed.taken is not None and claimed.taken.messages == 1
    assert (half.state, half.taken_over_by) == ("FAILOVER_STARTED", "brokerB")
    assert adopted is not None and adopted.messages == 1
    for worker, vhost in ((worker0, "/"), (worker1, "v2")):
        got = await EngineApi(worker).get_messages(
            "guest", vhost, "q", 10, AckMode.ACK_REQUEUE_FALSE
        )
        assert [(m.message.body, m.message.redelivered) for m in got] == [(vhost.encode(), True)]
    assert "v2" not in worker0.vhosts or "q" not in worker0.vhosts["v2"].queues
    after = {m.broker_id: m for m in await store0.members()}["brokerA"]
    assert after.state == "FAILOVER_COMPLETE"
    assert await adopt(worker1, store1, _owner(1)) is None
    assert (await store0.stats()).entries == (await store1.stats()).entries == 0


async def test_what_a_failed_survivor_had_not_adopted_yet_goes_to_the_next(
    start_broker: StartBroker,
) -> None:
    """A survivor with workers claimed a member and failed before its sibling adopted its
    share: whoever takes the survivor over takes that share too, so nothing is stranded."""
    failed, _ = await start_broker("brokerA", lease_seconds=0.2)
    worker0, store0 = await start_broker("brokerBw0", lease_seconds=1.0, member_of="brokerB")
    await start_broker("brokerBw1", lease_seconds=1.0, member_of="brokerB")
    last, last_store = await start_broker("brokerC")
    failed_api = EngineApi(failed)
    await failed_api.add_vhost("v2", creator="guest")
    await failed_api.declare_queue("guest", "v2", "q")
    assert await failed_api.publish("guest", "v2", "", "q", PERSISTENT, b"v2")
    seen = await lease_run_out(store0, "brokerA")
    assert (await take_over(worker0, store0, "brokerA", seen, owns=_owner(0))).taken is not None
    seen = await lease_run_out(last_store, "brokerB")

    outcome = await take_over(last, last_store, "brokerB", seen)

    assert outcome.taken is not None and outcome.taken.messages == 1
    await CatalogueSync(last, last_store, 3600.0).reload()
    got = await EngineApi(last).get_messages("guest", "v2", "q", 10, AckMode.ACK_REQUEUE_FALSE)
    assert [m.message.body for m in got] == [b"v2"]
    listed = {m.broker_id: m for m in await last_store.members()}
    assert (listed["brokerA"].state, listed["brokerA"].taken_over_by) == (
        "FAILOVER_COMPLETE",
        "brokerC",
    )


async def test_virtual_hosts_the_survivors_workers_had_not_seen_are_taken_over_by_their_owners(
    start_broker: StartBroker,
) -> None:
    """The failed member created a virtual host for each worker of the survivor and published to
    it just before it failed, and the survivor's workers had not applied the catalogue since:
    each worker's share of the takeover is what the store's catalogue says it owns, so the
    worker that claims takes its own, its sibling adopts the other, and each serves it (MQ 4.1
    HA guide: the takeover broker "takes over the failed broker's persistent data")."""
    worker0, store0 = await start_broker("brokerBw0", member_of="brokerB")
    worker1, store1 = await start_broker("brokerBw1", member_of="brokerB")
    failed, _ = await start_broker("brokerA", lease_seconds=0.2)
    failed_api = EngineApi(failed)
    unseen = {
        worker: next(f"late{n}" for n in range(20) if owner_of(f"late{n}", 2) == worker)
        for worker in (0, 1)
    }
    for vhost in unseen.values():
        await failed_api.add_vhost(vhost, creator="guest")
        await failed_api.declare_queue("guest", vhost, "q")
        assert await failed_api.publish("guest", vhost, "", "q", PERSISTENT, vhost.encode())
    assert not set(unseen.values()) & {*worker0.vhosts, *worker1.vhosts}
    await lease_run_out(store0, "brokerA")

    async def siblings_adopt() -> None:
        await adopt_taken_over(EngineApi(worker1), Ownership(_owner(1), _owner(1)))

    member = ClusterMember(
        Config(cluster=ClusterConfig(ha=True, clusterid="test", brokerid="brokerB")),
        worker0,
        store0,
        owns=_owner(0),
        siblings_adopt=siblings_adopt,
    )
    outcome = await member.take_over("brokerA")

    assert outcome.taken is not None
    for index, worker in enumerate((worker0, worker1)):
        await CatalogueSync(worker, store0 if index == 0 else store1, 3600.0).reload()
        got = await EngineApi(worker).get_messages(
            "guest", unseen[index], "q", 10, AckMode.ACK_REQUEUE_FALSE
        )
        assert [(m.message.body, m.message.redelivered) for m in got] == [
            (unseen[index].encode(), True)
        ]
    after = {m.broker_id: m for m in await store0.members()}["brokerA"]
    assert after.state == "FAILOVER_COMPLETE"


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_failed_members_rows_in_a_virtual_host_deleted_meanwhile_are_taken_over(
    start_broker: StartBroker, workers: int
) -> None:
    """The failed member held a queue and a persistent message in a virtual host deleted while
    it was down. The survivor takes over "the failed broker's persistent data" (MQ 4.1 HA
    guide), all of it: the rows come back with their virtual host, as the failed broker's own
    restart would bring them back (a recovery restores every stored queue), until the survivor
    applies the catalogue's next change, which deletes that virtual host again as any deleted
    one, with what it holds (RabbitMQ: deleting a virtual host deletes its queues); a worker's share
    is the virtual hosts it owns among those the failed broker holds rows of, not among those
    the catalogue still lists. Before, one survivor failed with a KeyError and a worker's share
    left the rows to no one, so the record stayed FAILOVER_STARTED."""
    gone = next(f"gone{n}" for n in range(20) if owner_of(f"gone{n}", 2) == 0)
    failed, _ = await start_broker("brokerA", lease_seconds=0.2)
    failed_api = EngineApi(failed)
    await failed_api.add_vhost(gone, creator="guest")
    for vhost in (gone, "/"):
        await failed_api.declare_queue("guest", vhost, "q")
        assert await failed_api.publish("guest", vhost, "", "q", PERSISTENT, vhost.encode())
    if workers == 1:
        survivor, store = await start_broker("brokerB")
        owns = None
    else:
        survivor, store = await start_broker("brokerBw0", member_of="brokerB")
        owns = _owner(0)
    await EngineApi(survivor).delete_vhost(gone)
    assert gone not in (await store.catalogue()).vhosts
    await lease_run_out(store, "brokerA")

    member = ClusterMember(
        Config(cluster=ClusterConfig(ha=True, clusterid="test", brokerid="brokerB")),
        survivor,
        store,
        owns=owns,
    )
    outcome = await member.take_over("brokerA")

    assert outcome.taken is not None and outcome.error is None
    got = await EngineApi(survivor).get_messages("guest", "/", "q", 10, AckMode.ACK_REQUEUE_FALSE)
    assert [(m.message.body, m.message.redelivered) for m in got] == [(b"/", True)]
    # No one has permissions there any more: the queue is read as a restart would restore it.
    assert survivor.vhosts[gone].queues["q"].message_count == 1
    after = {m.broker_id: m for m in await store.members()}["brokerA"]
    assert after.state == "FAILOVER_COMPLETE"
