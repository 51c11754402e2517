"""The write plan both stores run (`batonmq.store.plan`), rendered in each dialect: the order of a
batch's writes, what each dialect's rendering holds, and the plan run on a real SQLite database
in memory (PostgreSQL runs it in tests/integration/store)."""

from __future__ import annotations

import re
import sqlite3

import pytest

from batonmq.security.permissions import UserPermission
from batonmq.store.base import (
    SCHEMA_VERSION,
    StoredBinding,
    StoredEntry,
    StoredExchange,
    StoredMessage,
    StoredQueue,
    StoredUser,
    WriteBatch,
)
from batonmq.store.dialect import POSTGRES, SQLITE, Dialect
from batonmq.store.plan import (
    MIGRATIONS,
    ROWS_PER_STATEMENT,
    AddColumn,
    Plan,
    array_text,
    orphan_candidates,
)

BINDING = StoredBinding("/", "ex", "queue", "q", "k", {})


def everything() -> WriteBatch:
    """A batch with a change of every kind."""
    return WriteBatch(
        vhosts_deleted=["old"],
        exchanges_deleted=[("/", "gone-ex")],
        queues_deleted=[("/", "gone-q")],
        bindings_deleted=[StoredBinding("/", "ex", "queue", "q", "old", {})],
        ranges_deleted=[("/", "q", 0, 9, None)],
        vhosts_put=["/"],
        exchanges_put=[StoredExchange("/", "ex", "topic", False, False, {})],
        queues_put=[StoredQueue("/", "q", False, {"x-max-priority": 5})],
        bindings_put=[BINDING],
        messages_put=[StoredMessage(11, "ex", "k", b"\x00\x3c", b"body")],
        entries_put=[StoredEntry("/", "q", 10, 11, priority=3)],
        entries_updated=[("/", "q", 10, 2)],
        entries_deleted=[("/", "q", 8, 7)],
        users_put=[StoredUser("ann", "cred")],
        users_deleted=["bob"],
        permissions_put=[UserPermission("ann", "/", ".*", "", "^q$")],
        permissions_deleted=[("carl", "/")],
    )


def verbs(dialect: Dialect) -> list[str]:
    """Each step of `everything()` as "VERB table"."""
    steps = Plan(dialect, "s").write_steps("b1", everything(), [123])
    return [
        " ".join(re.match(r"(\w+) (?:INTO |FROM )?(\S+)", sql).groups())  # type: ignore[union-attr]
        for sql, _rows in steps
    ]


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
def test_a_batch_is_written_in_the_order_write_batch_states(dialect: Dialect) -> None:
    """Rule (WriteBatch): deletions of virtual hosts, queues, exchanges and bindings, and purges
    come first, each collecting the message ids of the entries it deletes; then puts of virtual
    hosts, exchanges, queues, bindings, messages and entries; then entry updates and deletions;
    then users deleted (their permissions with them) and put; then permissions; a deleted
    virtual host takes its permissions with it; the garbage collection of messages follows the
    plan's steps."""
    table = '"s".' if dialect is POSTGRES else ""
    candidates = dialect.candidates
    assert verbs(dialect) == [
        f"INSERT {candidates}",
        f"DELETE {table}entries",
        f"DELETE {table}bindings",
        f"DELETE {table}queues",
        f"DELETE {table}exchanges",
        f"DELETE {table}vhosts",
        f"DELETE {table}permissions",
        f"DELETE {table}bindings",
        f"DELETE {table}exchanges",
        f"INSERT {candidates}",
        f"DELETE {table}entries",
        f"DELETE {table}bindings",
        f"DELETE {table}queues",
        f"DELETE {table}bindings",
        f"INSERT {candidates}",
        f"DELETE {table}entries",
        f"INSERT {table}vhosts",
        f"INSERT {table}exchanges",
        f"INSERT {table}queues",
        f"INSERT {table}bindings",
        f"INSERT {table}messages",
        f"INSERT {table}entries",
        f"UPDATE {table}entries",
        f"DELETE {table}entries",
        f"DELETE {table}users",
        f"DELETE {table}permissions",
        f"INSERT {table}users",
        f"INSERT {table}permissions",
        f"DELETE {table}permissions",
    ]
    assert orphan_candidates(everything()) == [7]


