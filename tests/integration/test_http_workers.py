"""The management HTTP API of a broker with `[broker] workers = 2` (README, "Worker processes"):
every worker serves it, and whichever one a request reaches, the answer is the whole broker's,
as RabbitMQ's management answers for every node of a cluster from any node: lists hold what
every worker holds, figures are summed, a connection is closed by the worker that holds it,
and a worker that is down is named while the others answer.

Each check is repeated over several HTTP connections, so that both workers take some of them
(the kernel spreads the accepted connections over the workers that accept on the socket)."""

from __future__ import annotations

import base64
import json
import os
import signal
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pika
import pika.exceptions
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.brokerproc import (
    RunningBroker,
    connect,
    start_broker,
    vhost_of_each_worker,
    wait_until,
    worker_pids,
)
from tests.httpapi import call

pytestmark = pytest.mark.integration

WORKERS = 2
#: A virtual host owned by each worker ("/" is one of them).
VHOSTS = vhost_of_each_worker(WORKERS)
#: Requests per check: enough that both workers answer some.
ATTEMPTS = 6


@dataclass
class Workers:
    broker: RunningBroker

    def pids(self) -> dict[int, int]:
        """The latest pid of each worker, from its "worker started" line."""
        return worker_pids(self.broker.log())

    def with_vhost(self, vhost: str) -> RunningBroker:
        return RunningBroker(self.broker.host, self.broker.port, vhost=vhost)


@pytest.fixture
def workers(tmp_path: Path, postgres_dsn: str) -> Iterator[Workers]:
    """Two workers with the API on, and a virtual host of each (created over the API, which
    gives its creator, guest, every permission in it)."""
    environment = {
        "BATONMQ__PERSIST__STORE": "postgres",
        "BATONMQ__PERSIST__POSTGRES__DSN": postgres_dsn,
        "BATONMQ__BROKER__WORKERS": str(WORKERS),
    }
    with start_broker(tmp_path, http=True, environment=environment) as broker:
        for vhost in VHOSTS.values():
            if vhost != "/":
                assert call(broker, "PUT", f"/api/vhosts/{_quoted(vhost)}")[0] == 201
        yield Workers(broker)


def _quoted(vhost: str) -> str:
    return urllib.parse.quote(vhost, safe="")


def _declare(broker: Workers, vhost: str, queue: str, messages: int) -> None:
    with connect(broker.broker, vhost=vhost) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for number in range(messages):
            channel.basic_publish("", queue, f"{queue} {number}".encode())


def test_lists_and_the_overview_hold_every_workers_objects(workers: Workers) -> None:
    """RabbitMQ's /api/queues, /api/exchanges, /api/vhosts and /api/overview of a cluster list
    and count the objects of every node: here of every worker, each once (every worker holds
    every virtual host's default exchanges; only its owner's count)."""
    for owner, vhost in VHOSTS.items():
        _declare(workers, vhost, f"q{owner}", messages=owner + 2)
    for _ in range(ATTEMPTS):
        status, queues = call(workers.broker, "GET", "/api/queues")
        assert status == 200 and isinstance(queues, list)
        assert {(q["vhost"], q["name"], q["messages"]) for q in queues} == {
            (VHOSTS[0], "q0", 2),
            (VHOSTS[1], "q1", 3),
        }
        _, exchanges = call(workers.broker, "GET", "/api/exchanges")
        assert isinstance(exchanges, list)
        keys = [(exchange["vhost"], exchange["name"]) for exchange in exchanges]
        assert len(keys) == len(set(keys))
        assert {vhost for vhost, _name in keys} == set(VHOSTS.values())
        _, overview = call(workers.broker, "GET", "/api/overview")
        assert isinstance(overview, dict)
        assert overview["object_totals"]["queues"] == 2
        assert overview["object_totals"]["exchanges"] == len(keys)
        assert overview["queue_totals"]["messages_ready"] == 5
        assert overview["message_stats"]["publish"] == 5
        _, vhosts = call(workers.broker, "GET", "/api/vhosts")
        assert isinstance(vhosts, list)
        assert {v["name"]: v["messages"] for v in vhosts} == {VHOSTS[0]: 2, VHOSTS[1]: 3}


