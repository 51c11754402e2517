"""The write plan of both stores, written once: the schema and its migrations, the order in which
a `WriteBatch` is written, recovery, and the statements the stores share. SQL is written in the
neutral form of `batonmq.store.dialect`; `batonmq.store.sqlite` and `batonmq.store.postgres`
render it, hold the connections and the lock, and run what this module lists.

A commit is, in one transaction: `Plan.write_steps` in their order, then the garbage collection
of the messages no entry refers to any more among `orphan_candidates` and the ids the deletions
of whole queues, virtual hosts and ranges collected into the `{candidates}` table. That last
step is the stores' own (PostgreSQL passes the ids as one array and sums the bytes freed for
its quota, SQLite has no arrays), as are the reads of a page of entries (each is tuned to its
planner; see there).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Final, TypeVar

from pamqp.common import FieldTable

from batonmq import __version__
from batonmq.security.permissions import UserPermission
from batonmq.store.base import (
    GUEST_CREDENTIAL,
    GUEST_TAGS,
    LEVEL_INDEX,
    SCHEMA_VERSION,
    QueueBacklog,
    Recovery,
    StoredBinding,
    StoredDefinitions,
    StoredExchange,
    StoredQueue,
    StoredUser,
    WriteBatch,
)
from batonmq.store.dialect import Dialect
from batonmq.store.fields import decode_table, encode_table

_Item = TypeVar("_Item")
Row = tuple[object, ...]
#: A rendered statement and the rows it runs for (executemany), in order.
Step = tuple[str, Sequence[Row]]


@dataclass(frozen=True, slots=True)
class AddColumn:
    """A column added to a table that may have it already (a migration step is rerun when a
    migration failed half-way in SQLite, which has no ADD COLUMN IF NOT EXISTS)."""

    table: str
    column: str
    definition: str
    #: The dialect that has the column, or None for both.
    only: str | None = None


@dataclass(frozen=True, slots=True)
class Only:
    """A statement of a migration that one dialect runs (the other has no use for what it
    makes)."""

    dialect: str
    sql: str


MigrationStep = str | AddColumn | Only

#: Migration n (from 0) takes the schema from version n to n + 1; every step is also correct when
#: rerun (IF NOT EXISTS, ON CONFLICT DO NOTHING, AddColumn).
MIGRATIONS: Final[tuple[tuple[MigrationStep, ...], ...]] = (
    (
        "CREATE TABLE IF NOT EXISTS {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {s}.counters (name TEXT PRIMARY KEY, value {int64} NOT NULL)",
        "INSERT INTO {s}.counters (name, value) VALUES ('message_id_block', 0)"
        " ON CONFLICT DO NOTHING",
        "CREATE TABLE IF NOT EXISTS {s}.brokers (broker_id TEXT PRIMARY KEY,"
        " epoch {int64} NOT NULL, state TEXT NOT NULL, started_at {time} NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {s}.exchanges (broker_id TEXT NOT NULL, vhost TEXT NOT NULL,"
        " name TEXT NOT NULL, type TEXT NOT NULL, auto_delete {bool} NOT NULL,"
        " internal {bool} NOT NULL, arguments TEXT NOT NULL,"
        " PRIMARY KEY (broker_id, vhost, name)){clustered}",
        "CREATE TABLE IF NOT EXISTS {s}.queues (broker_id TEXT NOT NULL, vhost TEXT NOT NULL,"
        " name TEXT NOT NULL, auto_delete {bool} NOT NULL, arguments TEXT NOT NULL,"
        " PRIMARY KEY (broker_id, vhost, name)){clustered}",
        "CREATE TABLE IF NOT EXISTS {s}.bindings (broker_id TEXT NOT NULL, vhost TEXT NOT NULL,"
        " source TEXT NOT NULL, destination_kind TEXT NOT NULL, destination TEXT NOT NULL,"
        " routing_key TEXT NOT NULL, arguments TEXT NOT NULL, PRIMARY KEY (broker_id, vhost,"
        " source, destination_kind, destination, routing_key, arguments)){clustered}",
        "CREATE TABLE IF NOT EXISTS {s}.messages (broker_id TEXT NOT NULL,"
        " id {int64} PRIMARY KEY, exchange TEXT NOT NULL, routing_key TEXT NOT NULL,"
        " header_payload {blob} NOT NULL, body {blob} NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {s}.entries (broker_id TEXT NOT NULL, vhost TEXT NOT NULL,"
        " queue TEXT NOT NULL, sequence {int64} NOT NULL, message_id {int64} NOT NULL,"
        " delivery_count INTEGER NOT NULL, transient {bool} NOT NULL,"
        " PRIMARY KEY (broker_id, vhost, queue, sequence)){clustered}",
        "CREATE INDEX IF NOT EXISTS entries_message_id ON {s}.entries (message_id)",
    ),
    # Version 2: entries carry their expiry time (message TTL), wall-clock milliseconds.
    (AddColumn("entries", "expires_at", "{int64}"),),
    # Version 3: entries carry their priority level, so a priority queue pages each level.
    (
        AddColumn("entries", "priority", "INTEGER NOT NULL DEFAULT 0"),
        "CREATE INDEX IF NOT EXISTS entries_priority"
        " ON {s}.entries (broker_id, vhost, queue, priority, sequence)",
    ),
    # Version 4: users (with guest/guest, as every new store) and virtual hosts, store-wide.
    (
        "CREATE TABLE IF NOT EXISTS {s}.users (name TEXT PRIMARY KEY, credential TEXT NOT NULL)"
        "{clustered}",
        f"INSERT INTO {{s}}.users (name, credential) VALUES ('guest', '{GUEST_CREDENTIAL}')"
        " ON CONFLICT DO NOTHING",
        "CREATE TABLE IF NOT EXISTS {s}.vhosts (name TEXT PRIMARY KEY){clustered}",
        # WHERE true: SQLite would read ON CONFLICT as the join constraint of the last SELECT.
        "INSERT INTO {s}.vhosts (name) SELECT vhost FROM {s}.exchanges"
        " UNION SELECT vhost FROM {s}.queues WHERE true ON CONFLICT DO NOTHING",
    ),
    # Version 5: the level index holds only levels above 0 (see `LEVEL_INDEX`).
    (
        "DROP INDEX IF EXISTS {s}.entries_priority",
        f"CREATE INDEX entries_priority ON {{s}}.entries {LEVEL_INDEX}",
    ),
    # Version 6: message checksums (NULL, unchecked, for those written before; see
    # batonmq.store.integrity), and the quarantine of entries whose message fails its own.
    (
        AddColumn("messages", "checksum", "{int64}"),
        "CREATE TABLE IF NOT EXISTS {s}.quarantined_messages (broker_id TEXT NOT NULL,"
        " vhost TEXT NOT NULL, queue TEXT NOT NULL, sequence {int64} NOT NULL,"
        " delivery_count INTEGER NOT NULL, message_id {int64} NOT NULL,"
        " exchange TEXT NOT NULL, routing_key TEXT NOT NULL, header_payload {blob} NOT NULL,"
        " body {blob} NOT NULL, checksum {int64}, quarantined_at {time} NOT NULL)",
    ),
    # Version 7: the broker record names the process holding the store; in PostgreSQL it is a
    # lease (holder, expiry) with a fencing epoch, where SQLite's lock file decides and the
    # record tells an operator.
    (
        AddColumn("brokers", "holder", "TEXT"),
        AddColumn("brokers", "lease_expires", "{time}", only="postgres"),
    ),
    # Version 8: users carry RabbitMQ's tags (comma-separated); the guest user of a store being
    # created (no schema version written yet) is an administrator, as RabbitMQ's default user;
    # the users of an older store get none.
    (
        AddColumn("users", "tags", "TEXT NOT NULL DEFAULT ''"),
        f"UPDATE {{s}}.users SET tags = '{GUEST_TAGS}' WHERE name = 'guest'"
        " AND NOT EXISTS (SELECT 1 FROM {s}.meta WHERE key = 'schema_version')",
    ),
    # Version 9: the broker record is an HA cluster member's registration (MQ 4.1 HA guide,
    # `list bkr`, Example 1): the addresses of its AMQP listener and heartbeat service, its
    # version, who took it over; in PostgreSQL the time of its last update in the store (the
    # lease renewal, on the database's clock), which the failure detector reads.
    (
        AddColumn("brokers", "address", "TEXT"),
        AddColumn("brokers", "heartbeat_address", "TEXT"),
        AddColumn("brokers", "version", "TEXT"),
        AddColumn("brokers", "taken_over_by", "TEXT"),
        AddColumn("brokers", "heartbeat_at", "{time}", only="postgres"),
    ),
    # Version 10: a member shut down with `shutdown bkr -nofailover` says so in its record, and
    # no survivor claims it (MQ 4.1 HA guide, Table 7: "no other broker is to take over the
    # persistent data of the one being shut down") until it starts again.
    (AddColumn("brokers", "no_failover", "BOOLEAN NOT NULL DEFAULT false", only="postgres"),),
    # Version 11: a member records the settings every member of the cluster must share (MQ 4.1
    # HA guide, Table 6: "Must have the same value for all brokers in a cluster"), which a broker
    # joining checks its own against.
    (AddColumn("brokers", "settings", "TEXT", only="postgres"),),
    # Version 12: RabbitMQ's permissions, per user and virtual host (configure, write and read
    # patterns). No one is locked out by the upgrade: every user of an older store may do
    # everything in every virtual host it has, as it could before permissions existed.
    (
        "CREATE TABLE IF NOT EXISTS {s}.permissions (username TEXT NOT NULL,"
        " vhost TEXT NOT NULL, configure TEXT NOT NULL, write TEXT NOT NULL,"
        " read TEXT NOT NULL, PRIMARY KEY (username, vhost)){clustered}",
        # WHERE true: as in version 4, for SQLite's reading of ON CONFLICT.
        "INSERT INTO {s}.permissions (username, vhost, configure, write, read)"
        " SELECT u.name, v.name, '.*', '.*', '.*' FROM {s}.users AS u CROSS JOIN {s}.vhosts AS v"
        " WHERE true ON CONFLICT DO NOTHING",
    ),
    # Version 13: stream queues kept in the PostgreSQL store (SQLite's stay in segment files
    # beside it): each segment with the snapshot of producers' ids it began with, and each chunk
    # (`batonmq.queues.streams.chunk`, encoded as in a segment file) under its first offset,
    # with its segment and the time it was written (milliseconds). Both are owned rows: a
    # takeover moves them with the broker's queues.
    (
        Only(
            "postgres",
            "CREATE TABLE IF NOT EXISTS {s}.stream_segments (broker_id TEXT NOT NULL,"
            " vhost TEXT NOT NULL, queue TEXT NOT NULL, first_offset {int64} NOT NULL,"
            " producers {blob}, PRIMARY KEY (broker_id, vhost, queue, first_offset))",
        ),
        Only(
            "postgres",
            "CREATE TABLE IF NOT EXISTS {s}.stream_chunks (broker_id TEXT NOT NULL,"
            " vhost TEXT NOT NULL, queue TEXT NOT NULL, segment {int64} NOT NULL,"
            " first_offset {int64} NOT NULL, written_at {int64} NOT NULL, chunk {blob} NOT NULL,"
            " PRIMARY KEY (broker_id, vhost, queue, first_offset))",
        ),
        # Uncompressed out of line: opening a stream reads its chunks' headers only, a slice
        # that PostgreSQL then fetches without reading (and decompressing) the whole chunk.
        Only("postgres", "ALTER TABLE {s}.stream_chunks ALTER COLUMN chunk SET STORAGE EXTERNAL"),
    ),
    # Version 14: the PostgreSQL store's append log (`batonmq.store.postgres_log`; SQLite's is
    # a file beside the database): a frame per batch of message and entry changes, under its
    # broker and its sequence in that broker's log. An owned row: a takeover applies the failed
    # broker's. Uncompressed: a frame is written once and read back seldom, and compressing it
    # cost the server more than storing it.
    (
        Only(
            "postgres",
            "CREATE TABLE IF NOT EXISTS {s}.appends (broker_id TEXT NOT NULL,"
            " seq {int64} NOT NULL, frame {blob} NOT NULL, PRIMARY KEY (broker_id, seq))",
        ),
        Only("postgres", "ALTER TABLE {s}.appends ALTER COLUMN frame SET STORAGE EXTERNAL"),
    ),
    # Version 15: the store identity of a worker of an HA member with several worker processes
    # names the member it is a worker of: the member is one broker to its peers (one row of
    # `list bkr`), and a takeover claims all of its workers' identities at once.
    (AddColumn("brokers", "member_of", "TEXT", only="postgres"),),
)
assert len(MIGRATIONS) == SCHEMA_VERSION

_KEY: Final = "broker_id = $1 AND vhost = $2"
_QUEUE: Final = f"{_KEY} AND queue = $3"
_ENTRY: Final = f"{_QUEUE} AND sequence = $4"
_RANGE: Final = (
    f"{_QUEUE} AND sequence BETWEEN $4 AND $5 AND (CAST($6 AS INTEGER) IS NULL OR priority = $6)"
)


def numbered(count: int, first: int = 1) -> str:
    """ "$first, $first+1, ..." for `count` values."""
    return ", ".join(f"${number}" for number in range(first, first + count))


_COLLECT: Final = "INSERT INTO {candidates} (id) SELECT message_id FROM {s}.entries WHERE"


def _upsert(table: str, columns: str, key: str | None, *, guard: str = "") -> tuple[str, str, int]:
    """(head, tail, width) of an insert of one row or more: "INSERT ... VALUES", the conflict
    clause, which replaces the columns outside `key` (None: the row is kept as it is), and the
    number of columns."""
    names = [name.strip() for name in columns.split(",")]
    head = f"INSERT INTO {{s}}.{table} ({columns}) VALUES"
    if key is None:
        return head, "ON CONFLICT DO NOTHING", len(names)
    keys = {name.strip() for name in key.split(",")}
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in names if name not in keys)
    return head, f"ON CONFLICT ({key}) DO UPDATE SET {updates}{guard}", len(names)


#: Inserts that a batch makes one row per message or entry (several rows per statement in
#: SQLite): table, columns, conflict key.
_PUTS: Final = {
    "put_vhost": _upsert("vhosts", "name", None),
    "put_exchange": _upsert(
        "exchanges",
        "broker_id, vhost, name, type, auto_delete, internal, arguments",
        "broker_id, vhost, name",
    ),
    "put_queue": _upsert(
        "queues", "broker_id, vhost, name, auto_delete, arguments", "broker_id, vhost, name"
    ),
    "put_binding": _upsert(
        "bindings",
        "broker_id, vhost, source, destination_kind, destination, routing_key, arguments",
        None,
    ),
    # Never over another broker's message (ids are unique per store; this only fences a bug).
    "put_message": _upsert(
        "messages",
        "broker_id, id, exchange, routing_key, header_payload, body, checksum",
        "id",
        guard=" WHERE messages.broker_id = EXCLUDED.broker_id",
    ),
    "put_entry": _upsert(
        "entries",
        "broker_id, vhost, queue, sequence, message_id, delivery_count, transient, expires_at,"
        " priority",
        "broker_id, vhost, queue, sequence",
    ),
    # Users: their columns here, `user_row` and `stored_user` (one place for all three).
    "put_user": _upsert("users", "name, credential, tags", "name"),
    # Permissions: their columns here, `permission_row` and `stored_permission`.
    "put_permission": _upsert(
        "permissions", "username, vhost, configure, write, read", "username, vhost"
    ),
}


#: Column types whose arrays go as the text of an array ('{1,NULL}', '{"a","b"}'), which
#: PostgreSQL parses: asyncpg encodes an array element by element, checking each against the
#: abstract base classes of `collections.abc`, which cost the broker more than the runs per row
#: the arrays replaced. Bytes go as arrays (their text would be twice as long).
_AS_TEXT: Final = ("TEXT", "{int64}", "INTEGER", "{bool}")


def _unnest(types: Sequence[str], alias: str = "") -> str:
    """Rows made of one array per column, from $2 on (`types`: the columns' types), named
    `alias` when given."""
    arrays = ", ".join(
        f"CAST(CAST(${number} AS TEXT) AS {kind}[])"
        if kind in _AS_TEXT
        else f"CAST(${number} AS {kind}[])"
        for number, kind in enumerate(types, 2)
    )
    return f"unnest({arrays}){f' AS {alias}' if alias else ''}"


def array_text(values: Sequence[object]) -> str:
    """`values` (all strings, or integers, booleans and None) as the text of a PostgreSQL
    array. Each distinct string is quoted once: most columns repeat a few (virtual hosts,
    queues)."""
    if values and isinstance(values[0], str):
        quoted = {value: _quoted(str(value)) for value in set(values)}
        return "{" + ",".join(map(quoted.__getitem__, values)) + "}"
    if None in values:
        return "{" + ",".join("NULL" if value is None else str(value) for value in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def _quoted(text: str) -> str:
    """An element of an array's text that reads back as `text` (PostgreSQL, "Arrays": double
    quotes around it, and a backslash before each double quote or backslash in it)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: The types of the columns of ARRAY_STATEMENTS, after the broker.
