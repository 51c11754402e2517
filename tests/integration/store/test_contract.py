"""The `Store` protocol (batonmq.store.base), checked against every store on real databases.

Each test quotes the rule it enforces. The broker's order of calls is followed throughout: open,
recover (which hands out the message-id block the messages are numbered from), then commits.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import sqlite3
import struct
from decimal import Decimal
from pathlib import Path

import asyncpg
import pytest
from pamqp.common import FieldTable

from batonmq.security.permissions import UserPermission
from batonmq.store.base import (
    GUEST_CREDENTIAL,
    MESSAGE_ID_BLOCK,
    SCHEMA_VERSION,
    PagedEntry,
    QuarantinedEntry,
    QueueBacklog,
    Recovery,
    Store,
    StoredBinding,
    StoredEntry,
    StoredExchange,
    StoredMessage,
    StoredQueue,
    StoredUser,
    StoreError,
    WriteBatch,
)
from tests.integration.store.conftest import StoreBuilder, StoreFactory, Tamper

VHOST = "/"
RICH_ARGUMENTS: FieldTable = {
    "x-float": 1.5,
    "x-tiny-float": 5e-324,
    "x-int-like-float": 2.0,
    "x-int": -(2**62),
    "x-decimal": Decimal("3.140"),
    "x-bytes": b"\x00\xff\xfe",
    "x-text": "snow \u2603",
    "x-bool": True,
    "x-void": None,
    "x-timestamp": datetime.datetime(2026, 11, 21, 6, 12, 49, tzinfo=datetime.UTC),
    "x-table": {"nested": {"deeper": [1, "two", 3.25, b"four", {"five": False}]}},
    "x-array": [],
}


def _shape(value: object) -> object:
    """The value with every leaf replaced by its type: equal values of different types (2 and
    2.0, Decimal("1.5") and 1.5) compare equal, their shapes do not."""
    if isinstance(value, dict):
        return {name: _shape(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return type(value).__name__


def message(message_id: int, body: bytes = b"hello") -> StoredMessage:
    # A basic-class content header: class 60, weight 0, body size, no properties.
    header = struct.pack(">HHQH", 60, 0, len(body), 0)
    return StoredMessage(message_id, "amq.direct", "key", header, body)


def queue(name: str, arguments: FieldTable | None = None, vhost: str = VHOST) -> StoredQueue:
    return StoredQueue(vhost, name, False, arguments or {})


def exchange(name: str, type_name: str = "direct", vhost: str = VHOST) -> StoredExchange:
    return StoredExchange(vhost, name, type_name, False, False, {})


def binding(
    source: str,
    destination: str,
    kind: str = "queue",
    key: str = "",
    arguments: FieldTable | None = None,
    vhost: str = VHOST,
) -> StoredBinding:
    return StoredBinding(vhost, source, kind, destination, key, arguments or {})


def entry(
    queue_name: str,
    sequence: int,
    message_id: int,
    delivery_count: int = 0,
    transient: bool = False,
    expires_at: int | None = None,
    priority: int = 0,
) -> StoredEntry:
    return StoredEntry(
        VHOST, queue_name, sequence, message_id, delivery_count, transient, expires_at, priority
    )


async def start(
    make: StoreFactory, broker_id: str = "b1", *, sync: bool = True, store: str | None = None
) -> tuple[Store, int]:
    """Open and recover, as a broker starts: the store and the first id of its message block."""
    opened = await make(broker_id, sync, store=store)
    recovery = await opened.recover()
    return opened, recovery.message_id_base


async def restart(
    opened: Store,
    make: StoreFactory,
    broker_id: str = "b1",
    *,
    sync: bool = True,
    store: str | None = None,
) -> tuple[Store, Recovery]:
    """Close, open the same store again and recover, as a broker restarts."""
    await opened.close()
    reopened = await make(broker_id, sync, store=store)
    return reopened, await reopened.recover()


async def read_all(store: Store, queue_name: str) -> list[PagedEntry]:
    return await store.read_entries(VHOST, queue_name, -1, 1_000_000)


async def sequences(store: Store, queue_name: str) -> list[int]:
    return [paged.sequence for paged in await read_all(store, queue_name)]


# -- round trips ------------------------------------------------------------------------------


async def test_objects_come_back_as_declared_after_a_restart(store_factory: StoreFactory) -> None:
    """Rule (Store.recover): durable exchanges, queues and bindings come back as declared, their
    arguments with the same types and values (fields.py: a float stays a float, bytes stay
    bytes, a timestamp stays a timestamp)."""
    store, _ = await start(store_factory)
    exchanges = [
        StoredExchange(VHOST, "ex.topic", "topic", False, False, RICH_ARGUMENTS),
        StoredExchange("other", "ex.internal", "fanout", True, True, {}),
    ]
    queues = [StoredQueue(VHOST, "q1", False, RICH_ARGUMENTS), StoredQueue("other", "q2", True, {})]
    bindings = [
        binding("ex.topic", "q1", key="a.#"),
        # Same source, destination and key; other arguments: another binding.
        binding("ex.topic", "q1", key="a.#", arguments=RICH_ARGUMENTS),
        binding("ex.topic", "ex.internal", kind="exchange", key="b.*"),
    ]
    await store.commit(
        WriteBatch(exchanges_put=exchanges, queues_put=queues, bindings_put=bindings)
    )

    store, recovery = await restart(store, store_factory)

    assert sorted(recovery.exchanges, key=repr) == sorted(exchanges, key=repr)
    assert sorted(recovery.queues, key=repr) == sorted(queues, key=repr)
    assert sorted(recovery.bindings, key=repr) == sorted(bindings, key=repr)
    recovered = {q.name: q.arguments for q in recovery.queues}
    assert _shape(recovered["q1"]) == _shape(RICH_ARGUMENTS)
    assert all(
        _shape(b.arguments) == _shape(RICH_ARGUMENTS) for b in recovery.bindings if b.arguments
    )


async def test_entries_come_back_in_sequence_order_with_delivery_counts(
    store_factory: StoreFactory,
) -> None:
    """Rules (Store.recover, read_entries): each durable queue's backlog is counted (entries,
    body bytes, last sequence or -1), and its entries are read back with their messages in
    sequence order, delivery counts (entries_updated sets them) and expiry times included."""
    store, base = await start(store_factory)
    bodies = {base + 1: b"one", base + 2: b"second", base + 3: b"the third"}
    await store.commit(
        WriteBatch(
            queues_put=[queue("q1"), queue("empty")],
            messages_put=[message(message_id, body) for message_id, body in bodies.items()],
            entries_put=[
                entry("q1", 5, base + 3, delivery_count=2, expires_at=1_900_000_000_123),
                entry("q1", 1, base + 1),
                entry("q1", 3, base + 2),
            ],
        )
    )
    await store.commit(WriteBatch(entries_updated=[(VHOST, "q1", 3, 4)]))

    store, recovery = await restart(store, store_factory)

    assert sorted(recovery.backlogs, key=repr) == [
        QueueBacklog(VHOST, "empty", 0, 0, -1),
        QueueBacklog(VHOST, "q1", 3, len(b"one" + b"second" + b"the third"), 5),
    ]
    assert await read_all(store, "q1") == [
        PagedEntry(1, 0, message(base + 1, b"one")),
        PagedEntry(3, 4, message(base + 2, b"second")),
        PagedEntry(5, 2, message(base + 3, b"the third"), 1_900_000_000_123),
    ]


async def test_recover_discards_transient_entries_and_orphaned_messages(
    store_factory: StoreFactory,
) -> None:
    """Rule (StoredEntry, Store.recover): transient entries, and entries of a queue that has no
    row (a non-durable queue paged out), are deleted when the store is opened, and so are the
    messages no entry refers to any more."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            queues_put=[queue("durable")],
            messages_put=[message(base + n) for n in range(1, 5)],
            entries_put=[
                entry("durable", 1, base + 1),
                entry("durable", 2, base + 2, transient=True),
                entry("non-durable", 1, base + 3, transient=True),
                entry("non-durable", 2, base + 4, transient=True),
                entry("durable", 3, base + 4),
            ],
        )
    )

    store, recovery = await restart(store, store_factory)

    assert recovery.discarded_entries == 3
    assert await sequences(store, "durable") == [1, 3]
    assert await read_all(store, "non-durable") == []
    stats = await store.stats()
    assert (stats.messages, stats.entries) == (2, 2)