def test_a_queue_declared_over_amqp_is_in_the_next_answer(workers: Workers) -> None:
    """No snapshot stands between the API and the engine: whichever worker answers, it asks the
    owner now."""
    for attempt in range(ATTEMPTS):
        for vhost in VHOSTS.values():
            name = f"fresh{attempt}"
            _declare(workers, vhost, name, messages=1)
            status, queue = call(workers.broker, "GET", f"/api/queues/{_quoted(vhost)}/{name}")
            assert status == 200 and isinstance(queue, dict) and queue["messages"] == 1
            _, queues = call(workers.broker, "GET", "/api/queues")
            assert isinstance(queues, list)
            assert (vhost, name) in {(q["vhost"], q["name"]) for q in queues}


def test_writes_over_the_api_are_made_by_the_owner(workers: Workers) -> None:
    """PUT, publish and get of RabbitMQ's API on a virtual host of each worker: the owner, which
    holds the queue, makes them, whichever worker took the request."""
    for owner, vhost in VHOSTS.items():
        path = f"/api/queues/{_quoted(vhost)}/api{owner}"
        assert call(workers.broker, "PUT", path, {"durable": True})[0] == 201
        for number in range(ATTEMPTS):
            published = {
                "routing_key": f"api{owner}",
                "properties": {},
                "payload": f"m{number}",
                "payload_encoding": "string",
            }
            status, routed = call(
                workers.broker,
                "POST",
                f"/api/exchanges/{_quoted(vhost)}/amq.default/publish",
                published,
            )
            assert (status, routed) == (200, {"routed": True})
        got = {"count": ATTEMPTS, "ackmode": "ack_requeue_false", "encoding": "auto"}
        status, messages = call(workers.broker, "POST", f"{path}/get", got)
        assert status == 200 and isinstance(messages, list)
        assert [m["payload"] for m in messages] == [f"m{n}" for n in range(ATTEMPTS)]
        with connect(workers.broker, vhost=vhost) as connection:
            connection.channel().queue_declare(f"api{owner}", durable=True, passive=True)


