"""Lists of the HTTP API sorted, filtered and paged as RabbitMQ's management API does it (its
reference: "sort allows you to select a primary field to sort by, and sort_reverse will reverse
the sort order if set to true. The sort parameter can contain subfields separated by dots";
pagination with `page`, `page_size` (at most 500), `name` and `use_regex`)."""

from __future__ import annotations

import pytest

from batonmq.management.listing import (
    Completion,
    InvalidListQuery,
    Item,
    ListQuery,
    answer_list,
    parse_list_query,
)

QUEUES: list[Item] = [
    {"vhost": "/", "name": "orders", "messages": 5, "message_stats": {"publish": 9}},
    {"vhost": "/", "name": "audit", "messages": 0},
    {"vhost": "b", "name": "Orders-eu", "messages": 12, "message_stats": {"publish": 1}},
    {"vhost": "/", "name": "billing", "messages": 5, "message_stats": {"publish": 3}},
]
DEFAULT_SORT = ("vhost", "name")


def names(answer: object) -> list[str]:
    items = answer["items"] if isinstance(answer, dict) else answer
    assert isinstance(items, list)
    return [item["name"] for item in items]


def answer(params: dict[str, str]) -> object:
    return answer_list(QUEUES, parse_list_query(params), DEFAULT_SORT)


def test_without_parameters_the_whole_list_comes_in_its_default_order():
    assert names(answer({})) == ["audit", "billing", "orders", "Orders-eu"]


def test_sort_goes_before_the_default_order_and_sort_reverse_reverses_it():
    assert names(answer({"sort": "messages"})) == ["audit", "billing", "orders", "Orders-eu"]
    reverse = answer({"sort": "messages", "sort_reverse": "true"})
    assert names(reverse) == ["Orders-eu", "orders", "billing", "audit"]


def test_a_dotted_sort_reaches_a_nested_field_and_a_missing_one_sorts_first():
    """RabbitMQ puts "nothing" first: a missing field sorts as the number 0."""
    assert names(answer({"sort": "message_stats.publish"})) == [
        "audit",
        "Orders-eu",
        "billing",
        "orders",
    ]


def test_numbers_sort_before_strings_as_in_erlangs_term_order():
    mixed: list[Item] = [{"name": "a", "x": "text"}, {"name": "b", "x": 7}, {"name": "c"}]
    ordered = answer_list(mixed, ListQuery(sort="x"), ("name",))
    assert names(ordered) == ["c", "b", "a"]


def test_a_page_comes_in_rabbitmqs_envelope():
    page = answer({"page": "2", "page_size": "3"})
    assert page == {
        "total_count": 4,
        "item_count": 1,
        "filtered_count": 4,
        "page": 2,
        "page_size": 3,
        "page_count": 2,
        "items": [QUEUES[2]],
    }


def test_name_filters_a_page_by_substring_ignoring_case_or_by_regular_expression():
    assert names(answer({"page": "1", "name": "ORDERS"})) == ["orders", "Orders-eu"]
    assert answer({"page": "1", "name": "ORDERS"})["filtered_count"] == 2  # type: ignore[index]
    assert names(answer({"page": "1", "name": "^or.*s$", "use_regex": "true"})) == ["orders"]
    assert names(answer({"page": "1", "name": "(", "use_regex": "true"})) == []


def test_name_is_ignored_without_a_page_as_rabbitmq_does():
    assert len(names(answer({"name": "orders"}))) == 4


def test_columns_keep_the_asked_fields_of_each_item_and_nested_ones():
    items = answer({"columns": "name,message_stats.publish", "sort": "name"})
    assert items == [
        {"name": "Orders-eu", "message_stats": {"publish": 1}},
        {"name": "audit"},
        {"name": "billing", "message_stats": {"publish": 3}},
        {"name": "orders", "message_stats": {"publish": 9}},
    ]


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"page": "0"}, "invalid_pagination_parameters"),
        ({"page": "1", "page_size": "501"}, "invalid_pagination_parameters"),
        ({"page": "1", "page_size": "0"}, "invalid_pagination_parameters"),
        ({"page": "one"}, "bad_request"),
        ({"page": "1", "name": "x" * 1025, "use_regex": "true"}, "invalid_pagination_parameters"),
    ],
)
def test_invalid_parameters_are_refused_with_rabbitmqs_error_type(params, error):
    with pytest.raises(InvalidListQuery) as refused:
        parse_list_query(params)
    assert refused.value.error == error


def test_a_page_past_the_end_is_refused_but_the_page_just_after_the_last_item_is_empty():
    """RabbitMQ: "Page out of range" once the page starts past the end of the list."""
    assert answer({"page": "2", "page_size": "4"})["items"] == []  # type: ignore[index]
    with pytest.raises(InvalidListQuery) as refused:
        answer({"page": "3", "page_size": "4"})
    assert refused.value.error == "page_out_of_range"


def _costly() -> tuple[list[Item], list[str], Completion]:
    """Items without their costly field, the names of those it was written for, and the
    completion that writes it (`stars`, a made-up field)."""
    items: list[Item] = [{"vhost": "/", "name": name} for name in ("c", "a", "d", "b")]
    completed: list[str] = []

    def add(item: Item) -> None:
        name = item["name"]
        completed.append(name)
        item["stars"] = {"count": ord(name)}

    return items, completed, Completion(frozenset({"stars"}), add)


def test_a_completion_writes_its_costly_fields_into_the_answered_page_only():
    """A page of 10,000 queues must come fast (the management issue: "a page of 100 in under
    200 ms"): message_stats is written for the page's queues, not for every queue."""
    items, completed, completion = _costly()
    query = parse_list_query({"page": "1", "page_size": "2"})
    page = answer_list(items, query, DEFAULT_SORT, completion)
    assert isinstance(page, dict)
    assert page["items"] == [
        {"vhost": "/", "name": "a", "stars": {"count": 97}},
        {"vhost": "/", "name": "b", "stars": {"count": 98}},
    ]
    assert sorted(completed) == ["a", "b"]


def test_a_list_sorted_by_a_costly_field_has_it_written_for_every_item_first():
    """RabbitMQ's `sort` may name a nested field (message_stats.publish_details.rate): to sort
    by it, every item needs it."""
    items, completed, completion = _costly()
    query = parse_list_query(
        {"page": "1", "page_size": "1", "sort": "stars.count", "sort_reverse": "true"}
    )
    page = answer_list(items, query, DEFAULT_SORT, completion)
    assert isinstance(page, dict)
    assert names(page) == ["d"]
    assert sorted(completed) == ["a", "b", "c", "d"]
