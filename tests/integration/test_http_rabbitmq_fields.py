"""BatonMQ's management API answers, field by field, against RabbitMQ's for the same objects.

The management issue: "the RabbitMQ-compatibility of field names checked against a recorded
RabbitMQ response for the same objects (record it with the benchmark harness's RabbitMQ)". The
answers of RabbitMQ 3.10.8 are in tests/data/rabbitmq_management, recorded by
`python -m benchmarks.record_management`; this test plays the same scenario against BatonMQ. A
field BatonMQ writes must be one RabbitMQ writes in the same place (or one of BatonMQ's own,
listed in OWN_FIELDS), and the fields scripts and dashboards read most must be there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchmarks.record_management import DEFAULT_DIRECTORY, scenario

from tests.brokerproc import start_broker

pytestmark = pytest.mark.integration

#: BatonMQ's own fields, which RabbitMQ's clients ignore: by answer, as dotted paths.
OWN_FIELDS = {
    "queue": {"paused"},
    "queues": {"[].paused"},
    "overview": {"user", "user_tags"},
}

#: RabbitMQ's permission object (its management HTTP API reference, /api/permissions).
_PERMISSION = ("user", "vhost", "configure", "write", "read")

#: What BatonMQ must answer as RabbitMQ does (the issue names them), as dotted paths.
REQUIRED = {
    "queue": {
        "name",
        "vhost",
        "durable",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
        "consumers",
        "memory",
        "message_stats.publish",
        "message_stats.publish_details.rate",
        "message_stats.deliver_get",
    },
    "overview": {
        "object_totals.queues",
        "queue_totals.messages",
        "message_stats.publish",
        "message_stats.publish_details.rate",
    },
    "connections": {"[].name", "[].user", "[].vhost", "[].client_properties.product"},
    "consumers": {"[].consumer_tag", "[].queue.name", "[].channel_details.connection_name"},
    "bindings": {"[].source", "[].destination", "[].routing_key", "[].properties_key"},
    "get": {"[].payload", "[].redelivered", "[].message_count", "[].properties.content_type"},
    "permission": set(_PERMISSION),
    **{
        name: {f"[].{field}" for field in _PERMISSION}
        for name in ("permissions", "user_permissions", "vhost_permissions")
    },
}


def paths(value: object, prefix: str = "") -> Iterator[str]:
    """The dotted path of every field in a JSON answer (a list's items under "[]")."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}{key}"
            yield path
            yield from paths(item, path + ".")
    elif isinstance(value, list):
        for item in value:
            yield from paths(item, prefix + "[].")


# Fields whose value is a table of the user's own (arguments, headers, client properties):
# their keys are data, not field names.
_TABLES = ("arguments", "client_properties", "headers", "properties.headers")


def field_paths(value: object) -> set[str]:
    return {
        path
        for path in paths(value)
        if not any(f"{table}." in f".{path}" for table in _TABLES)
        or path.endswith(tuple(f"{table}.product" for table in _TABLES))
    }


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    with start_broker(tmp_path_factory.mktemp("fields"), http=True) as broker:
        return scenario(f"http://127.0.0.1:{broker.http_port}", broker.url)


def recorded(name: str) -> object:
    return json.loads((DEFAULT_DIRECTORY / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(p.stem for p in Path(DEFAULT_DIRECTORY).glob("*.json")))
def test_every_field_is_one_rabbitmq_writes_in_the_same_place(
    answers: dict[str, object], name: str
) -> None:
    ours = field_paths(answers[name])
    theirs = field_paths(recorded(name))
    assert ours, f"BatonMQ's {name} answer is empty"
    assert ours - theirs - OWN_FIELDS.get(name, set()) == set()


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_the_fields_scripts_read_are_there(answers: dict[str, object], name: str) -> None:
    assert REQUIRED[name] <= field_paths(answers[name]) & field_paths(recorded(name))
