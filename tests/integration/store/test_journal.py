"""The journal over each real store: group commit, cancellation inside a gathering batch,
durability callbacks in order, reads after writes, failures reported to waiters."""

from __future__ import annotations

import asyncio
import functools

import pytest
from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message
from batonmq.queues.classic import ClassicQueue
from batonmq.queues.paging import Paging
from batonmq.security.permissions import UserPermission
from batonmq.store.base import StoredEntry, StoredQueue, StoredUser, WriteBatch
from batonmq.store.journal import Journal
from tests.integration.store.conftest import StoreFactory

HEADER = b"\x00\x3c\x00\x00" + b"\x00" * 8 + b"\x00\x00"


def message(number: int) -> Message:
    return Message("", "q", HEADER, f"body {number}".encode(), id=1000 + number)


def entry(number: int, queue: str = "q") -> StoredEntry:
    return StoredEntry("/", queue, number, 1000 + number)


async def settle(journal: Journal) -> bool:
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    journal.when_durable(done.set_result)
    return await asyncio.wait_for(done, 10)


async def test_changes_from_one_loop_turn_go_in_one_commit(store_factory: StoreFactory):
    """Qpid manual §1.6.6.2 (coalescing sync): writes that arrive together share one transaction,
    never one per message."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    for number in range(500):
        journal.put_entry(entry(number), message(number))
    assert await settle(journal)
    assert journal.counters.commits == 1
    assert (await store.stats()).entries == 500
    await journal.stop()


async def test_an_entry_put_and_deleted_before_its_commit_never_reaches_the_store(
    store_factory: StoreFactory,
):
    """A message consumed and acknowledged before its batch went out is not written at all
    (nor its message, which nothing else holds)."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    journal.put_entry(entry(1), message(1))
    journal.put_entry(entry(2), message(2))
    journal.update_entry("/", "q", 1, 1)
    journal.delete_entry("/", "q", 1, 1001)
    assert await settle(journal)
    stats = await store.stats()
    assert (stats.entries, stats.messages) == (1, 1)
    await journal.stop()


async def test_deleting_a_queue_drops_what_was_gathered_for_it(store_factory: StoreFactory):
    """A queue deleted and declared again in one batch starts empty."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    journal.put_entry(entry(1), message(1))
    journal.delete_queue("/", "q")
    journal.put_queue(StoredQueue("/", "q", True, {}))
    journal.put_entry(entry(0), message(0))
    assert await settle(journal)
    recovery_store = store
    await journal.stop()
    read = await recovery_store.read_entries("/", "q", -1, 10)
    assert [(paged.sequence, paged.message.body) for paged in read] == [(0, b"body 0")]


async def test_a_user_deleted_and_added_again_in_one_batch_loses_its_old_permissions(
    store_factory: StoreFactory,
):
    """RabbitMQ deletes a user's permissions with it: a user deleted and added again before the
    batch went out comes back with none of the old ones, and only what was granted after."""
    store = await store_factory()
    await store.recover()
    await store.commit(
        WriteBatch(
            vhosts_put=["/", "v"],
            users_put=[StoredUser("ann", "x")],
            permissions_put=[UserPermission.full("ann", "/"), UserPermission.full("ann", "v")],
        )
    )
    journal = Journal(store)
    journal.start()
    journal.put_permission(UserPermission("ann", "v", "", "", ""))
    journal.delete_user("ann")
    journal.put_user(StoredUser("ann", "y"))
    journal.put_permission(UserPermission("ann", "/", "^new$", "", ""))
    assert await settle(journal)
    assert await store.permissions() == [UserPermission("ann", "/", "^new$", "", "")]
    await journal.stop()


async def test_reads_see_everything_recorded_before_them(store_factory: StoreFactory):
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    for number in range(5):
        journal.put_entry(entry(number), message(number))
    read: asyncio.Future[list] = asyncio.get_running_loop().create_future()
    journal.read_entries("/", "q", 1, 2, read.set_result)
    entries = await asyncio.wait_for(read, 10)
    assert [paged.sequence for paged in entries] == [2, 3]
    await journal.stop()


async def test_a_failed_commit_is_reported_to_its_waiters_and_the_next_one_succeeds(
    store_factory: StoreFactory,
):
    """The Durable messaging requirements: a failing write gives publishers basic.nack (here: the
    waiter hears False), and the broker keeps serving (the next commit goes through)."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    journal.put_entry(StoredEntry("/", "q", 2**64, 1), message(1))  # no database stores this
    assert not await settle(journal)
    assert journal.counters.failures == 1
    journal.put_queue(StoredQueue("/", "q", False, {}))
    journal.put_entry(entry(3), message(3))
    assert await settle(journal)
    assert (await store.stats()).entries == 1
    await journal.stop()