_ENTRY_KEY: Final = ("TEXT", "TEXT", "{int64}")
_ARRAY_TYPES: Final = {
    "put_message": ("{int64}", "TEXT", "TEXT", "{blob}", "{blob}", "{int64}"),
    "put_entry": (*_ENTRY_KEY, "{int64}", "INTEGER", "{bool}", "{int64}", "INTEGER"),
    "update_entry": (*_ENTRY_KEY, "INTEGER"),
    "delete_entry": _ENTRY_KEY,
}
#: The physical row (ctid) of each entry the arrays name, found by one probe of the primary key
#: per entry: the subquery fenced with OFFSET 0 (as `batonmq.store.dialect.POSTGRES` explains)
#: cannot become a join, which the planner made a hash join over the whole table (its cost
#: growing with the backlog, 40 us per entry of 100,000); the rows are then reached by their
#: ctid. An entry that is not there is no row.
_ENTRY_CTIDS: Final = (
    "CROSS JOIN LATERAL (SELECT x.ctid FROM {s}.entries AS x WHERE x.broker_id = $1"
    " AND x.vhost = r.vhost AND x.queue = r.queue AND x.sequence = r.sequence OFFSET 0) AS x"
)

#: The statements of the "arrays" dialect for the rows a batch has many of (see
#: `Dialect.rows`): $1 the broker, then one array per column, a statement per batch. The key
#: of an upsert and of an update is unique among its rows (`Plan.write_steps` sees to it):
#: PostgreSQL refuses to change a row twice in one statement.
ARRAY_STATEMENTS: Final = {
    name: f"{_PUTS[name][0].removesuffix(' VALUES')} SELECT CAST($1 AS TEXT), * FROM"
    f" {_unnest(_ARRAY_TYPES[name])} {_PUTS[name][1]}"
    for name in ("put_message", "put_entry")
} | {
    "update_entry": "UPDATE {s}.entries AS e SET delivery_count = u.delivery_count FROM"
    " (SELECT x.ctid, r.delivery_count FROM"
    f" {_unnest(_ARRAY_TYPES['update_entry'], 'r (vhost, queue, sequence, delivery_count)')}"
    f" {_ENTRY_CTIDS}) AS u WHERE e.ctid = u.ctid",
    "delete_entry": "DELETE FROM {s}.entries AS e WHERE e.ctid = ANY(ARRAY(SELECT x.ctid FROM"
    f" {_unnest(_ARRAY_TYPES['delete_entry'], 'r (vhost, queue, sequence)')} {_ENTRY_CTIDS}))",
}
#: The positions in a row of the columns that make its key, for those of ARRAY_STATEMENTS that
#: change rows (a deletion may name a row twice).
_ARRAY_KEYS: Final = {"put_message": (1,), "put_entry": (1, 2, 3), "update_entry": (1, 2, 3)}

