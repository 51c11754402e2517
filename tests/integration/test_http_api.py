"""The management HTTP API against a real broker, over real HTTP (urllib), with real pika
clients connected so that their connections, channels and consumers show: RabbitMQ's paths,
JSON field names, status codes and error bodies (its management HTTP API reference and
rabbit_mgmt_util / rabbit_web_dispatch_access_control)."""

from __future__ import annotations

import base64
import json
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.brokerproc import (
    RunningBroker,
    connect,
    failed_start,
    http_environment,
    start_broker,
    wait_until,
)
from tests.httpapi import call

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-http"
#: RabbitMQ's permissions of a user who may do everything in a virtual host.
EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


@pytest.fixture
def broker(tmp_path: Path, workers_environment: dict[str, str]) -> Iterator[RunningBroker]:
    """A broker of one process, and one of two workers: the API answers for the whole broker."""
    with start_broker(tmp_path, http=True, environment=workers_environment) as running:
        yield running


def test_lists_show_what_pika_clients_opened(broker: RunningBroker) -> None:
    """/api/connections, /api/channels, /api/consumers, /api/queues and /api/overview: a pika
    client's connection (its client properties included), channel and consumer, and a queue's
    ready and unacknowledged messages (`messages` is both)."""
    with connect(broker) as connection:
        channel = connection.channel()
        channel.queue_declare("work")
        for number in range(3):
            channel.basic_publish("", "work", f"job {number}".encode())
        channel.basic_qos(prefetch_count=2)
        delivered: list[bytes] = []
        channel.basic_consume(
            "work", lambda _ch, _m, _p, body: delivered.append(body), consumer_tag="c1"
        )
        wait_until(lambda: connection.process_data_events(0.1) or len(delivered) == 2, "deliveries")

        status, connections = call(broker, "GET", "/api/connections")
        assert status == 200 and isinstance(connections, list)
        [listed] = connections
        assert (listed["user"], listed["vhost"], listed["channels"]) == ("guest", "/", 1)
        assert listed["client_properties"]["product"] == "Pika Python Client Library"
        assert listed["protocol"] == "AMQP 0-9-1"
        status, one = call(
            broker, "GET", "/api/connections/" + urllib.request.quote(listed["name"], safe="")
        )
        assert status == 200 and one == listed

        _, channels = call(broker, "GET", "/api/channels")
        assert isinstance(channels, list)
        [listed_channel] = channels
        assert listed_channel["connection_details"]["name"] == listed["name"]
        assert (listed_channel["number"], listed_channel["consumer_count"]) == (1, 1)
        assert listed_channel["messages_unacknowledged"] == 2
        assert listed_channel["message_stats"]["publish"] == 3

        _, consumers = call(broker, "GET", "/api/consumers/%2F")
        assert isinstance(consumers, list)
        [consumer] = consumers
        assert consumer["queue"] == {"name": "work", "vhost": "/"}
        assert (consumer["consumer_tag"], consumer["prefetch_count"]) == ("c1", 2)
        assert consumer["channel_details"]["connection_name"] == listed["name"]

        status, queue = call(broker, "GET", "/api/queues/%2F/work")
        assert status == 200 and isinstance(queue, dict)
        assert (queue["messages"], queue["messages_ready"], queue["messages_unacknowledged"]) == (
            3,
            1,
            2,
        )
        assert (queue["consumers"], queue["durable"], queue["type"]) == (1, False, "classic")

        _, overview = call(broker, "GET", "/api/overview")
        assert isinstance(overview, dict)
        assert overview["object_totals"]["connections"] == 1
        assert overview["object_totals"]["consumers"] == 1
        assert overview["queue_totals"]["messages"] == 3
        assert {"protocol": "amqp", "port": broker.port}.items() <= overview["listeners"][0].items()


