"""Definitions as RabbitMQ's GET /api/definitions writes them and POST /api/definitions reads
them (its management HTTP API reference, "definitions"): exclusive queues, the default and
amq.* exchanges and the default exchange's implicit bindings are left out; users carry a
password hash, named by its hashing_algorithm; permissions carry user, vhost, configure, write
and read."""

from __future__ import annotations

import pytest

from batonmq.engine.snapshots import BindingInfo, ExchangeInfo, QueueInfo, UserCredential
from batonmq.management import definitions
from batonmq.security.permissions import UserPermission

QUEUES = [
    QueueInfo("/", "orders", "classic", True, False, False, {"x-max-length": 10}, 0, 0),
    QueueInfo("/", "amq.gen-1", "classic", False, True, True, {}, 0, 0),
]
EXCHANGES = [
    ExchangeInfo("/", "", "direct", True, False, False, {}),
    ExchangeInfo("/", "amq.topic", "topic", True, False, False, {}),
    ExchangeInfo("/", "shop", "topic", True, False, False, {}),
]
BINDINGS = [
    BindingInfo("/", "", "orders", "queue", "orders", {}),
    BindingInfo("/", "shop", "orders", "queue", "order.*", {}),
    BindingInfo("/", "shop", "amq.gen-1", "queue", "#", {}),
]
PERMISSIONS = [
    UserPermission("alice", "/", ".*", ".*", ".*"),
    UserPermission("old", "/", "", "^orders$", ""),
]
USERS = [
    UserCredential("alice", "$scrypt$...", ("administrator",)),
    UserCredential("old", "md5$X03MO1qnZdYdgyfeuILPmQ==", ()),
]


def exported() -> dict:
    return definitions.export("1.0", ["/"], USERS, PERMISSIONS, QUEUES, EXCHANGES, BINDINGS)


def test_export_leaves_out_what_every_broker_has_and_what_ends_with_a_connection():
    document = exported()
    assert [queue["name"] for queue in document["queues"]] == ["orders"]
    assert document["queues"][0]["arguments"] == {"x-max-length": 10}
    assert [exchange["name"] for exchange in document["exchanges"]] == ["shop"]
    assert [(b["source"], b["routing_key"]) for b in document["bindings"]] == [("shop", "order.*")]
    assert document["vhosts"] == [{"name": "/"}]
    assert document["permissions"][1] == {
        "user": "old",
        "vhost": "/",
        "configure": "",
        "write": "^orders$",
        "read": "",
    }


def test_users_are_exported_with_their_hash_never_a_password():
    alice, old = exported()["users"]
    assert (alice["password_hash"], alice["hashing_algorithm"]) == ("$scrypt$...", "batonmq_scrypt")
    assert alice["tags"] == ["administrator"] and "password" not in alice
    assert old["hashing_algorithm"] == "batonmq_legacy_md5"


def test_an_export_parses_back_to_what_it_was_made_of():
    parsed = definitions.parse(exported())
    assert parsed.vhosts == ["/"]
    assert [(user.name, user.credential, user.tags) for user in parsed.users] == [
        (user.name, user.credential, user.tags) for user in USERS
    ]
    assert parsed.exchanges == [EXCHANGES[2]]
    [queue] = parsed.queues
    assert (queue.name, queue.durable, queue.arguments) == ("orders", True, {"x-max-length": 10})
    assert parsed.bindings == [BINDINGS[1]]
    assert parsed.permissions == PERMISSIONS


def test_older_rabbitmq_comma_separated_tags_and_plain_passwords_are_read():
    [user] = definitions.parse(
        {"users": [{"name": "bob", "password": "pw", "tags": "management,monitoring"}]}
    ).users
    assert (user.password, user.credential, user.tags) == ("pw", None, ("management", "monitoring"))


@pytest.mark.parametrize(
    "document",
    [
        {
            "users": [
                {
                    "name": "r",
                    "password_hash": "x",
                    "hashing_algorithm": "rabbit_password_hashing_sha256",
                }
            ]
        },
        {"queues": [{"name": "q"}]},
        {"queues": "q"},
        {"exchanges": [{"name": "e", "vhost": "/", "type": "direct", "durable": "yes"}]},
        {"bindings": [{"vhost": "/", "source": "e", "destination": "q", "destination_type": "x"}]},
        {"permissions": [{"user": "u", "vhost": "/", "configure": "(", "write": "", "read": ""}]},
        {"permissions": [{"vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}]},
    ],
)
def test_a_document_that_cannot_be_imported_is_refused_whole(document):
    with pytest.raises(definitions.InvalidDefinitions):
        definitions.parse(document)