#: The statements both stores run, by name; each store renders them once.
STATEMENTS: Final = {
    # Writes, in the order of `Plan.write_steps`.
    "collect_vhost": f"{_COLLECT} {_KEY} ON CONFLICT DO NOTHING",
    **{
        f"delete_vhost_{table}": f"DELETE FROM {{s}}.{table} WHERE {_KEY}"
        for table in ("entries", "bindings", "queues", "exchanges")
    },
    "delete_vhost": "DELETE FROM {s}.vhosts WHERE name = $1",
    "delete_vhost_permissions": "DELETE FROM {s}.permissions WHERE vhost = $1",
    "delete_exchange_bindings": f"DELETE FROM {{s}}.bindings WHERE {_KEY}"
    " AND (source = $3 OR (destination_kind = 'exchange' AND destination = $3))",
    "delete_exchange": f"DELETE FROM {{s}}.exchanges WHERE {_KEY} AND name = $3",
    "collect_queue": f"{_COLLECT} {_QUEUE} ON CONFLICT DO NOTHING",
    "delete_queue_entries": f"DELETE FROM {{s}}.entries WHERE {_QUEUE}",
    "delete_queue_bindings": f"DELETE FROM {{s}}.bindings WHERE {_KEY}"
    " AND destination_kind = 'queue' AND destination = $3",
    "delete_queue": f"DELETE FROM {{s}}.queues WHERE {_KEY} AND name = $3",
    "delete_binding": f"DELETE FROM {{s}}.bindings WHERE {_KEY} AND source = $3"
    " AND destination_kind = $4 AND destination = $5 AND routing_key = $6 AND arguments = $7",
    "collect_range": f"{_COLLECT} {_RANGE} ON CONFLICT DO NOTHING",
    "delete_range": f"DELETE FROM {{s}}.entries WHERE {_RANGE}",
    **{name: f"{head} ({numbered(width)}) {tail}" for name, (head, tail, width) in _PUTS.items()},
    "update_entry": f"UPDATE {{s}}.entries SET delivery_count = $5 WHERE {_ENTRY}",
    "delete_entry": f"DELETE FROM {{s}}.entries WHERE {_ENTRY}",
    "delete_user": "DELETE FROM {s}.users WHERE name = $1",
    "delete_user_permissions": "DELETE FROM {s}.permissions WHERE username = $1",
    "delete_permission": "DELETE FROM {s}.permissions WHERE username = $1 AND vhost = $2",
    # Recovery, in this order, in one transaction.
    "discard_entries": "DELETE FROM {s}.entries WHERE broker_id = $1 AND (transient OR NOT"
    " EXISTS (SELECT 1 FROM {s}.queues AS q WHERE q.broker_id = $1"
    " AND q.vhost = entries.vhost AND q.name = entries.queue))",
    "discard_messages": "DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 AND {orphans}",
    # After an unclean stop only: whether a message was delivered before the crash is unknown
    # (its delivery count may not have been written yet), so every one counts as delivered and
    # comes back redelivered, as RabbitMQ's classic queues do on a dirty recovery.
    "mark_delivered": "UPDATE {s}.entries SET delivery_count = 1"
    " WHERE broker_id = $1 AND delivery_count = 0",
    "next_block": "UPDATE {s}.counters SET value = value + 1 WHERE name = 'message_id_block'"
    " RETURNING value",
    "exchanges": "SELECT vhost, name, type, auto_delete, internal, arguments FROM {s}.exchanges"
    " WHERE broker_id = $1 ORDER BY vhost, name",
    "queues": "SELECT vhost, name, auto_delete, arguments FROM {s}.queues WHERE broker_id = $1"
    " ORDER BY vhost, name",
    "bindings": "SELECT vhost, source, destination_kind, destination, routing_key, arguments"
    " FROM {s}.bindings WHERE broker_id = $1"
    " ORDER BY vhost, source, destination_kind, destination, routing_key, arguments",
    "backlogs": "SELECT q.vhost, q.name, count(e.sequence), COALESCE(sum(length(m.body)), 0),"
    " COALESCE(max(e.sequence), -1), COALESCE(e.priority, 0) FROM {s}.queues AS q"
    " LEFT JOIN {s}.entries AS e ON e.broker_id = q.broker_id AND e.vhost = q.vhost"
    " AND e.queue = q.name"
    " LEFT JOIN {s}.messages AS m ON m.broker_id = e.broker_id AND m.id = e.message_id"
    " WHERE q.broker_id = $1 GROUP BY q.vhost, q.name, e.priority"
    " ORDER BY q.vhost, q.name, e.priority",
    # Users and virtual hosts: the store's, shared by the brokers that share it.
    "users": "SELECT name, credential, tags FROM {s}.users ORDER BY name",  # see `stored_user`
    "vhosts": "SELECT name FROM {s}.vhosts ORDER BY name",
    "permissions": "SELECT username, vhost, configure, write, read FROM {s}.permissions"
    " ORDER BY username, vhost",  # see `stored_permission`
    # The entry, with a copy of its message as stored, moves to the quarantine ($5: now); then
    # `delete_entry`, and `delete_orphan` for its message.
    "quarantine_entry": "INSERT INTO {s}.quarantined_messages (broker_id, vhost, queue,"
    " sequence, delivery_count, message_id, exchange, routing_key, header_payload, body,"
    " checksum, quarantined_at) SELECT e.broker_id, e.vhost, e.queue, e.sequence,"
    " e.delivery_count, m.id, m.exchange, m.routing_key, m.header_payload, m.body, m.checksum,"
    " $5 FROM {s}.entries AS e JOIN {s}.messages AS m"
    " ON m.broker_id = e.broker_id AND m.id = e.message_id WHERE e.broker_id = $1"
    " AND e.vhost = $2 AND e.queue = $3 AND e.sequence = $4",
    "delete_orphan": "DELETE FROM {s}.messages AS m WHERE m.broker_id = $1 AND m.id = $2"
    " AND {orphans}",
    # (exchanges, queues, bindings, messages, entries, message bytes, quarantined) of a broker.
    "counts": "SELECT (SELECT count(*) FROM {s}.exchanges WHERE broker_id = $1),"
    " (SELECT count(*) FROM {s}.queues WHERE broker_id = $1),"
    " (SELECT count(*) FROM {s}.bindings WHERE broker_id = $1),"
    " (SELECT count(*) FROM {s}.messages WHERE broker_id = $1),"
    " (SELECT count(*) FROM {s}.entries WHERE broker_id = $1),"
    " (SELECT COALESCE(sum(length(body)), 0) FROM {s}.messages WHERE broker_id = $1),"
    " (SELECT count(*) FROM {s}.quarantined_messages WHERE broker_id = $1)",
    "block": "SELECT value FROM {s}.counters WHERE name = 'message_id_block'",
    "version": "SELECT value FROM {s}.meta WHERE key = 'schema_version'",
    "set_meta": "INSERT INTO {s}.meta (key, value) VALUES ($1, $2)"
    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
    "meta_created": "INSERT INTO {s}.meta (key, value) VALUES ('created_at', $1)"
    " ON CONFLICT DO NOTHING",
}