def test_the_overview_shows_the_publish_rate(broker: RunningBroker) -> None:
    """RabbitMQ's /api/overview: message_stats.publish_details.rate, messages per second over
    the last statistics interval (5 s)."""
    with connect(broker) as connection:
        channel = connection.channel()
        channel.queue_declare("rated")
        deadline = time.monotonic() + 20
        rate = 0.0
        while rate == 0.0 and time.monotonic() < deadline:
            for _ in range(50):
                channel.basic_publish("", "rated", b"x")
            time.sleep(0.5)
            _, overview = call(broker, "GET", "/api/overview")
            assert isinstance(overview, dict)
            rate = overview["message_stats"].get("publish_details", {}).get("rate", 0.0)
    assert rate > 0


def test_a_queue_shows_its_message_stats_rates_and_memory(broker: RunningBroker) -> None:
    """RabbitMQ's /api/queues/{vhost}/{name}: `memory` in bytes and `message_stats` with
    publish, deliver, deliver_no_ack, get, get_no_ack, ack, redeliver and deliver_get ("Sum of
    deliver, deliver_noack, get, get_noack"), each with `_details.rate` per second over the last
    statistics interval (5 s); the page of the queue list carries the same."""
    body = b"x" * 1000
    with connect(broker) as connection:
        channel = connection.channel()
        channel.queue_declare("stats")
        channel.queue_declare("other")
        for _ in range(10):
            channel.basic_publish("", "stats", body)
        method, _properties, _body = channel.basic_get("stats")
        assert method is not None
        channel.basic_nack(method.delivery_tag, requeue=True)
        method, _properties, _body = channel.basic_get("stats")  # the same one, redelivered
        assert method is not None and method.redelivered
        channel.basic_ack(method.delivery_tag)
        channel.basic_get("stats", auto_ack=True)
        _, queue = call(broker, "GET", "/api/queues/%2F/stats")
        assert isinstance(queue, dict)
        stats = queue["message_stats"]
        counts = {name: stats[name] for name in ("publish", "get", "get_no_ack", "ack")}
        assert counts == {"publish": 10, "get": 2, "get_no_ack": 1, "ack": 1}
        assert (stats["redeliver"], stats["deliver_get"], stats["deliver"]) == (1, 3, 0)
        # Eight ready messages of 1,000 bytes, in memory: at least their bodies.
        assert 8 * len(body) < queue["memory"] < 8 * (len(body) + 1000)

        deadline = time.monotonic() + 20
        rate = 0.0
        while rate == 0.0 and time.monotonic() < deadline:
            for _ in range(50):
                channel.basic_publish("", "stats", b"")
            time.sleep(0.5)
            _, queue = call(broker, "GET", "/api/queues/%2F/stats")
            assert isinstance(queue, dict)
            rate = queue["message_stats"]["publish_details"]["rate"]
        assert rate > 0
        _, listed = call(broker, "GET", "/api/queues?page=1&page_size=100")
        assert isinstance(listed, dict)
        by_name = {item["name"]: item for item in listed["items"]}
        assert by_name["stats"]["message_stats"]["publish_details"]["rate"] > 0
        assert by_name["other"]["message_stats"]["publish_details"] == {"rate": 0.0}
        assert by_name["other"]["memory"] == 0