# -- deletions and the order of one batch -----------------------------------------------------


async def test_deleting_a_queue_deletes_its_entries_and_bindings(
    store_factory: StoreFactory,
) -> None:
    """Rule (WriteBatch): a deleted queue's entries and bindings go too; a binding to an
    exchange of the same name stays (the destination kind is part of the binding)."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            exchanges_put=[exchange("ex"), exchange("q1")],
            queues_put=[queue("q1"), queue("q2")],
            bindings_put=[
                binding("ex", "q1", key="a"),
                binding("ex", "q1", key="b"),
                binding("ex", "q2", key="a"),
                binding("ex", "q1", kind="exchange", key="a"),
            ],
            messages_put=[message(base + 1), message(base + 2)],
            entries_put=[
                entry("q1", 1, base + 1),
                entry("q1", 2, base + 2),
                entry("q2", 1, base + 2),
            ],
        )
    )

    await store.commit(WriteBatch(queues_deleted=[(VHOST, "q1")]))

    assert await read_all(store, "q1") == []
    assert await sequences(store, "q2") == [1]
    assert (await store.stats()).messages == 1
    store, recovery = await restart(store, store_factory)
    assert [q.name for q in recovery.queues] == ["q2"]
    assert sorted(recovery.bindings, key=repr) == sorted(
        [binding("ex", "q2", key="a"), binding("ex", "q1", kind="exchange", key="a")], key=repr
    )


async def test_deleting_an_exchange_deletes_bindings_from_and_to_it(
    store_factory: StoreFactory,
) -> None:
    """Rule (WriteBatch): a deleted exchange's bindings go too, those whose source it is and
    those whose destination (of kind exchange) it is; a queue of the same name keeps its own."""
    store, _ = await start(store_factory)
    await store.commit(
        WriteBatch(
            exchanges_put=[exchange("a"), exchange("b"), exchange("c")],
            queues_put=[queue("q"), queue("a")],
            bindings_put=[
                binding("a", "q"),
                binding("a", "b", kind="exchange"),
                binding("b", "a", kind="exchange"),
                binding("c", "q"),
                binding("c", "a", kind="queue"),
            ],
        )
    )

    await store.commit(WriteBatch(exchanges_deleted=[(VHOST, "a")]))

    store, recovery = await restart(store, store_factory)
    assert [e.name for e in recovery.exchanges] == ["b", "c"]
    assert sorted(recovery.bindings, key=repr) == sorted(
        [binding("c", "q"), binding("c", "a", kind="queue")], key=repr
    )


async def test_a_binding_is_deleted_by_its_arguments_too(store_factory: StoreFactory) -> None:
    """Rule (fields.py): the encoded text of a binding's arguments is part of its key, and equal
    tables encode equally whatever their key order."""
    store, _ = await start(store_factory)
    headers_match: FieldTable = {"x-match": "all", "format": "pdf"}
    await store.commit(
        WriteBatch(
            exchanges_put=[exchange("h", "headers")],
            queues_put=[queue("q")],
            bindings_put=[binding("h", "q", arguments=headers_match), binding("h", "q")],
        )
    )

    same_table_reordered: FieldTable = {"format": "pdf", "x-match": "all"}
    await store.commit(
        WriteBatch(bindings_deleted=[binding("h", "q", arguments=same_table_reordered)])
    )

    store, recovery = await restart(store, store_factory)
    assert recovery.bindings == [binding("h", "q")]


async def test_ranges_delete_entries_inclusively(store_factory: StoreFactory) -> None:
    """Rule (WriteBatch.ranges_deleted): the entries of that queue with first <= sequence <=
    last go, and their messages with them; other queues keep theirs."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            queues_put=[queue("q"), queue("other")],
            messages_put=[message(base + n) for n in range(10)],
            entries_put=[entry("q", n, base + n) for n in range(10)]
            + [entry("other", n, base + n) for n in (0, 1)],
        )
    )

    await store.commit(
        WriteBatch(ranges_deleted=[(VHOST, "q", 3, 6, None), (VHOST, "other", 5, 9, None)])
    )

    assert await sequences(store, "q") == [0, 1, 2, 7, 8, 9]
    assert await sequences(store, "other") == [0, 1]
    assert (await store.stats()).messages == 6


