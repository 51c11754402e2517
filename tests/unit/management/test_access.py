"""RabbitMQ's user tags over the HTTP API (its management reference, "Permissions"), and HTTP
basic credentials (RFC 7617)."""

from __future__ import annotations

import base64

import pytest

from batonmq.management.access import (
    basic_credentials,
    may_close_connection,
    may_see_connection,
    may_use_api,
    parse_tags,
    visible_vhosts,
)


def test_tags_are_separated_by_commas_or_spaces():
    assert parse_tags("administrator, monitoring custom") == {
        "administrator",
        "monitoring",
        "custom",
    }
    assert parse_tags("") == frozenset()


@pytest.mark.parametrize(
    ("tags", "allowed"),
    [
        ("", False),
        ("custom", False),
        ("management", True),
        ("policymaker", True),
        ("monitoring", True),
        ("administrator", True),
    ],
)
def test_only_a_management_tag_opens_the_api(tags, allowed):
    """RabbitMQ: a user without one is refused with "Not management user"."""
    assert may_use_api(parse_tags(tags)) is allowed


def test_management_users_see_the_vhosts_they_have_permissions_on_and_monitors_see_all():
    every = ["/", "a", "b"]
    assert visible_vhosts({"management"}, ["a", "gone"], every) == {"a"}
    assert visible_vhosts({"monitoring"}, [], every) == {"/", "a", "b"}
    assert visible_vhosts({"administrator"}, [], every) == {"/", "a", "b"}


def test_connections_are_seen_by_their_owner_and_monitors_but_closed_by_owner_or_admin():
    assert may_see_connection({"management"}, "ann", "ann")
    assert not may_see_connection({"management"}, "ann", "bob")
    assert may_see_connection({"monitoring"}, "ann", "bob")
    assert not may_close_connection({"monitoring"}, "ann", "bob")
    assert may_close_connection({"administrator"}, "ann", "bob")
    assert may_close_connection({"management"}, "ann", "ann")


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("header", "credentials"),
    [
        (_basic("guest:guest"), ("guest", "guest")),
        (_basic("ann:pa:ss"), ("ann", "pa:ss")),
        (_basic("ann:"), ("ann", "")),
        ("basic " + base64.b64encode(b"a:b").decode(), ("a", "b")),
        (None, None),
        ("Bearer abc", None),
        ("Basic !!!", None),
        (_basic("no-colon"), None),
        ("Basic " + base64.b64encode(b"\xff:x").decode(), None),
    ],
)
def test_basic_credentials(header, credentials):
    assert basic_credentials(header) == credentials
