"""The web console's files and the recent log, served by the broker's HTTP listener: the
console needs no login to load (the API it calls keeps its authentication), ships everything it
uses, and an administrator reads the broker's newest log records over the API."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.brokerproc import RunningBroker, start_broker
from tests.httpapi import call

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(tmp_path: Path, workers_environment: dict[str, str]) -> Iterator[RunningBroker]:
    """A broker of one process, and one of two workers: the API answers for the whole broker."""
    with start_broker(tmp_path, http=True, environment=workers_environment) as running:
        yield running


def fetch(broker: RunningBroker, path: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET without credentials."""
    url = f"http://127.0.0.1:{broker.http_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_the_console_loads_without_login_and_the_api_still_needs_one(
    broker: RunningBroker,
) -> None:
    """RabbitMQ serves its console at / on the management port; the page logs in to the API
    with HTTP basic authentication, so the static files themselves need none. The page may
    load only the broker's own files (its Content-Security-Policy)."""
    status, headers, body = fetch(broker, "/")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert b'<script type="module" src="/console/js/app.js">' in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]

    status, headers, body = fetch(broker, "/console/js/app.js")
    assert status == 200
    assert "javascript" in headers["Content-Type"]

    assert fetch(broker, "/console/no-such-file.js")[0] == 404
    assert fetch(broker, "/console/../routes/log.py")[0] == 404
    assert call(broker, "GET", "/api/overview", auth=None)[0] == 401


def test_an_administrator_reads_the_newest_log_records(broker: RunningBroker) -> None:
    """GET /api/broker/log?lines=N: the newest N records of the broker's log, oldest first, as
    the json log format writes them (ts, level, logger, msg and the record's fields)."""
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)):
        pass
    status, records = call(broker, "GET", "/api/broker/log?lines=1000")
    assert status == 200 and isinstance(records, list)
    opened = [record for record in records if record["msg"] == "connection opened"]
    assert len(opened) == 1
    assert opened[0]["level"] == "info"
    assert opened[0]["logger"] == "batonmq.engine.session"
    assert opened[0]["user"] == "guest"
    assert records == sorted(records, key=lambda record: record["ts"])

    status, newest = call(broker, "GET", "/api/broker/log?lines=2")
    assert status == 200 and isinstance(newest, list)
    assert newest == records[-2:]  # the API's own requests are not logged


@pytest.mark.parametrize("lines", ["0", "1001", "many", "-1"])
def test_lines_out_of_range_is_a_400(broker: RunningBroker, lines: str) -> None:
    """Errors as RabbitMQ's API answers them: {"error": "bad_request", "reason": ...}."""
    status, body = call(broker, "GET", f"/api/broker/log?lines={lines}")
    assert status == 400
    assert body == {
        "error": "bad_request",
        "reason": "lines must be a whole number from 1 to 1000",
    }


def test_only_administrators_read_the_log(broker: RunningBroker) -> None:
    """The log names users, client addresses and the objects of every virtual host: like
    RabbitMQ's administrator-only endpoints, a monitoring user is refused with "Not
    administrator user"."""
    assert call(broker, "PUT", "/api/users/watcher", {"password": "pw", "tags": "monitoring"})[
        0
    ] in (201, 204)
    status, body = call(broker, "GET", "/api/broker/log", auth=("watcher", "pw"))
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Not administrator user"})