async def test_a_range_of_one_priority_level_leaves_the_other_levels(
    store_factory: StoreFactory,
) -> None:
    """Rule (WriteBatch.ranges_deleted): a range with a priority level deletes only that level's
    entries; another level's entries in between (delivered, say) stay."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            queues_put=[queue("q")],
            messages_put=[message(base + n) for n in range(10)],
            entries_put=[entry("q", n, base + n, priority=n % 2) for n in range(10)],
        )
    )

    await store.commit(WriteBatch(ranges_deleted=[(VHOST, "q", 2, 7, 1)]))

    assert await sequences(store, "q") == [0, 1, 2, 4, 6, 8, 9]


async def test_entries_are_read_and_counted_per_priority_level(
    store_factory: StoreFactory,
) -> None:
    """Rules (Store.read_entries, Recovery.backlogs): a read with a priority level returns only
    that level's entries, in sequence order; a queue's backlog is counted per level, so that a
    priority queue pages each level on its own (the Durable messaging requirements: priorities
    survive a restart and a backlog larger than memory works)."""
    store, base = await start(store_factory)
    levels = [0, 3, 3, 0, 1, 3, 0]
    await store.commit(
        WriteBatch(
            queues_put=[queue("q")],
            messages_put=[message(base + n) for n in range(len(levels))],
            entries_put=[entry("q", n, base + n, priority=p) for n, p in enumerate(levels)],
        )
    )

    store, recovery = await restart(store, store_factory)

    size = len(message(0).body)
    assert recovery.backlogs == [
        QueueBacklog(VHOST, "q", 3, 3 * size, 6, priority=0),
        QueueBacklog(VHOST, "q", 1, size, 4, priority=1),
        QueueBacklog(VHOST, "q", 3, 3 * size, 5, priority=3),
    ]
    top = await store.read_entries(VHOST, "q", -1, 2, priority=3)
    assert [paged.sequence for paged in top] == [1, 2]
    rest = await store.read_entries(VHOST, "q", 2, 10, priority=3)
    assert [paged.sequence for paged in rest] == [5]
    assert await sequences(store, "q") == list(range(len(levels)))


async def test_a_message_held_by_two_queues_goes_with_its_last_entry(
    store_factory: StoreFactory,
) -> None:
    """Rule (WriteBatch): last in a batch, messages no entry refers to any more are deleted, and
    only those."""
    store, base = await start(store_factory)
    shared = message(base + 1, b"fanned out")
    await store.commit(
        WriteBatch(
            queues_put=[queue("q1"), queue("q2")],
            messages_put=[shared],
            entries_put=[entry("q1", 1, shared.id), entry("q2", 1, shared.id)],
        )
    )

    await store.commit(WriteBatch(entries_deleted=[(VHOST, "q1", 1, shared.id)]))
    assert (await store.stats()).messages == 1
    assert await read_all(store, "q2") == [PagedEntry(1, 0, shared)]

    await store.commit(WriteBatch(entries_deleted=[(VHOST, "q2", 1, shared.id)]))
    assert (await store.stats()).messages == 0


async def test_a_message_put_without_entries_is_not_kept(store_factory: StoreFactory) -> None:
    """Rule (WriteBatch): a message put in a batch that no entry refers to at its end is deleted
    with the other orphans."""
    store, base = await start(store_factory)
    await store.commit(WriteBatch(queues_put=[queue("q")], messages_put=[message(base + 1)]))
    assert (await store.stats()).messages == 0


async def test_a_queue_and_an_exchange_deleted_and_put_again_in_one_batch(
    store_factory: StoreFactory,
) -> None:
    """Rule (WriteBatch's order): deletions apply before puts, so a queue deleted and declared
    again in one batch has its new arguments, bindings and entries, and none of its old ones."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            exchanges_put=[exchange("ex", "direct")],
            queues_put=[queue("q", {"x-max-length": 10})],
            bindings_put=[binding("ex", "q", key="old")],
            messages_put=[message(base + 1), message(base + 2)],
            entries_put=[entry("q", 1, base + 1), entry("q", 2, base + 2)],
        )
    )

    replacement = message(base + 3, b"new")
    await store.commit(
        WriteBatch(
            exchanges_deleted=[(VHOST, "ex")],
            queues_deleted=[(VHOST, "q")],
            exchanges_put=[exchange("ex", "fanout")],
            queues_put=[queue("q", {"x-max-length": 20})],
            bindings_put=[binding("ex", "q", key="new")],
            messages_put=[replacement],
            entries_put=[entry("q", 1, replacement.id)],
        )
    )

    assert await read_all(store, "q") == [PagedEntry(1, 0, replacement)]
    store, recovery = await restart(store, store_factory)
    assert recovery.exchanges == [exchange("ex", "fanout")]
    assert recovery.queues == [queue("q", {"x-max-length": 20})]
    assert recovery.bindings == [binding("ex", "q", key="new")]
    assert recovery.backlogs == [QueueBacklog(VHOST, "q", 1, len(b"new"), 1)]
    assert (await store.stats()).messages == 1