#: Rows per statement where SQLite writes several rows per statement. Each statement SQLite runs
#: releases and retakes the GIL; one statement per row (executemany) makes the store's thread
#: wait for the event loop's thread at every row, and a commit of 1,000 rows took tens of
#: milliseconds while the loop was busy (see benchmarks/, persistent-1x1-128B). 500 rows of 9
#: values stay well under SQLite's limit of 32,766 variables per statement.
ROWS_PER_STATEMENT: Final = 500


def chunks(items: Sequence[_Item]) -> Iterator[Sequence[_Item]]:
    for start in range(0, len(items), ROWS_PER_STATEMENT):
        yield items[start : start + ROWS_PER_STATEMENT]


class Plan:
    """The plan rendered for one dialect and, in PostgreSQL, one schema (None: "{s}" is kept,
    for scripts rendered once for every schema)."""

    def __init__(self, dialect: Dialect, schema: str | None = None) -> None:
        self.dialect = dialect
        self._schema = schema
        #: Every statement of STATEMENTS, rendered.
        self.sql = {name: self.render(text) for name, text in STATEMENTS.items()}
        #: The parts of the statements that take several rows at once (multi_row), rendered.
        self._puts_rendered = {
            name: (self.render(head), self.render(tail), width)
            for name, (head, tail, width) in _PUTS.items()
        }
        self._delete_entries_head = self.render(
            f"DELETE FROM {{s}}.entries WHERE {_QUEUE} AND sequence IN"
        )
        if dialect.rows == "arrays":
            # ARRAY_STATEMENTS too, named "array_" and their name.
            self.sql |= {
                f"array_{name}": self.render(sql) for name, sql in ARRAY_STATEMENTS.items()
            }

    def render(self, sql: str) -> str:
        return self.dialect.render(sql, self._schema)

    def migration(self, version: int) -> list[str | AddColumn]:
        """The steps that make schema `version` (from 1) out of `version - 1`: SQL rendered,
        and the columns this dialect has."""
        steps: list[str | AddColumn] = []
        for step in MIGRATIONS[version - 1]:
            if isinstance(step, str):
                steps.append(self.render(step))
            elif isinstance(step, Only):
                if step.dialect == self.dialect.name:
                    steps.append(self.render(step.sql))
            elif step.only in (None, self.dialect.name):
                steps.append(step)
        return steps

    def write_steps(self, broker: str, batch: WriteBatch, checksums: Sequence[int]) -> list[Step]:
        """The statements of a commit, each with its rows (`checksums` those of the batch's
        messages), in the order of writes: deletions of virtual hosts (with this broker's
        exchanges, queues, bindings and entries in them), of exchanges (their bindings go too),
        of queues (their entries and bindings go too) and of bindings; purges; then puts of
        virtual hosts, exchanges, queues, bindings, messages and entries; then entry updates and
        entry deletions; then users deleted (with their permissions) and put (a user deleted and
        added again in one batch comes back without its old permissions); then permissions
        put and deleted. A deleted virtual host's permissions go with it. Entries that go with
        their virtual host, queue or range leave their message ids in `{candidates}` first, for
        the garbage collection that follows (see the module docstring)."""
        sql = self.sql
        vhosts = [(broker, vhost) for vhost in batch.vhosts_deleted]
        exchanges = [(broker, *key) for key in batch.exchanges_deleted]
        queues = [(broker, *key) for key in batch.queues_deleted]
        # The range's priority is read twice ($6), which numbered placeholders allow.
        ranges = [(broker, *purge) for purge in batch.ranges_deleted]
        steps: list[Step] = [
            (sql["collect_vhost"], vhosts),
            *((sql[f"delete_vhost_{table}"], vhosts)
              for table in ("entries", "bindings", "queues", "exchanges")),
            (sql["delete_vhost"], [(vhost,) for vhost in batch.vhosts_deleted]),
            (sql["delete_vhost_permissions"], [(vhost,) for vhost in batch.vhosts_deleted]),
            (sql["delete_exchange_bindings"], exchanges),
            (sql["delete_exchange"], exchanges),
            (sql["collect_queue"], queues),
            (sql["delete_queue_entries"], queues),
            (sql["delete_queue_bindings"], queues),
            (sql["delete_queue"], queues),
            (sql["delete_binding"], [binding_row(broker, b) for b in batch.bindings_deleted]),
            (sql["collect_range"], ranges),
            (sql["delete_range"], ranges),
            *self._puts("put_vhost", [(vhost,) for vhost in batch.vhosts_put]),
            *self._puts("put_exchange", [
                (broker, e.vhost, e.name, e.type_name, e.auto_delete, e.internal,
                 encode_table(e.arguments)) for e in batch.exchanges_put]),
            *self._puts("put_queue", [
                (broker, q.vhost, q.name, q.auto_delete, encode_table(q.arguments))
                for q in batch.queues_put]),
            *self._puts("put_binding", [binding_row(broker, b) for b in batch.bindings_put]),
            *self._puts("put_message", [
                (broker, m.id, m.exchange, m.routing_key, m.header_payload, m.body, checksum)
                for m, checksum in zip(batch.messages_put, checksums, strict=True)]),
            *self._puts("put_entry", [
                (broker, e.vhost, e.queue, e.sequence, e.message_id, e.delivery_count,
                 e.transient, e.expires_at, e.priority) for e in batch.entries_put]),
            *self._updated_entries(broker, batch.entries_updated),
            *self._deleted_entries(broker, batch.entries_deleted),
            (sql["delete_user"], [(name,) for name in batch.users_deleted]),
            (sql["delete_user_permissions"], [(name,) for name in batch.users_deleted]),
            *self._puts("put_user", [user_row(user) for user in batch.users_put]),
            *self._puts("put_permission", [permission_row(p) for p in batch.permissions_put]),
            (sql["delete_permission"], batch.permissions_deleted),
        ]  # fmt: skip
        return [(statement, rows) for statement, rows in steps if rows]

    def _puts(self, name: str, rows: Sequence[Row]) -> list[Step]:
        """`name`'s insert for `rows`: up to ROWS_PER_STATEMENT rows per statement ("values"),
        or one statement for them all ("arrays": those of ARRAY_STATEMENTS; one run of a
        statement per row for the others, which a batch seldom has more than one of)."""
        if not rows:
            return []
        if self.dialect.rows == "arrays":
            return (
                self._array_step(name, rows)
                if name in ARRAY_STATEMENTS
                else [(self.sql[name], rows)]
            )
        return [
            (self._many(name, len(chunk)), [tuple(v for row in chunk for v in row)])
            for chunk in chunks(rows)
        ]

    def _updated_entries(
        self, broker: str, updated: Sequence[tuple[str, str, int, int]]
    ) -> list[Step]:
        """Updates of entries' delivery counts: one run per entry, or ("arrays") one for all."""
        rows = [(broker, *update) for update in updated]
        if self.dialect.rows == "arrays":
            return self._array_step("update_entry", rows)
        return [(self.sql["update_entry"], rows)]

    def _deleted_entries(
        self, broker: str, deleted: Sequence[tuple[str, str, int, int]]
    ) -> list[Step]:
        """Deletions of single entries: one statement per queue and up to ROWS_PER_STATEMENT
        sequences ("values"), or one statement for them all ("arrays")."""
        if self.dialect.rows == "arrays":
            return self._array_step("delete_entry", [(broker, *entry[:3]) for entry in deleted])
        by_queue: dict[tuple[str, str], list[int]] = {}
        for vhost, queue, sequence, _message_id in deleted:
            by_queue.setdefault((vhost, queue), []).append(sequence)
        return [
            (self._many("delete_entries", len(chunk)), [(broker, vhost, queue, *chunk)])
            for (vhost, queue), sequences in by_queue.items()
            for chunk in chunks(sequences)
        ]

    def _array_step(self, name: str, rows: Sequence[Row]) -> list[Step]:
        """`name` of ARRAY_STATEMENTS run once for `rows`: the broker (the same in every row),
        then a column of values per array. Of rows with the same key the last is kept: it
        is the one a run per row would have left."""
        if not rows:
            return []
        if name in _ARRAY_KEYS:
            key = itemgetter(*_ARRAY_KEYS[name])
            if len(set(map(key, rows))) < len(rows):
                rows = list({key(row): row for row in rows}.values())
        columns = zip(*rows, strict=True)
        broker = next(columns)[0]
        arrays = [
            array_text(column) if kind in _AS_TEXT else column
            for column, kind in zip(columns, _ARRAY_TYPES[name], strict=True)
        ]
        return [(self.sql[f"array_{name}"], [(broker, *arrays)])]

    def _many(self, name: str, count: int) -> str:
        """Statement `name` for `count` rows at once. Its values are numbered in order, so the
        dialect's `sequential` placeholders are written straight in: rendering the text of a
        500-row statement each time took longer than running it."""
        dialect = self.dialect
        if name == "delete_entries":
            return f"{self._delete_entries_head} ({dialect.sequential(count, 4)})"
        head, tail, width = self._puts_rendered[name]
        values = ", ".join(
            f"({dialect.sequential(width, 1 + row * width)})" for row in range(count)
        )
        return f"{head} {values} {tail}"