def test_queues_are_declared_purged_and_deleted_over_http(broker: RunningBroker) -> None:
    """PUT answers 201 for a new queue and 204 for one that was there; an inequivalent one is a
    400; DELETE .../contents purges; DELETE deletes; an unknown queue or vhost is 404
    {"error": "Object Not Found", "reason": "Not Found"}."""
    assert call(broker, "PUT", "/api/queues/%2F/jobs", {"durable": True}) == (201, None)
    assert call(broker, "PUT", "/api/queues/%2F/jobs", {"durable": True}) == (204, None)
    status, refused = call(broker, "PUT", "/api/queues/%2F/jobs", {"durable": False})
    assert status == 400 and isinstance(refused, dict)
    assert refused["error"] == "bad_request" and "inequivalent arg 'durable'" in refused["reason"]
    with connect(broker) as connection:
        channel = connection.channel()
        for number in range(4):
            channel.basic_publish("", "jobs", f"job {number}".encode())
    _, listed = call(broker, "GET", "/api/queues/%2F")
    assert isinstance(listed, list)
    assert [(queue["name"], queue["messages_ready"]) for queue in listed] == [("jobs", 4)]

    assert call(broker, "DELETE", "/api/queues/%2F/jobs/contents") == (204, None)
    _, queue = call(broker, "GET", "/api/queues/%2F/jobs")
    assert isinstance(queue, dict) and queue["messages_ready"] == 0
    assert call(broker, "DELETE", "/api/queues/%2F/jobs") == (204, None)

    not_found = (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert call(broker, "GET", "/api/queues/%2F/jobs") == not_found
    assert call(broker, "DELETE", "/api/queues/%2F/jobs") == not_found
    assert call(broker, "GET", "/api/queues/nowhere") == not_found


def test_exchanges_and_bindings(broker: RunningBroker) -> None:
    """PUT /api/exchanges/{vhost}/{name} takes RabbitMQ's body (type, durable, auto_delete,
    internal, arguments); /api/bindings lists a queue's binding and the default exchange's."""
    assert call(broker, "PUT", "/api/exchanges/%2F/orders", {"type": "topic"}) == (201, None)
    status, bad_type = call(broker, "PUT", "/api/exchanges/%2F/odd", {"type": "nope"})
    assert status == 400 and isinstance(bad_type, dict)
    with connect(broker) as connection:
        channel = connection.channel()
        channel.queue_declare("eu")
        channel.queue_bind("eu", "orders", "eu.#")
    _, exchange = call(broker, "GET", "/api/exchanges/%2F/orders")
    assert isinstance(exchange, dict)
    assert (exchange["type"], exchange["durable"], exchange["internal"]) == ("topic", True, False)
    _, bindings = call(broker, "GET", "/api/bindings/%2F")
    assert isinstance(bindings, list)
    assert [(b["source"], b["destination"], b["routing_key"]) for b in bindings] == [
        ("", "eu", "eu"),
        ("orders", "eu", "eu.#"),
    ]
    _, default = call(broker, "GET", "/api/exchanges/%2F/amq.default")
    assert isinstance(default, dict) and (default["name"], default["type"]) == ("", "direct")
    status, _ = call(broker, "DELETE", "/api/exchanges/%2F/amq.default")
    assert status == 401  # RabbitMQ: the default exchange cannot be deleted (access refused)
    assert call(broker, "DELETE", "/api/exchanges/%2F/orders") == (204, None)
    assert call(broker, "GET", "/api/exchanges/%2F/orders")[0] == 404


def test_bindings_are_made_and_removed_over_http(broker: RunningBroker) -> None:
    """RabbitMQ's POST /api/bindings/{vhost}/e/{exchange}/q/{queue} binds (201, with the new
    binding's location); DELETE on that location unbinds; a queue's and an exchange's
    bindings are listed on their own paths."""
    call(broker, "PUT", "/api/exchanges/%2F/orders", {"type": "topic", "durable": False})
    call(broker, "PUT", "/api/exchanges/%2F/audit", {"type": "fanout", "durable": False})
    call(broker, "PUT", "/api/queues/%2F/eu", {"durable": False})
    between = "/api/bindings/%2F/e/orders/q/eu"
    assert broker.http_port is not None
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.http_port}{between}",
        data=json.dumps({"routing_key": "eu.#"}).encode(),
        method="POST",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    with urllib.request.urlopen(request, timeout=30) as created:
        assert created.status == 201
        # RabbitMQ's properties_key is the key quoted as a form value, quoted again in a path.
        assert created.headers["Location"] == f"{between}/eu.%2523"
    assert call(broker, "POST", "/api/bindings/%2F/e/orders/e/audit", {})[0] == 201
    _, listed = call(broker, "GET", between)
    assert isinstance(listed, list)
    assert [(b["routing_key"], b["properties_key"]) for b in listed] == [("eu.#", "eu.%23")]
    status, one = call(broker, "GET", f"{between}/eu.%2523")
    assert status == 200 and isinstance(one, dict) and one["routing_key"] == "eu.#"
    _, of_queue = call(broker, "GET", "/api/queues/%2F/eu/bindings")
    assert isinstance(of_queue, list)
    assert [b["source"] for b in of_queue] == ["", "orders"]
    _, of_source = call(broker, "GET", "/api/exchanges/%2F/orders/bindings/source")
    assert isinstance(of_source, list)
    assert [b["destination"] for b in of_source] == ["eu", "audit"]
    _, of_destination = call(broker, "GET", "/api/exchanges/%2F/audit/bindings/destination")
    assert isinstance(of_destination, list) and len(of_destination) == 1

    assert call(broker, "DELETE", f"{between}/eu.%2523") == (204, None)
    assert call(broker, "DELETE", f"{between}/eu.%2523")[0] == 404
    assert call(broker, "GET", between) == (200, [])
    assert call(broker, "POST", "/api/bindings/%2F/e/orders/q/nowhere", {})[0] == 404