async def test_puts_replace_what_they_put_again(store_factory: StoreFactory) -> None:
    """Rule (WriteBatch): puts are upserts: an object, message or entry put again replaces the
    stored one instead of failing or adding a second."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            exchanges_put=[exchange("ex", "direct")],
            queues_put=[queue("q", {"x-a": 1})],
            bindings_put=[binding("ex", "q")],
            messages_put=[message(base + 1)],
            entries_put=[entry("q", 1, base + 1)],
        )
    )
    await store.commit(
        WriteBatch(
            exchanges_put=[exchange("ex", "topic")],
            queues_put=[queue("q", {"x-a": 2})],
            bindings_put=[binding("ex", "q")],
            messages_put=[message(base + 1)],
            entries_put=[entry("q", 1, base + 1, delivery_count=3)],
        )
    )

    store, recovery = await restart(store, store_factory)
    assert recovery.exchanges == [exchange("ex", "topic")]
    assert recovery.queues == [queue("q", {"x-a": 2})]
    assert recovery.bindings == [binding("ex", "q")]
    assert await read_all(store, "q") == [PagedEntry(1, 3, message(base + 1))]
    stats = await store.stats()
    assert (stats.messages, stats.entries) == (1, 1)


async def test_a_failing_commit_applies_nothing(store_factory: StoreFactory) -> None:
    """Rule (Store.commit): a write that fails raises StoreError and applies nothing of its
    batch, and the store takes the next commit. Here the last row of the batch holds a sequence
    beyond 64 bits, which no store can keep, after the deletions and puts before it."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            queues_put=[queue("q")],
            messages_put=[message(base + 1), message(base + 2)],
            entries_put=[entry("q", 1, base + 1), entry("q", 2, base + 2)],
        )
    )
    failing = WriteBatch(
        ranges_deleted=[(VHOST, "q", 1, 1)],
        queues_put=[queue("never")],
        messages_put=[message(base + 3)],
        entries_put=[entry("q", 3, base + 3), entry("q", 2**64, base + 3)],
    )

    with pytest.raises(StoreError):
        await store.commit(failing)

    assert await sequences(store, "q") == [1, 2]
    stats = await store.stats()
    assert (stats.queues, stats.messages, stats.entries) == (1, 2, 2)
    await store.commit(
        WriteBatch(messages_put=[message(base + 3)], entries_put=[entry("q", 3, base + 3)])
    )
    assert await sequences(store, "q") == [1, 2, 3]


async def test_a_read_issued_after_a_commit_sees_it(store_factory: StoreFactory) -> None:
    """Rule (base.py): calls to a store run in the order they are made, so a read issued after
    a commit, before the commit has returned, sees it."""
    store, base = await start(store_factory)
    await store.commit(WriteBatch(queues_put=[queue("q")]))
    batch = WriteBatch(messages_put=[message(base + 1)], entries_put=[entry("q", 1, base + 1)])

    _, entries = await asyncio.gather(store.commit(batch), read_all(store, "q"))

    assert [paged.sequence for paged in entries] == [1]


async def test_read_entries_pages_by_sequence(store_factory: StoreFactory) -> None:
    """Rule (Store.read_entries): up to `limit` entries with sequence > `after_sequence`, in
    order, so that a queue pages its backlog in without loading it whole."""
    store, base = await start(store_factory)
    stored = list(range(0, 20, 2))
    await store.commit(
        WriteBatch(
            queues_put=[queue("q")],
            messages_put=[message(base + n) for n in stored],
            entries_put=[entry("q", n, base + n) for n in reversed(stored)],
        )
    )

    pages: list[list[int]] = []
    after = -1
    while page := await store.read_entries(VHOST, "q", after, 3):
        pages.append([paged.sequence for paged in page])
        after = page[-1].sequence

    assert pages == [[0, 2, 4], [6, 8, 10], [12, 14, 16], [18]]
    assert [p.sequence for p in await store.read_entries(VHOST, "q", 5, 2)] == [6, 8]
    assert [p.message.id for p in await store.read_entries(VHOST, "q", 17, 5)] == [base + 18]