def migrated_meta() -> list[Row]:
    """The `set_meta` rows a migration ends with: the schema it made, and by what."""
    return [("schema_version", str(SCHEMA_VERSION)), ("software_version", __version__)]


def orphan_candidates(batch: WriteBatch) -> list[int]:
    """The ids of the messages a batch may leave without an entry: those of its deleted entries,
    and those it puts without putting an entry that refers to them (a message whose entries a
    later batch deleted already). A message put with an entry keeps it to the end of the
    commit: the only writes after the puts that delete entries are the single deletions, whose
    ids are among the first. Each candidate costs the garbage collection a look-up: the
    journal's batches put every message with an entry, and the acknowledged ones were half of
    them."""
    referenced = {entry.message_id for entry in batch.entries_put}
    deleted = [entry[3] for entry in batch.entries_deleted]
    return deleted + [m.id for m in batch.messages_put if m.id not in referenced]


def user_row(user: StoredUser) -> Row:
    """A row of `users` (`put_user`) for `user`."""
    return (user.name, user.credential, user.tags_text)


def stored_user(row: Iterable[object]) -> StoredUser:
    """A user read back from a row of the `users` statement."""
    name, credential, tags = row
    return StoredUser(str(name), str(credential), StoredUser.parse_tags(str(tags)))


