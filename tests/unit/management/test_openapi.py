"""The OpenAPI document is derived from the route table: every route is in it, once, with its
path parameters and the tag it needs."""

from __future__ import annotations

from batonmq.management.openapi import openapi_document
from batonmq.management.routes import ROUTES


def _operations(document: dict) -> dict:
    return {
        (method.upper(), path): operation
        for path, by_method in document["paths"].items()
        for method, operation in by_method.items()
    }


def test_every_route_is_one_operation_with_its_path_parameters():
    document = openapi_document(ROUTES, "1.2.3")
    operations = _operations(document)

    assert len(operations) == len(ROUTES)
    queue = operations["DELETE", "/api/queues/{vhost}/{name}"]
    assert [parameter["name"] for parameter in queue["parameters"]] == ["vhost", "name"]
    assert "204" in queue["responses"]
    binding = operations["POST", "/api/bindings/{vhost}/e/{source}/{kind}/{destination}"]
    assert binding["parameters"][2]["schema"] == {"type": "string", "pattern": "^([qe])$"}
    assert operations["PUT", "/api/users/{name}"]["x-batonmq-needs-tag"] == "administrator"
    assert operations["GET", "/api/queues"]["summary"] == "List queues"
    ids = [operation["operationId"] for operation in operations.values()]
    assert len(set(ids)) == len(ids)
    assert (document["openapi"], document["info"]["version"]) == ("3.1.0", "1.2.3")


def test_metrics_need_no_login_and_message_posts_answer_200():
    """RabbitMQ's Prometheus endpoint takes no credentials; POST .../get and .../publish answer
    200 with JSON (RabbitMQ's management reference), not 201."""
    operations = _operations(openapi_document(ROUTES, "1"))
    scrape = operations["GET", "/metrics"]
    assert scrape["security"] == [] and "x-batonmq-needs-tag" not in scrape
    assert "200" in operations["POST", "/api/queues/{vhost}/{name}/get"]["responses"]
    assert "204" in operations["PUT", "/api/queues/{vhost}/{name}/pause"]["responses"]


def test_the_queue_reads_say_how_memory_and_the_rates_are_found():
    """A queue's `memory` is an estimate: the document says what it counts."""
    operations = _operations(openapi_document(ROUTES, "1"))
    for path in ("/api/queues", "/api/queues/{vhost}", "/api/queues/{vhost}/{name}"):
        description = operations["GET", path]["description"]
        assert "`memory`: an estimate in bytes" in description
        assert "_details.rate`: per second over the last 5 s" in description
    assert "description" not in operations["DELETE", "/api/queues/{vhost}/{name}"]