# -- message ids and brokers sharing a store ---------------------------------------------------


async def test_each_recovery_gets_its_own_message_id_block(store_factory: StoreFactory) -> None:
    """Rule (Recovery.message_id_base): each start gets a block of MESSAGE_ID_BLOCK ids that no
    other start gets."""
    store, first = await start(store_factory)
    store, recovery = await restart(store, store_factory)
    assert abs(recovery.message_id_base - first) >= MESSAGE_ID_BLOCK


async def test_brokers_sharing_a_store_get_different_message_id_blocks(
    store_factory: StoreFactory,
) -> None:
    """Rule (base.py): blocks are unique across every broker sharing the store, which makes
    message ids unique across a cluster."""
    store, first = await start(store_factory, "b1", store="shared")
    await store.close()
    _, second = await start(store_factory, "b2", store="shared")
    assert abs(second - first) >= MESSAGE_ID_BLOCK


async def test_brokers_sharing_a_store_see_only_their_own_rows(
    store_factory: StoreFactory,
) -> None:
    """Rule (base.py): every row carries the id of the broker that owns it; a broker recovers,
    reads, counts and deletes only its own, even under the same names."""
    b1, base1 = await start(store_factory, "b1", store="shared")
    await b1.commit(
        WriteBatch(
            exchanges_put=[exchange("ex")],
            queues_put=[queue("q", {"owner": "b1"})],
            bindings_put=[binding("ex", "q")],
            messages_put=[message(base1 + 1, b"b1's")],
            entries_put=[entry("q", 1, base1 + 1)],
        )
    )
    await b1.close()

    b2, base2 = await start(store_factory, "b2", store="shared")
    stats = await b2.stats()
    assert (stats.exchanges, stats.queues, stats.bindings, stats.messages, stats.entries) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert await read_all(b2, "q") == []
    await b2.commit(
        WriteBatch(
            exchanges_put=[exchange("ex")],
            queues_put=[queue("q", {"owner": "b2"})],
            messages_put=[message(base2 + 1, b"b2's")],
            entries_put=[entry("q", 1, base2 + 1)],
        )
    )
    await b2.commit(
        WriteBatch(
            exchanges_deleted=[(VHOST, "ex")],
            queues_deleted=[(VHOST, "q")],
            ranges_deleted=[(VHOST, "q", 0, 10, None)],
        )
    )
    await b2.close()

    b1, recovery = await restart(b1, store_factory, "b1", store="shared")
    assert recovery.queues == [queue("q", {"owner": "b1"})]
    assert recovery.bindings == [binding("ex", "q")]
    assert await read_all(b1, "q") == [PagedEntry(1, 0, message(base1 + 1, b"b1's"))]


# -- users and virtual hosts --------------------------------------------------------------------


async def test_a_new_store_has_the_guest_user_and_users_can_be_put_and_deleted(
    store_factory: StoreFactory,
) -> None:
    """Rules (Recovery.users, WriteBatch.users_put/users_deleted, GUEST_CREDENTIAL, GUEST_TAGS):
    a new store starts with guest/guest, an administrator, as RabbitMQ's default user; users
    put replace their credential and tags; a deleted user is gone, guest too."""
    store, _ = await start(store_factory)
    assert await store.users() == [StoredUser("guest", GUEST_CREDENTIAL, ("administrator",))]

    await store.commit(
        WriteBatch(
            users_put=[StoredUser("alice", "md5$a"), StoredUser("bob", "x", ("management",))]
        )
    )
    await store.commit(
        WriteBatch(
            users_put=[StoredUser("alice", "scrypt$new", ("monitoring", "policymaker"))],
            users_deleted=["guest"],
        )
    )

    store, recovery = await restart(store, store_factory)
    assert recovery.users == [
        StoredUser("alice", "scrypt$new", ("monitoring", "policymaker")),
        StoredUser("bob", "x", ("management",)),
    ]
    assert await store.users() == recovery.users


async def test_permissions_are_put_replaced_and_go_with_their_user_or_virtual_host(
    store_factory: StoreFactory,
) -> None:
    """Rules (Recovery.permissions, WriteBatch.permissions_put/permissions_deleted): a new store
    has none (a broker grants the default user its virtual host when it creates it); a put
    replaces the user's patterns in that virtual host; a deleted user or virtual host takes its
    permissions with it (RabbitMQ deletes them too)."""
    store, _ = await start(store_factory)
    assert await store.permissions() == []
    await store.commit(
        WriteBatch(
            vhosts_put=["a", "b"],
            users_put=[StoredUser("ann", "x"), StoredUser("bo", "y")],
            permissions_put=[
                UserPermission("ann", "a", ".*", ".*", ".*"),
                UserPermission("ann", "b", ".*", ".*", ".*"),
                UserPermission("bo", "a", "", "", ""),
                UserPermission("bo", "b", "", "", ""),
            ],
        )
    )
    await store.commit(
        WriteBatch(
            permissions_put=[UserPermission("ann", "a", "^q$", "", "")],
            permissions_deleted=[("ann", "b")],
        )
    )
    await store.commit(WriteBatch(vhosts_deleted=["b"], users_deleted=["bo"]))

    store, recovery = await restart(store, store_factory)
    assert recovery.permissions == [UserPermission("ann", "a", "^q$", "", "")]
    assert await store.permissions() == recovery.permissions