def test_logins_need_a_password_and_a_management_tag(broker: RunningBroker) -> None:
    """RabbitMQ: no or wrong credentials are 401 {"error": "not_authorized", "reason":
    "Not_Authorized"} with a basic challenge; a user without a tag is 401 {"error":
    "not_authorised", "reason": "Not management user"}; administrator endpoints refuse other
    tags with "Not administrator user"."""
    refused = (401, {"error": "not_authorized", "reason": "Not_Authorized"})
    assert call(broker, "GET", "/api/overview", auth=None) == refused
    assert call(broker, "GET", "/api/overview", auth=("guest", "wrong")) == refused

    assert call(broker, "PUT", "/api/users/plain", {"password": PASSWORD}) == (201, None)
    assert call(broker, "GET", "/api/overview", auth=("plain", PASSWORD)) == (
        401,
        {"error": "not_authorised", "reason": "Not management user"},
    )
    assert call(broker, "PUT", "/api/users/plain", {"tags": "management"}) == (204, None)
    status, whoami = call(broker, "GET", "/api/whoami", auth=("plain", PASSWORD))
    assert (status, whoami) == (200, {"name": "plain", "tags": ["management"]})
    assert call(broker, "GET", "/api/users", auth=("plain", PASSWORD)) == (
        401,
        {"error": "not_authorised", "reason": "Not administrator user"},
    )
    _, users = call(broker, "GET", "/api/users")
    assert users == [
        {"name": "guest", "tags": ["administrator"], "limits": {}},
        {"name": "plain", "tags": ["management"], "limits": {}},
    ]


def test_a_user_added_over_http_logs_in_over_amqp(broker: RunningBroker) -> None:
    """RabbitMQ: a user added has no permissions; connection.open is refused (530 NOT_ALLOWED
    "access to vhost '/' refused for user 'carol'") until PUT /api/permissions gives some."""
    assert call(
        broker, "PUT", "/api/users/carol", {"password": PASSWORD, "tags": ["monitoring"]}
    ) == (201, None)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        connect(broker, "carol", PASSWORD)
    assert "access to vhost '/' refused for user 'carol'" in str(refused.value)
    assert call(broker, "PUT", "/api/permissions/%2F/carol", EVERYTHING) == (201, None)
    with connect(broker, "carol", PASSWORD) as connection:
        connection.channel().queue_declare("", exclusive=True)
        _, connections = call(broker, "GET", "/api/connections", auth=("carol", PASSWORD))
        assert isinstance(connections, list)
        assert [listed["user"] for listed in connections] == ["carol"]
    assert call(broker, "DELETE", "/api/users/carol") == (204, None)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(broker, "carol", PASSWORD)


