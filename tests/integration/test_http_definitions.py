"""GET and POST /api/definitions between two real brokers, checked with pika: RabbitMQ's
definitions export carries users (with their password hash), virtual hosts, queues, exchanges
and bindings; importing it into another broker declares what is missing and leaves what
exists (RabbitMQ's management reference: the import "merges" into the current definitions)."""

from __future__ import annotations

from pathlib import Path

import pika
import pytest

from tests.brokerproc import start_broker
from tests.httpapi import call

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-defs"


#: Carol's permissions in "shop": she may declare nothing, publish to "orders", read "eu".
CAROLS = {"configure": "", "write": "^orders$", "read": "^eu$"}
EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


def test_an_export_imported_elsewhere_serves_the_same_users_and_routes(
    tmp_path: Path, workers_environment: dict[str, str]
) -> None:
    """RabbitMQ's definitions: users, virtual hosts, permissions, exchanges, queues and bindings
    exported by one broker and imported by another serve the same clients."""
    with start_broker(tmp_path / "a", http=True) as source:
        assert call(source, "PUT", "/api/vhosts/shop")[0] == 201
        assert call(source, "PUT", "/api/users/carol", {"password": PASSWORD, "tags": ""})[0] == 201
        assert call(source, "PUT", "/api/permissions/shop/carol", CAROLS)[0] == 201
        assert call(source, "PUT", "/api/exchanges/shop/orders", {"type": "topic"})[0] == 201
        call(source, "PUT", "/api/queues/shop/eu", {"arguments": {"x-max-length": 100}})
        call(source, "POST", "/api/bindings/shop/e/orders/q/eu", {"routing_key": "eu.#"})
        status, document = call(source, "GET", "/api/definitions")
    assert status == 200 and isinstance(document, dict)
    [carol] = [user for user in document["users"] if user["name"] == "carol"]
    assert carol["hashing_algorithm"] == "batonmq_scrypt" and PASSWORD not in str(document)
    # RabbitMQ's export: each permission record, and the creator's of the vhost it made.
    assert {"user": "carol", "vhost": "shop", **CAROLS} in document["permissions"]
    assert {"user": "guest", "vhost": "shop", **EVERYTHING} in document["permissions"]

    # The target is a broker of one process, and one of two workers (the import declares each
    # queue in its virtual host's owner).
    with start_broker(tmp_path / "b", http=True, environment=workers_environment) as target:
        call(target, "PUT", "/api/vhosts/shop")
        call(target, "PUT", "/api/queues/shop/eu", {"durable": False})  # exists: left as it is
        assert call(target, "POST", "/api/definitions", document)[0] == 204
        assert call(target, "POST", "/api/definitions", document)[0] == 204  # merging again
        _, queue = call(target, "GET", "/api/queues/shop/eu")
        assert isinstance(queue, dict) and queue["durable"] is False
        parameters = pika.ConnectionParameters(
            target.host,
            target.port,
            "shop",
            pika.PlainCredentials("carol", PASSWORD),
            connection_attempts=1,
        )
        with pika.BlockingConnection(parameters) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.basic_publish("orders", "eu.de", b"order 1")
            method, _properties, body = channel.basic_get("eu", auto_ack=True)
        assert method is not None and body == b"order 1"
        _, imported = call(target, "GET", "/api/permissions/shop/carol")
        assert imported == {"user": "carol", "vhost": "shop", **CAROLS}
        bad = {"users": [{"name": "r", "password_hash": "x", "hashing_algorithm": "sha256"}]}
        status, refused = call(target, "POST", "/api/definitions", bad)
        assert status == 400 and isinstance(refused, dict) and "sha256" in refused["reason"]