def test_users_and_permissions_changed_over_the_api_are_in_force_everywhere_at_once(
    workers: Workers,
) -> None:
    """RabbitMQ's PUT /api/users and /api/permissions: the new user logs in at once over AMQP
    (to a virtual host of each worker) and over HTTP (whichever worker answers), and once
    deleted is refused everywhere (spec: connection.open refused with 403 ACCESS_REFUSED; the
    API's 401)."""
    for attempt in range(ATTEMPTS // 2):
        user, password = f"dave{attempt}", "pw-dave"
        body = {"password": password, "tags": "management"}
        assert call(workers.broker, "PUT", f"/api/users/{user}", body)[0] == 201
        for vhost in VHOSTS.values():
            everything = {"configure": ".*", "write": ".*", "read": ".*"}
            path = f"/api/permissions/{_quoted(vhost)}/{user}"
            assert call(workers.broker, "PUT", path, everything)[0] == 201
            with connect(workers.broker, user, password, vhost):
                pass
        for _ in range(ATTEMPTS):
            assert call(workers.broker, "GET", "/api/whoami", auth=(user, password))[0] == 200
        assert call(workers.broker, "DELETE", f"/api/users/{user}")[0] == 204
        for vhost in VHOSTS.values():
            with pytest.raises(pika.exceptions.ProbableAuthenticationError):
                connect(workers.broker, user, password, vhost)
        for _ in range(ATTEMPTS):
            assert call(workers.broker, "GET", "/api/whoami", auth=(user, password))[0] == 401


def test_a_connection_is_closed_by_the_worker_that_holds_it(workers: Workers) -> None:
    """RabbitMQ's DELETE /api/connections/{name}: the client gets connection.close with 320
    CONNECTION_FORCED and the X-Reason text, whichever worker took the request."""
    for _ in range(ATTEMPTS // 2):
        for vhost in VHOSTS.values():
            connection = connect(workers.broker, vhost=vhost)
            try:
                _, listed = call(workers.broker, "GET", "/api/connections")
                assert isinstance(listed, list)
                [held] = [item for item in listed if item["vhost"] == vhost]
                status, _ = call(
                    workers.broker,
                    "DELETE",
                    "/api/connections/" + _quoted(held["name"]),
                    headers={"X-Reason": "maintenance"},
                )
                assert status == 204
                with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                    connection.process_data_events(5)
                assert closed.value.reply_code == 320
                assert closed.value.reply_text == "CONNECTION_FORCED - maintenance"
            finally:
                if connection.is_open:
                    connection.close()
            wait_until(lambda: call(workers.broker, "GET", "/api/connections")[1] == [], "gone")


def test_metrics_sum_the_workers_with_each_series_once(workers: Workers) -> None:
    """Prometheus needs each series (name and labels) once in a scrape: the broker's totals are
    the workers' summed, and a queue's series come from its owner."""
    for owner, vhost in VHOSTS.items():
        _declare(workers, vhost, f"m{owner}", messages=3)
    for _ in range(ATTEMPTS):
        for path in ("/metrics", "/metrics/per-object"):
            url = f"http://127.0.0.1:{workers.broker.http_port}{path}"
            with urllib.request.urlopen(url, timeout=30) as response:
                text = response.read().decode()
            families = {family.name: family for family in text_string_to_metric_families(text)}
            for family in families.values():
                series = [(s.name, tuple(sorted(s.labels.items()))) for s in family.samples]
                assert len(series) == len(set(series)), family.name
            received = families["batonmq_global_messages_received"].samples
            assert [sample.value for sample in received] == [6]
            ready = families["batonmq_queue_messages_ready"].samples
            assert sum(sample.value for sample in ready) == 6


def test_while_a_worker_is_down_the_others_answer_and_name_it(workers: Workers) -> None:
    """RabbitMQ's /api/nodes says a node is down (`running: false`) while the others answer;
    here the one node names its workers, a list holds what the running ones hold and its
    answer names the missing worker (X-Workers-Down), and a request for a virtual host of the
    down worker is a 503. Once the worker is back, everything answers again."""
    for owner, vhost in VHOSTS.items():
        _declare(workers, vhost, f"k{owner}", messages=1)
    victim = 1
    killed = workers.pids()[victim]
    os.kill(killed, signal.SIGKILL)
    down = 0
    for _ in range(ATTEMPTS):
        with urllib.request.urlopen(_get(workers, "/api/queues"), timeout=30) as response:
            if response.headers.get("X-Workers-Down") is None:
                break  # the worker is back already
            down += 1
            assert response.headers["X-Workers-Down"] == str(victim)
            names = [q["name"] for q in json.loads(response.read())]
            assert names == ["k0"]
        status, nodes = call(workers.broker, "GET", "/api/nodes")
        assert status == 200 and isinstance(nodes, list)
        [node] = nodes
        if node["workers"][victim]["running"]:
            break
        running = [(worker["index"], worker["running"]) for worker in node["workers"]]
        assert running == [(0, True), (1, False)]
        assert node["workers"][victim]["cluster_links"] == []  # it said nothing
        status, _ = call(workers.broker, "GET", f"/api/queues/{_quoted(VHOSTS[victim])}/k1")
        assert status in (503, 200)
    assert down > 0, "the worker came back before the API was asked"
    wait_until(lambda: workers.pids()[victim] != killed, "the restarted worker to serve")
    for _ in range(ATTEMPTS):
        _, queues = call(workers.broker, "GET", "/api/queues")
        assert isinstance(queues, list)
        assert sorted(q["name"] for q in queues) == ["k0", "k1"]
        _, nodes = call(workers.broker, "GET", "/api/nodes")
        assert isinstance(nodes, list)
        assert all(worker["running"] for worker in nodes[0]["workers"])


def _get(workers: Workers, path: str) -> urllib.request.Request:
    token = base64.b64encode(b"guest:guest").decode()
    return urllib.request.Request(
        f"http://127.0.0.1:{workers.broker.http_port}{path}",
        headers={"Authorization": f"Basic {token}"},
    )