def test_permissions_over_http_as_rabbitmq_has_them(broker: RunningBroker) -> None:
    """RabbitMQ's management HTTP API reference: /api/permissions lists every record (user,
    vhost, configure, write, read); PUT /api/permissions/{vhost}/{user} answers 201 for a new
    record and 204 for a changed one, 400 for a missing field or a pattern that is not a regular
    expression, 404 for a user or virtual host that does not exist; DELETE 204, then 404;
    administrators only. A `management` user sees the virtual hosts it has permissions on."""
    assert call(broker, "PUT", "/api/vhosts/shop") == (201, None)
    body = {"password": PASSWORD, "tags": "management"}
    assert call(broker, "PUT", "/api/users/dora", body) == (201, None)
    dora = ("dora", PASSWORD)
    shop = {"configure": "^dora-", "write": "^dora-", "read": ".*"}
    assert call(broker, "PUT", "/api/permissions/shop/dora", shop) == (201, None)
    assert call(broker, "PUT", "/api/permissions/shop/dora", shop) == (204, None)
    record = {"user": "dora", "vhost": "shop", **shop}
    assert call(broker, "GET", "/api/permissions/shop/dora") == (200, record)
    assert call(broker, "GET", "/api/users/dora/permissions") == (200, [record])
    _, in_shop = call(broker, "GET", "/api/vhosts/shop/permissions")
    assert in_shop == [record, {"user": "guest", "vhost": "shop", **EVERYTHING}]  # its creator
    _, every = call(broker, "GET", "/api/permissions")
    assert isinstance(every, list) and record in every and len(every) == 3
    _, visible = call(broker, "GET", "/api/vhosts", auth=dora)
    assert isinstance(visible, list) and [vhost["name"] for vhost in visible] == ["shop"]
    assert call(broker, "GET", "/api/permissions", auth=dora) == (
        401,
        {"error": "not_authorised", "reason": "Not administrator user"},
    )

    with connect(broker, "dora", PASSWORD, vhost="shop") as connection:
        channel = connection.channel()
        channel.queue_declare("dora-jobs")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("jobs")
        assert (refused.value.reply_code, refused.value.reply_text) == (
            403,
            "ACCESS_REFUSED - configure access to queue 'jobs' in vhost 'shop' refused for user "
            "'dora'",
        )

    missing = call(broker, "PUT", "/api/permissions/shop/dora", {"configure": ".*"})
    assert missing == (400, {"error": "bad_request", "reason": "missing fields: write, read"})
    status, bad = call(broker, "PUT", "/api/permissions/shop/dora", {**shop, "read": "("})
    assert status == 400 and isinstance(bad, dict) and "read pattern '('" in bad["reason"]
    assert call(broker, "PUT", "/api/permissions/nowhere/dora", shop)[0] == 404
    assert call(broker, "PUT", "/api/permissions/shop/nobody", shop)[0] == 404
    assert call(broker, "DELETE", "/api/permissions/shop/dora") == (204, None)
    assert call(broker, "DELETE", "/api/permissions/shop/dora")[0] == 404
    assert call(broker, "GET", "/api/permissions/shop/dora")[0] == 404
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(broker, "dora", PASSWORD, vhost="shop")
    _, document = call(broker, "GET", "/api/openapi.json")
    assert isinstance(document, dict)
    assert set(document["paths"]["/api/permissions/{vhost}/{user}"]) == {"get", "put", "delete"}


def test_closing_a_connection_sends_320_with_the_x_reason(broker: RunningBroker) -> None:
    """RabbitMQ's DELETE /api/connections/{name}: the client gets connection.close 320
    CONNECTION_FORCED with the X-Reason header's text."""
    connection = connect(broker)
    _, connections = call(broker, "GET", "/api/connections")
    assert isinstance(connections, list)
    [listed] = connections
    name = urllib.request.quote(listed["name"], safe="")
    status, _ = call(
        broker, "DELETE", f"/api/connections/{name}", headers={"X-Reason": "maintenance"}
    )
    assert status == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(5)
    assert (closed.value.reply_code, closed.value.reply_text) == (
        320,
        "CONNECTION_FORCED - maintenance",
    )
    assert call(broker, "DELETE", f"/api/connections/{name}")[0] == 404