def permission_row(permission: UserPermission) -> Row:
    """A row of `permissions` (`put_permission`)."""
    p = permission
    return (p.user, p.vhost, p.configure, p.write, p.read)


def stored_permission(row: Iterable[object]) -> UserPermission:
    """A permission read back from a row of the `permissions` statement."""
    user, vhost, configure, write, read = (str(value) for value in row)
    return UserPermission(user, vhost, configure, write, read)


def binding_row(broker: str, b: StoredBinding) -> Row:
    return (
        broker, b.vhost, b.source, b.destination_kind, b.destination, b.routing_key,
        encode_table(b.arguments),
    )  # fmt: skip


#: The reads of a recovery, after its deletions and the message-id block (see STATEMENTS).
RECOVERY_READS: Final = (
    "exchanges", "queues", "bindings", "backlogs", "users", "vhosts", "permissions"
)  # fmt: skip
#: Those of them that read an identity's exchanges, queues and bindings (`stored_definitions`).
DEFINITION_READS: Final = ("exchanges", "queues", "bindings")
#: Those of them that read the store's own rows, shared by its brokers: they take no broker id.
STORE_WIDE_READS: Final = frozenset({"users", "vhosts", "permissions"})


def recovery(
    rows: Mapping[str, Iterable[Iterable[object]]],
    *,
    message_id_base: int,
    discarded_entries: int,
    unclean_stop: bool,
) -> Recovery:
    """A Recovery of the rows RECOVERY_READS returned (booleans may be SQLite's 0 and 1)."""
    definitions = stored_definitions(rows)
    return Recovery(
        exchanges=definitions.exchanges,
        queues=definitions.queues,
        bindings=definitions.bindings,
        backlogs=[QueueBacklog(*row) for row in rows["backlogs"]],  # type: ignore[arg-type]
        message_id_base=message_id_base,
        users=[stored_user(row) for row in rows["users"]],
        vhosts=[str(name) for (name,) in rows["vhosts"]],
        permissions=[stored_permission(row) for row in rows["permissions"]],
        discarded_entries=discarded_entries,
        unclean_stop=unclean_stop,
    )


def stored_definitions(rows: Mapping[str, Iterable[Iterable[object]]]) -> StoredDefinitions:
    """The definitions of the rows DEFINITION_READS returned, for one identity."""
    return StoredDefinitions(
        exchanges=[
            StoredExchange(str(v), str(n), str(t), bool(auto), bool(internal), _table(a))
            for v, n, t, auto, internal, a in rows["exchanges"]
        ],
        queues=[
            StoredQueue(str(v), str(n), bool(auto), _table(a)) for v, n, auto, a in rows["queues"]
        ],
        bindings=[
            StoredBinding(str(v), str(s), str(kind), str(d), str(k), _table(a))
            for v, s, kind, d, k, a in rows["bindings"]
        ],
    )


def _table(text: object) -> FieldTable:
    assert isinstance(text, str)
    return decode_table(text)
