"""Sorting, filtering, paging and column selection of the HTTP API's lists, as RabbitMQ's
management API does them, so that scripts and dashboards written for it page through BatonMQ's
lists unchanged.

RabbitMQ's rules (its management API reference, "sort", "columns" and pagination):
- `sort` names one field, dotted for a nested one (`message_stats.publish_details.rate`); it goes
  first, before the list's own default order; `sort_reverse=true` reverses the result. A missing
  field sorts as 0, before every string.
- `page` (from 1) and `page_size` (default 100, at most 500) ask for one page, wrapped in an
  envelope (`total_count`, `item_count`, `filtered_count`, `page`, `page_size`, `page_count`,
  `items`); `name` then keeps the items whose name holds it, ignoring case, or matches it as a
  regular expression with `use_regex=true` (at most 1,024 characters). Without `page` the list
  comes whole and `name` is ignored.
- `columns` keeps the listed fields of each item (comma-separated, dotted for nested ones).
- Invalid parameters are a 400 with `{"error": ..., "reason": ...}`.

Pure functions over JSON-shaped items: no HTTP here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
Item: TypeAlias = dict[str, Json]

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 500
MAX_NAME_FILTER_LENGTH: Final = 1024


class InvalidListQuery(ValueError):
    """A 400 answer: `error` is RabbitMQ's error type, the message its reason."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Paging:
    number: int
    size: int
    name: str | None
    use_regex: bool


@dataclass(frozen=True, slots=True)
class ListQuery:
    sort: str | None = None
    sort_reverse: bool = False
    paging: Paging | None = None
    #: Field paths to keep in each item; None keeps them all.
    columns: tuple[tuple[str, ...], ...] | None = None


def parse_list_query(params: Mapping[str, str]) -> ListQuery:
    """The list parameters of a request's query string; InvalidListQuery when they are wrong."""
    columns = params.get("columns")
    return ListQuery(
        sort=params.get("sort") or None,
        sort_reverse=params.get("sort_reverse") == "true",
        paging=_paging(params),
        columns=None
        if columns is None
        else tuple(
            tuple(part for part in column.split(".") if part) for column in columns.split(",")
        )
        or None,
    )


def _paging(params: Mapping[str, str]) -> Paging | None:
    if "page" not in params:
        return None
    number = _integer(params["page"])
    size = _integer(params["page_size"]) if "page_size" in params else DEFAULT_PAGE_SIZE
    if number < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        raise InvalidListQuery(
            "invalid_pagination_parameters",
            f"Invalid pagination parameters: page number {number}, page size {size}",
        )
    name = params.get("name") or None
    use_regex = params.get("use_regex") == "true"
    if name is not None and use_regex and len(name) > MAX_NAME_FILTER_LENGTH:
        raise InvalidListQuery("invalid_pagination_parameters", "name filter regex is too long")
    return Paging(number, size, name, use_regex)


def _integer(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise InvalidListQuery("bad_request", "Pagination parameters are invalid") from None


@dataclass(frozen=True, slots=True)
class Completion:
    """Fields too costly to write for every item of a long list when a page of it is asked
    for: `add` writes them into an item, and is called for the items answered only, unless the
    list is sorted by one of `fields` (top-level names)."""

    fields: frozenset[str]
    add: Callable[[Item], None]


def answer_list(
    items: Sequence[Item],
    query: ListQuery,
    default_sort: Sequence[str],
    completion: Completion | None = None,
) -> Json:
    """`items` sorted, filtered, paged and cut down to the asked columns: a JSON list, or a page
    envelope when a page was asked for. With a `completion`, what it adds is in every item
    answered."""
    if completion is not None and (query.sort or "").split(".")[0] in completion.fields:
        for item in items:
            completion.add(item)
        completion = None

    def answered(item: Item) -> Item:
        if completion is not None:
            completion.add(item)
        return _columns(item, query.columns)

    sorts = [query.sort, *[key for key in default_sort if key != query.sort]]
    ordered = sorted(items, key=lambda item: [_order(_dotted(item, key)) for key in sorts if key])
    if query.sort_reverse:
        ordered.reverse()
    paging = query.paging
    if paging is None:
        return [answered(item) for item in ordered]
    kept = [item for item in ordered if _name_matches(item, paging)]
    first = (paging.number - 1) * paging.size
    if first > len(kept):
        raise InvalidListQuery(
            "page_out_of_range",
            f"Page out of range, page: {paging.number} page size: {paging.size}, len: {len(kept)}",
        )
    page = kept[first : first + paging.size]
    return {
        "total_count": len(ordered),
        "item_count": len(page),
        "filtered_count": len(kept),
        "page": paging.number,
        "page_size": paging.size,
        "page_count": -(-len(kept) // paging.size),
        "items": [answered(item) for item in page],
    }


def _name_matches(item: Item, paging: Paging) -> bool:
    if paging.name is None:
        return True
    name = item.get("name")
    if not isinstance(name, str):
        return False
    if not paging.use_regex:
        return paging.name.lower() in name.lower()
    try:
        return re.search(paging.name, name, re.IGNORECASE) is not None
    except re.error:
        return False  # RabbitMQ: a pattern that does not compile matches nothing


def _dotted(item: Item, path: str) -> Json:
    """The field at `path`; 0 when it is missing (RabbitMQ: "Put 'nothing' before everything
    else, in number terms it usually means 0")."""
    value: Json = item
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return 0
        value = value[key]
    return value


#: Erlang's term order, which RabbitMQ sorts by: numbers < atoms (true, false, null) < maps <
#: lists < binaries (strings).
_ATOMS: Final = {False: "false", None: "null", True: "true"}


def _order(value: Json) -> tuple[int, object]:
    if value is None or isinstance(value, bool):
        return (1, _ATOMS[value])
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, dict):
        return (2, len(value))
    if isinstance(value, list):
        return (3, len(value))
    return (4, value.encode())


def _columns(item: Item, columns: tuple[tuple[str, ...], ...] | None) -> Item:
    if columns is None:
        return item
    kept: Item = {}
    for key, value in item.items():
        wanted = [column[1:] for column in columns if column and column[0] == key]
        if not wanted:
            continue
        if any(not rest for rest in wanted) or not isinstance(value, dict):
            kept[key] = value
        else:
            kept[key] = _columns(value, tuple(wanted))
    return kept