async def test_a_batch_is_written_while_the_previous_ones_waiters_run(
    store_factory: StoreFactory,
):
    """Group commit as a pipeline: once a batch is committed, the next one goes to the store
    before the first one's waiters (confirms, deliveries) run, so that the store and the engine
    work side by side; the waiters of each batch still run in batch order."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    events: list[str] = []
    commit = store.commit

    async def traced_commit(batch: WriteBatch) -> None:
        number = len([event for event in events if event.startswith("start")]) + 1
        events.append(f"start {number}")
        if number == 1:
            journal.put_entry(entry(2), message(2))  # arrives while batch 1 is written
            journal.when_durable(lambda ok: events.append(f"told 2 {ok}"))
        await commit(batch)
        events.append(f"end {number}")

    store.commit = traced_commit  # type: ignore[method-assign]
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    journal.put_entry(entry(1), message(1))
    journal.when_durable(lambda ok: events.append(f"told 1 {ok}"))
    assert await settle(journal)  # batch 1's waiters
    assert await settle(journal)  # batch 2's
    assert events == ["start 1", "end 1", "start 2", "told 1 True", "end 2", "told 2 True"]
    await journal.stop()


def test_with_no_store_nothing_waits():
    """A broker that persists nothing (the engine's unit tests) confirms at once."""
    journal = Journal(None)
    journal.put_entry(entry(1), message(1))
    results: list[bool] = []
    journal.when_durable(results.append)
    assert results == [True]
    assert not journal.dirty


async def test_a_burst_of_publishes_is_paged_down_to_the_window(store_factory: StoreFactory):
    """The Durable messaging requirements, paging: "A queue keeps a bounded window of message bodies
    in memory" — also after a burst that arrives while the first spill is being written: each
    committed spill starts the next one until memory holds no more than the window."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    queue = ClassicQueue("burst", paging=Paging(journal, "/", window=16))
    for number in range(200):
        queue.publish(message(number))
    for _ in range(50):
        if queue.ready.in_memory <= 16:
            break
        await settle(journal)
    assert queue.ready.in_memory <= 16
    await journal.stop()


async def test_an_entry_updated_in_its_own_batch_keeps_its_expiry_and_level(
    store_factory: StoreFactory,
):
    """A message delivered before its batch went out is written with its delivery count, and
    still with its expiry time and priority level (they used to be lost)."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {"x-max-priority": 3}))
    journal.put_entry(StoredEntry("/", "q", 1, 1001, expires_at=123, priority=2), message(1))
    journal.update_entry("/", "q", 1, 1)
    assert await settle(journal)
    [paged] = await store.read_entries("/", "q", -1, 10, priority=2)
    assert (paged.delivery_count, paged.expires_at) == (1, 123)
    await journal.stop()


async def test_a_priority_queue_pages_each_level_and_serves_in_priority_order(
    store_factory: StoreFactory,
):
    """The Durable messaging requirements, paging, for a priority queue: memory holds no more than
    the window, and what comes back from the store is served higher priority first, FIFO within a
    priority."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    queue = ClassicQueue(
        "by-priority", arguments={"x-max-priority": 3}, paging=Paging(journal, "/", window=64)
    )
    for number in range(400):
        properties = commands.Basic.Properties(priority=number % 4)
        body = f"body {number}".encode()
        header = encode_header_payload(properties, len(body))
        queue.publish(Message("", "q", header, body, id=1000 + number))
    for _ in range(100):
        if queue.ready.in_memory <= 64:
            break
        await settle(journal)
    assert queue.ready.in_memory <= 64

    served = []
    while len(served) < 400:
        entry = queue.get()
        if entry is None:
            assert queue.ready.waiting_for_page_in
            paged_in: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue.when_paged_in(functools.partial(paged_in.set_result, None))
            await asyncio.wait_for(paged_in, 10)
            continue
        served.append(int(entry.message.body.split()[1]))
        queue.settled(entry)
    assert served == sorted(range(400), key=lambda number: (-(number % 4), number))
    await journal.stop()


async def test_an_acknowledgement_a_failed_commit_could_not_write_is_written_again(
    store_factory: StoreFactory, caplog
):
    """Hardening, defect 4: "An ack that could not be persisted must not be reported as done".
    The journal keeps a failed batch's entry deletes and delivery counts and writes them again,
    on its own (nothing else is recorded here); one that can never be written (here, a sequence
    no database stores) does not keep a stopping broker waiting, and the shutdown says what was
    not written."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    journal.put_entry(entry(1), message(1))
    assert await settle(journal)
    journal.update_entry("/", "q", 1, 1)
    journal.delete_entry("/", "q", 2**64, 1001)  # no database stores this: the batch fails
    assert not await settle(journal)
    failures = journal.counters.failures
    for _ in range(100):  # the first retry comes after half a second
        await asyncio.sleep(0.05)
        if journal.counters.failures > failures:
            break
    assert journal.counters.failures > failures, "the failed acknowledgement was not written again"
    await asyncio.wait_for(journal.stop(), 10)
    assert "2 acknowledgements and deliveries not written" in caplog.text


async def test_a_wait_for_durability_cancelled_before_the_commit_ends_is_no_error(
    store_factory: StoreFactory, caplog: pytest.LogCaptureFixture
):
    """A task awaiting `durable()` may be cancelled (at a shutdown, the catalogue watch of a
    worker is) while its batch is still being written: the commit ends without an error. Before,
    the journal told the cancelled future and logged "journal callback failed" with a
    traceback."""
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    waiting = asyncio.get_running_loop().create_task(journal.durable())
    await asyncio.sleep(0)  # it waits on the batch being gathered
    waiting.cancel()
    assert await settle(journal)
    await journal.stop()
    assert "journal callback failed" not in caplog.text
