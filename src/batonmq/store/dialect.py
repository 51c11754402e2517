"""The few ways the two stores' SQL differs, so that `batonmq.store.plan` is written once.

The plan's SQL is written in a neutral form that both databases read once rendered:

- placeholders are numbered, `$1`, `$2`, ... (PostgreSQL's; SQLite reads `?1`, `?2`, ..., or
  `?` where each value is used once, in order). A literal in the plan's SQL must never hold a `$`
  followed by a digit;
- `{s}.table` names a table of the store: in PostgreSQL the broker's schema, quoted; in SQLite
  the one database of the file, so the prefix goes;
- column types that differ are named by token: `{int64}` (INTEGER, BIGINT), `{blob}` (BLOB,
  BYTEA), `{bool}` (INTEGER, BOOLEAN), `{time}` (TEXT, TIMESTAMPTZ); `{clustered}` is SQLite's
  WITHOUT ROWID, which clusters small rows by their key;
- `{candidates}` is the session's temporary table of message ids that may have lost their last
  entry in the transaction under way; `{orphans}` the condition "no entry refers to message m".

Upserts are written `INSERT ... ON CONFLICT ... DO UPDATE SET c = EXCLUDED.c` and `RETURNING` is
used freely: SQLite reads both since 3.35. Arrays (`unnest`, `CAST($2 AS {int64}[])`) are
PostgreSQL's alone: only a dialect whose `rows` is "arrays" renders the statements that use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

_PLACEHOLDER: Final = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    int64: str
    blob: str
    boolean: str
    time: str
    clustered: str
    candidates: str
    orphans: str
    #: How a commit sends the rows it has many of (messages and entries put, entries updated
    #: and deleted): "values", several rows per statement (multi-row VALUES, IN lists), as
    #: SQLite's thread releases and retakes the GIL per statement (see `batonmq.store.plan`);
    #: or "arrays", one statement per batch taking a column of values per array (unnest), as
    #: PostgreSQL ran a statement once per row before, a portal and an executor start each.
    rows: Literal["values", "arrays"]
    #: The placeholder prefix the driver reads: "?" (then the number) or "$".
    placeholder: str
    #: Whether a store's tables are in a schema of its own (`{s}`), or in the file's database.
    schemas: bool

    def render(self, sql: str, schema: str | None = None) -> str:
        """`sql` in this dialect, its tables in `schema`; where the dialect has schemas, `{s}`
        is kept when `schema` is None (PostgreSQL scripts rendered once for every schema)."""
        if self.placeholder != "$":
            numbers = [int(number) for number in _PLACEHOLDER.findall(sql)]
            if numbers == list(range(1, len(numbers) + 1)):
                # Each value once, in order: plain "?", which SQLite binds much faster than "?N"
                # (a third of a commit of 500-row inserts went on it).
                sql = _PLACEHOLDER.sub("?", sql)
            else:
                sql = _PLACEHOLDER.sub(rf"{self.placeholder}\1", sql)
        for token, value in (
            ("{int64}", self.int64),
            ("{blob}", self.blob),
            ("{bool}", self.boolean),
            ("{time}", self.time),
            ("{clustered}", self.clustered),
            ("{candidates}", self.candidates),
            ("{orphans}", self.orphans),
        ):
            sql = sql.replace(token, value)
        if not self.schemas:
            return sql.replace("{s}.", "")
        if schema is None:
            return sql
        return sql.replace("{s}.", f'"{schema}".')

    def sequential(self, count: int, first: int) -> str:
        """Placeholders for `count` values numbered from `first`, in a statement whose values
        are all numbered in order (each used once)."""
        if self.placeholder == "$":
            return ", ".join(f"${number}" for number in range(first, first + count))
        return ", ".join("?" * count)

    def timestamp(self, moment: datetime) -> object:
        """A value for a `{time}` column."""
        return moment.isoformat() if self.time == "TEXT" else moment


SQLITE: Final = Dialect(
    name="sqlite",
    int64="INTEGER",
    blob="BLOB",
    boolean="INTEGER",
    time="TEXT",
    clustered=" WITHOUT ROWID",
    candidates="temp.gc_candidates",
    orphans="NOT EXISTS (SELECT 1 FROM entries e"
    " WHERE e.message_id = m.id AND e.broker_id = m.broker_id)",
    rows="values",
    placeholder="?",
    schemas=False,
)

#: The lookup of an entry per message is a subquery fenced with OFFSET 0, which the planner
#: cannot turn into a join: each row is one probe of the index, whatever the table statistics
#: say. A queue's tables are often analysed while empty (a drained queue; autovacuum); a join
#: then planned as a nested loop with the whole index as its inner side and the key as a filter
#: walked every index entry (dead ones too) per row: 73 ms instead of 1.4 ms for the orphans of
#: a 1,000-message commit, growing with the table.
POSTGRES: Final = Dialect(
    name="postgres",
    int64="BIGINT",
    blob="BYTEA",
    boolean="BOOLEAN",
    time="TIMESTAMPTZ",
    clustered="",
    candidates="pg_temp.batonmq_orphan_candidates",
    orphans="NOT EXISTS (SELECT 1 FROM {s}.entries AS e WHERE e.message_id = m.id OFFSET 0)",
    rows="arrays",
    placeholder="$",
    schemas=True,
)