def test_tables_nested_past_the_limit_are_400(broker: RunningBroker) -> None:
    """Arguments and headers given as JSON may nest as deep as an AMQP client's tables may
    (100, `batonmq.amqp.properties.MAX_NESTING`): deeper is a 400 naming the limit, for a
    queue's arguments, a definitions document's and a published message's headers, rather
    than a durable queue whose store write fails (it did, with a RecursionError, at 400)."""
    deep: dict[str, object] = {"leaf": 1}
    for _ in range(400):
        deep = {"n": deep}
    queue = {"durable": True, "arguments": {"x-deep": deep}}
    document = {"queues": [{"name": "deep", "vhost": "/", **queue}]}
    publish = {
        "routing_key": "deep",
        "properties": {"headers": {"x-deep": deep}},
        "payload": "m",
        "payload_encoding": "string",
    }
    for method, path, body in (
        ("PUT", "/api/queues/%2F/deep", queue),
        ("POST", "/api/definitions", document),
        ("POST", "/api/exchanges/%2F/amq.default/publish", publish),
    ):
        status, refused = call(broker, method, path, body)
        assert status == 400 and isinstance(refused, dict), (path, status, refused)
        assert "nested more than 100 deep" in refused["reason"], path
    assert call(broker, "GET", "/api/queues/%2F/deep")[0] == 404
    # Deeper than JSON's own decoder goes: malformed JSON, as RabbitMQ says of a body it
    # cannot read.
    status, refused = call(broker, "PUT", "/api/queues/%2F/deep", raw=b"[" * 100_000)
    assert status == 400 and isinstance(refused, dict)
    assert refused["reason"] == "Malformed JSON: nested too deep"


def test_bad_requests_are_400_and_the_listener_goes_on(broker: RunningBroker) -> None:
    """A body that is not JSON, not an object or over the size limit is RabbitMQ's 400
    bad_request; a request that is not HTTP at all is answered 400 by the server; an unknown
    method on a path is 405; none of them stops the API."""
    status, malformed = call(broker, "PUT", "/api/queues/%2F/q", raw=b"{not json")
    assert status == 400 and isinstance(malformed, dict) and malformed["error"] == "bad_request"
    assert call(broker, "PUT", "/api/queues/%2F/q", raw=b"[1, 2]")[0] == 400
    status, too_large = call(broker, "PUT", "/api/queues/%2F/q", raw=b"x" * (2 * 1024 * 1024))
    assert (status, too_large) == (
        400,
        {"error": "bad_request", "reason": "Exceeded HTTP request body size limit"},
    )
    assert call(broker, "PUT", "/api/queues/%2F/q", {"arguments": "no"})[0] == 400
    assert call(broker, "PATCH", "/api/queues/%2F/q")[0] == 405
    assert broker.http_port is not None
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as garbage:
        garbage.sendall(b"\x00\x01 this is not HTTP\r\n\r\n")
        assert garbage.recv(100).split(b" ", 2)[1] == b"400"
    assert call(broker, "GET", "/api/overview")[0] == 200
    assert call(broker, "GET", "/api/queues/%2F/q")[0] == 404  # nothing was declared


def test_lists_take_rabbitmqs_paging_and_sorting(broker: RunningBroker) -> None:
    for name in ("b", "c", "a"):
        call(broker, "PUT", f"/api/queues/%2F/{name}", {"durable": False})
    _, page = call(broker, "GET", "/api/queues?page=1&page_size=2&sort=name&sort_reverse=true")
    assert isinstance(page, dict)
    assert (page["total_count"], page["page_count"]) == (3, 2)
    assert [queue["name"] for queue in page["items"]] == ["c", "b"]
    _, columns = call(broker, "GET", "/api/queues/%2F?columns=name,durable")
    assert columns == [{"name": name, "durable": False} for name in ("a", "b", "c")]
    status, error = call(broker, "GET", "/api/queues?page=0")
    assert status == 400 and isinstance(error, dict)


