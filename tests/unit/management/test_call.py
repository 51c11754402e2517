"""What a request body may hold, checked at the edge (RabbitMQ answers a body it cannot use
with 400 bad_request)."""

from __future__ import annotations

import pytest

from batonmq.management import call, problems


def test_flags_take_json_booleans_and_the_strings_rabbitmqs_forms_send():
    assert call.flag({"durable": False}, "durable", True) is False
    assert call.flag({"durable": "true"}, "durable", False) is True
    assert call.flag({}, "durable", True) is True
    with pytest.raises(problems.HttpProblem) as refused:
        call.flag({"durable": 1}, "durable", True)
    assert (refused.value.status, refused.value.error) == (400, "bad_request")


def test_tags_are_a_comma_separated_string_or_a_list():
    """RabbitMQ's PUT /api/users/{name}: "tags": "administrator,monitoring", or a list."""
    assert call.tags({"tags": "administrator, monitoring"}) == ["administrator", "monitoring"]
    assert call.tags({"tags": ["management"]}) == ["management"]
    assert call.tags({"tags": ["a,b", " c "]}) == ["a", "b", "c"]  # stored comma-separated
    assert call.tags({"tags": ""}) == []
    assert call.tags({}) is None
    with pytest.raises(problems.HttpProblem):
        call.tags({"tags": [1]})


def test_arguments_must_be_an_object_and_become_a_field_table():
    assert call.arguments({"arguments": {"x-max-length": 5, "x-a": [{"b": None}]}}) == {
        "x-max-length": 5,
        "x-a": [{"b": None}],
    }
    assert call.arguments({}) == {}
    with pytest.raises(problems.HttpProblem):
        call.arguments({"arguments": ["x"]})


def test_text_fields_must_be_strings():
    assert call.text({"password": "pw"}, "password") == "pw"
    assert call.text({}, "password") is None
    with pytest.raises(problems.HttpProblem):
        call.text({"password": 5}, "password")
