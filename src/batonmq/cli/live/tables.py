"""How batonctl shows the API's JSON: to a person as tables with a header row and aligned
columns (as imqcmd's `list dst`) and field: value lists (as its `query dst`), numbers aligned
to the right and everything else to the left; or as JSON. Pure functions, no IO."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from batonmq.management.listing import Json

#: Between two columns.
GAP: Final = "  "


@dataclass(frozen=True, slots=True)
class Column:
    """A column: its header, and the field it shows (dotted for a nested one,
    "queue.name")."""

    header: str
    field: str

    def value(self, item: Mapping[str, Json]) -> Json:
        """The field's value in `item` (None where the item has no such field)."""
        first, *nested = self.field.split(".")
        value = item.get(first)
        for key in nested:
            value = value.get(key) if isinstance(value, dict) else None
        return value


def cell(value: Json) -> str:
    """A value as a table shows it: yes/no for booleans, lists comma-separated, objects as
    compact JSON, nothing for a missing value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list):
        return ",".join(cell(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return str(value)


def is_number(value: Json) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def table(columns: Sequence[Column], items: Sequence[Mapping[str, Json]]) -> str:
    """A header row and one row per item, the columns as wide as their widest cell; a column
    whose values are all numbers is aligned right, header included."""
    values = [[column.value(item) for column in columns] for item in items]
    rows = [[cell(value) for value in row] for row in values]
    lines: list[str] = []
    widths = [
        max([len(column.header), *(len(row[index]) for row in rows)])
        for index, column in enumerate(columns)
    ]
    right = [
        bool(values) and all(is_number(row[index]) for row in values)
        for index in range(len(columns))
    ]
    for row in [[column.header for column in columns], *rows]:
        lines.append(
            GAP.join(
                text.rjust(width) if aligned else text.ljust(width)
                for text, width, aligned in zip(row, widths, right, strict=True)
            ).rstrip()
        )
    return "\n".join(lines)


def json_text(value: Json) -> str:
    """The API's JSON as `--json` prints it: indented, non-ASCII as it is."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def fields(pairs: Sequence[tuple[str, Json]]) -> str:
    """One "label  value" line per pair, the values lined up after the longest label."""
    width = max((len(label) for label, _ in pairs), default=0)
    return "\n".join(f"{label.ljust(width)}{GAP}{cell(value)}".rstrip() for label, value in pairs)
