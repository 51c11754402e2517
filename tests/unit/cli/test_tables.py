"""batonctl's tables and field lists (batonmq.cli.live.tables): what `batonctl list` and
`query` print. imqcmd's `list dst` prints a header row over aligned columns (MQ 3.5 admin
guide); numbers are aligned right, as its counts are."""

from __future__ import annotations

from batonmq.cli.live.tables import Column, cell, fields, table

COLUMNS = (Column("NAME", "name"), Column("MESSAGES", "messages"), Column("QUEUE", "queue.name"))


def test_columns_are_as_wide_as_their_widest_cell_and_numbers_align_right() -> None:
    items = [
        {"name": "a", "messages": 5, "queue": {"name": "work"}},
        {"name": "orders.eu", "messages": 12345, "queue": {"name": "q"}},
    ]

    assert table(COLUMNS, items).splitlines() == [
        "NAME       MESSAGES  QUEUE",
        "a                 5  work",
        "orders.eu     12345  q",
    ]


def test_an_empty_list_is_the_header_alone() -> None:
    """A script that counts lines after the header counts 0; the header still says what the
    columns would be."""
    assert table(COLUMNS, []) == "NAME  MESSAGES  QUEUE"


def test_a_column_with_a_value_that_is_not_a_number_aligns_left() -> None:
    items = [{"name": "a", "messages": 5}, {"name": "b", "messages": None}]

    assert table(COLUMNS[:2], items).splitlines() == [
        "NAME  MESSAGES",
        "a     5",
        "b",
    ]


def test_missing_and_nested_fields() -> None:
    """A field the item lacks, or under a value that is not an object, shows as nothing."""
    column = Column("QUEUE", "queue.name")

    assert column.value({"queue": {"name": "q"}}) == "q"
    assert column.value({"queue": "q"}) is None
    assert column.value({}) is None


def test_cells() -> None:
    assert cell(None) == ""
    assert (cell(True), cell(False)) == ("yes", "no")
    assert cell(0) == "0"
    assert cell(1 / 3) == "0.3"
    assert cell(["administrator", "monitoring"]) == "administrator,monitoring"
    assert cell({"x-max-length": 10, "a": "é"}) == '{"a":"é","x-max-length":10}'
    assert cell({}) == "{}"


def test_fields_line_up_after_the_longest_label() -> None:
    """imqcmd's `query dst`: one "label value" line per attribute."""
    assert fields([("Name", "work"), ("Unacknowledged", 3), ("Arguments", None)]).splitlines() == [
        "Name            work",
        "Unacknowledged  3",
        "Arguments",
    ]
