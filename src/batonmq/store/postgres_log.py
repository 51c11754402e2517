"""The PostgreSQL store's append log: message and entry writes made durable by one insert of one
row per batch, and written to the tables later, in bulk (a checkpoint), as the SQLite store's
log file does (`batonmq.store.appendlog`; frames and their net effect: `batonmq.store.pending`).

Why: a persistent message is confirmed, and delivered, only once its batch is committed.
Written to the tables, each costs the server an insert of the message and of its entry (two
indexes each), and, once consumed, the deletion of both, with the garbage collection's look-up:
most of PostgreSQL's CPU per message, and most of the broker's store cost. Most persistent
messages are consumed within moments. Appended to the log instead, a message costs its share
of one row of one statement, and when its entry is deleted before the next checkpoint the two
meet in the broker's memory (`Pending`): the tables never see either.

The log is the table `appends` (schema version 14): a row per batch, its broker, its sequence in
that broker's log and its frame. The insert is the batch's transaction, a single statement that
checks the writer's fencing epoch itself: it inserts only while the broker's record holds that
epoch, read FOR SHARE, so a takeover's claim, which bumps the epoch, waits for an append under
way, and every append after it inserts nothing (StoreFenced). The frame is stored uncompressed
(STORAGE EXTERNAL): written once, read back seldom.

A checkpoint is one transaction: the epoch checked, the net effect of the log's rows written
with the commit's statements (`batonmq.store.plan`: upserts, updates that set values,
deletions by key, then the garbage collection of the messages no entry holds), and the rows up
to the last one applied deleted. Unlike a file, the log and the tables change together, so no
row is ever applied twice; a second application would change nothing anyway, for the same
reasons as the file's replay. A checkpoint runs when the log or what it holds grows large
(`batonmq.store.pending`), before any batch that is not only messages and entries, for
statistics, the disk quota's measure, backups and a clean close; and at open, for the rows a
crash left (`apply_log`), and in a takeover's claim, for the failed broker's, before its rows
move (`batonmq.store.takeover`): nothing the failed broker confirmed is lost.

Readers that cannot checkpoint (a store opened without the lock, another member counting a
broker's messages) read the log's rows in the snapshot they read the tables in, and add what
they hold (`counts_with_log`). Every owned table's snapshot (a backup) holds the log's rows
with the tables', and a restore applies them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Final

from batonmq.store.base import StoreCorrupt, StoredMessage, WriteBatch
from batonmq.store.integrity import checksum
from batonmq.store.pending import Counts, Pending, body_size
from batonmq.store.pgsession import Connection
from batonmq.store.plan import Plan, orphan_candidates

#: A stored message's bytes as the disk quota counts them (`PostgresStore.used_bytes`):
#: octet_length reads a TOASTed value's size from its pointer, the value itself is not fetched.
MESSAGE_SIZE: Final = "octet_length(m.header_payload) + octet_length(m.body)"

#: Statements, "{s}" standing for the quoted schema.
SQL: Final = {
    # The batch's whole transaction: inserted only while the broker holds epoch $2.
    "append": "INSERT INTO {s}.appends (broker_id, seq, frame) SELECT b.broker_id, $3, $4"
    " FROM {s}.brokers AS b WHERE b.broker_id = $1 AND b.epoch = $2 FOR SHARE",
    "log_rows": "SELECT seq, frame FROM {s}.appends WHERE broker_id = $1 ORDER BY seq",
    "logging_brokers": "SELECT DISTINCT broker_id FROM {s}.appends",
    "drop_log": "DELETE FROM {s}.appends WHERE broker_id = $1 AND seq <= $2",
    # The bytes of the messages of $2 the tables have: a write puts them again (another queue
    # paged them out), replacing their rows.
    "stored_bytes": f"SELECT COALESCE(sum({MESSAGE_SIZE}), 0) FROM {{s}}.messages AS m"
    " WHERE m.broker_id = $1 AND m.id = ANY($2::bigint[])",
    # For a reader: of the messages $2, those the tables have, with their bodies' bytes, the
    # quota's bytes, and how many entries of the broker hold each.
    "stored_messages": "SELECT m.id, octet_length(m.body), "
    f"{MESSAGE_SIZE}, (SELECT count(*) FROM {{s}}.entries AS e WHERE e.broker_id = $1"
    " AND e.message_id = m.id) FROM {s}.messages AS m"
    " WHERE m.broker_id = $1 AND m.id = ANY($2::bigint[])",
}


async def logged(
    connection: Connection, sql: Mapping[str, str], broker: str
) -> tuple[Pending, int]:
    """The net effect of `broker`'s log rows as `connection` sees them, and the sequence of the
    last (0: none); StoreCorrupt if a frame is damaged."""
    pending, last = Pending(), 0
    for seq, frame in await connection.fetch(sql["log_rows"], broker):
        source = f"the append log row {seq} of broker {broker!r}"
        if pending.take_frames(frame, source) != len(frame):
            # A row is written whole or not at all: a frame cut short is damage here.
            raise StoreCorrupt(f"{source} is damaged: it is not one whole frame")
        last = seq
    return pending, last


async def write_batch(
    connection: Connection,
    sql: Mapping[str, str],
    plan: Plan,
    broker: str,
    batch: WriteBatch,
    checksums: list[int],
    *,
    count_bytes: bool,
) -> int:
    """`batch` written to the tables of `broker` inside the transaction under way on
    `connection` (which checked the epoch): the plan's steps, then the garbage collection of
    the messages no entry holds among those that lost one. What it changed the bytes of the
    broker's messages by when `count_bytes` (0 otherwise)."""
    growth = 0
    if count_bytes and batch.messages_put:
        # A message put again (another queue paging it out) replaces its row.
        put = [message.id for message in batch.messages_put]
        growth -= await connection.fetchval(sql["stored_bytes"], broker, put)
        growth += sum(len(m.header_payload) + len(m.body) for m in batch.messages_put)
    for statement, rows in plan.write_steps(broker, batch, checksums):
        await connection.executemany(statement, rows)
    candidates = orphan_candidates(batch)
    if batch.queues_deleted or batch.ranges_deleted or batch.vhosts_deleted:
        growth -= await connection.fetchval(sql["delete_orphans_too"], broker, candidates)
    elif candidates:
        growth -= await connection.fetchval(sql["delete_orphans"], broker, candidates)
    return growth if count_bytes else 0