def test_virtual_hosts_nodes_and_health(broker: RunningBroker) -> None:
    assert call(broker, "PUT", "/api/vhosts/orders") == (201, None)
    assert call(broker, "PUT", "/api/vhosts/orders") == (204, None)
    _, vhosts = call(broker, "GET", "/api/vhosts")
    assert isinstance(vhosts, list) and [vhost["name"] for vhost in vhosts] == ["/", "orders"]
    assert call(broker, "GET", "/api/aliveness-test/orders") == (200, {"status": "ok"})
    assert call(broker, "GET", "/api/health/checks/alarms") == (200, {"status": "ok"})
    _, nodes = call(broker, "GET", "/api/nodes")
    assert isinstance(nodes, list)
    [node] = nodes
    assert node["running"] is True and node["mem_alarm"] is False
    assert node["name"].startswith("batonmq@")
    if "workers" not in node:  # one process: no link with another (RabbitMQ's `cluster_links`)
        assert node["cluster_links"] == []
    _, document = call(broker, "GET", "/api/openapi.json")
    assert isinstance(document, dict)
    assert set(document["paths"]["/api/queues/{vhost}/{name}"]) == {"get", "put", "delete"}


@pytest.fixture
def acl_path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="acl-") as name:
        yield Path(name) / "broker.acl"


def test_the_acl_refuses_over_http_what_it_refuses_over_amqp(
    tmp_path: Path, acl_path: Path
) -> None:
    """A user refused queue deletion over AMQP is refused it over HTTP. RabbitMQ answers an
    AMQP access_refused in its HTTP API with 401 "not_authorised" (rabbit_mgmt_util:
    direct_request); the reason here names the deciding rule, as the AMQP 403 does."""
    acl_path.write_text(
        "ACL ALLOW guest ALL ALL\nACL DENY bob DELETE QUEUE\nACL ALLOW bob ALL ALL\n",
        encoding="utf-8",
    )
    with start_broker(
        tmp_path, http=True, environment={"BATONMQ__ACL__FILE": str(acl_path)}
    ) as broker:
        body = {"password": PASSWORD, "tags": "management"}
        assert call(broker, "PUT", "/api/users/bob", body) == (201, None)
        assert call(broker, "PUT", "/api/permissions/%2F/bob", EVERYTHING) == (201, None)
        bob = ("bob", PASSWORD)
        assert call(broker, "PUT", "/api/queues/%2F/kept", {"durable": False}, auth=bob) == (
            201,
            None,
        )
        with connect(broker, "bob", PASSWORD) as connection:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as over_amqp:
                connection.channel().queue_delete("kept")
            assert over_amqp.value.reply_code == 403
        status, refused = call(broker, "DELETE", "/api/queues/%2F/kept", auth=bob)
        assert status == 401 and isinstance(refused, dict)
        assert refused["error"] == "not_authorised"
        assert "DELETE" in refused["reason"] and "kept" in refused["reason"]
        assert call(broker, "GET", "/api/queues/%2F/kept", auth=bob)[0] == 200
        assert call(broker, "DELETE", "/api/queues/%2F/kept") == (204, None)