def test_orphan_candidates_are_the_deleted_entries_messages_and_those_put_without_an_entry() -> (
    None
):
    """Rule (the module docstring): the garbage collection looks at the messages that may have
    no entry left once the commit's writes are done: those of the entries it deletes (after the
    puts, so an entry put and deleted again leaves its message a candidate) and those it puts
    without an entry; a message put with its entry keeps it."""
    batch = WriteBatch(
        messages_put=[StoredMessage(n, "", "q", b"h", b"b") for n in (1, 2, 3)],
        entries_put=[StoredEntry("/", "q", 10, 1), StoredEntry("/", "r", 10, 3)],
        entries_deleted=[("/", "r", 10, 3), ("/", "q", 4, 4)],
    )
    assert orphan_candidates(batch) == [3, 4, 2]


def test_each_dialect_renders_its_placeholders_tables_and_types() -> None:
    """The neutral SQL's tokens are all replaced: SQLite reads ?N and no schema, PostgreSQL $N
    and the broker's quoted schema."""
    for dialect, placeholder, foreign in ((SQLITE, "?", "$"), (POSTGRES, "$", "?")):
        plan = Plan(dialect, "s")
        rendered = [sql for sql, _rows in plan.write_steps("b1", everything(), [123])]
        rendered += list(plan.sql.values())
        for sql in rendered:
            assert "{" not in sql, sql
            assert foreign not in sql, sql
        assert any(f"{placeholder}1" in sql for sql in rendered)
    assert all('"s".' not in sql for sql in Plan(SQLITE, "s").sql.values())
    assert '"s".entries' in Plan(POSTGRES, "s").sql["delete_entry"]


def test_sqlite_writes_many_rows_per_statement_and_postgres_one_statement_per_batch() -> None:
    """SQLite's thread sends up to ROWS_PER_STATEMENT rows per statement (one statement per row
    made it wait for the event loop's thread at every row); PostgreSQL runs one statement for
    all of a batch's rows of a kind, one array per column (a run per row cost a portal and an
    executor start each)."""
    count = ROWS_PER_STATEMENT * 2 + 1
    batch = WriteBatch(
        messages_put=[StoredMessage(n, "", "q", b"h", b"b") for n in range(count)],
        entries_deleted=[("/", "q", n, n) for n in range(count)],
    )
    sqlite_steps = Plan(SQLITE).write_steps("b1", batch, [0] * count)
    assert [len(rows) for _sql, rows in sqlite_steps] == [1] * 6
    assert [len(rows[0]) for _sql, rows in sqlite_steps[:3]] == [7 * 500, 7 * 500, 7]
    assert [len(rows[0]) for _sql, rows in sqlite_steps[3:]] == [3 + 500, 3 + 500, 3 + 1]
    postgres_steps = Plan(POSTGRES, "s").write_steps("b1", batch, [0] * count)
    assert [len(rows) for _sql, rows in postgres_steps] == [1, 1]
    (messages,), (deletions,) = (rows for _sql, rows in postgres_steps)
    assert messages[0] == deletions[0] == "b1"
    assert messages[1] == "{" + ",".join(str(n) for n in range(count)) + "}"
    assert messages[4:6] == ((b"h",) * count, (b"b",) * count)
    assert deletions[1:3] == tuple("{" + ",".join([f'"{name}"'] * count) + "}" for name in "/q")


def test_postgres_sends_numbers_and_names_as_array_text_and_bytes_as_arrays() -> None:
    """PostgreSQL's array input ("Arrays", Array Value Input): elements separated by commas in
    braces, NULL for a null, an element in double quotes with a backslash before each double
    quote and backslash in it. Each distinct name is quoted once."""
    assert array_text([1, None, -3]) == "{1,NULL,-3}"
    assert array_text([True, False]) == "{True,False}"
    assert array_text(["a", 'say "hi"', "back\\slash", "a", "NULL"]) == (
        '{"a","say \\"hi\\"","back\\\\slash","a","NULL"}'
    )
    assert array_text([]) == "{}"
    (step,) = Plan(POSTGRES, "s").write_steps(
        "b1", WriteBatch(entries_put=[StoredEntry("/", "q", 5, 9, expires_at=77)]), []
    )
    assert step[1] == [("b1", '{"/"}', '{"q"}', "{5}", "{9}", "{0}", "{False}", "{77}", "{0}")]