async def test_deleting_a_virtual_host_deletes_everything_in_it(
    store_factory: StoreFactory,
) -> None:
    """Rules (Recovery.vhosts, WriteBatch.vhosts_put/vhosts_deleted): virtual hosts are kept;
    deleting one deletes this broker's exchanges, queues, bindings, entries and (orphaned)
    messages in it, and nothing in another virtual host."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            vhosts_put=["gone", "kept"],
            exchanges_put=[exchange("ex", vhost="gone"), exchange("ex", vhost="kept")],
            queues_put=[queue("q", vhost="gone"), queue("q", vhost="kept")],
            bindings_put=[binding("ex", "q", vhost="gone"), binding("ex", "q", vhost="kept")],
            messages_put=[message(base + 1), message(base + 2)],
            entries_put=[
                StoredEntry("gone", "q", 0, base + 1),
                StoredEntry("kept", "q", 0, base + 2),
            ],
        )
    )

    await store.commit(WriteBatch(vhosts_deleted=["gone"]))

    store, recovery = await restart(store, store_factory)
    assert recovery.vhosts == ["kept"]
    assert [(e.vhost, e.name) for e in recovery.exchanges] == [("kept", "ex")]
    assert [(q.vhost, q.name) for q in recovery.queues] == [("kept", "q")]
    assert [b.vhost for b in recovery.bindings] == ["kept"]
    assert [(b.vhost, b.count) for b in recovery.backlogs] == [("kept", 1)]
    assert (await store.stats()).messages == 1


# -- integrity: checksums and the quarantine ---------------------------------------------------


async def test_an_entry_whose_message_fails_its_checksum_is_quarantined_never_returned(
    store_factory: StoreFactory, tamper: Tamper, caplog: pytest.LogCaptureFixture
) -> None:
    """Rule (hardening, defect 5): "A corrupted message body is delivered as garbage: store a
    checksum with each body, verify it on read, and quarantine a record that fails (logged with
    its queue and id, never delivered)". The queue's other entries are read as before; the
    quarantined entry leaves its queue for good (not read again, not in its backlog after a
    restart) and is counted in StoreStats.quarantined; another queue holding the same message
    quarantines its own entry when it reads it; each is logged once, at ERROR."""
    store, base = await start(store_factory)
    bodies = {base + n: f"body {n}".encode() for n in (1, 2, 3)}
    await store.commit(
        WriteBatch(
            queues_put=[queue("q"), queue("other")],
            messages_put=[message(message_id, body) for message_id, body in bodies.items()],
            entries_put=[
                entry("q", 1, base + 1),
                entry("q", 2, base + 2, delivery_count=1),
                entry("q", 3, base + 3),
                entry("other", 7, base + 2, priority=4),
            ],
        )
    )
    await tamper(store, base + 2)

    with caplog.at_level(logging.ERROR, logger="batonmq.store"):
        first_read = await read_all(store, "q")
        again = await read_all(store, "q")
        other = await read_all(store, "other")

    assert first_read == [
        PagedEntry(1, 0, message(base + 1, b"body 1")),
        QuarantinedEntry(2, base + 2, 0, len(b"body 2")),
        PagedEntry(3, 0, message(base + 3, b"body 3")),
    ]
    assert again == [first_read[0], first_read[2]]
    assert other == [QuarantinedEntry(7, base + 2, 4, len(b"body 2"))]
    logged = [
        (record.levelname, record.vhost, record.queue, record.message_id, record.sequence)
        for record in caplog.records
    ]
    assert logged == [("ERROR", VHOST, "q", base + 2, 2), ("ERROR", VHOST, "other", base + 2, 7)]
    stats = await store.stats()
    assert (stats.quarantined, stats.messages, stats.entries) == (2, 2, 2)

    store, recovery = await restart(store, store_factory)
    assert sorted(recovery.backlogs, key=repr) == [
        QueueBacklog(VHOST, "other", 0, 0, -1),
        QueueBacklog(VHOST, "q", 2, len(b"body 1" + b"body 3"), 3),
    ]
    assert await read_all(store, "q") == [first_read[0], first_read[2]]
    assert (await store.stats()).quarantined == 2


async def test_a_message_stored_before_checksums_is_read_unchecked(
    store_factory: StoreFactory, tamper: Tamper
) -> None:
    """Rule (batonmq.store.integrity): rows written before schema version 6 have no checksum
    (NULL, "unchecked"); the migration does not vouch for bytes written before it, and such a
    message is delivered as it was before checksums existed."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            queues_put=[queue("q")],
            messages_put=[message(base + 1, b"old")],
            entries_put=[entry("q", 1, base + 1)],
        )
    )
    await tamper(store, base + 1, checksum=True)
    await tamper(store, base + 1)

    assert await read_all(store, "q") == [PagedEntry(1, 0, message(base + 1, b"\x90ld"))]
    assert (await store.stats()).quarantined == 0