def test_a_broker_whose_http_port_is_taken_does_not_start(tmp_path: Path) -> None:
    """As for the AMQP listeners: a port that cannot be listened on stops the broker at start
    with exit status 1 and a line naming the listener, its address and the reason."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        output = failed_start(tmp_path, http_environment(port))
    assert f"cannot listen on 127.0.0.1:{port}" in output
    assert "listener=http" in output


def test_what_each_tag_sees_and_may_close(tmp_path: Path, acl_path: Path) -> None:
    """RabbitMQ's management reference, "Permissions": `management` sees its own connections
    and the virtual hosts it may use, and closes only its own connections; `monitoring` sees
    every connection and virtual host but closes none of another user's; `administrator` may
    close anyone's."""
    acl_path.write_text(
        "ACL ALLOW guest ALL ALL\n"
        "ACL DENY mia ACCESS VIRTUALHOST name=hidden\n"
        "ACL ALLOW mia ALL ALL\nACL ALLOW mo ALL ALL\n",
        encoding="utf-8",
    )
    with start_broker(
        tmp_path, http=True, environment={"BATONMQ__ACL__FILE": str(acl_path)}
    ) as broker:
        call(broker, "PUT", "/api/vhosts/hidden")
        call(broker, "PUT", "/api/users/mia", {"password": PASSWORD, "tags": "management"})
        call(broker, "PUT", "/api/users/mo", {"password": PASSWORD, "tags": "monitoring"})
        call(broker, "PUT", "/api/permissions/%2F/mia", EVERYTHING)
        mia, mo = ("mia", PASSWORD), ("mo", PASSWORD)
        with connect(broker) as guest_connection, connect(broker, "mia", PASSWORD):
            _, seen_by_mia = call(broker, "GET", "/api/connections", auth=mia)
            assert isinstance(seen_by_mia, list)
            assert [listed["user"] for listed in seen_by_mia] == ["mia"]
            _, seen_by_mo = call(broker, "GET", "/api/connections", auth=mo)
            assert isinstance(seen_by_mo, list)
            assert sorted(listed["user"] for listed in seen_by_mo) == ["guest", "mia"]
            [guests] = [listed for listed in seen_by_mo if listed["user"] == "guest"]
            path = "/api/connections/" + urllib.request.quote(guests["name"], safe="")
            refused = (
                401,
                {"error": "not_authorised", "reason": "User not authorised to access object"},
            )
            assert call(broker, "GET", path, auth=mia) == refused
            assert call(broker, "DELETE", path, auth=mo) == refused
            assert guest_connection.is_open

        _, vhosts_of_mia = call(broker, "GET", "/api/vhosts", auth=mia)
        assert isinstance(vhosts_of_mia, list)
        assert [vhost["name"] for vhost in vhosts_of_mia] == ["/"]
        assert call(broker, "GET", "/api/queues/hidden", auth=mia) == (
            401,
            {"error": "not_authorised", "reason": "User not authorised to access virtual host"},
        )
        _, vhosts_of_mo = call(broker, "GET", "/api/vhosts", auth=mo)
        assert isinstance(vhosts_of_mo, list) and len(vhosts_of_mo) == 2
        assert call(broker, "GET", "/api/nodes", auth=mia) == (
            401,
            {"error": "not_authorised", "reason": "Not monitor user"},
        )
        assert call(broker, "GET", "/api/nodes", auth=mo)[0] == 200


def test_deleting_a_virtual_host_closes_its_connections_and_deletes_it_for_good(
    tmp_path: Path,
) -> None:
    """RabbitMQ's DELETE /api/vhosts/{vhost}: the clients connected to it get 320
    CONNECTION_FORCED, and it is gone with its queues, also after a restart."""
    with start_broker(tmp_path, http=True) as broker:
        assert call(broker, "PUT", "/api/vhosts/orders") == (201, None)
        assert call(broker, "PUT", "/api/queues/orders/placed", {"durable": True}) == (201, None)
        connection = pika.BlockingConnection(
            pika.ConnectionParameters(broker.host, broker.port, "orders", connection_attempts=1)
        )
        connection.channel().basic_publish(
            "", "placed", b"order 1", pika.BasicProperties(delivery_mode=2)
        )
        assert call(broker, "DELETE", "/api/vhosts/orders") == (204, None)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            connection.process_data_events(5)
        assert (closed.value.reply_code, closed.value.reply_text) == (
            320,
            "CONNECTION_FORCED - vhost 'orders' is deleted",
        )
        assert call(broker, "GET", "/api/vhosts/orders")[0] == 404
        assert call(broker, "DELETE", "/api/vhosts/orders")[0] == 404
    with start_broker(tmp_path, http=True) as broker:
        _, vhosts = call(broker, "GET", "/api/vhosts")
        assert isinstance(vhosts, list) and [vhost["name"] for vhost in vhosts] == ["/"]
        assert call(broker, "GET", "/api/queues") == (200, [])