async def apply_log(
    connection: Connection, sql: Mapping[str, str], plan: Plan, broker: str
) -> None:
    """Checkpoint `broker`'s log as the tables hold it, inside the transaction under way on
    `connection` (which holds the broker's record: its own epoch checked, or the claim of a
    takeover): what a crash left, or what a failed member confirmed."""
    pending, last = await logged(connection, sql, broker)
    if not last:
        return
    batch = pending.as_batch()
    checksums = await asyncio.to_thread(checksums_of, batch.messages_put)
    await write_batch(connection, sql, plan, broker, batch, checksums, count_bytes=False)
    await connection.execute(sql["drop_log"], broker, last)


def checksums_of(messages: list[StoredMessage]) -> list[int]:
    return [checksum(message) for message in messages]


async def counts_with_log(
    connection: Connection, sql: Mapping[str, str], broker: str, tables: Counts, *, quota: bool
) -> Counts:
    """For a reader that cannot checkpoint, inside a transaction that reads one snapshot:
    `broker`'s (messages, entries, message bytes) of `tables` with what its log holds added
    (see `Pending.counted`); a message's bytes are its body's, or with `quota` its content
    header's and body's (`MESSAGE_SIZE`)."""
    pending, last = await logged(connection, sql, broker)
    if not last:
        return tables
    orphans = pending.orphan_candidates()
    rows = await connection.fetch(sql["stored_messages"], broker, [*pending.messages, *orphans])
    column = 2 if quota else 1
    return pending.counted(
        tables,
        _quota_size if quota else body_size,
        {row[0]: row[column] for row in rows if row[0] in pending.messages},
        {row[0]: (row[3], row[column]) for row in rows if row[0] in orphans},
    )


def _quota_size(message: StoredMessage) -> int:
    return len(message.header_payload) + len(message.body)