async def test_an_unchecked_message_whose_header_does_not_decode_is_quarantined(
    store_factory: StoreFactory, tamper: Tamper
) -> None:
    """The Hardening requirements: "no message the broker holds can make a consumer, a
    dead-letter path or a timer fail". A row written before checksums was not checked at the
    edge either (an older BatonMQ forwarded any content header): read back, its header is
    checked as a publish is, and one no client could decode is quarantined, never returned."""
    store, base = await start(store_factory)
    # Property flags announce a content-type that is not there: the header is cut short.
    undecodable = StoredMessage(
        base + 1, "amq.direct", "key", struct.pack(">HHQH", 60, 0, 3, 0x8000), b"old"
    )
    await store.commit(
        WriteBatch(
            queues_put=[queue("q")],
            messages_put=[undecodable, message(base + 2)],
            entries_put=[entry("q", 1, base + 1), entry("q", 2, base + 2)],
        )
    )
    await tamper(store, base + 1, checksum=True)
    await tamper(store, base + 2, checksum=True)

    quarantined, *rest = await read_all(store, "q")
    assert isinstance(quarantined, QuarantinedEntry)
    assert (quarantined.sequence, quarantined.message_id) == (1, base + 1)
    assert "content header does not decode" in quarantined.reason
    assert rest == [PagedEntry(2, 0, message(base + 2))]
    assert (await store.stats()).quarantined == 1


# -- stats, backup and restore ------------------------------------------------------------------