def test_postgres_keeps_the_last_of_rows_with_the_same_key_as_a_run_per_row_would() -> None:
    """An upsert or update that changed a row twice in one statement is refused by PostgreSQL
    ("ON CONFLICT DO UPDATE command cannot affect row a second time"); run row by row, the
    last row won. The arrays carry the last row of each key; deletions go as they are."""
    batch = WriteBatch(
        messages_put=[StoredMessage(n % 2, "", f"k{n}", b"h", b"b") for n in range(4)],
        entries_put=[StoredEntry("/", "q", 5, n, delivery_count=n) for n in range(3)],
        entries_updated=[("/", "q", 7, 1), ("/", "r", 7, 1), ("/", "q", 7, 2)],
        entries_deleted=[("/", "q", 9, 1), ("/", "q", 9, 1)],
    )
    steps = Plan(POSTGRES, "s").write_steps("b1", batch, [10, 11, 12, 13])
    (messages,), (entries,), (updates,), (deletions,) = (rows for _sql, rows in steps)
    assert (messages[1], messages[3], messages[6]) == ("{0,1}", '{"k2","k3"}', "{12,13}")
    assert (entries[3], entries[4], entries[5]) == ("{5}", "{2}", "{2}")
    assert (updates[2], updates[4]) == ('{"q","r"}', "{2,1}")
    assert deletions[1:] == ('{"/","/"}', '{"q","q"}', "{9,9}")


def test_migrations_add_postgres_lease_columns_to_postgres_only() -> None:
    """Rule (schema version 7): the broker record names its holder in both stores; only
    PostgreSQL's is a lease with an expiry (SQLite's lock file decides)."""
    assert len(MIGRATIONS) == SCHEMA_VERSION >= 7
    columns = {
        dialect.name: [
            step.column for step in Plan(dialect).migration(7) if isinstance(step, AddColumn)
        ]
        for dialect in (SQLITE, POSTGRES)
    }
    assert columns == {"sqlite": ["holder"], "postgres": ["holder", "lease_expires"]}


def test_the_plan_runs_on_sqlite_and_a_batch_leaves_what_it_says() -> None:
    """The rendered migrations make a schema the rendered batch writes into, on a real SQLite
    database: a purged range and a deleted entry go, and their messages become candidates for
    the garbage collection."""
    plan = Plan(SQLITE)
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TEMP TABLE gc_candidates (id INTEGER PRIMARY KEY)")
    for version in range(1, SCHEMA_VERSION + 1):
        for step in plan.migration(version):
            if isinstance(step, str):
                conn.execute(step)
            else:
                conn.execute(
                    f"ALTER TABLE {step.table} ADD COLUMN {step.column}"
                    f" {plan.render(step.definition)}"
                )
    first = WriteBatch(
        vhosts_put=["/"],
        queues_put=[StoredQueue("/", "q", False, {})],
        messages_put=[StoredMessage(n, "", "q", b"h", b"b") for n in range(4)],
        entries_put=[StoredEntry("/", "q", n, n) for n in range(4)],
    )
    second = WriteBatch(ranges_deleted=[("/", "q", 0, 1, None)], entries_deleted=[("/", "q", 3, 3)])
    for batch in (first, second):
        for sql, rows in plan.write_steps("b1", batch, [0] * len(batch.messages_put)):
            conn.executemany(sql, rows)

    assert conn.execute("SELECT sequence FROM entries").fetchall() == [(2,)]
    assert conn.execute("SELECT id FROM temp.gc_candidates ORDER BY id").fetchall() == [(0,), (1,)]
    # A store being created: its guest is an administrator, as RabbitMQ's default user.
    assert conn.execute(plan.sql["users"]).fetchall() == [
        ("guest", conn.execute("SELECT credential FROM users").fetchone()[0], "administrator")
    ]