async def test_stats_count_this_brokers_rows_and_body_bytes(store_factory: StoreFactory) -> None:
    """Rule (StoreStats): what `batonctl db stats` shows: counts of each kind of row and the
    total size of the message bodies."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            exchanges_put=[exchange("a"), exchange("b")],
            queues_put=[queue("q1"), queue("q2")],
            bindings_put=[binding("a", "q1"), binding("a", "q2"), binding("b", "q2")],
            messages_put=[message(base + n, b"x" * 10 * n) for n in (1, 2, 3)],
            entries_put=[
                entry("q1", 1, base + 1),
                entry("q1", 2, base + 2),
                entry("q2", 1, base + 3),
                entry("q2", 2, base + 1),
            ],
        )
    )

    stats = await store.stats()

    assert (stats.kind, stats.location) == (store.kind, store.location)
    assert (stats.schema_version, stats.broker_id) == (SCHEMA_VERSION, "b1")
    assert (stats.exchanges, stats.queues, stats.bindings) == (2, 2, 3)
    assert (stats.messages, stats.entries, stats.message_bytes) == (3, 4, 60)
    assert stats.quarantined == 0


async def test_used_bytes_grow_with_writes_and_shrink_after_deletes(
    store_factory: StoreFactory,
) -> None:
    """Rule (Store.used_bytes): the disk quota's measure "grows as messages are written and
    falls as they are deleted, without any compaction", so that producers blocked over
    disk.store_overfull are released "when consumers consume the messages, causing disk space
    usage to falls below the underflow limit" (Qpid manual §1.5.1.2.2). Messages go each way the
    engine deletes them: an acknowledged entry, a purged range, a deleted queue."""
    store, base = await start(store_factory)
    await store.commit(WriteBatch(queues_put=[queue("q"), queue("other")]))
    empty = await store.used_bytes()
    body_size, count = 4096, 300
    written = body_size * count

    await store.commit(
        WriteBatch(
            messages_put=[message(base + n, bytes([n % 256]) * body_size) for n in range(count)],
            entries_put=[entry("q", n, base + n) for n in range(count)],
        )
    )
    full = await store.used_bytes()
    assert full - empty >= written

    # Another queue paging the same messages out puts them again: they are stored once.
    await store.commit(
        WriteBatch(
            messages_put=[message(base + n, bytes([n % 256]) * body_size) for n in range(count)],
            entries_put=[entry("other", n, base + n) for n in range(count)],
        )
    )
    assert await store.used_bytes() - full < written // 2
    await store.commit(WriteBatch(queues_deleted=[(VHOST, "other")]))

    acked = count // 3
    await store.commit(
        WriteBatch(entries_deleted=[(VHOST, "q", n, base + n) for n in range(acked)])
    )
    after_acks = await store.used_bytes()
    assert full - after_acks >= body_size * acked * 9 // 10

    await store.commit(WriteBatch(ranges_deleted=[(VHOST, "q", acked, 2 * acked - 1, None)]))
    after_purge = await store.used_bytes()
    assert after_acks - after_purge >= body_size * acked * 9 // 10

    await store.commit(WriteBatch(queues_deleted=[(VHOST, "q")]))
    drained = await store.used_bytes()
    assert drained < empty + written // 10


async def test_used_bytes_are_what_a_fresh_count_finds(
    store_factory: StoreFactory, store_builder: StoreBuilder
) -> None:
    """Rule (Store.used_bytes): the measure is the store's state, however it got there (puts,
    puts again, deletions of every kind, a commit that failed), not a tally that drifts: another
    opening of the same store, which counts afresh, finds the same."""
    store, base = await start(store_factory)
    fresh = store_builder("b1", True, "b1")
    await fresh.open(lock=False)

    async def assert_counted_afresh() -> None:
        assert await store.used_bytes() == await fresh.used_bytes()

    try:
        await assert_counted_afresh()  # counted now, then kept by the commits that follow
        await store.commit(
            WriteBatch(
                queues_put=[queue("q"), queue("r")],
                messages_put=[message(base + n, b"m" * (100 * n)) for n in range(1, 21)],
                entries_put=[entry("q", n, base + n) for n in range(1, 21)]
                + [entry("r", n, base + n) for n in range(1, 6)],
            )
        )
        await store.commit(
            WriteBatch(
                messages_put=[message(base + n, b"m" * (100 * n)) for n in range(1, 4)],
                entries_put=[entry("r", n, base + n) for n in range(1, 4)],
            )
        )
        await store.commit(
            WriteBatch(
                messages_put=[message(base + 99, b"never kept")],
                entries_deleted=[(VHOST, "q", n, base + n) for n in range(1, 6)],
            )
        )
        await assert_counted_afresh()
        with pytest.raises(StoreError):
            await store.commit(
                WriteBatch(
                    ranges_deleted=[(VHOST, "q", 6, 10, None)],
                    messages_put=[message(base + 50, b"x" * 5000)],
                    entries_put=[entry("q", 50, base + 50), entry("q", 2**64, base + 50)],
                )
            )
        await assert_counted_afresh()
        await store.commit(WriteBatch(ranges_deleted=[(VHOST, "q", 6, 10, None)]))
        await store.commit(WriteBatch(queues_deleted=[(VHOST, "r")]))
        await assert_counted_afresh()
    finally:
        await fresh.close()


async def test_a_backup_restored_into_a_fresh_store_has_the_same_contents(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    """Rules (Store.backup, Store.restore): a snapshot written while the store is open, restored
    into another store, gives back the same objects, entries and messages."""
    store, base = await start(store_factory)
    await store.commit(
        WriteBatch(
            exchanges_put=[StoredExchange(VHOST, "ex", "topic", False, False, RICH_ARGUMENTS)],
            queues_put=[queue("q", RICH_ARGUMENTS), queue("empty")],
            bindings_put=[binding("ex", "q", key="#", arguments=RICH_ARGUMENTS)],
            messages_put=[message(base + n, bytes([n]) * n) for n in range(1, 6)],
            entries_put=[entry("q", n, base + n, delivery_count=n % 2) for n in range(1, 6)],
            users_put=[StoredUser("alice", "scrypt$alice")],
            vhosts_put=[VHOST, "other"],
            permissions_put=[UserPermission("alice", "other", "", "^a$", ".*")],
        )
    )
    original_stats = await store.stats()
    original_entries = await read_all(store, "q")
    directory = tmp_path / "backups" / "first"

    await store.backup(directory)
    store, original = await restart(store, store_factory)
    fresh = await store_factory("b1", store="restored")
    await fresh.recover()
    await fresh.restore(directory)
    fresh, restored = await restart(fresh, store_factory, "b1", store="restored")

    assert restored.exchanges == original.exchanges
    assert restored.queues == original.queues
    assert restored.bindings == original.bindings
    assert restored.backlogs == original.backlogs
    users = [
        StoredUser("alice", "scrypt$alice"),
        StoredUser("guest", GUEST_CREDENTIAL, ("administrator",)),
    ]
    assert restored.users == original.users == users
    assert restored.vhosts == original.vhosts == [VHOST, "other"]
    assert restored.permissions == original.permissions
    assert restored.permissions == [UserPermission("alice", "other", "", "^a$", ".*")]
    assert await read_all(fresh, "q") == original_entries
    restored_stats = await fresh.stats()
    assert (restored_stats.messages, restored_stats.entries) == (
        original_stats.messages,
        original_stats.entries,
    )
    assert restored_stats.message_bytes == original_stats.message_bytes


async def test_a_backup_needs_an_empty_directory(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    """Rule (Store.backup): the directory must be empty, so that a backup never overwrites or
    mixes with another."""
    store, _ = await start(store_factory)
    directory = tmp_path / "backups" / "used"
    directory.mkdir(parents=True)
    (directory / "something").write_text("already here\n")

    with pytest.raises(StoreError, match="not empty"):
        await store.backup(directory)

    assert [path.name for path in directory.iterdir()] == ["something"]


async def test_unsynced_commits_survive_a_clean_close(store_factory: StoreFactory) -> None:
    """Rule (persist.sync): without sync a commit is not flushed to the disk before it returns,
    but it is still committed: a clean close keeps it."""
    store, base = await start(store_factory, sync=False)
    await store.commit(
        WriteBatch(
            queues_put=[queue("q")],
            messages_put=[message(base + 1)],
            entries_put=[entry("q", 1, base + 1)],
        )
    )
    store, recovery = await restart(store, store_factory, sync=False)
    assert recovery.backlogs == [QueueBacklog(VHOST, "q", 1, len(b"hello"), 1)]


async def test_recovery_tells_whether_the_previous_holder_stopped_cleanly(
    store_factory: StoreFactory, request: pytest.FixtureRequest
) -> None:
    """A store closed by its broker says so at the next recovery; one whose broker record was
    left "running" (the broker crashed, as simulated here by setting it back) says it was not
    (the broker logs it at start)."""
    store = await store_factory()
    assert not (await store.recover()).unclean_stop  # a new store
    await store.close()
    store = await store_factory()
    assert not (await store.recover()).unclean_stop
    await store.close()
    if store.kind == "sqlite":
        connection = sqlite3.connect(store.location)
        with connection:
            connection.execute("UPDATE brokers SET state = 'running'")
        connection.close()
    else:
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = store.location.rsplit(" schema ", 1)[1]
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f"UPDATE \"{schema}\".brokers SET state = 'running'")
        finally:
            await admin.close()
    store = await store_factory()
    assert (await store.recover()).unclean_stop
